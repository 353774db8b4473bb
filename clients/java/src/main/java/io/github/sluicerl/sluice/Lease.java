package io.github.sluicerl.sluice;

/**
 * A lease held: {@code capacity} (the resource's unit, e.g. permits per
 * second) valid until {@code expiry} (Unix seconds), to be refreshed every
 * {@code refreshInterval} seconds.
 */
public record Lease(double capacity, double expiry, double refreshInterval) {}
