package io.github.sluicerl.sluice;

import java.time.Duration;
import java.time.Instant;

/**
 * Conversions between the public API's {@link Duration} and {@link Instant}
 * and the seconds (doubles) the client computes with inside, and the wire's
 * {@code google.protobuf.Duration}. Stateless.
 */
final class Durations {
  private Durations() {}

  private static final long NANOS = 1_000_000_000L;

  /** d in seconds. */
  static double seconds(Duration d) {
    return d.getSeconds() + d.getNano() / 1e9;
  }

  /**
   * seconds as a Duration, to the nanosecond; NaN is zero, and beyond
   * Duration's range (infinity too) the largest or smallest Duration.
   */
  static Duration of(double seconds) {
    if (Double.isNaN(seconds)) {
      return Duration.ZERO;
    }
    if (seconds >= Long.MAX_VALUE) {
      return Duration.ofSeconds(Long.MAX_VALUE, NANOS - 1);
    }
    if (seconds <= Long.MIN_VALUE) {
      return Duration.ofSeconds(Long.MIN_VALUE);
    }
    double whole = Math.floor(seconds);
    return Duration.ofSeconds((long) whole, Math.min(NANOS - 1, Math.round((seconds - whole) * 1e9)));
  }

  /** A Unix time in seconds as an Instant. */
  static Instant instant(double unixSeconds) {
    double whole = Math.floor(unixSeconds);
    return Instant.ofEpochSecond((long) whole, Math.min(NANOS - 1, Math.round((unixSeconds - whole) * 1e9)));
  }

  /** seconds as the wire's Duration. */
  static com.google.protobuf.Duration proto(double seconds) {
    long n = Math.round(seconds * 1e9);
    return com.google.protobuf.Duration.newBuilder().setSeconds(Math.floorDiv(n, NANOS))
        .setNanos((int) Math.floorMod(n, NANOS)).build();
  }

  /** d as the wire's Duration. */
  static com.google.protobuf.Duration proto(Duration d) {
    return com.google.protobuf.Duration.newBuilder().setSeconds(d.getSeconds()).setNanos(d.getNano()).build();
  }

  /** The wire's Duration in seconds. */
  static double seconds(com.google.protobuf.Duration d) {
    return d.getSeconds() + d.getNanos() / 1e9;
  }

  /** The wire's Duration as a Duration. */
  static Duration of(com.google.protobuf.Duration d) {
    return Duration.ofSeconds(d.getSeconds(), d.getNanos());
  }
}
