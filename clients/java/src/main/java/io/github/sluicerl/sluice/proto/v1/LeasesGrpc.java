package io.github.sluicerl.sluice.proto.v1;

import static io.grpc.MethodDescriptor.generateFullMethodName;

/**
 */
@javax.annotation.processing.Generated(
    value = "by gRPC proto compiler",
    comments = "Source: sluice/v1/leases.proto")
@io.grpc.stub.annotations.GrpcGenerated
public final class LeasesGrpc {

  private LeasesGrpc() {}

  public static final String SERVICE_NAME = "sluice.v1.Leases";

  // Static method descriptors that strictly reflect the proto.
  private static volatile io.grpc.MethodDescriptor<io.github.sluicerl.sluice.proto.v1.WatchRequest,
      io.github.sluicerl.sluice.proto.v1.WatchResponse> getWatchMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Watch",
      requestType = io.github.sluicerl.sluice.proto.v1.WatchRequest.class,
      responseType = io.github.sluicerl.sluice.proto.v1.WatchResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.SERVER_STREAMING)
  public static io.grpc.MethodDescriptor<io.github.sluicerl.sluice.proto.v1.WatchRequest,
      io.github.sluicerl.sluice.proto.v1.WatchResponse> getWatchMethod() {
    io.grpc.MethodDescriptor<io.github.sluicerl.sluice.proto.v1.WatchRequest, io.github.sluicerl.sluice.proto.v1.WatchResponse> getWatchMethod;
    if ((getWatchMethod = LeasesGrpc.getWatchMethod) == null) {
      synchronized (LeasesGrpc.class) {
        if ((getWatchMethod = LeasesGrpc.getWatchMethod) == null) {
          LeasesGrpc.getWatchMethod = getWatchMethod =
              io.grpc.MethodDescriptor.<io.github.sluicerl.sluice.proto.v1.WatchRequest, io.github.sluicerl.sluice.proto.v1.WatchResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.SERVER_STREAMING)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Watch"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.github.sluicerl.sluice.proto.v1.WatchRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.github.sluicerl.sluice.proto.v1.WatchResponse.getDefaultInstance()))
              .setSchemaDescriptor(new LeasesMethodDescriptorSupplier("Watch"))
              .build();
        }
      }
    }
    return getWatchMethod;
  }

  /**
   * Creates a new async stub that supports all call types for the service
   */
  public static LeasesStub newStub(io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<LeasesStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<LeasesStub>() {
        @java.lang.Override
        public LeasesStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new LeasesStub(channel, callOptions);
        }
      };
    return LeasesStub.newStub(factory, channel);
  }

  /**
   * Creates a new blocking-style stub that supports unary and streaming output calls on the service
   */
  public static LeasesBlockingStub newBlockingStub(
      io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<LeasesBlockingStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<LeasesBlockingStub>() {
        @java.lang.Override
        public LeasesBlockingStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new LeasesBlockingStub(channel, callOptions);
        }
      };
    return LeasesBlockingStub.newStub(factory, channel);
  }

  /**
   * Creates a new ListenableFuture-style stub that supports unary calls on the service
   */
  public static LeasesFutureStub newFutureStub(
      io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<LeasesFutureStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<LeasesFutureStub>() {
        @java.lang.Override
        public LeasesFutureStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new LeasesFutureStub(channel, callOptions);
        }
      };
    return LeasesFutureStub.newStub(factory, channel);
  }

  /**
   */
  public static abstract class LeasesImplBase implements io.grpc.BindableService {

    /**
     * <pre>
     * Watch streams the leases the master decides for the holder without a
     * request. The first message is empty: the master watches for the holder
     * from then on. The stream ends (Unavailable) when the master loses
     * mastership, when another Watch for the same holder replaces it, or when
     * the holder does not read its messages; the holder then opens a new one
     * (it keeps polling meanwhile). A server that is not the master answers
     * FailedPrecondition.
     * </pre>
     */
    public void watch(io.github.sluicerl.sluice.proto.v1.WatchRequest request,
        io.grpc.stub.StreamObserver<io.github.sluicerl.sluice.proto.v1.WatchResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getWatchMethod(), responseObserver);
    }

    @java.lang.Override public final io.grpc.ServerServiceDefinition bindService() {
      return io.grpc.ServerServiceDefinition.builder(getServiceDescriptor())
          .addMethod(
            getWatchMethod(),
            io.grpc.stub.ServerCalls.asyncServerStreamingCall(
              new MethodHandlers<
                io.github.sluicerl.sluice.proto.v1.WatchRequest,
                io.github.sluicerl.sluice.proto.v1.WatchResponse>(
                  this, METHODID_WATCH)))
          .build();
    }
  }

  /**
   */
  public static final class LeasesStub extends io.grpc.stub.AbstractAsyncStub<LeasesStub> {
    private LeasesStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected LeasesStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new LeasesStub(channel, callOptions);
    }

    /**
     * <pre>
     * Watch streams the leases the master decides for the holder without a
     * request. The first message is empty: the master watches for the holder
     * from then on. The stream ends (Unavailable) when the master loses
     * mastership, when another Watch for the same holder replaces it, or when
     * the holder does not read its messages; the holder then opens a new one
     * (it keeps polling meanwhile). A server that is not the master answers
     * FailedPrecondition.
     * </pre>
     */
    public void watch(io.github.sluicerl.sluice.proto.v1.WatchRequest request,
        io.grpc.stub.StreamObserver<io.github.sluicerl.sluice.proto.v1.WatchResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncServerStreamingCall(
          getChannel().newCall(getWatchMethod(), getCallOptions()), request, responseObserver);
    }
  }

  /**
   */
  public static final class LeasesBlockingStub extends io.grpc.stub.AbstractBlockingStub<LeasesBlockingStub> {
    private LeasesBlockingStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected LeasesBlockingStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new LeasesBlockingStub(channel, callOptions);
    }

    /**
     * <pre>
     * Watch streams the leases the master decides for the holder without a
     * request. The first message is empty: the master watches for the holder
     * from then on. The stream ends (Unavailable) when the master loses
     * mastership, when another Watch for the same holder replaces it, or when
     * the holder does not read its messages; the holder then opens a new one
     * (it keeps polling meanwhile). A server that is not the master answers
     * FailedPrecondition.
     * </pre>
     */
    public java.util.Iterator<io.github.sluicerl.sluice.proto.v1.WatchResponse> watch(
        io.github.sluicerl.sluice.proto.v1.WatchRequest request) {
      return io.grpc.stub.ClientCalls.blockingServerStreamingCall(
          getChannel(), getWatchMethod(), getCallOptions(), request);
    }
  }

  /**
   */
  public static final class LeasesFutureStub extends io.grpc.stub.AbstractFutureStub<LeasesFutureStub> {
    private LeasesFutureStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected LeasesFutureStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new LeasesFutureStub(channel, callOptions);
    }
  }

  private static final int METHODID_WATCH = 0;

  private static final class MethodHandlers<Req, Resp> implements
      io.grpc.stub.ServerCalls.UnaryMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.ServerStreamingMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.ClientStreamingMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.BidiStreamingMethod<Req, Resp> {
    private final LeasesImplBase serviceImpl;
    private final int methodId;

    MethodHandlers(LeasesImplBase serviceImpl, int methodId) {
      this.serviceImpl = serviceImpl;
      this.methodId = methodId;
    }

    @java.lang.Override
    @java.lang.SuppressWarnings("unchecked")
    public void invoke(Req request, io.grpc.stub.StreamObserver<Resp> responseObserver) {
      switch (methodId) {
        case METHODID_WATCH:
          serviceImpl.watch((io.github.sluicerl.sluice.proto.v1.WatchRequest) request,
              (io.grpc.stub.StreamObserver<io.github.sluicerl.sluice.proto.v1.WatchResponse>) responseObserver);
          break;
        default:
          throw new AssertionError();
      }
    }

    @java.lang.Override
    @java.lang.SuppressWarnings("unchecked")
    public io.grpc.stub.StreamObserver<Req> invoke(
        io.grpc.stub.StreamObserver<Resp> responseObserver) {
      switch (methodId) {
        default:
          throw new AssertionError();
      }
    }
  }

  private static abstract class LeasesBaseDescriptorSupplier
      implements io.grpc.protobuf.ProtoFileDescriptorSupplier, io.grpc.protobuf.ProtoServiceDescriptorSupplier {
    LeasesBaseDescriptorSupplier() {}

    @java.lang.Override
    public com.google.protobuf.Descriptors.FileDescriptor getFileDescriptor() {
      return io.github.sluicerl.sluice.proto.v1.LeasesOuterClass.getDescriptor();
    }

    @java.lang.Override
    public com.google.protobuf.Descriptors.ServiceDescriptor getServiceDescriptor() {
      return getFileDescriptor().findServiceByName("Leases");
    }
  }

  private static final class LeasesFileDescriptorSupplier
      extends LeasesBaseDescriptorSupplier {
    LeasesFileDescriptorSupplier() {}
  }

  private static final class LeasesMethodDescriptorSupplier
      extends LeasesBaseDescriptorSupplier
      implements io.grpc.protobuf.ProtoMethodDescriptorSupplier {
    private final String methodName;

    LeasesMethodDescriptorSupplier(String methodName) {
      this.methodName = methodName;
    }

    @java.lang.Override
    public com.google.protobuf.Descriptors.MethodDescriptor getMethodDescriptor() {
      return getServiceDescriptor().findMethodByName(methodName);
    }
  }

  private static volatile io.grpc.ServiceDescriptor serviceDescriptor;

  public static io.grpc.ServiceDescriptor getServiceDescriptor() {
    io.grpc.ServiceDescriptor result = serviceDescriptor;
    if (result == null) {
      synchronized (LeasesGrpc.class) {
        result = serviceDescriptor;
        if (result == null) {
          serviceDescriptor = result = io.grpc.ServiceDescriptor.newBuilder(SERVICE_NAME)
              .setSchemaDescriptor(new LeasesFileDescriptorSupplier())
              .addMethod(getWatchMethod())
              .build();
        }
      }
    }
    return result;
  }
}
