package io.github.sluicerl.sluice;

/**
 * Fewer copies than the minimum asked were free under the domain, group
 * and global limits until the maximum wait passed ({@code
 * RESOURCE_EXHAUSTED}). Nothing is held.
 */
public class OverLimitException extends ResourceExhaustedException {
  private static final long serialVersionUID = 1L;

  private final transient Reservation reservation;
  private final int attempts;
  private final double waited;

  /** An over-limit error after {@code attempts} reserves in {@code waited} seconds. */
  public OverLimitException(String message, Reservation reservation, int attempts, double waited) {
    super(message);
    this.reservation = reservation;
    this.attempts = attempts;
    this.waited = waited;
  }

  /** The context of the last answer (limits and holds). */
  public Reservation reservation() {
    return reservation;
  }

  /** How many reserves were sent. */
  public int attempts() {
    return attempts;
  }

  /** How long the reserve took, in seconds. */
  public double waited() {
    return waited;
  }
}
