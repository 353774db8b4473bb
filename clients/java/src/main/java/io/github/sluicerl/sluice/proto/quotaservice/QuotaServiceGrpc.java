package io.github.sluicerl.sluice.proto.quotaservice;

import static io.grpc.MethodDescriptor.generateFullMethodName;

/**
 */
@javax.annotation.processing.Generated(
    value = "by gRPC proto compiler",
    comments = "Source: quotaservice/quota_service.proto")
@io.grpc.stub.annotations.GrpcGenerated
public final class QuotaServiceGrpc {

  private QuotaServiceGrpc() {}

  public static final String SERVICE_NAME = "quotaservice.QuotaService";

  // Static method descriptors that strictly reflect the proto.
  private static volatile io.grpc.MethodDescriptor<io.github.sluicerl.sluice.proto.quotaservice.AllowRequest,
      io.github.sluicerl.sluice.proto.quotaservice.AllowResponse> getAllowMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Allow",
      requestType = io.github.sluicerl.sluice.proto.quotaservice.AllowRequest.class,
      responseType = io.github.sluicerl.sluice.proto.quotaservice.AllowResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.github.sluicerl.sluice.proto.quotaservice.AllowRequest,
      io.github.sluicerl.sluice.proto.quotaservice.AllowResponse> getAllowMethod() {
    io.grpc.MethodDescriptor<io.github.sluicerl.sluice.proto.quotaservice.AllowRequest, io.github.sluicerl.sluice.proto.quotaservice.AllowResponse> getAllowMethod;
    if ((getAllowMethod = QuotaServiceGrpc.getAllowMethod) == null) {
      synchronized (QuotaServiceGrpc.class) {
        if ((getAllowMethod = QuotaServiceGrpc.getAllowMethod) == null) {
          QuotaServiceGrpc.getAllowMethod = getAllowMethod =
              io.grpc.MethodDescriptor.<io.github.sluicerl.sluice.proto.quotaservice.AllowRequest, io.github.sluicerl.sluice.proto.quotaservice.AllowResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Allow"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.github.sluicerl.sluice.proto.quotaservice.AllowRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.github.sluicerl.sluice.proto.quotaservice.AllowResponse.getDefaultInstance()))
              .setSchemaDescriptor(new QuotaServiceMethodDescriptorSupplier("Allow"))
              .build();
        }
      }
    }
    return getAllowMethod;
  }

  /**
   * Creates a new async stub that supports all call types for the service
   */
  public static QuotaServiceStub newStub(io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<QuotaServiceStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<QuotaServiceStub>() {
        @java.lang.Override
        public QuotaServiceStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new QuotaServiceStub(channel, callOptions);
        }
      };
    return QuotaServiceStub.newStub(factory, channel);
  }

  /**
   * Creates a new blocking-style stub that supports unary and streaming output calls on the service
   */
  public static QuotaServiceBlockingStub newBlockingStub(
      io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<QuotaServiceBlockingStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<QuotaServiceBlockingStub>() {
        @java.lang.Override
        public QuotaServiceBlockingStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new QuotaServiceBlockingStub(channel, callOptions);
        }
      };
    return QuotaServiceBlockingStub.newStub(factory, channel);
  }

  /**
   * Creates a new ListenableFuture-style stub that supports unary calls on the service
   */
  public static QuotaServiceFutureStub newFutureStub(
      io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<QuotaServiceFutureStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<QuotaServiceFutureStub>() {
        @java.lang.Override
        public QuotaServiceFutureStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new QuotaServiceFutureStub(channel, callOptions);
        }
      };
    return QuotaServiceFutureStub.newStub(factory, channel);
  }

  /**
   */
  public static abstract class QuotaServiceImplBase implements io.grpc.BindableService {

    /**
     * <pre>
     * Allow asks for tokens_requested tokens of the bucket bucket_name in
     * namespace. An over-limit answer is a status in a normal response, not
     * an RPC error.
     * </pre>
     */
    public void allow(io.github.sluicerl.sluice.proto.quotaservice.AllowRequest request,
        io.grpc.stub.StreamObserver<io.github.sluicerl.sluice.proto.quotaservice.AllowResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getAllowMethod(), responseObserver);
    }

    @java.lang.Override public final io.grpc.ServerServiceDefinition bindService() {
      return io.grpc.ServerServiceDefinition.builder(getServiceDescriptor())
          .addMethod(
            getAllowMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.github.sluicerl.sluice.proto.quotaservice.AllowRequest,
                io.github.sluicerl.sluice.proto.quotaservice.AllowResponse>(
                  this, METHODID_ALLOW)))
          .build();
    }
  }

  /**
   */
  public static final class QuotaServiceStub extends io.grpc.stub.AbstractAsyncStub<QuotaServiceStub> {
    private QuotaServiceStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected QuotaServiceStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new QuotaServiceStub(channel, callOptions);
    }

    /**
     * <pre>
     * Allow asks for tokens_requested tokens of the bucket bucket_name in
     * namespace. An over-limit answer is a status in a normal response, not
     * an RPC error.
     * </pre>
     */
    public void allow(io.github.sluicerl.sluice.proto.quotaservice.AllowRequest request,
        io.grpc.stub.StreamObserver<io.github.sluicerl.sluice.proto.quotaservice.AllowResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getAllowMethod(), getCallOptions()), request, responseObserver);
    }
  }

  /**
   */
  public static final class QuotaServiceBlockingStub extends io.grpc.stub.AbstractBlockingStub<QuotaServiceBlockingStub> {
    private QuotaServiceBlockingStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected QuotaServiceBlockingStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new QuotaServiceBlockingStub(channel, callOptions);
    }

    /**
     * <pre>
     * Allow asks for tokens_requested tokens of the bucket bucket_name in
     * namespace. An over-limit answer is a status in a normal response, not
     * an RPC error.
     * </pre>
     */
    public io.github.sluicerl.sluice.proto.quotaservice.AllowResponse allow(io.github.sluicerl.sluice.proto.quotaservice.AllowRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getAllowMethod(), getCallOptions(), request);
    }
  }

  /**
   */
  public static final class QuotaServiceFutureStub extends io.grpc.stub.AbstractFutureStub<QuotaServiceFutureStub> {
    private QuotaServiceFutureStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected QuotaServiceFutureStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new QuotaServiceFutureStub(channel, callOptions);
    }

    /**
     * <pre>
     * Allow asks for tokens_requested tokens of the bucket bucket_name in
     * namespace. An over-limit answer is a status in a normal response, not
     * an RPC error.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<io.github.sluicerl.sluice.proto.quotaservice.AllowResponse> allow(
        io.github.sluicerl.sluice.proto.quotaservice.AllowRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getAllowMethod(), getCallOptions()), request);
    }
  }

  private static final int METHODID_ALLOW = 0;

  private static final class MethodHandlers<Req, Resp> implements
      io.grpc.stub.ServerCalls.UnaryMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.ServerStreamingMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.ClientStreamingMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.BidiStreamingMethod<Req, Resp> {
    private final QuotaServiceImplBase serviceImpl;
    private final int methodId;

    MethodHandlers(QuotaServiceImplBase serviceImpl, int methodId) {
      this.serviceImpl = serviceImpl;
      this.methodId = methodId;
    }

    @java.lang.Override
    @java.lang.SuppressWarnings("unchecked")
    public void invoke(Req request, io.grpc.stub.StreamObserver<Resp> responseObserver) {
      switch (methodId) {
        case METHODID_ALLOW:
          serviceImpl.allow((io.github.sluicerl.sluice.proto.quotaservice.AllowRequest) request,
              (io.grpc.stub.StreamObserver<io.github.sluicerl.sluice.proto.quotaservice.AllowResponse>) responseObserver);
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

  private static abstract class QuotaServiceBaseDescriptorSupplier
      implements io.grpc.protobuf.ProtoFileDescriptorSupplier, io.grpc.protobuf.ProtoServiceDescriptorSupplier {
    QuotaServiceBaseDescriptorSupplier() {}

    @java.lang.Override
    public com.google.protobuf.Descriptors.FileDescriptor getFileDescriptor() {
      return io.github.sluicerl.sluice.proto.quotaservice.QuotaServiceOuterClass.getDescriptor();
    }

    @java.lang.Override
    public com.google.protobuf.Descriptors.ServiceDescriptor getServiceDescriptor() {
      return getFileDescriptor().findServiceByName("QuotaService");
    }
  }

  private static final class QuotaServiceFileDescriptorSupplier
      extends QuotaServiceBaseDescriptorSupplier {
    QuotaServiceFileDescriptorSupplier() {}
  }

  private static final class QuotaServiceMethodDescriptorSupplier
      extends QuotaServiceBaseDescriptorSupplier
      implements io.grpc.protobuf.ProtoMethodDescriptorSupplier {
    private final String methodName;

    QuotaServiceMethodDescriptorSupplier(String methodName) {
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
      synchronized (QuotaServiceGrpc.class) {
        result = serviceDescriptor;
        if (result == null) {
          serviceDescriptor = result = io.grpc.ServiceDescriptor.newBuilder(SERVICE_NAME)
              .setSchemaDescriptor(new QuotaServiceFileDescriptorSupplier())
              .addMethod(getAllowMethod())
              .build();
        }
      }
    }
    return result;
  }
}
