package io.github.sluicerl.sluice;

import io.github.sluicerl.sluice.proto.v1.AllowRequest;
import io.github.sluicerl.sluice.proto.v1.AllowResponse;
import io.github.sluicerl.sluice.proto.v1.CloseSessionRequest;
import io.github.sluicerl.sluice.proto.v1.CloseSessionResponse;
import io.github.sluicerl.sluice.proto.v1.KeepAliveRequest;
import io.github.sluicerl.sluice.proto.v1.KeepAliveResponse;
import io.github.sluicerl.sluice.proto.v1.LimitsGrpc;
import io.github.sluicerl.sluice.proto.v1.OpenSessionRequest;
import io.github.sluicerl.sluice.proto.v1.OpenSessionResponse;
import io.github.sluicerl.sluice.proto.v1.ReserveRequest;
import io.github.sluicerl.sluice.proto.v1.ReserveResponse;
import io.grpc.Server;
import io.grpc.Status;
import io.grpc.netty.NettyServerBuilder;
import io.grpc.stub.StreamObserver;
import java.net.InetSocketAddress;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.function.DoubleSupplier;

/**
 * A scripted sluice.v1.Limits server on loopback for the vector tests:
 * OpenSession opens "session-1" (or fails with {@code openFails}), Reserve
 * answers {@code reserveStatus} (granting what was asked on OK) or fails
 * with {@code reserveFails}, recording when ({@code clock}) each Reserve
 * came; KeepAlive acknowledges each keep-alive, or fails the stream with
 * {@code keepAliveFails}; Allow fails with {@code allowFails} or answers
 * OK; CloseSession succeeds. OpenSession and Reserve answer after {@code
 * openDelay} and {@code reserveDelay}.
 */
final class LimitsServer extends LimitsGrpc.LimitsImplBase {
  final DoubleSupplier clock;
  volatile Status openFails;
  volatile Status reserveFails;
  volatile Status keepAliveFails;
  volatile Status allowFails;
  /** How long OpenSession and Reserve take to answer, in milliseconds. */
  volatile long openDelay, reserveDelay;
  volatile ReserveResponse.Status reserveStatus = ReserveResponse.Status.REJECTED_OVER_LIMIT;
  final List<Double> reserves = new ArrayList<>();
  final Server server;
  final String addr;

  LimitsServer(DoubleSupplier clock) throws Exception {
    this.clock = clock;
    server = NettyServerBuilder.forAddress(new InetSocketAddress("127.0.0.1", 0)).addService(this).build().start();
    addr = "127.0.0.1:" + server.getPort();
  }

  @Override
  public void openSession(OpenSessionRequest req, StreamObserver<OpenSessionResponse> out) {
    pause(openDelay);
    Status f = openFails;
    if (f != null) {
      out.onError(f.asRuntimeException());
      return;
    }
    out.onNext(OpenSessionResponse.newBuilder().setSessionId("session-1").setTtl(req.getTtl()).build());
    out.onCompleted();
  }

  @Override
  public StreamObserver<KeepAliveRequest> keepAlive(StreamObserver<KeepAliveResponse> out) {
    return new StreamObserver<>() {
      @Override
      public void onNext(KeepAliveRequest r) {
        Status f = keepAliveFails;
        if (f != null) {
          out.onError(f.asRuntimeException());
          return;
        }
        out.onNext(KeepAliveResponse.newBuilder().setSessionId(r.getSessionId()).build());
      }

      @Override
      public void onError(Throwable t) {}

      @Override
      public void onCompleted() {
        out.onCompleted();
      }
    };
  }

  @Override
  public void closeSession(CloseSessionRequest req, StreamObserver<CloseSessionResponse> out) {
    out.onNext(CloseSessionResponse.getDefaultInstance());
    out.onCompleted();
  }

  @Override
  public void reserve(ReserveRequest req, StreamObserver<ReserveResponse> out) {
    synchronized (this) {
      reserves.add(clock.getAsDouble());
    }
    pause(reserveDelay);
    Status f = reserveFails;
    if (f != null) {
      out.onError(f.asRuntimeException());
      return;
    }
    ReserveResponse.Status s = reserveStatus;
    out.onNext(ReserveResponse.newBuilder().setStatus(s).setGranted(s == ReserveResponse.Status.OK ? req.getCopies() : 0)
        .setDomainLimit(8).setDomainHolds(8).build());
    out.onCompleted();
  }

  @Override
  public void allow(AllowRequest req, StreamObserver<AllowResponse> out) {
    Status f = allowFails;
    if (f != null) {
      out.onError(f.asRuntimeException());
      return;
    }
    out.onNext(AllowResponse.newBuilder().setStatus(AllowResponse.Status.OK).setGranted(req.getTokens()).build());
    out.onCompleted();
  }

  private static void pause(long millis) {
    if (millis > 0) {
      try {
        Thread.sleep(millis);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    }
  }

  synchronized List<Double> reserves() {
    return new ArrayList<>(reserves);
  }

  /**
   * Stops the server and waits until its listener and connections are closed, so that a call made
   * after it finds no server (UNAVAILABLE), not a stream the shutting-down server cancels.
   */
  void stop() {
    server.shutdownNow();
    try {
      server.awaitTermination(10, TimeUnit.SECONDS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }
}
