package io.github.sluicerl.sluice;

import io.github.sluicerl.sluice.proto.v1.AllowResponse;
import java.time.Duration;
import java.util.Optional;

/**
 * The answer of {@code sluice.v1.Limits/Allow}. Immutable.
 *
 * @param status the decision: {@code OK}, {@code REJECTED_TIMEOUT}, {@code
 *     REJECTED_NO_BUCKET}, ... (the wire's enum name)
 * @param granted the tokens granted (0 when rejected)
 * @param waitTime how long after the answer the granted tokens may be used
 *     ({@link Duration#ZERO}: at once)
 * @param retryAfter for a rejection, after how long the same request could
 *     succeed if nobody else took tokens meanwhile; empty when waiting
 *     cannot make it succeed
 * @param remaining the tokens left in the bucket after this answer
 *     (fractional)
 * @param limit the bucket's size, in tokens
 * @param response the whole answer (burst tiers included)
 */
public record Allowance(String status, long granted, Duration waitTime, Optional<Duration> retryAfter,
    double remaining, long limit, AllowResponse response) {
  /** Whether tokens were granted ({@code status} is {@code OK}). */
  public boolean ok() {
    return "OK".equals(status);
  }
}
