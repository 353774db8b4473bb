package io.github.sluicerl.sluice;

import java.time.Duration;

/**
 * Acquire overhead of a lease's limiter: a timed loop, ns per call (JMH is
 * not on Debian). The limiter is bound to a resource whose lease (from an
 * in-process doorman.Capacity test server) is 10^9 permits per second, so
 * every call is admitted and the loop measures the library alone.
 *
 * <pre>java -cp "$dir/tests.jar:$dir/sluice.jar:$(cat $dir/classpath)" io.github.sluicerl.sluice.AcquireBenchmark</pre>
 */
public final class AcquireBenchmark {
  interface Call {
    void run();
  }

  static double perCall(Call f, int n) {
    double best = Double.POSITIVE_INFINITY;
    for (int round = 0; round < 7; round++) {
      long start = System.nanoTime();
      for (int i = 0; i < n; i++) {
        f.run();
      }
      best = Math.min(best, (System.nanoTime() - start) / (double) n);
    }
    return best;
  }

  public static void main(String[] args) throws Exception {
    double now = System.currentTimeMillis() / 1e3;
    CapacityServer srv = new CapacityServer(() -> now + (System.nanoTime() / 1e9), 1e9, 600);
    try (SluiceClient c = SluiceClient.builder(srv.addr).push(false).build()) {
      Resource res = c.resource("bench", 1e9);
      RateLimiter lim = res.rateLimiter();
      while (lim.getRate() < 1e9) {
        Thread.sleep(10);
      }
      int n = 2_000_000;
      System.out.printf("acquire() admitted:               %6.1f ns%n", perCall(lim::acquire, n));
      System.out.printf("tryAcquire() admitted:            %6.1f ns%n", perCall(lim::tryAcquire, n));
      System.out.printf("tryAcquire(1, 1 ms) admitted:     %6.1f ns%n",
          perCall(() -> lim.tryAcquire(1, Duration.ofMillis(1)), n));
      RateLimiter slow = RateLimiter.create(1, Duration.ZERO);
      slow.tryAcquire();
      System.out.printf("tryAcquire() refused:             %6.1f ns%n", perCall(slow::tryAcquire, n));
    } finally {
      srv.stop();
    }
  }
}
