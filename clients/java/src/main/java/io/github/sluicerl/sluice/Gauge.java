package io.github.sluicerl.sluice;

import java.time.Duration;
import java.util.ArrayDeque;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

/**
 * A counting semaphore for in-flight limits: at most {@code
 * floor(capacity)} holders at once ({@link Double#POSITIVE_INFINITY}:
 * unlimited; negative or NaN: 0). Lowering the capacity never revokes a
 * held slot; it only stops new acquisitions until enough holders release.
 * Waiters are served first come, first served. Thread-safe.
 *
 * <pre>{@code
 * try (Gauge.Slot slot = gauge.hold(Duration.ofSeconds(1))) {
 *   runTransaction();
 * }
 * }</pre>
 *
 * <p>A gauge bound to a lease ({@link Resource#gauge()}) follows the
 * lease's capacity. Source: doorman-design.md, "Client library"
 * (GaugeResource).
 */
public final class Gauge {
  private final Object lock = new Object();
  private double capacity;
  private double slots;
  private long inUse;
  private final ArrayDeque<CountDownLatch> waiters = new ArrayDeque<>();

  /** A gauge of {@code capacity} slots (fractions round down; negative or NaN: 0; infinity: unlimited). */
  public Gauge(double capacity) {
    setLocked(capacity);
  }

  private void setLocked(double c) {
    if (!(c > 0)) {
      c = 0;
    }
    capacity = c;
    slots = Double.isInfinite(c) ? Double.POSITIVE_INFINITY : Math.floor(c);
  }

  /**
   * The capacity set, in slots (0 for a negative or NaN one; a fraction is
   * kept here, and rounds down when admitting).
   */
  public double capacity() {
    synchronized (lock) {
      return capacity;
    }
  }

  /** The slots held now. */
  public long inUse() {
    synchronized (lock) {
      return inUse;
    }
  }

  /** Sets the capacity, as the constructor reads it; waiters that now fit are admitted in order. */
  public void setCapacity(double c) {
    synchronized (lock) {
      setLocked(c);
      wakeLocked();
    }
  }

  private void wakeLocked() {
    while (!waiters.isEmpty() && inUse < slots) {
      inUse++;
      waiters.removeFirst().countDown();
    }
  }

  /** Takes a slot if one is free now (and nobody is waiting); never blocks. */
  public boolean tryAcquire() {
    synchronized (lock) {
      if (inUse < slots && waiters.isEmpty()) {
        inUse++;
        return true;
      }
      return false;
    }
  }

  /**
   * Blocks until a slot is free and takes it, at most {@code timeout}
   * ({@code null}: no bound; zero or negative: only if one is free now and
   * nobody waits). Release it with {@link #release()}.
   *
   * @throws DeadlineExceededException when no slot came within the timeout
   * @throws InterruptedException when interrupted while waiting (nothing held)
   */
  public void acquire(Duration timeout) throws InterruptedException {
    CountDownLatch me;
    synchronized (lock) {
      if (inUse < slots && waiters.isEmpty()) {
        inUse++;
        return;
      }
      me = new CountDownLatch(1);
      waiters.addLast(me);
    }
    boolean got = false;
    InterruptedException ie = null;
    try {
      if (timeout == null) {
        me.await();
        got = true;
      } else {
        got = me.await(Math.max(0, timeout.toNanos()), TimeUnit.NANOSECONDS);
      }
    } catch (InterruptedException e) {
      ie = e;
    }
    if (got) {
      return;
    }
    synchronized (lock) {
      if (me.getCount() == 0) {
        // Granted meanwhile: give it back if interrupted, else keep it.
        if (ie == null) {
          return;
        }
        inUse--;
        wakeLocked();
      } else {
        waiters.remove(me);
      }
    }
    if (ie != null) {
      throw ie;
    }
    throw new DeadlineExceededException("no slot of the gauge within " + timeout);
  }

  /** Gives a slot back. Releasing more than is held does nothing. */
  public void release() {
    synchronized (lock) {
      if (inUse > 0) {
        inUse--;
      }
      wakeLocked();
    }
  }

  /**
   * Acquires a slot ({@link #acquire(Duration)}) and returns it as an
   * {@link AutoCloseable}: try-with-resources releases it.
   *
   * @throws DeadlineExceededException when no slot came within the timeout
   * @throws InterruptedException when interrupted while waiting (nothing held)
   */
  public Slot hold(Duration timeout) throws InterruptedException {
    acquire(timeout);
    return new Slot(this);
  }

  /** A slot held; {@link #close()} releases it (once). Thread-safe. */
  public static final class Slot implements AutoCloseable {
    private final Gauge gauge;
    private boolean closed;

    private Slot(Gauge g) {
      gauge = g;
    }

    /** Releases the slot; twice does nothing. Throws nothing. */
    @Override
    public synchronized void close() {
      if (!closed) {
        closed = true;
        gauge.release();
      }
    }
  }
}
