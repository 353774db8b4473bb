package copies

import (
	"maps"
	"slices"
	"time"
)

// Stats are the engine's counts now and its counters since New.
type Stats struct {
	// Sessions, Transfers and Resources are the open sessions, the staged
	// transfers, and the resources with a copy log (configured, or holding
	// copies), now — including sessions and transfers whose ttl has passed
	// that Expire has not ended yet.
	Sessions, Transfers, Resources int
	// Opened, Closed and Expired count sessions; Staged, Seized and
	// TransfersExpired count transfers.
	Opened, Closed, Expired          uint64
	Staged, Seized, TransfersExpired uint64
	// Granted and Rejected count reserves (over-limit answers are
	// rejections; errors are neither).
	Granted, Rejected uint64
	// Released counts copies released: by Release, and by the end of
	// sessions and transfers.
	Released uint64
	// With a shared Log: Degraded counts reserves granted fail-open while
	// the Log failed, and Fenced the times the engine was fenced.
	Degraded, Fenced uint64
}

// Stats returns the engine's counts and counters.
func (e *Engine) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.stats
	s.Sessions, s.Transfers, s.Resources = len(e.sessions), len(e.transfers), len(e.counts.res)
	return s
}

// Snapshot is the copy log and the hold sets at one moment, for a status
// page and tests. Its IDs are capabilities (whoever knows a session id can
// release its copies; a transfer id, seize them): a page for anyone but
// operators should show a prefix.
type Snapshot struct {
	// Resources are the resources that are configured or hold copies, by
	// name.
	Resources []ResourceHolds
	// Sessions are the open sessions, by id.
	Sessions []SessionHolds
	// Transfers are the staged transfers, by id.
	Transfers []TransferHolds
}

// ResourceHolds is one resource's copy log.
type ResourceHolds struct {
	Resource string
	// Configured: the configuration names the resource. Otherwise it is
	// unconfigured under an AllowUnconfigured prefix (Unlimited), or was
	// removed from the configuration and still holds copies.
	Configured bool
	// Unlimited: unconfigured under an AllowUnconfigured prefix. Ignore:
	// configured, ignoring its limits.
	Unlimited, Ignore bool
	// DomainLimit is the default domain limit and GlobalLimit the global
	// limit (Unbounded: none), both 0 on a resource no longer configured.
	DomainLimit, GlobalLimit int64
	// GlobalHolds is the copies held across every domain.
	GlobalHolds int64
	// Domains are the domains holding copies, by name.
	Domains []DomainHolds
	// Groups are the configured groups, and the groups no longer
	// configured whose copies are still held, by name.
	Groups []GroupState
}

// DomainHolds is one domain's holds of a resource.
type DomainHolds struct {
	Domain string
	// Limit is the domain's limit now (0 on a resource no longer
	// configured).
	Limit int64
	// Holds is the copies the domain holds, in every group and session.
	Holds int64
	// Groups are the domain's groups now (nil: none).
	Groups []string
}

// GroupState is one group's pool of a resource.
type GroupState struct {
	Name string
	// Configured: the group is in the resource's configuration (else its
	// Limit is 0 and copies reserved under it are still held).
	Configured bool
	Limit      int64
	// Holds is the copies held across the group's domains — those
	// reserved while in the group.
	Holds int64
}

// SessionHolds is one session's hold set.
type SessionHolds struct {
	ID      string
	TTL     time.Duration
	Expires time.Time
	// Holds are the copies the session holds, in (resource, domain,
	// groups) order.
	Holds []Hold
}

// TransferHolds is one staged transfer.
type TransferHolds struct {
	ID string
	// Session is the session that staged it (it may have ended).
	Session string
	Expires time.Time
	Hold    Hold
}

// Snapshot returns the whole copy log and every hold set. It costs a pass
// over every domain holding copies, session and transfer, under the
// engine's lock; Resource costs one resource's domains.
func (e *Engine) Snapshot() Snapshot {
	e.mu.Lock()
	defer e.mu.Unlock()
	var s Snapshot
	for _, name := range slices.Sorted(maps.Keys(e.counts.res)) {
		s.Resources = append(s.Resources, e.counts.res[name].holds(name))
	}
	for _, id := range slices.Sorted(maps.Keys(e.sessions)) {
		ss := e.sessions[id]
		s.Sessions = append(s.Sessions, SessionHolds{ID: id, TTL: time.Duration(ss.ttl), Expires: time.Unix(0, ss.deadline), Holds: sortedHolds(ss.holds)})
	}
	for _, id := range slices.Sorted(maps.Keys(e.transfers)) {
		t := e.transfers[id]
		s.Transfers = append(s.Transfers, TransferHolds{ID: id, Session: t.from, Expires: time.Unix(0, t.deadline),
			Hold: Hold{Resource: t.k.res, Domain: t.k.dom, Groups: splitGroups(t.k.groups), Copies: t.copies}})
	}
	return s
}

// Resource returns the copy log of one resource, and whether there is one
// (the resource is configured or holds copies).
func (e *Engine) Resource(name string) (ResourceHolds, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	st := e.counts.res[name]
	if st == nil {
		return ResourceHolds{}, false
	}
	return st.holds(name), true
}

// holds describes st, the copy log of resource name.
func (st *resState) holds(name string) ResourceHolds {
	r := ResourceHolds{Resource: name, GlobalHolds: st.global}
	c := st.c
	if c != nil {
		r.Configured = !c.unlimited
		r.Unlimited, r.Ignore = c.unlimited, c.ignore
		r.DomainLimit, r.GlobalLimit = c.domainLimit, c.global
	}
	for _, d := range slices.Sorted(maps.Keys(st.domains)) {
		dh := DomainHolds{Domain: d, Holds: st.domains[d]}
		if c != nil {
			dh.Limit = c.limitOf(d)
			if m := c.member[d]; m != nil {
				dh.Groups = slices.Clone(m.names)
			}
		}
		r.Domains = append(r.Domains, dh)
	}
	names := map[string]bool{}
	for g := range st.groups {
		names[g] = true
	}
	if c != nil {
		for g := range c.groups {
			names[g] = true
		}
	}
	for _, g := range slices.Sorted(maps.Keys(names)) {
		gs := GroupState{Name: g, Holds: st.groups[g]}
		if c != nil {
			gs.Limit, gs.Configured = c.groups[g]
		}
		r.Groups = append(r.Groups, gs)
	}
	return r
}
