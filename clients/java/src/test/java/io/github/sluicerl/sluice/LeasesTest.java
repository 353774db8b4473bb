package io.github.sluicerl.sluice;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.github.sluicerl.sluice.proto.v1.PushedLease;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * The lease client's refresh, stepped by hand on a fake clock against a
 * doorman.Capacity test server on loopback: one bulk request, Doorman's
 * 5-second rule, fallbacks, redirects, failover, pushes and release.
 */
class LeasesTest {
  /** A hand-moved clock in Unix seconds. */
  static final class FakeClock {
    private double t = 1_800_000_000.0;

    synchronized double now() {
      return t;
    }

    synchronized void advance(double s) {
      t += s;
    }
  }

  FakeClock clock;
  CapacityServer srv;

  @BeforeEach
  void start() throws Exception {
    clock = new FakeClock();
    srv = new CapacityServer(clock::now, 100, 20);
  }

  @AfterEach
  void stop() {
    srv.stop();
  }

  SluiceClient manual(String addrs, Mode mode) throws Exception {
    return SluiceClient.builder(addrs).clientId("test-client").push(false).mode(mode).manual(clock::now).build();
  }

  /** Runs the refresh loop for seconds of the fake clock, as the refresh thread would. */
  void run(SluiceClient c, double seconds) {
    double end = clock.now() + seconds;
    while (true) {
      double wait = c.leases().step();
      if (clock.now() + wait > end) {
        clock.advance(end - clock.now());
        return;
      }
      clock.advance(Math.max(wait, 0.001));
    }
  }

  @Test
  void oneBulkRequestPerRefreshIntervalFor1000Resources() throws Exception {
    try (SluiceClient c = manual(srv.addr, Mode.SAFE)) {
      List<Resource> rs = new ArrayList<>();
      for (int i = 0; i < 1000; i++) {
        rs.add(c.resource("bulk/" + i, 1));
      }
      c.leases().step();
      assertEquals(List.of(1000), srv.counts()); // added before the first step: one request
      for (Resource r : rs) {
        assertEquals(1, r.capacity());
      }
      Lease l = rs.get(0).lease().orElseThrow();
      assertEquals(new Lease(1, Instant.ofEpochSecond((long) clock.now() + 20), Duration.ofSeconds(5)), l);
      run(c, 50); // ten refresh intervals of 5 s
      List<Integer> got = srv.counts().subList(1, srv.counts().size());
      assertEquals(Collections.nCopies(10, 1000), got);
    }
  }

  @Test
  void aResourceAddedLaterRejoinsTheBulkRequest() throws Exception {
    try (SluiceClient c = manual(srv.addr, Mode.SAFE)) {
      c.resource("a", 1);
      c.resource("b", 1);
      c.leases().step();
      clock.advance(2);
      c.resource("c", 1); // new: sent at once, alone
      c.leases().step();
      assertEquals(List.of(2, 1), srv.counts());
      run(c, 30);
      List<Integer> rest = srv.counts().subList(2, srv.counts().size());
      assertTrue(!rest.isEmpty() && rest.stream().allMatch(n -> n == 3), rest.toString());
    }
  }

  @Test
  void theFiveSecondRuleHoldsBackAChangeOfWants() throws Exception {
    try (SluiceClient c = manual(srv.addr, Mode.SAFE)) {
      Resource r = c.resource("a", 10);
      c.leases().step();
      clock.advance(1);
      r.setWants(20);
      double wait = c.leases().step();
      assertEquals(List.of(1), srv.counts()); // not within 5 s of the last
      assertEquals(4, wait, 1e-6);
      clock.advance(wait);
      c.leases().step();
      assertEquals(2, srv.requests.size());
      assertEquals(20, srv.requests.get(1).getResource(0).getWants());
      assertTrue(srv.requests.get(1).getResource(0).hasHas());
      assertEquals(20, r.capacity());
    }
  }

  @Test
  void safeCapacityAndModesAfterTheLeaseExpires() throws Exception {
    for (Mode m : Mode.values()) {
      CapacityServer s = new CapacityServer(clock::now, 100, 10);
      try (SluiceClient c = manual(s.addr, m)) {
        Resource r = c.resource("a", 5);
        c.leases().step();
        assertEquals(5, r.capacity());
        assertEquals(1.5, r.safeCapacity().get());
        s.stop(); // unreachable from now on
        run(c, 12);
        assertTrue(r.lease().isEmpty());
        double want = m == Mode.SAFE ? 1.5 : m == Mode.PESSIMISTIC ? 0 : 5;
        assertEquals(want, r.capacity(), m.toString());
      }
    }
  }

  @Test
  void mastershipRedirectIsFollowedAndFailoverMovesOn() throws Exception {
    CapacityServer other = new CapacityServer(clock::now, 100, 20);
    other.master = srv.addr;
    try (SluiceClient c = manual(other.addr, Mode.SAFE)) {
      Resource r = c.resource("a", 3);
      c.leases().step();
      assertEquals(3, r.capacity());
      assertEquals(srv.addr, c.server());
    }
    other.stop();
    try (SluiceClient c = manual(other.addr + "," + srv.addr, Mode.SAFE)) { // the first is dead
      Resource r = c.resource("a", 3);
      run(c, 5);
      assertEquals(3, r.capacity());
      assertEquals(srv.addr, c.server());
    }
  }

  @Test
  void pushedLeasesApplyWhenNewer() throws Exception {
    try (SluiceClient c = manual(srv.addr, Mode.SAFE)) {
      Resource r = c.resource("a", 50);
      c.leases().step();
      long exp = (long) clock.now() + 30;
      c.leases().applyPushed(List.of(PushedLease.newBuilder().setResourceId("a").setCapacity(40).setExpiryTime(exp)
          .setRefreshInterval(5).setSequence(7).build()));
      assertEquals(40, r.capacity());
      c.leases().applyPushed(List.of(PushedLease.newBuilder().setResourceId("a").setCapacity(10).setExpiryTime(exp)
          .setRefreshInterval(5).setSequence(6).build()));
      assertEquals(40, r.capacity()); // older than the lease held
    }
  }

  @Test
  void handlesShareALeaseAndReleaseItWithTheLast() throws Exception {
    try (SluiceClient c = manual(srv.addr, Mode.SAFE)) {
      Resource a = c.resource("x", 2);
      Resource b = c.resource("x", 3);
      assertEquals(5, a.totalWants());
      List<Double> seen = Collections.synchronizedList(new ArrayList<>());
      a.onChange(seen::add);
      RateLimiter lim = a.rateLimiter();
      c.leases().step();
      assertEquals(5, b.capacity());
      assertEquals(5, lim.getRate());
      b.release();
      assertEquals(2, a.totalWants());
      assertTrue(srv.released.isEmpty());
      a.release();
      assertEquals(List.of(List.of("x")), srv.released);
      assertEquals(0, a.capacity());
      assertEquals(0, lim.getRate());
      assertEquals(List.of(0.0, 5.0, 0.0), seen);
      assertThrows(ClosedException.class, () -> a.setWants(1));
    }
  }

  @Test
  void closeReleasesEveryLeaseInOneRequest() throws Exception {
    SluiceClient c = SluiceClient.builder(srv.addr).clientId("closing").push(false).build(); // threaded
    List<Resource> rs = List.of(c.resource("r0", 1), c.resource("r1", 1), c.resource("r2", 1));
    RateLimiter lim = rs.get(0).rateLimiter();
    c.close();
    List<String> last = new ArrayList<>(srv.released.get(srv.released.size() - 1));
    Collections.sort(last);
    assertEquals(List.of("r0", "r1", "r2"), last);
    for (Resource r : rs) {
      assertEquals(0, r.capacity());
    }
    assertEquals(0, lim.getRate());
    assertThrows(ClosedException.class, () -> c.resource("r9", 1));
  }

  @Test
  void closeThrowsNothingWhenTheServerIsGoneAndReleaseSaysWhy() throws Exception {
    try (SluiceClient c = manual(srv.addr, Mode.SAFE)) {
      Resource a = c.resource("a", 1);
      Resource b = c.resource("b", 1);
      c.leases().step();
      assertEquals(1, a.capacity());
      srv.stop();
      UnavailableException e = assertThrows(UnavailableException.class, a::release);
      assertEquals("UNAVAILABLE", e.codeName());
      assertEquals(0, a.capacity()); // dropped here all the same
      b.close(); // nothing thrown
      assertEquals(0, b.capacity());
    }
  }

  @Test
  void killSwitchAndBadInput() throws Exception {
    try (SluiceClient c = manual(srv.addr, Mode.SAFE)) {
      Resource r = c.resource("a", 1);
      RateLimiter lim = r.rateLimiter();
      c.setKillSwitch(true);
      assertEquals(Double.POSITIVE_INFINITY, r.capacity());
      assertEquals(Double.POSITIVE_INFINITY, lim.getRate());
      c.setKillSwitch(false);
      assertEquals(0, r.capacity());
      for (double w : new double[] {-1, Double.NaN, Double.POSITIVE_INFINITY}) {
        InvalidArgumentException e = assertThrows(InvalidArgumentException.class, () -> c.resource("b", w));
        assertEquals("INVALID_ARGUMENT", e.codeName());
      }
      assertThrows(InvalidArgumentException.class, () -> c.resource("", 1));
    }
  }
}
