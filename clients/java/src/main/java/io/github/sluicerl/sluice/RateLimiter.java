package io.github.sluicerl.sluice;

import java.time.Duration;
import java.util.ArrayDeque;
import java.util.Objects;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;

/**
 * A smooth rate limiter with the semantics of Guava's {@code SmoothBursty}
 * and the shape of Guava's {@code RateLimiter}: {@link #acquire()},
 * {@link #acquire(int)}, {@link #tryAcquire(int, Duration)},
 * {@link #tryAcquire(int, long, TimeUnit)}, {@link #setRate(double)}.
 *
 * <p>Permits are issued at a steady rate, in permits per second; up to
 * {@code maxBurstSeconds} of unused permits are stored and handed out at
 * once (Guava's default, 1 s; 0 stores nothing); a request for more
 * permits than are free is granted as soon as the previous request's are
 * paid for and makes the <em>next</em> request wait ("pays ahead"). It
 * starts with nothing stored, at its first use. Unlike Guava's, a rate of
 * 0 is allowed and admits nothing ({@link #acquire()} waits for a rate
 * change), and {@link Double#POSITIVE_INFINITY} admits everything: a
 * limiter bound to a lease ({@link Resource#rateLimiter(Duration)}) follows
 * the lease's capacity from the moment it changes. A rate change re-times
 * the permits paid ahead, and the blocked callers' turns, at the new rate.
 *
 * <p>Thread-safe. Time is read only through a {@link Ticker}, which {@link
 * #create(double, Duration, Ticker)} takes, so a test can move it by hand.
 * Blocking methods are uninterruptible, as Guava's (an interrupt is kept for
 * the caller). Nothing it does throws a checked exception.
 *
 * <p>Source: guava-ratelimiter.md ("SmoothRateLimiter", "SmoothBursty",
 * "setRate"); the Go {@code ratelimit} package is the model.
 */
public final class RateLimiter {
  private static final int NEVER = 0, LATE = 1, FREE = 2, TAKEN = 3;
  /** How many rate changes a waiter can follow while it sleeps. */
  private static final int KEEP_CHANGES = 64;

  private final Ticker ticker;
  private final Duration maxBurst;
  private final double burst; // maxBurst in seconds
  private final ReentrantLock lock = new ReentrantLock();
  private final Condition changed = lock.newCondition();
  // Guarded by lock; times in seconds of the ticker.
  private double rate;
  private double interval;
  private double maxStored;
  private double stored;
  private double nextFree;
  private boolean started;
  private long gen;
  private final ArrayDeque<double[]> changes = new ArrayDeque<>(); // {gen, when, factor}

  private RateLimiter(double rate, Duration maxBurst, Ticker ticker) {
    this.ticker = ticker;
    this.maxBurst = maxBurst.isNegative() ? Duration.ZERO : maxBurst;
    this.burst = Durations.seconds(this.maxBurst);
    setParams(sanitize(rate));
  }

  /**
   * A limiter of {@code permitsPerSecond} (0, negative or NaN: admits
   * nothing; {@link Double#POSITIVE_INFINITY}: everything) storing up to
   * 1 s of unused permits (Guava's default), on {@link System#nanoTime()}.
   */
  public static RateLimiter create(double permitsPerSecond) {
    return create(permitsPerSecond, Duration.ofSeconds(1));
  }

  /**
   * A limiter of {@code permitsPerSecond} (as {@link #create(double)})
   * storing up to {@code maxBurst}'s worth of unused permits (zero or
   * negative: none), on {@link System#nanoTime()}.
   *
   * @throws NullPointerException if {@code maxBurst} is null
   */
  public static RateLimiter create(double permitsPerSecond, Duration maxBurst) {
    return create(permitsPerSecond, maxBurst, Ticker.SYSTEM);
  }

  /**
   * {@link #create(double, Duration)} on {@code ticker}'s time: a test's
   * hand-moved ticker makes every non-blocking method deterministic.
   *
   * @throws NullPointerException if {@code maxBurst} or {@code ticker} is null
   */
  public static RateLimiter create(double permitsPerSecond, Duration maxBurst, Ticker ticker) {
    Objects.requireNonNull(maxBurst, "maxBurst");
    Objects.requireNonNull(ticker, "ticker");
    return new RateLimiter(permitsPerSecond, maxBurst, ticker);
  }

  private static double sanitize(double r) {
    return r > 0 ? r : 0; // negative, zero and NaN count as 0
  }

  private static double retimeFactor(double old, double now) {
    if (old == 0) {
      return 0;
    }
    if (now == 0) {
      return Double.POSITIVE_INFINITY;
    }
    if (Double.isInfinite(now) || Double.isInfinite(old)) {
      return 0;
    }
    return old / now;
  }

  private void setParams(double r) {
    rate = r;
    if (Double.isInfinite(r)) {
      interval = 0;
      maxStored = Double.POSITIVE_INFINITY;
    } else if (r > 0) {
      interval = 1 / r;
      maxStored = burst * r;
    } else {
      interval = 0;
      maxStored = 0;
    }
  }

  private double seconds(long nanos) {
    return nanos / 1e9;
  }

  private double now() {
    return seconds(ticker.read());
  }

  private void resync(double now) {
    if (now > nextFree) {
      if (interval > 0) {
        stored = Math.min(maxStored, stored + (now - nextFree) / interval);
      }
      nextFree = now;
    }
  }

  /** A claim: what a refund needs. */
  private static final class Claim {
    int outcome;
    double at;
    double foundNext, foundStored, end;
    long gen;
  }

  private Claim reserve(double now, int permits, double limit) {
    Claim c = new Claim();
    if (rate == 0) {
      c.outcome = NEVER;
      return c;
    }
    if (Double.isInfinite(rate)) {
      c.outcome = FREE;
      c.at = now;
      return c;
    }
    if (!started) {
      started = true;
      stored = 0;
      nextFree = now;
    }
    double foundNext = nextFree, foundStored = stored;
    resync(now);
    double at = Math.max(nextFree, now);
    if (at > limit) {
      nextFree = foundNext;
      stored = foundStored;
      c.outcome = LATE;
      c.at = at;
      return c;
    }
    double spend = Math.min(permits, stored);
    stored -= spend;
    nextFree = at + (permits - spend) * interval;
    c.outcome = TAKEN;
    c.at = at;
    c.foundNext = foundNext;
    c.foundStored = foundStored;
    c.end = nextFree;
    c.gen = gen;
    return c;
  }

  private void refund(Claim c) {
    if (c.gen == gen && nextFree == c.end) {
      nextFree = c.foundNext;
      stored = c.foundStored;
    }
  }

  /** The rate, in permits per second (0: admits nothing; {@link Double#POSITIVE_INFINITY}: everything). */
  public double getRate() {
    lock.lock();
    try {
      return rate;
    } finally {
      lock.unlock();
    }
  }

  /** How much time's worth of unused permits may be stored ({@link Duration#ZERO}: none). */
  public Duration getMaxBurst() {
    return maxBurst;
  }

  /**
   * Sets the rate, in permits per second, from now on: permits accrued
   * until now count at the old rate, stored permits keep the time they
   * stand for, permits paid ahead and blocked callers' turns are re-timed
   * at the new rate. Leaving rate 0 starts with nothing stored; leaving
   * infinity with a full store. The same rate does nothing; negative or NaN
   * count as 0. Wakes the callers blocked in {@link #acquire} and {@link
   * #tryAcquire(int, Duration)}.
   *
   * <p>Source: guava-ratelimiter.md, "setRate" (doSetRate).
   */
  public void setRate(double permitsPerSecond) {
    setRateAt(ticker.read(), permitsPerSecond);
  }

  /** {@link #setRate} at {@code nowNanos} on the ticker's scale (tests). */
  void setRateAt(long nowNanos, double permitsPerSecond) {
    double r = sanitize(permitsPerSecond);
    double now = seconds(nowNanos);
    lock.lock();
    try {
      double old = rate;
      if (r == old) {
        return;
      }
      if (Double.isInfinite(old)) {
        setParams(r);
        stored = maxStored;
        nextFree = now;
      } else if (!started || old == 0) {
        setParams(r);
        stored = 0;
        nextFree = now;
      } else {
        resync(now);
        double secondsStored = stored * interval;
        setParams(r);
        if (r > 0 && !Double.isInfinite(r)) {
          stored = Math.min(maxStored, secondsStored / interval);
          if (nextFree > now) {
            nextFree = now + (nextFree - now) * old / r;
          }
        } else if (r == 0) {
          stored = 0;
        }
      }
      started = true;
      gen++;
      if (changes.size() == KEEP_CHANGES) {
        changes.removeFirst();
      }
      changes.addLast(new double[] {gen, now, retimeFactor(old, r)});
      changed.signalAll();
    } finally {
      lock.unlock();
    }
  }

  /** {@link #acquire(int)} of one permit. */
  public Duration acquire() {
    return acquire(1);
  }

  /**
   * Blocks until {@code permits} are free and takes them; returns how long
   * it waited ({@link Duration#ZERO} when they were free at once), as
   * Guava's returns the seconds. At rate 0 it waits for a rate change.
   * Uninterruptible: an interrupt is kept for the caller.
   *
   * @throws IllegalArgumentException for fewer than 1 permit
   */
  public Duration acquire(int permits) {
    checkPermits(permits);
    return Durations.of(waitFor(permits, Double.POSITIVE_INFINITY));
  }

  /** Takes one permit if it is free now; never blocks. */
  public boolean tryAcquire() {
    return tryAcquire(1);
  }

  /**
   * Takes {@code permits} if they are free now; never blocks.
   *
   * @throws IllegalArgumentException for fewer than 1 permit
   */
  public boolean tryAcquire(int permits) {
    return tryAcquireAt(ticker.read(), permits);
  }

  /**
   * {@link #tryAcquire(int, Duration)} of one permit.
   *
   * @throws NullPointerException if {@code timeout} is null
   */
  public boolean tryAcquire(Duration timeout) {
    return tryAcquire(1, timeout);
  }

  /**
   * {@link #tryAcquire(int, Duration)} of one permit, with the timeout in {@code unit}.
   *
   * @throws NullPointerException if {@code unit} is null
   */
  public boolean tryAcquire(long timeout, TimeUnit unit) {
    return tryAcquire(1, timeout, unit);
  }

  /**
   * {@link #tryAcquire(int, Duration)} with the timeout in {@code unit}.
   *
   * @throws IllegalArgumentException for fewer than 1 permit
   * @throws NullPointerException if {@code unit} is null
   */
  public boolean tryAcquire(int permits, long timeout, TimeUnit unit) {
    return tryAcquire(permits, Duration.ofNanos(unit.toNanos(timeout)));
  }

  /**
   * Takes {@code permits} if they are free within {@code timeout}, waiting
   * for them; returns false at once, taking nothing, if they would not be
   * (Guava's {@code tryAcquire(permits, timeout)}). A zero or negative
   * timeout never waits. Uninterruptible: an interrupt is kept for the
   * caller.
   *
   * @throws IllegalArgumentException for fewer than 1 permit
   * @throws NullPointerException if {@code timeout} is null
   */
  public boolean tryAcquire(int permits, Duration timeout) {
    checkPermits(permits);
    double t = timeout.isNegative() ? 0 : Durations.seconds(timeout);
    if (t <= 0) {
      return tryAcquireAt(ticker.read(), permits);
    }
    return waitFor(permits, t) >= 0;
  }

  /** {@link #tryAcquire(int)} at {@code nowNanos} on the ticker's scale (tests). */
  boolean tryAcquireAt(long nowNanos, int permits) {
    checkPermits(permits);
    double now = seconds(nowNanos);
    lock.lock();
    try {
      int o = reserve(now, permits, now).outcome;
      return o == FREE || o == TAKEN;
    } finally {
      lock.unlock();
    }
  }

  /**
   * Tests: takes {@code permits} at {@code nowNanos}, paying ahead, and
   * returns how many seconds after then the caller may act ({@link
   * Double#POSITIVE_INFINITY} at rate 0, when nothing is taken). Never
   * blocks.
   */
  double reserveAt(long nowNanos, int permits) {
    checkPermits(permits);
    double now = seconds(nowNanos);
    lock.lock();
    try {
      Claim c = reserve(now, permits, Double.POSITIVE_INFINITY);
      if (c.outcome == NEVER) {
        return Double.POSITIVE_INFINITY;
      }
      return Math.max(0, c.at - now);
    } finally {
      lock.unlock();
    }
  }

  /**
   * The permits available now: those stored, or minus those paid ahead
   * (0 at rate 0 and before the first use; {@link Double#POSITIVE_INFINITY}
   * at an infinite rate). Changes nothing.
   */
  public double tokens() {
    return tokensAt(ticker.read());
  }

  /** {@link #tokens()} at {@code nowNanos} on the ticker's scale (tests). */
  double tokensAt(long nowNanos) {
    double now = seconds(nowNanos);
    lock.lock();
    try {
      if (Double.isInfinite(rate)) {
        return Double.POSITIVE_INFINITY;
      }
      if (rate == 0 || !started) {
        return 0;
      }
      if (now >= nextFree) {
        return Math.min(maxStored, stored + (now - nextFree) * rate);
      }
      return stored - (nextFree - now) * rate;
    } finally {
      lock.unlock();
    }
  }

  private static void checkPermits(int permits) {
    if (permits < 1) {
      throw new IllegalArgumentException("permits " + permits + " must be at least 1");
    }
  }

  /**
   * Waits for permits at most timeout seconds; the seconds waited (0 when
   * they were free at once, as Guava's), or -1 for none.
   */
  private double waitFor(int permits, double timeout) {
    boolean interrupted = false;
    boolean slept = false;
    double start = now();
    double deadline = start + timeout;
    lock.lock();
    try {
      while (true) {
        double now = now();
        Claim c = reserve(now, permits, deadline);
        if (c.outcome == FREE) {
          return slept ? now - start : 0;
        }
        if (c.outcome == LATE) {
          return -1;
        }
        if (c.outcome == NEVER) {
          if (now >= deadline) {
            return -1;
          }
          long g = gen;
          while (gen == g && now < deadline) {
            slept = true;
            try {
              if (Double.isInfinite(deadline)) {
                changed.await();
              } else {
                changed.awaitNanos(nanos(deadline - now));
              }
            } catch (InterruptedException e) {
              interrupted = true;
            }
            now = now();
          }
          continue;
        }
        double at = c.at;
        long g = gen;
        while (true) {
          now = now();
          if (at <= now) {
            return slept ? now - start : 0;
          }
          if (now >= deadline) {
            refund(c);
            return -1;
          }
          double w = Math.min(at, deadline) - now;
          slept = true;
          try {
            if (Double.isInfinite(w)) {
              changed.await();
            } else {
              changed.awaitNanos(nanos(w));
            }
          } catch (InterruptedException e) {
            interrupted = true;
          }
          if (gen != g) {
            // The rate changed: the turn moves as the schedule did.
            for (double[] ch : changes) {
              if (ch[0] > g && at > ch[1]) {
                if (ch[2] == 0) {
                  at = ch[1];
                } else if (Double.isInfinite(ch[2])) {
                  at = Double.POSITIVE_INFINITY;
                } else {
                  at = ch[1] + (at - ch[1]) * ch[2];
                }
              }
            }
            g = gen;
          }
        }
      }
    } finally {
      lock.unlock();
      if (interrupted) {
        Thread.currentThread().interrupt();
      }
    }
  }

  private static long nanos(double s) {
    return Math.max(1, (long) Math.ceil(s * 1e9));
  }

  @Override
  public String toString() {
    return String.format("RateLimiter[stableRate=%.1fqps]", getRate());
  }
}
