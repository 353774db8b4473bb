package io.github.sluicerl.sluice;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import com.google.gson.JsonObject;
import io.github.sluicerl.sluice.proto.doorman.CapacityGrpc;
import io.github.sluicerl.sluice.proto.doorman.GetCapacityRequest;
import io.github.sluicerl.sluice.proto.doorman.GetCapacityResponse;
import io.github.sluicerl.sluice.proto.doorman.ReleaseCapacityRequest;
import io.github.sluicerl.sluice.proto.doorman.ReleaseCapacityResponse;
import io.github.sluicerl.sluice.proto.doorman.ResourceRequest;
import io.github.sluicerl.sluice.proto.doorman.ResourceResponse;
import io.grpc.Server;
import io.grpc.Status;
import io.grpc.netty.NettyServerBuilder;
import io.grpc.stub.StreamObserver;
import java.net.InetSocketAddress;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.TestFactory;

/**
 * clients/vectors/refresh.json — the lease client's refresh planner — on
 * a {@link SluiceClient} with no background thread ({@code
 * Builder.manual}: the test takes each refresh step, {@code
 * Leases.step()}, by hand) on a fake clock, against a scripted
 * doorman.Capacity server on loopback, as the schema says: at each time
 * visited, the events, then one step, then the capacity checks; the next
 * time is the earliest of what the step asked, the next event and the
 * next check. The requests the server recorded (when, and each resource's
 * wants) must be the case's, exactly. The whole client runs — the planner
 * ({@code Leases.plan}, {@code LeaseState.schedule}), the bulk request,
 * the lease applied, the fallback of the mode — only the refresh thread's
 * sleeping is the test's.
 *
 * <p>Source: doorman-design.md, "Client operation", "Client library",
 * "Optimistic, pessimistic and safe mode operation".
 */
class RefreshVectorsTest {
  /** A clock in Unix seconds that only the test moves. */
  static final class FakeClock {
    private double t;

    FakeClock(double t) {
      this.t = t;
    }

    synchronized double now() {
      return t;
    }

    synchronized void set(double v) {
      t = v;
    }
  }

  /** A request the server recorded: when (seconds since the epoch's t = 0) and the wants of each resource. */
  record Recorded(double at, Map<String, Double> wants) {
    @Override
    public String toString() {
      return at + " s " + new TreeMap<>(wants);
    }
  }

  /**
   * The scripted server: every resource of a GetCapacity gets the case's
   * lease for it (expiry floor(epoch + t) + lease_length, whole Unix
   * seconds), and the request is recorded. ReleaseCapacity succeeds,
   * unrecorded.
   */
  static final class Scripted extends CapacityGrpc.CapacityImplBase {
    final FakeClock clock;
    final double epoch;
    final JsonObject leases;
    final List<Recorded> requests = new ArrayList<>();
    final Server server;
    final String addr;

    Scripted(FakeClock clock, double epoch, JsonObject leases) throws Exception {
      this.clock = clock;
      this.epoch = epoch;
      this.leases = leases;
      server = NettyServerBuilder.forAddress(new InetSocketAddress("127.0.0.1", 0)).addService(this).build().start();
      addr = "127.0.0.1:" + server.getPort();
    }

    @Override
    public void getCapacity(GetCapacityRequest req, StreamObserver<GetCapacityResponse> out) {
      double now = clock.now();
      Map<String, Double> wants = new LinkedHashMap<>();
      GetCapacityResponse.Builder resp = GetCapacityResponse.newBuilder();
      for (ResourceRequest r : req.getResourceList()) {
        String id = r.getResourceId();
        wants.put(id, r.getWants());
        if (!leases.has(id)) {
          out.onError(Status.NOT_FOUND.withDescription("no lease scripted for " + id).asRuntimeException());
          return;
        }
        JsonObject l = leases.getAsJsonObject(id);
        ResourceResponse.Builder rr = resp.addResponseBuilder().setResourceId(id);
        rr.getGetsBuilder()
            .setExpiryTime((long) Math.floor(now) + l.get("lease_length").getAsLong())
            .setRefreshInterval(l.get("refresh_interval").getAsLong())
            .setCapacity(Vectors.num(l.get("capacity")));
        if (l.has("safe_capacity")) {
          rr.setSafeCapacity(Vectors.num(l.get("safe_capacity")));
        }
      }
      synchronized (this) {
        requests.add(new Recorded(now - epoch, wants));
      }
      out.onNext(resp.build());
      out.onCompleted();
    }

    @Override
    public void releaseCapacity(ReleaseCapacityRequest req, StreamObserver<ReleaseCapacityResponse> out) {
      out.onNext(ReleaseCapacityResponse.getDefaultInstance());
      out.onCompleted();
    }

    synchronized List<Recorded> recorded() {
      return new ArrayList<>(requests);
    }
  }

  @TestFactory
  List<DynamicTest> refreshVectors() {
    JsonObject v = Vectors.read("refresh.json");
    double epoch = v.get("epoch").getAsDouble();
    List<DynamicTest> tests = new ArrayList<>();
    for (JsonObject c : Vectors.objects(v, "cases")) {
      tests.add(DynamicTest.dynamicTest(c.get("name").getAsString(), () -> run(c, epoch)));
    }
    assertFalse(tests.isEmpty(), "refresh.json has no cases");
    return tests;
  }

  static void run(JsonObject c, double epoch) throws Exception {
    Mode mode = Mode.valueOf(c.get("mode").getAsString().toUpperCase(Locale.ROOT));
    FakeClock clock = new FakeClock(epoch);
    Scripted srv = new Scripted(clock, epoch, c.getAsJsonObject("server"));
    try (SluiceClient cl = SluiceClient.builder(srv.addr).clientId("vectors").push(false).mode(mode)
        .manual(clock::now).build()) {
      Map<String, Resource> handles = new HashMap<>();
      List<JsonObject> events = Vectors.objects(c, "events");
      List<JsonObject> checks = Vectors.objects(c, "capacity");
      double until = Vectors.num(c.get("until"));
      int e = 0, k = 0;
      double at = 0;
      for (int steps = 0; ; steps++) {
        if (steps > 10_000) {
          fail("still stepping at " + at + " s");
        }
        for (; e < events.size() && Vectors.num(events.get(e).get("at")) == at; e++) {
          JsonObject ev = events.get(e);
          String rid = ev.get("resource").getAsString();
          switch (ev.get("op").getAsString()) {
            case "add":
              handles.put(rid, cl.resource(rid, Vectors.num(ev.get("wants"))));
              break;
            case "set_wants":
              handles.get(rid).setWants(Vectors.num(ev.get("wants")));
              break;
            case "release":
              handles.get(rid).release();
              break;
            default:
              fail("at " + at + " s: unknown op " + ev.get("op"));
          }
        }
        double wait = cl.leases().step();
        assertEquals(epoch + at, clock.now(), "the step moved the clock");
        for (; k < checks.size() && Vectors.num(checks.get(k).get("at")) == at; k++) {
          JsonObject ck = checks.get(k);
          String rid = ck.get("resource").getAsString();
          double want = Vectors.num(ck.get("capacity"));
          assertEquals(want, handles.get(rid).capacity(), "capacity of " + rid + " at " + at + " s");
        }
        double next = at + wait;
        if (e < events.size()) {
          next = Math.min(next, Vectors.num(events.get(e).get("at")));
        }
        if (k < checks.size()) {
          next = Math.min(next, Vectors.num(checks.get(k).get("at")));
        }
        if (next > until) {
          break;
        }
        assertTrue(next >= at, "the step asked to go back in time: " + wait + " s at " + at + " s");
        at = next;
        clock.set(epoch + at);
      }
      assertEquals(events.size(), e, "events that never came");
      assertEquals(checks.size(), k, "checks that never came");
      List<Recorded> want = new ArrayList<>();
      for (JsonObject r : Vectors.objects(c, "requests")) {
        Map<String, Double> w = new LinkedHashMap<>();
        for (Map.Entry<String, com.google.gson.JsonElement> en : r.getAsJsonObject("wants").entrySet()) {
          w.put(en.getKey(), Vectors.num(en.getValue()));
        }
        want.add(new Recorded(Vectors.num(r.get("at")), w));
      }
      assertEquals(want, srv.recorded(), "requests");
    } finally {
      srv.server.shutdownNow();
    }
  }
}
