package io.github.sluicerl.sluice.proto.v1;

import static io.grpc.MethodDescriptor.generateFullMethodName;

/**
 */
@javax.annotation.processing.Generated(
    value = "by gRPC proto compiler",
    comments = "Source: sluice/v1/limits.proto")
@io.grpc.stub.annotations.GrpcGenerated
public final class LimitsGrpc {

  private LimitsGrpc() {}

  public static final String SERVICE_NAME = "sluice.v1.Limits";

  // Static method descriptors that strictly reflect the proto.
  private static volatile io.grpc.MethodDescriptor<io.github.sluicerl.sluice.proto.v1.AllowRequest,
      io.github.sluicerl.sluice.proto.v1.AllowResponse> getAllowMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Allow",
      requestType = io.github.sluicerl.sluice.proto.v1.AllowRequest.class,
      responseType = io.github.sluicerl.sluice.proto.v1.AllowResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.github.sluicerl.sluice.proto.v1.AllowRequest,
      io.github.sluicerl.sluice.proto.v1.AllowResponse> getAllowMethod() {
    io.grpc.MethodDescriptor<io.github.sluicerl.sluice.proto.v1.AllowRequest, io.github.sluicerl.sluice.proto.v1.AllowResponse> getAllowMethod;
    if ((getAllowMethod = LimitsGrpc.getAllowMethod) == null) {
      synchronized (LimitsGrpc.class) {
        if ((getAllowMethod = LimitsGrpc.getAllowMethod) == null) {
          LimitsGrpc.getAllowMethod = getAllowMethod =
              io.grpc.MethodDescriptor.<io.github.sluicerl.sluice.proto.v1.AllowRequest, io.github.sluicerl.sluice.proto.v1.AllowResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Allow"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.github.sluicerl.sluice.proto.v1.AllowRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.github.sluicerl.sluice.proto.v1.AllowResponse.getDefaultInstance()))
              .setSchemaDescriptor(new LimitsMethodDescriptorSupplier("Allow"))
              .build();
        }
      }
    }
    return getAllowMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.github.sluicerl.sluice.proto.v1.OpenSessionRequest,
      io.github.sluicerl.sluice.proto.v1.OpenSessionResponse> getOpenSessionMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "OpenSession",
      requestType = io.github.sluicerl.sluice.proto.v1.OpenSessionRequest.class,
      responseType = io.github.sluicerl.sluice.proto.v1.OpenSessionResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.github.sluicerl.sluice.proto.v1.OpenSessionRequest,
      io.github.sluicerl.sluice.proto.v1.OpenSessionResponse> getOpenSessionMethod() {
    io.grpc.MethodDescriptor<io.github.sluicerl.sluice.proto.v1.OpenSessionRequest, io.github.sluicerl.sluice.proto.v1.OpenSessionResponse> getOpenSessionMethod;
    if ((getOpenSessionMethod = LimitsGrpc.getOpenSessionMethod) == null) {
      synchronized (LimitsGrpc.class) {
        if ((getOpenSessionMethod = LimitsGrpc.getOpenSessionMethod) == null) {
          LimitsGrpc.getOpenSessionMethod = getOpenSessionMethod =
              io.grpc.MethodDescriptor.<io.github.sluicerl.sluice.proto.v1.OpenSessionRequest, io.github.sluicerl.sluice.proto.v1.OpenSessionResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "OpenSession"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.github.sluicerl.sluice.proto.v1.OpenSessionRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.github.sluicerl.sluice.proto.v1.OpenSessionResponse.getDefaultInstance()))
              .setSchemaDescriptor(new LimitsMethodDescriptorSupplier("OpenSession"))
              .build();
        }
      }
    }
    return getOpenSessionMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.github.sluicerl.sluice.proto.v1.KeepAliveRequest,
      io.github.sluicerl.sluice.proto.v1.KeepAliveResponse> getKeepAliveMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "KeepAlive",
      requestType = io.github.sluicerl.sluice.proto.v1.KeepAliveRequest.class,
      responseType = io.github.sluicerl.sluice.proto.v1.KeepAliveResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.BIDI_STREAMING)
  public static io.grpc.MethodDescriptor<io.github.sluicerl.sluice.proto.v1.KeepAliveRequest,
      io.github.sluicerl.sluice.proto.v1.KeepAliveResponse> getKeepAliveMethod() {
    io.grpc.MethodDescriptor<io.github.sluicerl.sluice.proto.v1.KeepAliveRequest, io.github.sluicerl.sluice.proto.v1.KeepAliveResponse> getKeepAliveMethod;
    if ((getKeepAliveMethod = LimitsGrpc.getKeepAliveMethod) == null) {
      synchronized (LimitsGrpc.class) {
        if ((getKeepAliveMethod = LimitsGrpc.getKeepAliveMethod) == null) {
          LimitsGrpc.getKeepAliveMethod = getKeepAliveMethod =
              io.grpc.MethodDescriptor.<io.github.sluicerl.sluice.proto.v1.KeepAliveRequest, io.github.sluicerl.sluice.proto.v1.KeepAliveResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.BIDI_STREAMING)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "KeepAlive"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.github.sluicerl.sluice.proto.v1.KeepAliveRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.github.sluicerl.sluice.proto.v1.KeepAliveResponse.getDefaultInstance()))
              .setSchemaDescriptor(new LimitsMethodDescriptorSupplier("KeepAlive"))
              .build();
        }
      }
    }
    return getKeepAliveMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.github.sluicerl.sluice.proto.v1.CloseSessionRequest,
      io.github.sluicerl.sluice.proto.v1.CloseSessionResponse> getCloseSessionMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "CloseSession",
      requestType = io.github.sluicerl.sluice.proto.v1.CloseSessionRequest.class,
      responseType = io.github.sluicerl.sluice.proto.v1.CloseSessionResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.github.sluicerl.sluice.proto.v1.CloseSessionRequest,
      io.github.sluicerl.sluice.proto.v1.CloseSessionResponse> getCloseSessionMethod() {
    io.grpc.MethodDescriptor<io.github.sluicerl.sluice.proto.v1.CloseSessionRequest, io.github.sluicerl.sluice.proto.v1.CloseSessionResponse> getCloseSessionMethod;
    if ((getCloseSessionMethod = LimitsGrpc.getCloseSessionMethod) == null) {
      synchronized (LimitsGrpc.class) {
        if ((getCloseSessionMethod = LimitsGrpc.getCloseSessionMethod) == null) {
          LimitsGrpc.getCloseSessionMethod = getCloseSessionMethod =
              io.grpc.MethodDescriptor.<io.github.sluicerl.sluice.proto.v1.CloseSessionRequest, io.github.sluicerl.sluice.proto.v1.CloseSessionResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "CloseSession"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.github.sluicerl.sluice.proto.v1.CloseSessionRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.github.sluicerl.sluice.proto.v1.CloseSessionResponse.getDefaultInstance()))
              .setSchemaDescriptor(new LimitsMethodDescriptorSupplier("CloseSession"))
              .build();
        }
      }
    }
    return getCloseSessionMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.github.sluicerl.sluice.proto.v1.ReserveRequest,
      io.github.sluicerl.sluice.proto.v1.ReserveResponse> getReserveMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Reserve",
      requestType = io.github.sluicerl.sluice.proto.v1.ReserveRequest.class,
      responseType = io.github.sluicerl.sluice.proto.v1.ReserveResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.github.sluicerl.sluice.proto.v1.ReserveRequest,
      io.github.sluicerl.sluice.proto.v1.ReserveResponse> getReserveMethod() {
    io.grpc.MethodDescriptor<io.github.sluicerl.sluice.proto.v1.ReserveRequest, io.github.sluicerl.sluice.proto.v1.ReserveResponse> getReserveMethod;
    if ((getReserveMethod = LimitsGrpc.getReserveMethod) == null) {
      synchronized (LimitsGrpc.class) {
        if ((getReserveMethod = LimitsGrpc.getReserveMethod) == null) {
          LimitsGrpc.getReserveMethod = getReserveMethod =
              io.grpc.MethodDescriptor.<io.github.sluicerl.sluice.proto.v1.ReserveRequest, io.github.sluicerl.sluice.proto.v1.ReserveResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Reserve"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.github.sluicerl.sluice.proto.v1.ReserveRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.github.sluicerl.sluice.proto.v1.ReserveResponse.getDefaultInstance()))
              .setSchemaDescriptor(new LimitsMethodDescriptorSupplier("Reserve"))
              .build();
        }
      }
    }
    return getReserveMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.github.sluicerl.sluice.proto.v1.ReleaseRequest,
      io.github.sluicerl.sluice.proto.v1.ReleaseResponse> getReleaseMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Release",
      requestType = io.github.sluicerl.sluice.proto.v1.ReleaseRequest.class,
      responseType = io.github.sluicerl.sluice.proto.v1.ReleaseResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.github.sluicerl.sluice.proto.v1.ReleaseRequest,
      io.github.sluicerl.sluice.proto.v1.ReleaseResponse> getReleaseMethod() {
    io.grpc.MethodDescriptor<io.github.sluicerl.sluice.proto.v1.ReleaseRequest, io.github.sluicerl.sluice.proto.v1.ReleaseResponse> getReleaseMethod;
    if ((getReleaseMethod = LimitsGrpc.getReleaseMethod) == null) {
      synchronized (LimitsGrpc.class) {
        if ((getReleaseMethod = LimitsGrpc.getReleaseMethod) == null) {
          LimitsGrpc.getReleaseMethod = getReleaseMethod =
              io.grpc.MethodDescriptor.<io.github.sluicerl.sluice.proto.v1.ReleaseRequest, io.github.sluicerl.sluice.proto.v1.ReleaseResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Release"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.github.sluicerl.sluice.proto.v1.ReleaseRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.github.sluicerl.sluice.proto.v1.ReleaseResponse.getDefaultInstance()))
              .setSchemaDescriptor(new LimitsMethodDescriptorSupplier("Release"))
              .build();
        }
      }
    }
    return getReleaseMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.github.sluicerl.sluice.proto.v1.TransferRequest,
      io.github.sluicerl.sluice.proto.v1.TransferResponse> getTransferMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Transfer",
      requestType = io.github.sluicerl.sluice.proto.v1.TransferRequest.class,
      responseType = io.github.sluicerl.sluice.proto.v1.TransferResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.github.sluicerl.sluice.proto.v1.TransferRequest,
      io.github.sluicerl.sluice.proto.v1.TransferResponse> getTransferMethod() {
    io.grpc.MethodDescriptor<io.github.sluicerl.sluice.proto.v1.TransferRequest, io.github.sluicerl.sluice.proto.v1.TransferResponse> getTransferMethod;
    if ((getTransferMethod = LimitsGrpc.getTransferMethod) == null) {
      synchronized (LimitsGrpc.class) {
        if ((getTransferMethod = LimitsGrpc.getTransferMethod) == null) {
          LimitsGrpc.getTransferMethod = getTransferMethod =
              io.grpc.MethodDescriptor.<io.github.sluicerl.sluice.proto.v1.TransferRequest, io.github.sluicerl.sluice.proto.v1.TransferResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Transfer"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.github.sluicerl.sluice.proto.v1.TransferRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.github.sluicerl.sluice.proto.v1.TransferResponse.getDefaultInstance()))
              .setSchemaDescriptor(new LimitsMethodDescriptorSupplier("Transfer"))
              .build();
        }
      }
    }
    return getTransferMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.github.sluicerl.sluice.proto.v1.SeizeRequest,
      io.github.sluicerl.sluice.proto.v1.SeizeResponse> getSeizeMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Seize",
      requestType = io.github.sluicerl.sluice.proto.v1.SeizeRequest.class,
      responseType = io.github.sluicerl.sluice.proto.v1.SeizeResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.github.sluicerl.sluice.proto.v1.SeizeRequest,
      io.github.sluicerl.sluice.proto.v1.SeizeResponse> getSeizeMethod() {
    io.grpc.MethodDescriptor<io.github.sluicerl.sluice.proto.v1.SeizeRequest, io.github.sluicerl.sluice.proto.v1.SeizeResponse> getSeizeMethod;
    if ((getSeizeMethod = LimitsGrpc.getSeizeMethod) == null) {
      synchronized (LimitsGrpc.class) {
        if ((getSeizeMethod = LimitsGrpc.getSeizeMethod) == null) {
          LimitsGrpc.getSeizeMethod = getSeizeMethod =
              io.grpc.MethodDescriptor.<io.github.sluicerl.sluice.proto.v1.SeizeRequest, io.github.sluicerl.sluice.proto.v1.SeizeResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Seize"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.github.sluicerl.sluice.proto.v1.SeizeRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.github.sluicerl.sluice.proto.v1.SeizeResponse.getDefaultInstance()))
              .setSchemaDescriptor(new LimitsMethodDescriptorSupplier("Seize"))
              .build();
        }
      }
    }
    return getSeizeMethod;
  }

  /**
   * Creates a new async stub that supports all call types for the service
   */
  public static LimitsStub newStub(io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<LimitsStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<LimitsStub>() {
        @java.lang.Override
        public LimitsStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new LimitsStub(channel, callOptions);
        }
      };
    return LimitsStub.newStub(factory, channel);
  }

  /**
   * Creates a new blocking-style stub that supports unary and streaming output calls on the service
   */
  public static LimitsBlockingStub newBlockingStub(
      io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<LimitsBlockingStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<LimitsBlockingStub>() {
        @java.lang.Override
        public LimitsBlockingStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new LimitsBlockingStub(channel, callOptions);
        }
      };
    return LimitsBlockingStub.newStub(factory, channel);
  }

  /**
   * Creates a new ListenableFuture-style stub that supports unary calls on the service
   */
  public static LimitsFutureStub newFutureStub(
      io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<LimitsFutureStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<LimitsFutureStub>() {
        @java.lang.Override
        public LimitsFutureStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new LimitsFutureStub(channel, callOptions);
        }
      };
    return LimitsFutureStub.newStub(factory, channel);
  }

  /**
   */
  public static abstract class LimitsImplBase implements io.grpc.BindableService {

    /**
     * <pre>
     * Allow asks for tokens of the bucket that answers for (resource,
     * domain). An over-limit answer is a status in a normal response. An
     * invalid request is the RPC error InvalidArgument, its message naming
     * the field ("domain: has '#' at byte 3; allowed: ..."); a server that
     * cannot decide (its store failed) answers Unavailable.
     * </pre>
     */
    public void allow(io.github.sluicerl.sluice.proto.v1.AllowRequest request,
        io.grpc.stub.StreamObserver<io.github.sluicerl.sluice.proto.v1.AllowResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getAllowMethod(), responseObserver);
    }

    /**
     * <pre>
     * OpenSession opens a session: every hold of a copy-limited resource
     * belongs to one, and is released when the session ends — closed,
     * its keep-alive stream broken, or its ttl passed without a keep-alive.
     * Source: charon-paper.md, sections 3.1, 4.2 and 4.3.1.
     * </pre>
     */
    public void openSession(io.github.sluicerl.sluice.proto.v1.OpenSessionRequest request,
        io.grpc.stub.StreamObserver<io.github.sluicerl.sluice.proto.v1.OpenSessionResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getOpenSessionMethod(), responseObserver);
    }

    /**
     * <pre>
     * KeepAlive keeps sessions alive: each message renews its session's
     * ttl; the server answers each with the session's ttl. When the stream
     * breaks, the sessions it kept alive end (within a second).
     * </pre>
     */
    public io.grpc.stub.StreamObserver<io.github.sluicerl.sluice.proto.v1.KeepAliveRequest> keepAlive(
        io.grpc.stub.StreamObserver<io.github.sluicerl.sluice.proto.v1.KeepAliveResponse> responseObserver) {
      return io.grpc.stub.ServerCalls.asyncUnimplementedStreamingCall(getKeepAliveMethod(), responseObserver);
    }

    /**
     * <pre>
     * CloseSession ends a session and releases its holds. Transfers it
     * staged stay staged until seized or until their ttl passes (a process
     * may stage copies, hand the id over and exit).
     * </pre>
     */
    public void closeSession(io.github.sluicerl.sluice.proto.v1.CloseSessionRequest request,
        io.grpc.stub.StreamObserver<io.github.sluicerl.sluice.proto.v1.CloseSessionResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getCloseSessionMethod(), responseObserver);
    }

    /**
     * <pre>
     * Reserve holds copies of a copy-limited resource for a domain, in a
     * session: the most in [min_copies, copies] the domain, group and
     * global limits allow, or none (an over-limit answer is a status).
     * </pre>
     */
    public void reserve(io.github.sluicerl.sluice.proto.v1.ReserveRequest request,
        io.grpc.stub.StreamObserver<io.github.sluicerl.sluice.proto.v1.ReserveResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getReserveMethod(), responseObserver);
    }

    /**
     * <pre>
     * Release gives back copies the session holds (partial releases
     * allowed); releasing more than it holds is FailedPrecondition.
     * </pre>
     */
    public void release(io.github.sluicerl.sluice.proto.v1.ReleaseRequest request,
        io.grpc.stub.StreamObserver<io.github.sluicerl.sluice.proto.v1.ReleaseResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getReleaseMethod(), responseObserver);
    }

    /**
     * <pre>
     * Transfer stages copies the session holds for another session to
     * Seize; unseized after ttl, they are released.
     * </pre>
     */
    public void transfer(io.github.sluicerl.sluice.proto.v1.TransferRequest request,
        io.grpc.stub.StreamObserver<io.github.sluicerl.sluice.proto.v1.TransferResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getTransferMethod(), responseObserver);
    }

    /**
     * <pre>
     * Seize takes the copies of a staged transfer into the session (once).
     * </pre>
     */
    public void seize(io.github.sluicerl.sluice.proto.v1.SeizeRequest request,
        io.grpc.stub.StreamObserver<io.github.sluicerl.sluice.proto.v1.SeizeResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getSeizeMethod(), responseObserver);
    }

    @java.lang.Override public final io.grpc.ServerServiceDefinition bindService() {
      return io.grpc.ServerServiceDefinition.builder(getServiceDescriptor())
          .addMethod(
            getAllowMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.github.sluicerl.sluice.proto.v1.AllowRequest,
                io.github.sluicerl.sluice.proto.v1.AllowResponse>(
                  this, METHODID_ALLOW)))
          .addMethod(
            getOpenSessionMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.github.sluicerl.sluice.proto.v1.OpenSessionRequest,
                io.github.sluicerl.sluice.proto.v1.OpenSessionResponse>(
                  this, METHODID_OPEN_SESSION)))
          .addMethod(
            getKeepAliveMethod(),
            io.grpc.stub.ServerCalls.asyncBidiStreamingCall(
              new MethodHandlers<
                io.github.sluicerl.sluice.proto.v1.KeepAliveRequest,
                io.github.sluicerl.sluice.proto.v1.KeepAliveResponse>(
                  this, METHODID_KEEP_ALIVE)))
          .addMethod(
            getCloseSessionMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.github.sluicerl.sluice.proto.v1.CloseSessionRequest,
                io.github.sluicerl.sluice.proto.v1.CloseSessionResponse>(
                  this, METHODID_CLOSE_SESSION)))
          .addMethod(
            getReserveMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.github.sluicerl.sluice.proto.v1.ReserveRequest,
                io.github.sluicerl.sluice.proto.v1.ReserveResponse>(
                  this, METHODID_RESERVE)))
          .addMethod(
            getReleaseMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.github.sluicerl.sluice.proto.v1.ReleaseRequest,
                io.github.sluicerl.sluice.proto.v1.ReleaseResponse>(
                  this, METHODID_RELEASE)))
          .addMethod(
            getTransferMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.github.sluicerl.sluice.proto.v1.TransferRequest,
                io.github.sluicerl.sluice.proto.v1.TransferResponse>(
                  this, METHODID_TRANSFER)))
          .addMethod(
            getSeizeMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.github.sluicerl.sluice.proto.v1.SeizeRequest,
                io.github.sluicerl.sluice.proto.v1.SeizeResponse>(
                  this, METHODID_SEIZE)))
          .build();
    }
  }

  /**
   */
  public static final class LimitsStub extends io.grpc.stub.AbstractAsyncStub<LimitsStub> {
    private LimitsStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected LimitsStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new LimitsStub(channel, callOptions);
    }

    /**
     * <pre>
     * Allow asks for tokens of the bucket that answers for (resource,
     * domain). An over-limit answer is a status in a normal response. An
     * invalid request is the RPC error InvalidArgument, its message naming
     * the field ("domain: has '#' at byte 3; allowed: ..."); a server that
     * cannot decide (its store failed) answers Unavailable.
     * </pre>
     */
    public void allow(io.github.sluicerl.sluice.proto.v1.AllowRequest request,
        io.grpc.stub.StreamObserver<io.github.sluicerl.sluice.proto.v1.AllowResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getAllowMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * OpenSession opens a session: every hold of a copy-limited resource
     * belongs to one, and is released when the session ends — closed,
     * its keep-alive stream broken, or its ttl passed without a keep-alive.
     * Source: charon-paper.md, sections 3.1, 4.2 and 4.3.1.
     * </pre>
     */
    public void openSession(io.github.sluicerl.sluice.proto.v1.OpenSessionRequest request,
        io.grpc.stub.StreamObserver<io.github.sluicerl.sluice.proto.v1.OpenSessionResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getOpenSessionMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * KeepAlive keeps sessions alive: each message renews its session's
     * ttl; the server answers each with the session's ttl. When the stream
     * breaks, the sessions it kept alive end (within a second).
     * </pre>
     */
    public io.grpc.stub.StreamObserver<io.github.sluicerl.sluice.proto.v1.KeepAliveRequest> keepAlive(
        io.grpc.stub.StreamObserver<io.github.sluicerl.sluice.proto.v1.KeepAliveResponse> responseObserver) {
      return io.grpc.stub.ClientCalls.asyncBidiStreamingCall(
          getChannel().newCall(getKeepAliveMethod(), getCallOptions()), responseObserver);
    }

    /**
     * <pre>
     * CloseSession ends a session and releases its holds. Transfers it
     * staged stay staged until seized or until their ttl passes (a process
     * may stage copies, hand the id over and exit).
     * </pre>
     */
    public void closeSession(io.github.sluicerl.sluice.proto.v1.CloseSessionRequest request,
        io.grpc.stub.StreamObserver<io.github.sluicerl.sluice.proto.v1.CloseSessionResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getCloseSessionMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Reserve holds copies of a copy-limited resource for a domain, in a
     * session: the most in [min_copies, copies] the domain, group and
     * global limits allow, or none (an over-limit answer is a status).
     * </pre>
     */
    public void reserve(io.github.sluicerl.sluice.proto.v1.ReserveRequest request,
        io.grpc.stub.StreamObserver<io.github.sluicerl.sluice.proto.v1.ReserveResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getReserveMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Release gives back copies the session holds (partial releases
     * allowed); releasing more than it holds is FailedPrecondition.
     * </pre>
     */
    public void release(io.github.sluicerl.sluice.proto.v1.ReleaseRequest request,
        io.grpc.stub.StreamObserver<io.github.sluicerl.sluice.proto.v1.ReleaseResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getReleaseMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Transfer stages copies the session holds for another session to
     * Seize; unseized after ttl, they are released.
     * </pre>
     */
    public void transfer(io.github.sluicerl.sluice.proto.v1.TransferRequest request,
        io.grpc.stub.StreamObserver<io.github.sluicerl.sluice.proto.v1.TransferResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getTransferMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Seize takes the copies of a staged transfer into the session (once).
     * </pre>
     */
    public void seize(io.github.sluicerl.sluice.proto.v1.SeizeRequest request,
        io.grpc.stub.StreamObserver<io.github.sluicerl.sluice.proto.v1.SeizeResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getSeizeMethod(), getCallOptions()), request, responseObserver);
    }
  }

  /**
   */
  public static final class LimitsBlockingStub extends io.grpc.stub.AbstractBlockingStub<LimitsBlockingStub> {
    private LimitsBlockingStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected LimitsBlockingStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new LimitsBlockingStub(channel, callOptions);
    }

    /**
     * <pre>
     * Allow asks for tokens of the bucket that answers for (resource,
     * domain). An over-limit answer is a status in a normal response. An
     * invalid request is the RPC error InvalidArgument, its message naming
     * the field ("domain: has '#' at byte 3; allowed: ..."); a server that
     * cannot decide (its store failed) answers Unavailable.
     * </pre>
     */
    public io.github.sluicerl.sluice.proto.v1.AllowResponse allow(io.github.sluicerl.sluice.proto.v1.AllowRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getAllowMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * OpenSession opens a session: every hold of a copy-limited resource
     * belongs to one, and is released when the session ends — closed,
     * its keep-alive stream broken, or its ttl passed without a keep-alive.
     * Source: charon-paper.md, sections 3.1, 4.2 and 4.3.1.
     * </pre>
     */
    public io.github.sluicerl.sluice.proto.v1.OpenSessionResponse openSession(io.github.sluicerl.sluice.proto.v1.OpenSessionRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getOpenSessionMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * CloseSession ends a session and releases its holds. Transfers it
     * staged stay staged until seized or until their ttl passes (a process
     * may stage copies, hand the id over and exit).
     * </pre>
     */
    public io.github.sluicerl.sluice.proto.v1.CloseSessionResponse closeSession(io.github.sluicerl.sluice.proto.v1.CloseSessionRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getCloseSessionMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Reserve holds copies of a copy-limited resource for a domain, in a
     * session: the most in [min_copies, copies] the domain, group and
     * global limits allow, or none (an over-limit answer is a status).
     * </pre>
     */
    public io.github.sluicerl.sluice.proto.v1.ReserveResponse reserve(io.github.sluicerl.sluice.proto.v1.ReserveRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getReserveMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Release gives back copies the session holds (partial releases
     * allowed); releasing more than it holds is FailedPrecondition.
     * </pre>
     */
    public io.github.sluicerl.sluice.proto.v1.ReleaseResponse release(io.github.sluicerl.sluice.proto.v1.ReleaseRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getReleaseMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Transfer stages copies the session holds for another session to
     * Seize; unseized after ttl, they are released.
     * </pre>
     */
    public io.github.sluicerl.sluice.proto.v1.TransferResponse transfer(io.github.sluicerl.sluice.proto.v1.TransferRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getTransferMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Seize takes the copies of a staged transfer into the session (once).
     * </pre>
     */
    public io.github.sluicerl.sluice.proto.v1.SeizeResponse seize(io.github.sluicerl.sluice.proto.v1.SeizeRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getSeizeMethod(), getCallOptions(), request);
    }
  }

  /**
   */
  public static final class LimitsFutureStub extends io.grpc.stub.AbstractFutureStub<LimitsFutureStub> {
    private LimitsFutureStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected LimitsFutureStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new LimitsFutureStub(channel, callOptions);
    }

    /**
     * <pre>
     * Allow asks for tokens of the bucket that answers for (resource,
     * domain). An over-limit answer is a status in a normal response. An
     * invalid request is the RPC error InvalidArgument, its message naming
     * the field ("domain: has '#' at byte 3; allowed: ..."); a server that
     * cannot decide (its store failed) answers Unavailable.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<io.github.sluicerl.sluice.proto.v1.AllowResponse> allow(
        io.github.sluicerl.sluice.proto.v1.AllowRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getAllowMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * OpenSession opens a session: every hold of a copy-limited resource
     * belongs to one, and is released when the session ends — closed,
     * its keep-alive stream broken, or its ttl passed without a keep-alive.
     * Source: charon-paper.md, sections 3.1, 4.2 and 4.3.1.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<io.github.sluicerl.sluice.proto.v1.OpenSessionResponse> openSession(
        io.github.sluicerl.sluice.proto.v1.OpenSessionRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getOpenSessionMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * CloseSession ends a session and releases its holds. Transfers it
     * staged stay staged until seized or until their ttl passes (a process
     * may stage copies, hand the id over and exit).
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<io.github.sluicerl.sluice.proto.v1.CloseSessionResponse> closeSession(
        io.github.sluicerl.sluice.proto.v1.CloseSessionRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getCloseSessionMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Reserve holds copies of a copy-limited resource for a domain, in a
     * session: the most in [min_copies, copies] the domain, group and
     * global limits allow, or none (an over-limit answer is a status).
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<io.github.sluicerl.sluice.proto.v1.ReserveResponse> reserve(
        io.github.sluicerl.sluice.proto.v1.ReserveRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getReserveMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Release gives back copies the session holds (partial releases
     * allowed); releasing more than it holds is FailedPrecondition.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<io.github.sluicerl.sluice.proto.v1.ReleaseResponse> release(
        io.github.sluicerl.sluice.proto.v1.ReleaseRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getReleaseMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Transfer stages copies the session holds for another session to
     * Seize; unseized after ttl, they are released.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<io.github.sluicerl.sluice.proto.v1.TransferResponse> transfer(
        io.github.sluicerl.sluice.proto.v1.TransferRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getTransferMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Seize takes the copies of a staged transfer into the session (once).
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<io.github.sluicerl.sluice.proto.v1.SeizeResponse> seize(
        io.github.sluicerl.sluice.proto.v1.SeizeRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getSeizeMethod(), getCallOptions()), request);
    }
  }

  private static final int METHODID_ALLOW = 0;
  private static final int METHODID_OPEN_SESSION = 1;
  private static final int METHODID_CLOSE_SESSION = 2;
  private static final int METHODID_RESERVE = 3;
  private static final int METHODID_RELEASE = 4;
  private static final int METHODID_TRANSFER = 5;
  private static final int METHODID_SEIZE = 6;
  private static final int METHODID_KEEP_ALIVE = 7;

  private static final class MethodHandlers<Req, Resp> implements
      io.grpc.stub.ServerCalls.UnaryMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.ServerStreamingMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.ClientStreamingMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.BidiStreamingMethod<Req, Resp> {
    private final LimitsImplBase serviceImpl;
    private final int methodId;

    MethodHandlers(LimitsImplBase serviceImpl, int methodId) {
      this.serviceImpl = serviceImpl;
      this.methodId = methodId;
    }

    @java.lang.Override
    @java.lang.SuppressWarnings("unchecked")
    public void invoke(Req request, io.grpc.stub.StreamObserver<Resp> responseObserver) {
      switch (methodId) {
        case METHODID_ALLOW:
          serviceImpl.allow((io.github.sluicerl.sluice.proto.v1.AllowRequest) request,
              (io.grpc.stub.StreamObserver<io.github.sluicerl.sluice.proto.v1.AllowResponse>) responseObserver);
          break;
        case METHODID_OPEN_SESSION:
          serviceImpl.openSession((io.github.sluicerl.sluice.proto.v1.OpenSessionRequest) request,
              (io.grpc.stub.StreamObserver<io.github.sluicerl.sluice.proto.v1.OpenSessionResponse>) responseObserver);
          break;
        case METHODID_CLOSE_SESSION:
          serviceImpl.closeSession((io.github.sluicerl.sluice.proto.v1.CloseSessionRequest) request,
              (io.grpc.stub.StreamObserver<io.github.sluicerl.sluice.proto.v1.CloseSessionResponse>) responseObserver);
          break;
        case METHODID_RESERVE:
          serviceImpl.reserve((io.github.sluicerl.sluice.proto.v1.ReserveRequest) request,
              (io.grpc.stub.StreamObserver<io.github.sluicerl.sluice.proto.v1.ReserveResponse>) responseObserver);
          break;
        case METHODID_RELEASE:
          serviceImpl.release((io.github.sluicerl.sluice.proto.v1.ReleaseRequest) request,
              (io.grpc.stub.StreamObserver<io.github.sluicerl.sluice.proto.v1.ReleaseResponse>) responseObserver);
          break;
        case METHODID_TRANSFER:
          serviceImpl.transfer((io.github.sluicerl.sluice.proto.v1.TransferRequest) request,
              (io.grpc.stub.StreamObserver<io.github.sluicerl.sluice.proto.v1.TransferResponse>) responseObserver);
          break;
        case METHODID_SEIZE:
          serviceImpl.seize((io.github.sluicerl.sluice.proto.v1.SeizeRequest) request,
              (io.grpc.stub.StreamObserver<io.github.sluicerl.sluice.proto.v1.SeizeResponse>) responseObserver);
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
        case METHODID_KEEP_ALIVE:
          return (io.grpc.stub.StreamObserver<Req>) serviceImpl.keepAlive(
              (io.grpc.stub.StreamObserver<io.github.sluicerl.sluice.proto.v1.KeepAliveResponse>) responseObserver);
        default:
          throw new AssertionError();
      }
    }
  }

  private static abstract class LimitsBaseDescriptorSupplier
      implements io.grpc.protobuf.ProtoFileDescriptorSupplier, io.grpc.protobuf.ProtoServiceDescriptorSupplier {
    LimitsBaseDescriptorSupplier() {}

    @java.lang.Override
    public com.google.protobuf.Descriptors.FileDescriptor getFileDescriptor() {
      return io.github.sluicerl.sluice.proto.v1.LimitsOuterClass.getDescriptor();
    }

    @java.lang.Override
    public com.google.protobuf.Descriptors.ServiceDescriptor getServiceDescriptor() {
      return getFileDescriptor().findServiceByName("Limits");
    }
  }

  private static final class LimitsFileDescriptorSupplier
      extends LimitsBaseDescriptorSupplier {
    LimitsFileDescriptorSupplier() {}
  }

  private static final class LimitsMethodDescriptorSupplier
      extends LimitsBaseDescriptorSupplier
      implements io.grpc.protobuf.ProtoMethodDescriptorSupplier {
    private final String methodName;

    LimitsMethodDescriptorSupplier(String methodName) {
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
      synchronized (LimitsGrpc.class) {
        result = serviceDescriptor;
        if (result == null) {
          serviceDescriptor = result = io.grpc.ServiceDescriptor.newBuilder(SERVICE_NAME)
              .setSchemaDescriptor(new LimitsFileDescriptorSupplier())
              .addMethod(getAllowMethod())
              .addMethod(getOpenSessionMethod())
              .addMethod(getKeepAliveMethod())
              .addMethod(getCloseSessionMethod())
              .addMethod(getReserveMethod())
              .addMethod(getReleaseMethod())
              .addMethod(getTransferMethod())
              .addMethod(getSeizeMethod())
              .build();
        }
      }
    }
    return result;
  }
}
