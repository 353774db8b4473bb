package io.github.sluicerl.sluice;

import java.time.Duration;
import java.util.Optional;
import java.util.function.DoubleConsumer;
import java.util.logging.Logger;

/**
 * A handle on one resource of a client: what this handle wants, the lease
 * the client holds for the resource, and the capacity it may use now.
 * Handles of one id in one process share one lease: their wants add up,
 * and the lease is given back when the last handle is released ({@link
 * #close()} releases too, throwing nothing, so try-with-resources needs no
 * catch). Thread-safe.
 *
 * <p>Get one with {@link SluiceClient#resource}; enforce it with {@link
 * #rateLimiter(Duration)} (a rate resource, permits per second) or {@link
 * #gauge()} (an in-flight limit).
 *
 * <p>Source: doorman-design.md, "Client library".
 */
public final class Resource implements AutoCloseable {
  private static final Logger log = Logger.getLogger("io.github.sluicerl.sluice");

  final LeaseState state;
  private double wants; // guarded by this
  private boolean closed; // guarded by this

  Resource(LeaseState state, double wants) {
    this.state = state;
    this.wants = wants;
  }

  /** The resource id. */
  public String id() {
    return state.id;
  }

  /** The priority the resource is held at (its priority band; higher is more important). */
  public int priority() {
    return state.priority;
  }

  /** What this handle asks for, in the resource's unit (at least 0). */
  public synchronized double wants() {
    return wants;
  }

  /** What all of the resource's handles in this process ask for together: what the client asks the server for. */
  public double totalWants() {
    synchronized (state) {
      return state.wants;
    }
  }

  /**
   * The capacity the resource may use now: its lease's while the lease is
   * valid, else the fallback of its {@link Mode} (0 once released; {@link
   * Double#POSITIVE_INFINITY} with the kill switch on, or a negative safe
   * capacity: no limit).
   */
  public double capacity() {
    synchronized (state) {
      return state.effective(state.leases.now());
    }
  }

  /** The lease held, or empty when none is held or it has expired. */
  public Optional<Lease> lease() {
    synchronized (state) {
      if (!state.hasLease || !(state.expiry > state.leases.now())) {
        return Optional.empty();
      }
      return Optional.of(
          new Lease(state.capacity, Durations.instant(state.expiry), Durations.of(state.refresh)));
    }
  }

  /** The last safe capacity the server sent (negative: no limit), or empty before any. */
  public Optional<Double> safeCapacity() {
    synchronized (state) {
      return state.safeKnown ? Optional.of(state.safe) : Optional.empty();
    }
  }

  /**
   * Changes what this handle wants; the client asks the server for the sum
   * over the resource's handles at once, or, inside the 5 s window of the
   * last request, when the window ends.
   *
   * @throws InvalidArgumentException unless wants is finite and at least 0
   * @throws ClosedException once released
   */
  public void setWants(double w) {
    Leases.checkWants(w);
    synchronized (this) {
      if (closed) {
        throw new ClosedException("resource " + id() + " was released");
      }
      wants = w;
    }
    state.askTotal();
  }

  /**
   * Calls {@code listener} with the capacity now and whenever it changes
   * (a new lease, an expiry and its fallback, a release). It runs on the
   * thread that made the change (the client's refresh thread for leases),
   * never under the client's locks, one call at a time per resource, newest
   * value last; it should return promptly. A listener that throws is logged
   * and called again on the next change.
   *
   * @throws NullPointerException if {@code listener} is null
   */
  public void onChange(DoubleConsumer listener) {
    state.addListener(java.util.Objects.requireNonNull(listener, "listener"));
    state.deliver();
  }

  /**
   * A SmoothBursty {@link RateLimiter} whose rate, in permits per second,
   * follows this resource's capacity from the moment it changes. {@code
   * maxBurst} is how much time's worth of unused permits it may store: 1 s
   * is Guava's default; less keeps every one-second window closer to the
   * lease; zero or negative stores none.
   *
   * @throws NullPointerException if {@code maxBurst} is null
   */
  public RateLimiter rateLimiter(Duration maxBurst) {
    RateLimiter lim = RateLimiter.create(0, maxBurst);
    onChange(lim::setRate);
    return lim;
  }

  /** {@link #rateLimiter(Duration)} with Guava's 1 s of burst. */
  public RateLimiter rateLimiter() {
    return rateLimiter(Duration.ofSeconds(1));
  }

  /** A {@link Gauge} whose capacity follows this resource's: at most floor(capacity) in flight. */
  public Gauge gauge() {
    Gauge g = new Gauge(0);
    onChange(g::setCapacity);
    return g;
  }

  /**
   * Releases this handle. When it is the resource's last, the lease is
   * given back to the server ({@code ReleaseCapacity}) and the capacity
   * becomes 0; otherwise the client asks for the remaining handles' wants.
   * Releasing twice does nothing. Blocks for the request (up to 2 s).
   *
   * @throws SluiceException of a failed {@code ReleaseCapacity} (the lease
   *     is dropped here all the same; the server lets it expire)
   */
  public void release() {
    synchronized (this) {
      if (closed) {
        return;
      }
      closed = true;
    }
    state.leases.releaseHandle(this);
  }

  /**
   * {@link #release()}, throwing nothing: a failed {@code ReleaseCapacity}
   * is logged (the lease is dropped here all the same; the server lets it
   * expire).
   */
  @Override
  public void close() {
    try {
      release();
    } catch (SluiceException e) {
      log.fine("sluice: releasing " + id() + " on close: " + e);
    }
  }

  @Override
  public String toString() {
    return "Resource[" + id() + ", wants " + wants() + ", capacity " + capacity() + "]";
  }
}
