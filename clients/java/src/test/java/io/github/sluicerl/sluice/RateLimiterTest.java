package io.github.sluicerl.sluice;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Test;

/** The SmoothBursty limiter on a fake ticker (guava-ratelimiter.md). */
class RateLimiterTest {
  static final long S = 1_000_000_000L;

  /** A hand-moved ticker. */
  static final class FakeTicker implements Ticker {
    final AtomicLong now = new AtomicLong(1000 * S);

    @Override
    public long read() {
      return now.get();
    }

    void advance(double seconds) {
      now.addAndGet((long) (seconds * S));
    }
  }

  @Test
  void firstPermitAtOnceThenOneEveryInterval() {
    FakeTicker t = new FakeTicker();
    RateLimiter lim = RateLimiter.create(5, Duration.ofSeconds(1), t);
    assertEquals(0, lim.reserveAt(t.read(), 1), 1e-9);
    assertEquals(0.2, lim.reserveAt(t.read(), 1), 1e-9);
    assertEquals(0.4, lim.reserveAt(t.read(), 1), 1e-9);
  }

  @Test
  void unusedPermitsAreStoredUpToTheBurst() {
    FakeTicker t = new FakeTicker();
    RateLimiter lim = RateLimiter.create(10, Duration.ofMillis(500), t);
    assertTrue(lim.tryAcquireAt(t.read(), 1));
    t.advance(10); // far more than the burst
    assertEquals(5, lim.tokensAt(t.read()), 1e-9);
    for (int i = 0; i < 5; i++) {
      assertTrue(lim.tryAcquireAt(t.read(), 1), "stored permit " + i);
    }
    assertTrue(lim.tryAcquireAt(t.read(), 1)); // free now, paid ahead (Guava)
    assertFalse(lim.tryAcquireAt(t.read(), 1));
  }

  @Test
  void aBigRequestPaysAheadAndTheNextWaits() {
    FakeTicker t = new FakeTicker();
    RateLimiter lim = RateLimiter.create(2, Duration.ZERO, t);
    assertEquals(0, lim.reserveAt(t.read(), 10), 1e-9); // granted at once
    assertEquals(5, lim.reserveAt(t.read(), 1), 1e-9); // the next pays for it
    assertFalse(lim.tryAcquireAt(t.read(), 1));
    assertEquals(-11, lim.tokensAt(t.read()), 1e-9);
  }

  @Test
  void rateZeroAdmitsNothingAndInfinityEverything() {
    FakeTicker t = new FakeTicker();
    RateLimiter lim = RateLimiter.create(0, Duration.ofSeconds(1), t);
    assertFalse(lim.tryAcquireAt(t.read(), 1));
    assertEquals(Double.POSITIVE_INFINITY, lim.reserveAt(t.read(), 1));
    assertFalse(RateLimiter.create(0).tryAcquire(1, Duration.ofMillis(20))); // on the real clock
    lim.setRateAt(t.read(), Double.POSITIVE_INFINITY);
    for (int i = 0; i < 1000; i++) {
      assertTrue(lim.tryAcquireAt(t.read(), 1000));
    }
  }

  @Test
  void setRateRetimesPermitsPaidAhead() {
    FakeTicker t = new FakeTicker();
    RateLimiter lim = RateLimiter.create(1, Duration.ZERO, t);
    lim.reserveAt(t.read(), 4); // next free in 4 s at 1/s
    lim.setRateAt(t.read(), 4); // the 4 s owed become 1 s
    assertEquals(1, lim.reserveAt(t.read(), 1), 1e-9);
  }

  @Test
  void storedPermitsKeepTheTimeTheyStandFor() {
    FakeTicker t = new FakeTicker();
    RateLimiter lim = RateLimiter.create(10, Duration.ofSeconds(1), t);
    lim.tryAcquireAt(t.read(), 1); // the first is free; the next is due in 0.1 s
    t.advance(0.5);
    assertEquals(4, lim.tokensAt(t.read()), 1e-9);
    lim.setRateAt(t.read(), 20); // 0.4 s stored: 8 permits at the new rate
    assertEquals(8, lim.tokensAt(t.read()), 1e-9);
  }

  @Test
  void tryAcquireWithATimeoutTakesNothingWhenTooLate() {
    FakeTicker t = new FakeTicker();
    RateLimiter lim = RateLimiter.create(1, Duration.ZERO, t);
    assertTrue(lim.tryAcquireAt(t.read(), 1));
    // The next is 1 s away on the fake ticker, which never moves: a 10 ms timeout fails at once.
    long start = System.nanoTime();
    assertFalse(lim.tryAcquire(1, Duration.ofMillis(10)));
    assertTrue(System.nanoTime() - start < 30 * S, "failed at once, not after the second");
    assertEquals(1, lim.reserveAt(t.read(), 1), 1e-9); // nothing was taken
  }

  @Test
  void blockingAcquireOnTheRealClock() {
    RateLimiter lim = RateLimiter.create(50, Duration.ZERO);
    long start = System.nanoTime();
    for (int i = 0; i < 11; i++) {
      lim.acquire();
    }
    double took = (System.nanoTime() - start) / 1e9;
    assertTrue(took >= 0.19, "11 permits at 50/s took " + took + " s");
  }

  @Test
  void aWaiterWakesWhenTheRateLeavesZero() throws Exception {
    RateLimiter lim = RateLimiter.create(0, Duration.ZERO);
    Thread th = new Thread(() -> lim.setRate(1000));
    long start = System.nanoTime();
    new Thread(() -> {
      try {
        Thread.sleep(100);
      } catch (InterruptedException e) {
        return;
      }
      th.start();
    }).start();
    Duration waited = lim.acquire();
    long elapsed = System.nanoTime() - start;
    assertTrue(elapsed >= 90_000_000L);
    assertTrue(!waited.isZero() && waited.toNanos() <= elapsed, "acquire says it waited " + waited);
  }

  @Test
  void badPermitsAreRefused() {
    RateLimiter lim = RateLimiter.create(1);
    assertEquals(Duration.ofSeconds(1), lim.getMaxBurst()); // Guava's default
    assertEquals(Duration.ZERO, RateLimiter.create(1, Duration.ofSeconds(-1)).getMaxBurst());
    assertEquals(Duration.ZERO, lim.acquire()); // the first permit is free at once
    assertThrows(IllegalArgumentException.class, () -> lim.acquire(0));
    assertThrows(IllegalArgumentException.class, () -> lim.tryAcquire(-1, Duration.ZERO));
  }

  @Test
  void gaugeAdmitsFloorOfCapacityInOrder() throws Exception {
    Gauge g = new Gauge(2.7);
    assertTrue(g.tryAcquire());
    assertTrue(g.tryAcquire());
    assertFalse(g.tryAcquire());
    assertThrows(DeadlineExceededException.class, () -> g.acquire(Duration.ofMillis(20)));
    g.release();
    try (Gauge.Slot s = g.hold(Duration.ofSeconds(1))) {
      assertEquals(2, g.inUse());
    }
    assertEquals(1, g.inUse());
    g.setCapacity(0);
    g.release();
    assertFalse(g.tryAcquire()); // lowered: nothing new admitted
  }
}
