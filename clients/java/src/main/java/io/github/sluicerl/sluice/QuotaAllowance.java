package io.github.sluicerl.sluice;

/**
 * The answer of the quota service's {@code quotaservice.QuotaService/Allow}:
 * {@code status} ({@code OK}, {@code REJECTED_TIMEOUT}, ...), {@code granted}
 * tokens usable after {@code waitSeconds}.
 */
public record QuotaAllowance(String status, long granted, double waitSeconds) {
  /** Whether tokens were granted. */
  public boolean ok() {
    return "OK".equals(status);
  }
}
