package io.github.sluicerl.sluice.proto.doorman;

import static io.grpc.MethodDescriptor.generateFullMethodName;

/**
 * <pre>
 * Capacity is the Doorman capacity service.
 * </pre>
 */
@javax.annotation.processing.Generated(
    value = "by gRPC proto compiler",
    comments = "Source: doorman/doorman.proto")
@io.grpc.stub.annotations.GrpcGenerated
public final class CapacityGrpc {

  private CapacityGrpc() {}

  public static final String SERVICE_NAME = "doorman.Capacity";

  // Static method descriptors that strictly reflect the proto.
  private static volatile io.grpc.MethodDescriptor<io.github.sluicerl.sluice.proto.doorman.DiscoveryRequest,
      io.github.sluicerl.sluice.proto.doorman.DiscoveryResponse> getDiscoveryMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Discovery",
      requestType = io.github.sluicerl.sluice.proto.doorman.DiscoveryRequest.class,
      responseType = io.github.sluicerl.sluice.proto.doorman.DiscoveryResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.github.sluicerl.sluice.proto.doorman.DiscoveryRequest,
      io.github.sluicerl.sluice.proto.doorman.DiscoveryResponse> getDiscoveryMethod() {
    io.grpc.MethodDescriptor<io.github.sluicerl.sluice.proto.doorman.DiscoveryRequest, io.github.sluicerl.sluice.proto.doorman.DiscoveryResponse> getDiscoveryMethod;
    if ((getDiscoveryMethod = CapacityGrpc.getDiscoveryMethod) == null) {
      synchronized (CapacityGrpc.class) {
        if ((getDiscoveryMethod = CapacityGrpc.getDiscoveryMethod) == null) {
          CapacityGrpc.getDiscoveryMethod = getDiscoveryMethod =
              io.grpc.MethodDescriptor.<io.github.sluicerl.sluice.proto.doorman.DiscoveryRequest, io.github.sluicerl.sluice.proto.doorman.DiscoveryResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Discovery"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.github.sluicerl.sluice.proto.doorman.DiscoveryRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.github.sluicerl.sluice.proto.doorman.DiscoveryResponse.getDefaultInstance()))
              .setSchemaDescriptor(new CapacityMethodDescriptorSupplier("Discovery"))
              .build();
        }
      }
    }
    return getDiscoveryMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.github.sluicerl.sluice.proto.doorman.GetCapacityRequest,
      io.github.sluicerl.sluice.proto.doorman.GetCapacityResponse> getGetCapacityMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "GetCapacity",
      requestType = io.github.sluicerl.sluice.proto.doorman.GetCapacityRequest.class,
      responseType = io.github.sluicerl.sluice.proto.doorman.GetCapacityResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.github.sluicerl.sluice.proto.doorman.GetCapacityRequest,
      io.github.sluicerl.sluice.proto.doorman.GetCapacityResponse> getGetCapacityMethod() {
    io.grpc.MethodDescriptor<io.github.sluicerl.sluice.proto.doorman.GetCapacityRequest, io.github.sluicerl.sluice.proto.doorman.GetCapacityResponse> getGetCapacityMethod;
    if ((getGetCapacityMethod = CapacityGrpc.getGetCapacityMethod) == null) {
      synchronized (CapacityGrpc.class) {
        if ((getGetCapacityMethod = CapacityGrpc.getGetCapacityMethod) == null) {
          CapacityGrpc.getGetCapacityMethod = getGetCapacityMethod =
              io.grpc.MethodDescriptor.<io.github.sluicerl.sluice.proto.doorman.GetCapacityRequest, io.github.sluicerl.sluice.proto.doorman.GetCapacityResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "GetCapacity"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.github.sluicerl.sluice.proto.doorman.GetCapacityRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.github.sluicerl.sluice.proto.doorman.GetCapacityResponse.getDefaultInstance()))
              .setSchemaDescriptor(new CapacityMethodDescriptorSupplier("GetCapacity"))
              .build();
        }
      }
    }
    return getGetCapacityMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.github.sluicerl.sluice.proto.doorman.GetServerCapacityRequest,
      io.github.sluicerl.sluice.proto.doorman.GetServerCapacityResponse> getGetServerCapacityMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "GetServerCapacity",
      requestType = io.github.sluicerl.sluice.proto.doorman.GetServerCapacityRequest.class,
      responseType = io.github.sluicerl.sluice.proto.doorman.GetServerCapacityResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.github.sluicerl.sluice.proto.doorman.GetServerCapacityRequest,
      io.github.sluicerl.sluice.proto.doorman.GetServerCapacityResponse> getGetServerCapacityMethod() {
    io.grpc.MethodDescriptor<io.github.sluicerl.sluice.proto.doorman.GetServerCapacityRequest, io.github.sluicerl.sluice.proto.doorman.GetServerCapacityResponse> getGetServerCapacityMethod;
    if ((getGetServerCapacityMethod = CapacityGrpc.getGetServerCapacityMethod) == null) {
      synchronized (CapacityGrpc.class) {
        if ((getGetServerCapacityMethod = CapacityGrpc.getGetServerCapacityMethod) == null) {
          CapacityGrpc.getGetServerCapacityMethod = getGetServerCapacityMethod =
              io.grpc.MethodDescriptor.<io.github.sluicerl.sluice.proto.doorman.GetServerCapacityRequest, io.github.sluicerl.sluice.proto.doorman.GetServerCapacityResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "GetServerCapacity"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.github.sluicerl.sluice.proto.doorman.GetServerCapacityRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.github.sluicerl.sluice.proto.doorman.GetServerCapacityResponse.getDefaultInstance()))
              .setSchemaDescriptor(new CapacityMethodDescriptorSupplier("GetServerCapacity"))
              .build();
        }
      }
    }
    return getGetServerCapacityMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.github.sluicerl.sluice.proto.doorman.ReleaseCapacityRequest,
      io.github.sluicerl.sluice.proto.doorman.ReleaseCapacityResponse> getReleaseCapacityMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "ReleaseCapacity",
      requestType = io.github.sluicerl.sluice.proto.doorman.ReleaseCapacityRequest.class,
      responseType = io.github.sluicerl.sluice.proto.doorman.ReleaseCapacityResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.github.sluicerl.sluice.proto.doorman.ReleaseCapacityRequest,
      io.github.sluicerl.sluice.proto.doorman.ReleaseCapacityResponse> getReleaseCapacityMethod() {
    io.grpc.MethodDescriptor<io.github.sluicerl.sluice.proto.doorman.ReleaseCapacityRequest, io.github.sluicerl.sluice.proto.doorman.ReleaseCapacityResponse> getReleaseCapacityMethod;
    if ((getReleaseCapacityMethod = CapacityGrpc.getReleaseCapacityMethod) == null) {
      synchronized (CapacityGrpc.class) {
        if ((getReleaseCapacityMethod = CapacityGrpc.getReleaseCapacityMethod) == null) {
          CapacityGrpc.getReleaseCapacityMethod = getReleaseCapacityMethod =
              io.grpc.MethodDescriptor.<io.github.sluicerl.sluice.proto.doorman.ReleaseCapacityRequest, io.github.sluicerl.sluice.proto.doorman.ReleaseCapacityResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "ReleaseCapacity"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.github.sluicerl.sluice.proto.doorman.ReleaseCapacityRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.github.sluicerl.sluice.proto.doorman.ReleaseCapacityResponse.getDefaultInstance()))
              .setSchemaDescriptor(new CapacityMethodDescriptorSupplier("ReleaseCapacity"))
              .build();
        }
      }
    }
    return getReleaseCapacityMethod;
  }

  /**
   * Creates a new async stub that supports all call types for the service
   */
  public static CapacityStub newStub(io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<CapacityStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<CapacityStub>() {
        @java.lang.Override
        public CapacityStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new CapacityStub(channel, callOptions);
        }
      };
    return CapacityStub.newStub(factory, channel);
  }

  /**
   * Creates a new blocking-style stub that supports unary and streaming output calls on the service
   */
  public static CapacityBlockingStub newBlockingStub(
      io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<CapacityBlockingStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<CapacityBlockingStub>() {
        @java.lang.Override
        public CapacityBlockingStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new CapacityBlockingStub(channel, callOptions);
        }
      };
    return CapacityBlockingStub.newStub(factory, channel);
  }

  /**
   * Creates a new ListenableFuture-style stub that supports unary calls on the service
   */
  public static CapacityFutureStub newFutureStub(
      io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<CapacityFutureStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<CapacityFutureStub>() {
        @java.lang.Override
        public CapacityFutureStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new CapacityFutureStub(channel, callOptions);
        }
      };
    return CapacityFutureStub.newStub(factory, channel);
  }

  /**
   * <pre>
   * Capacity is the Doorman capacity service.
   * </pre>
   */
  public static abstract class CapacityImplBase implements io.grpc.BindableService {

    /**
     */
    public void discovery(io.github.sluicerl.sluice.proto.doorman.DiscoveryRequest request,
        io.grpc.stub.StreamObserver<io.github.sluicerl.sluice.proto.doorman.DiscoveryResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getDiscoveryMethod(), responseObserver);
    }

    /**
     */
    public void getCapacity(io.github.sluicerl.sluice.proto.doorman.GetCapacityRequest request,
        io.grpc.stub.StreamObserver<io.github.sluicerl.sluice.proto.doorman.GetCapacityResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getGetCapacityMethod(), responseObserver);
    }

    /**
     */
    public void getServerCapacity(io.github.sluicerl.sluice.proto.doorman.GetServerCapacityRequest request,
        io.grpc.stub.StreamObserver<io.github.sluicerl.sluice.proto.doorman.GetServerCapacityResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getGetServerCapacityMethod(), responseObserver);
    }

    /**
     */
    public void releaseCapacity(io.github.sluicerl.sluice.proto.doorman.ReleaseCapacityRequest request,
        io.grpc.stub.StreamObserver<io.github.sluicerl.sluice.proto.doorman.ReleaseCapacityResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getReleaseCapacityMethod(), responseObserver);
    }

    @java.lang.Override public final io.grpc.ServerServiceDefinition bindService() {
      return io.grpc.ServerServiceDefinition.builder(getServiceDescriptor())
          .addMethod(
            getDiscoveryMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.github.sluicerl.sluice.proto.doorman.DiscoveryRequest,
                io.github.sluicerl.sluice.proto.doorman.DiscoveryResponse>(
                  this, METHODID_DISCOVERY)))
          .addMethod(
            getGetCapacityMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.github.sluicerl.sluice.proto.doorman.GetCapacityRequest,
                io.github.sluicerl.sluice.proto.doorman.GetCapacityResponse>(
                  this, METHODID_GET_CAPACITY)))
          .addMethod(
            getGetServerCapacityMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.github.sluicerl.sluice.proto.doorman.GetServerCapacityRequest,
                io.github.sluicerl.sluice.proto.doorman.GetServerCapacityResponse>(
                  this, METHODID_GET_SERVER_CAPACITY)))
          .addMethod(
            getReleaseCapacityMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.github.sluicerl.sluice.proto.doorman.ReleaseCapacityRequest,
                io.github.sluicerl.sluice.proto.doorman.ReleaseCapacityResponse>(
                  this, METHODID_RELEASE_CAPACITY)))
          .build();
    }
  }

  /**
   * <pre>
   * Capacity is the Doorman capacity service.
   * </pre>
   */
  public static final class CapacityStub extends io.grpc.stub.AbstractAsyncStub<CapacityStub> {
    private CapacityStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected CapacityStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new CapacityStub(channel, callOptions);
    }

    /**
     */
    public void discovery(io.github.sluicerl.sluice.proto.doorman.DiscoveryRequest request,
        io.grpc.stub.StreamObserver<io.github.sluicerl.sluice.proto.doorman.DiscoveryResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getDiscoveryMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     */
    public void getCapacity(io.github.sluicerl.sluice.proto.doorman.GetCapacityRequest request,
        io.grpc.stub.StreamObserver<io.github.sluicerl.sluice.proto.doorman.GetCapacityResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getGetCapacityMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     */
    public void getServerCapacity(io.github.sluicerl.sluice.proto.doorman.GetServerCapacityRequest request,
        io.grpc.stub.StreamObserver<io.github.sluicerl.sluice.proto.doorman.GetServerCapacityResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getGetServerCapacityMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     */
    public void releaseCapacity(io.github.sluicerl.sluice.proto.doorman.ReleaseCapacityRequest request,
        io.grpc.stub.StreamObserver<io.github.sluicerl.sluice.proto.doorman.ReleaseCapacityResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getReleaseCapacityMethod(), getCallOptions()), request, responseObserver);
    }
  }

  /**
   * <pre>
   * Capacity is the Doorman capacity service.
   * </pre>
   */
  public static final class CapacityBlockingStub extends io.grpc.stub.AbstractBlockingStub<CapacityBlockingStub> {
    private CapacityBlockingStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected CapacityBlockingStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new CapacityBlockingStub(channel, callOptions);
    }

    /**
     */
    public io.github.sluicerl.sluice.proto.doorman.DiscoveryResponse discovery(io.github.sluicerl.sluice.proto.doorman.DiscoveryRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getDiscoveryMethod(), getCallOptions(), request);
    }

    /**
     */
    public io.github.sluicerl.sluice.proto.doorman.GetCapacityResponse getCapacity(io.github.sluicerl.sluice.proto.doorman.GetCapacityRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getGetCapacityMethod(), getCallOptions(), request);
    }

    /**
     */
    public io.github.sluicerl.sluice.proto.doorman.GetServerCapacityResponse getServerCapacity(io.github.sluicerl.sluice.proto.doorman.GetServerCapacityRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getGetServerCapacityMethod(), getCallOptions(), request);
    }

    /**
     */
    public io.github.sluicerl.sluice.proto.doorman.ReleaseCapacityResponse releaseCapacity(io.github.sluicerl.sluice.proto.doorman.ReleaseCapacityRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getReleaseCapacityMethod(), getCallOptions(), request);
    }
  }

  /**
   * <pre>
   * Capacity is the Doorman capacity service.
   * </pre>
   */
  public static final class CapacityFutureStub extends io.grpc.stub.AbstractFutureStub<CapacityFutureStub> {
    private CapacityFutureStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected CapacityFutureStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new CapacityFutureStub(channel, callOptions);
    }

    /**
     */
    public com.google.common.util.concurrent.ListenableFuture<io.github.sluicerl.sluice.proto.doorman.DiscoveryResponse> discovery(
        io.github.sluicerl.sluice.proto.doorman.DiscoveryRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getDiscoveryMethod(), getCallOptions()), request);
    }

    /**
     */
    public com.google.common.util.concurrent.ListenableFuture<io.github.sluicerl.sluice.proto.doorman.GetCapacityResponse> getCapacity(
        io.github.sluicerl.sluice.proto.doorman.GetCapacityRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getGetCapacityMethod(), getCallOptions()), request);
    }

    /**
     */
    public com.google.common.util.concurrent.ListenableFuture<io.github.sluicerl.sluice.proto.doorman.GetServerCapacityResponse> getServerCapacity(
        io.github.sluicerl.sluice.proto.doorman.GetServerCapacityRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getGetServerCapacityMethod(), getCallOptions()), request);
    }

    /**
     */
    public com.google.common.util.concurrent.ListenableFuture<io.github.sluicerl.sluice.proto.doorman.ReleaseCapacityResponse> releaseCapacity(
        io.github.sluicerl.sluice.proto.doorman.ReleaseCapacityRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getReleaseCapacityMethod(), getCallOptions()), request);
    }
  }

  private static final int METHODID_DISCOVERY = 0;
  private static final int METHODID_GET_CAPACITY = 1;
  private static final int METHODID_GET_SERVER_CAPACITY = 2;
  private static final int METHODID_RELEASE_CAPACITY = 3;

  private static final class MethodHandlers<Req, Resp> implements
      io.grpc.stub.ServerCalls.UnaryMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.ServerStreamingMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.ClientStreamingMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.BidiStreamingMethod<Req, Resp> {
    private final CapacityImplBase serviceImpl;
    private final int methodId;

    MethodHandlers(CapacityImplBase serviceImpl, int methodId) {
      this.serviceImpl = serviceImpl;
      this.methodId = methodId;
    }

    @java.lang.Override
    @java.lang.SuppressWarnings("unchecked")
    public void invoke(Req request, io.grpc.stub.StreamObserver<Resp> responseObserver) {
      switch (methodId) {
        case METHODID_DISCOVERY:
          serviceImpl.discovery((io.github.sluicerl.sluice.proto.doorman.DiscoveryRequest) request,
              (io.grpc.stub.StreamObserver<io.github.sluicerl.sluice.proto.doorman.DiscoveryResponse>) responseObserver);
          break;
        case METHODID_GET_CAPACITY:
          serviceImpl.getCapacity((io.github.sluicerl.sluice.proto.doorman.GetCapacityRequest) request,
              (io.grpc.stub.StreamObserver<io.github.sluicerl.sluice.proto.doorman.GetCapacityResponse>) responseObserver);
          break;
        case METHODID_GET_SERVER_CAPACITY:
          serviceImpl.getServerCapacity((io.github.sluicerl.sluice.proto.doorman.GetServerCapacityRequest) request,
              (io.grpc.stub.StreamObserver<io.github.sluicerl.sluice.proto.doorman.GetServerCapacityResponse>) responseObserver);
          break;
        case METHODID_RELEASE_CAPACITY:
          serviceImpl.releaseCapacity((io.github.sluicerl.sluice.proto.doorman.ReleaseCapacityRequest) request,
              (io.grpc.stub.StreamObserver<io.github.sluicerl.sluice.proto.doorman.ReleaseCapacityResponse>) responseObserver);
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

  private static abstract class CapacityBaseDescriptorSupplier
      implements io.grpc.protobuf.ProtoFileDescriptorSupplier, io.grpc.protobuf.ProtoServiceDescriptorSupplier {
    CapacityBaseDescriptorSupplier() {}

    @java.lang.Override
    public com.google.protobuf.Descriptors.FileDescriptor getFileDescriptor() {
      return io.github.sluicerl.sluice.proto.doorman.Doorman.getDescriptor();
    }

    @java.lang.Override
    public com.google.protobuf.Descriptors.ServiceDescriptor getServiceDescriptor() {
      return getFileDescriptor().findServiceByName("Capacity");
    }
  }

  private static final class CapacityFileDescriptorSupplier
      extends CapacityBaseDescriptorSupplier {
    CapacityFileDescriptorSupplier() {}
  }

  private static final class CapacityMethodDescriptorSupplier
      extends CapacityBaseDescriptorSupplier
      implements io.grpc.protobuf.ProtoMethodDescriptorSupplier {
    private final String methodName;

    CapacityMethodDescriptorSupplier(String methodName) {
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
      synchronized (CapacityGrpc.class) {
        result = serviceDescriptor;
        if (result == null) {
          serviceDescriptor = result = io.grpc.ServiceDescriptor.newBuilder(SERVICE_NAME)
              .setSchemaDescriptor(new CapacityFileDescriptorSupplier())
              .addMethod(getDiscoveryMethod())
              .addMethod(getGetCapacityMethod())
              .addMethod(getGetServerCapacityMethod())
              .addMethod(getReleaseCapacityMethod())
              .build();
        }
      }
    }
    return result;
  }
}
