package io.github.sluicerl.sluice;

import io.github.sluicerl.sluice.proto.v1.ReserveResponse;
import java.util.List;
import java.util.stream.Collectors;

/**
 * The context of the server's answer to a reserve, in copies: the domain's
 * limit and the global limit (-1: unbounded), the copies held by the domain
 * and by every domain after the answer, the domain's groups, and whether
 * the resource is unlimited. Immutable as the client makes it (its group
 * list is unmodifiable).
 * A seized or degraded hold has none: limits 0 and -1, nothing held, no
 * groups.
 */
public record Reservation(
    long domainLimit, long globalLimit, long domainHolds, long globalHolds, List<GroupHolds> groups, boolean unlimited) {

  /** One domain group's pool: its name, limit, and the copies held across the group's domains. */
  public record GroupHolds(String name, long limit, long holds) {}

  static final Reservation NONE = new Reservation(0, -1, 0, 0, List.of(), false);

  static Reservation of(ReserveResponse r) {
    return new Reservation(
        r.getDomainLimit(),
        r.hasGlobalLimit() ? r.getGlobalLimit() : -1,
        r.getDomainHolds(),
        r.getGlobalHolds(),
        r.getGroupsList().stream()
            .map(g -> new GroupHolds(g.getName(), g.getLimit(), g.getHolds()))
            .collect(Collectors.toUnmodifiableList()),
        r.getUnlimited());
  }
}
