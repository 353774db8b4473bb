package io.github.sluicerl.sluice;

import io.github.sluicerl.sluice.proto.doorman.CapacityGrpc;
import io.github.sluicerl.sluice.proto.doorman.DiscoveryRequest;
import io.github.sluicerl.sluice.proto.doorman.DiscoveryResponse;
import io.github.sluicerl.sluice.proto.doorman.GetCapacityRequest;
import io.github.sluicerl.sluice.proto.doorman.GetCapacityResponse;
import io.github.sluicerl.sluice.proto.doorman.ReleaseCapacityRequest;
import io.github.sluicerl.sluice.proto.doorman.ReleaseCapacityResponse;
import io.github.sluicerl.sluice.proto.doorman.ResourceRequest;
import io.github.sluicerl.sluice.proto.doorman.ResourceResponse;
import io.grpc.Server;
import io.grpc.netty.NettyServerBuilder;
import io.grpc.stub.StreamObserver;
import java.net.InetSocketAddress;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.function.DoubleSupplier;

/**
 * A doorman.Capacity test server on loopback: it grants what is wanted (at
 * most {@code capacity}) for {@code leaseLength} seconds of the fake clock,
 * and records every request. {@code master} set makes it answer as a
 * non-master naming that address.
 */
final class CapacityServer extends CapacityGrpc.CapacityImplBase {
  final DoubleSupplier clock;
  final double capacity;
  final int leaseLength;
  volatile String master;
  final List<GetCapacityRequest> requests = new ArrayList<>();
  final List<List<String>> released = new ArrayList<>();
  final Server server;
  final String addr;

  CapacityServer(DoubleSupplier clock, double capacity, int leaseLength) throws Exception {
    this.clock = clock;
    this.capacity = capacity;
    this.leaseLength = leaseLength;
    server = NettyServerBuilder.forAddress(new InetSocketAddress("127.0.0.1", 0)).addService(this).build().start();
    addr = "127.0.0.1:" + server.getPort();
  }

  @Override
  public void getCapacity(GetCapacityRequest req, StreamObserver<GetCapacityResponse> out) {
    synchronized (this) {
      requests.add(req);
    }
    GetCapacityResponse.Builder resp = GetCapacityResponse.newBuilder();
    if (master != null) {
      resp.getMastershipBuilder().setMasterAddress(master);
    } else {
      long now = (long) clock.getAsDouble();
      for (ResourceRequest r : req.getResourceList()) {
        ResourceResponse.Builder rr = resp.addResponseBuilder().setResourceId(r.getResourceId()).setSafeCapacity(1.5);
        rr.getGetsBuilder().setCapacity(Math.min(r.getWants(), capacity)).setExpiryTime(now + leaseLength)
            .setRefreshInterval(5);
      }
    }
    out.onNext(resp.build());
    out.onCompleted();
  }

  @Override
  public void releaseCapacity(ReleaseCapacityRequest req, StreamObserver<ReleaseCapacityResponse> out) {
    synchronized (this) {
      released.add(new ArrayList<>(req.getResourceIdList()));
    }
    out.onNext(ReleaseCapacityResponse.getDefaultInstance());
    out.onCompleted();
  }

  @Override
  public void discovery(DiscoveryRequest req, StreamObserver<DiscoveryResponse> out) {
    DiscoveryResponse.Builder r = DiscoveryResponse.newBuilder().setIsMaster(master == null);
    r.getMastershipBuilder().setMasterAddress(master != null ? master : addr);
    out.onNext(r.build());
    out.onCompleted();
  }

  /** The number of resources in each request received. */
  synchronized List<Integer> counts() {
    List<Integer> c = new ArrayList<>();
    for (GetCapacityRequest r : requests) {
      c.add(r.getResourceCount());
    }
    return c;
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
