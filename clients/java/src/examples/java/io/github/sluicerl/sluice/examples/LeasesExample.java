package io.github.sluicerl.sluice.examples;

import io.github.sluicerl.sluice.Gauge;
import io.github.sluicerl.sluice.RateLimiter;
import io.github.sluicerl.sluice.Resource;
import io.github.sluicerl.sluice.SluiceClient;
import java.time.Duration;

/** Leases: a share of db/replica's 100 queries per second, enforced locally. Args: [HOST:PORT]. */
public final class LeasesExample {
  public static void main(String[] args) throws InterruptedException { // Thread.sleep, Gauge.hold
    String addr = args.length > 0 ? args[0] : "127.0.0.1:15000";
    try (SluiceClient client = SluiceClient.builder(addr).build()) { // one per process; close() releases every lease
      Resource replica = client.resource("db/replica", 20); // 20 queries per second
      RateLimiter limiter = replica.rateLimiter(Duration.ofMillis(100)); // follows the lease; 0.1 s of burst

      long deadline = System.nanoTime() + 30_000_000_000L; // generous: a loaded machine
      while (replica.lease().isEmpty()) { // the first lease comes within a round trip
        if (System.nanoTime() > deadline) {
          throw new AssertionError("no lease");
        }
        Thread.sleep(10);
      }
      System.out.printf("lease: %.0f queries/s (safe capacity %.0f)%n", replica.capacity(), replica.safeCapacity().get());

      int sent = 0;
      long start = System.nanoTime();
      while (System.nanoTime() - start < 1_000_000_000L) {
        limiter.acquire(); // blocks for its turn; never waits on the network
        sent++; // ... run one query here
      }
      System.out.printf("sent %d queries in 1 s%n", sent);
      check(sent <= 20 * 1.1 + 1, "sent " + sent);
      check(limiter.tryAcquire(1, Duration.ofSeconds(1)), "a permit within 1 s");

      // An in-flight limit: at most floor(capacity) at once.
      Gauge slots = client.resource("db/tx-slots", 3).gauge();
      deadline = System.nanoTime() + 30_000_000_000L;
      while (slots.capacity() < 3) {
        if (System.nanoTime() > deadline) {
          throw new AssertionError("no lease for db/tx-slots");
        }
        Thread.sleep(10);
      }
      try (Gauge.Slot slot = slots.hold(Duration.ofSeconds(1))) {
        System.out.printf("in a transaction: %d of %.0f slots held%n", slots.inUse(), slots.capacity());
      }
    }
  }

  static void check(boolean ok, String what) {
    if (!ok) {
      throw new AssertionError(what);
    }
  }
}
