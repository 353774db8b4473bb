package io.github.sluicerl.sluice;

import io.github.sluicerl.sluice.proto.v1.AllowResponse;

/**
 * The answer of {@code sluice.v1.Limits/Allow}: {@code status} ({@code OK},
 * {@code REJECTED_TIMEOUT}, {@code REJECTED_NO_BUCKET}, ...), {@code granted}
 * tokens usable after {@code waitSeconds}, {@code retryAfter} seconds
 * (NaN: none), the tokens {@code remaining} and the bucket's {@code limit},
 * and the whole {@code response} (burst tiers included).
 */
public record Allowance(
    String status, long granted, double waitSeconds, double retryAfter, double remaining, long limit, AllowResponse response) {
  /** Whether tokens were granted. */
  public boolean ok() {
    return "OK".equals(status);
  }
}
