package rlqsfilter

import (
	"maps"
	"slices"
	"strings"
	"time"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

// Options configure a Filter: the fallbacks of its buckets (Bucket's).
type Options struct {
	// NoAssignment is the no_assignment_behavior's blanket rule (the
	// zero value: ALLOW_ALL).
	NoAssignment typev3.RateLimitStrategy_BlanketRule
	// Expired is the expired_assignment_behavior's fallback_rate_limit
	// blanket rule (the zero value: ALLOW_ALL).
	Expired typev3.RateLimitStrategy_BlanketRule
}

// Stats are a Filter's counts since it started.
type Stats struct {
	// Allowed and Denied are the requests decided.
	Allowed, Denied int64
	// Bursts is Σ MaxTokens of the token buckets started (each starts
	// full): what the proxy may admit beyond its assigned rates.
	Bursts int64
	// Assignments and Abandons are the actions applied to buckets the
	// filter tracks.
	Assignments, Abandons int64
}

// Usage is one bucket's part of a usage report: the requests decided
// since its last report and the time since then in whole seconds (0 in
// the report of a new bucket), as the filter sends them.
type Usage struct {
	ID              map[string]string // the bucket id's pairs
	Allowed, Denied uint64
	Elapsed         time.Duration
}

// Filter is one filter's buckets (one proxy, one domain), by bucket id:
// a bucket is tracked from its first request until an AbandonAction.
// The zero value is not usable (New). Not safe for concurrent use; time
// is passed in and must not go backwards.
type Filter struct {
	opts    Options
	buckets map[string]*entry
	stats   Stats
}

// entry is one tracked bucket and its counts for the next report.
type entry struct {
	id              map[string]string
	b               Bucket
	allowed, denied uint64
	last            time.Time // its last report (or its first request)
}

// New returns a filter tracking no bucket, with opts' fallbacks.
func New(opts Options) *Filter {
	return &Filter{opts: opts, buckets: make(map[string]*entry)}
}

// Key returns a bucket id's key: its pairs sorted, "k=v;" each.
func Key(id map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(id)) {
		b.WriteString(k + "=" + id[k] + ";")
	}
	return b.String()
}

// Allow decides one request matched into the bucket with id at now, and
// counts it for the next report. created is true when it is the bucket's
// first request: the filter then reports the bucket at once
// (Usages(now, id)), which subscribes it.
func (f *Filter) Allow(now time.Time, id map[string]string) (allowed, created bool) {
	k := Key(id)
	e := f.buckets[k]
	if e == nil {
		e = &entry{id: maps.Clone(id), b: Bucket{NoAssignment: f.opts.NoAssignment, Expired: f.opts.Expired}, last: now}
		f.buckets[k] = e
		created = true
	}
	if allowed = e.b.Allow(now); allowed {
		e.allowed++
		f.stats.Allowed++
	} else {
		e.denied++
		f.stats.Denied++
	}
	return allowed, created
}

// Usages returns the report of the buckets with ids at now (none given:
// every tracked bucket), in the order of their keys, and starts their
// counts again. Ids not tracked are left out.
//
// Source: Envoy's global_client_impl.cc, buildReports and
// getUsageFromBucket (time_elapsed in whole seconds).
func (f *Filter) Usages(now time.Time, ids ...map[string]string) []Usage {
	keys := make([]string, 0, max(len(ids), len(f.buckets)))
	if len(ids) == 0 {
		keys = slices.Sorted(maps.Keys(f.buckets))
	} else {
		for _, id := range ids {
			keys = append(keys, Key(id))
		}
		slices.Sort(keys)
		keys = slices.Compact(keys)
	}
	out := make([]Usage, 0, len(keys))
	for _, k := range keys {
		e := f.buckets[k]
		if e == nil {
			continue
		}
		out = append(out, Usage{ID: e.id, Allowed: e.allowed, Denied: e.denied, Elapsed: now.Sub(e.last).Truncate(time.Second)})
		e.allowed, e.denied, e.last = 0, 0, now
	}
	return out
}

// Assign applies an assignment for the bucket with id received at now
// (Bucket.Assign). It returns false, and does nothing, for a bucket the
// filter does not track.
func (f *Filter) Assign(now time.Time, id map[string]string, s Strategy, ttl time.Duration) bool {
	e := f.buckets[Key(id)]
	if e == nil {
		return false
	}
	f.stats.Assignments++
	if e.b.Assign(now, s, ttl) {
		f.stats.Bursts += int64(s.TokenBucket.MaxTokens)
	}
	return true
}

// Abandon stops tracking the bucket with id (an AbandonAction): its next
// request starts it again, without an assignment.
func (f *Filter) Abandon(id map[string]string) {
	f.stats.Abandons++
	delete(f.buckets, Key(id))
}

// Active returns the assignment of the bucket with id that applies at
// now; ok is false when it has none or is not tracked.
func (f *Filter) Active(now time.Time, id map[string]string) (a Assignment, ok bool) {
	e := f.buckets[Key(id)]
	if e == nil {
		return Assignment{}, false
	}
	return e.b.Active(now)
}

// Tracked reports whether the filter tracks the bucket with id.
func (f *Filter) Tracked(id map[string]string) bool { return f.buckets[Key(id)] != nil }

// Len returns the number of buckets tracked.
func (f *Filter) Len() int { return len(f.buckets) }

// Stats returns the filter's counts.
func (f *Filter) Stats() Stats { return f.stats }
