package io.github.sluicerl.sluice;

/**
 * A monotonic source of time in nanoseconds, as Guava's {@code Ticker}: the
 * limiters read time only through it, so tests move time by hand.
 * Implementations must be safe to call from any thread.
 */
@FunctionalInterface
public interface Ticker {
  /** The time now, in nanoseconds on an arbitrary, monotonic scale. */
  long read();

  /** {@link System#nanoTime()}. */
  Ticker SYSTEM = System::nanoTime;
}
