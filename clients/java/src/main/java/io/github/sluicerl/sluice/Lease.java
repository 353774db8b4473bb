package io.github.sluicerl.sluice;

import java.time.Duration;
import java.time.Instant;

/**
 * A lease held on a resource. Immutable.
 *
 * @param capacity the capacity granted, in the resource's unit (permits per
 *     second for a rate, slots for a gauge); at least 0
 * @param expiry when the lease ends unless refreshed (the server's clock,
 *     to the second)
 * @param refreshInterval how often the client refreshes it (the server's
 *     choice; 5 s when it named none)
 */
public record Lease(double capacity, Instant expiry, Duration refreshInterval) {}
