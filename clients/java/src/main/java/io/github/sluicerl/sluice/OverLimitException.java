package io.github.sluicerl.sluice;

import java.time.Duration;
import java.util.Objects;

/**
 * Fewer copies than the minimum asked were free under the domain, group
 * and global limits until the maximum wait passed ({@code
 * RESOURCE_EXHAUSTED}). Nothing is held. Immutable.
 */
public class OverLimitException extends ResourceExhaustedException {
  private static final long serialVersionUID = 1L;

  private final transient Reservation reservation;
  private final int attempts;
  private final Duration waited;

  /**
   * An over-limit error after {@code attempts} reserves that took {@code
   * waited} in all, the last answered with {@code reservation}.
   *
   * @throws NullPointerException if {@code waited} is null
   */
  public OverLimitException(String message, Reservation reservation, int attempts, Duration waited) {
    super(message);
    this.reservation = reservation;
    this.attempts = attempts;
    this.waited = Objects.requireNonNull(waited, "waited");
  }

  /** The context of the last answer (limits and holds); null once deserialized. */
  public Reservation reservation() {
    return reservation;
  }

  /** How many reserves were sent (at least 1). */
  public int attempts() {
    return attempts;
  }

  /** How long the reserve took, from the first request to the last answer and the retry sleeps between. */
  public Duration waited() {
    return waited;
  }
}
