package io.github.sluicerl.sluice;

import java.time.Duration;

/**
 * The answer of the quota service's {@code quotaservice.QuotaService/Allow}.
 * Immutable.
 *
 * @param status the decision: {@code OK}, {@code REJECTED_TIMEOUT}, ...
 *     (the wire's enum name)
 * @param granted the tokens granted (0 when rejected)
 * @param waitTime how long after the answer the granted tokens may be used,
 *     to the millisecond ({@link Duration#ZERO}: at once)
 */
public record QuotaAllowance(String status, long granted, Duration waitTime) {
  /** Whether tokens were granted ({@code status} is {@code OK}). */
  public boolean ok() {
    return "OK".equals(status);
  }
}
