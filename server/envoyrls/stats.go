package envoyrls

import (
	"math"
	"time"
)

// StatsSink receives the statistics envoyproxy/ratelimit keeps of its
// ShouldRateLimit calls, per descriptor and per request, as the service
// decides them (Options.Stats): what a statsd sink needs to emit them
// under upstream's names (server/envoyrls/upstreamstats).
//
// Its methods are called on the request's goroutine, from many requests
// at once, after the request is decided and before it is answered: they
// must be safe for concurrent use, return quickly and never block (no
// I/O), and keep nothing of their argument but its strings.
//
// Source: envoyproxy/ratelimit's src/stats/manager_impl.go (the names),
// src/limiter/base_limiter.go (the counts), src/service/ratelimit.go and
// src/metrics/metrics.go (the request's).
type StatsSink interface {
	// Descriptor is called once per request descriptor that matched a
	// limit (a rule's, or the descriptor's own override) and was decided
	// or failed: not for a descriptor with no limit, an unlimited rule, a
	// limit another replaces, or an unknown domain (upstream counts none
	// of them), nor for a request refused before its descriptors were
	// decided (bad input, a domain the caller may not use).
	Descriptor(DescriptorStats)
	// Request is called once per ShouldRateLimit call, whatever its
	// answer (an error included), after its descriptors.
	Request(RequestStats)
}

// DescriptorStats is one request descriptor's statistics.
type DescriptorStats struct {
	// Domain is the request's domain.
	Domain string
	// Key names the descriptor's statistics after the domain, unsanitized,
	// as envoyproxy/ratelimit names them: the rule's keys and values
	// (key_value.key: rls.RulePath), the request's values for a
	// detailed_metric or value_to_metric rule, the descriptor's entries
	// for an override (key_value.key2_value2). The names made of request
	// values are at most MaxDetailedSeries per kind; beyond, the rule's
	// own name, or "override". The metrics' rule label is the same, but
	// for an override, which they label "override" (or the rule's).
	Key string
	// Result is what became of its hits (ResultFailed when the store
	// failed and the request was answered Unavailable).
	Result Result
	// Hits is what it added: the descriptor's hits_addend, else the
	// request's (0 means 1).
	Hits uint64
	// Counts are the counters envoyproxy/ratelimit adds for it.
	Counts Counts
}

// Counts are the per-rule counters envoyproxy/ratelimit adds for one
// descriptor of a request (its src/limiter/base_limiter.go), in hits:
//
//   - TotalHits: every hit of a descriptor with a limit, decided or not
//     (a refund's excepted).
//   - WithinLimit: every hit of a descriptor that was not over its limit
//     (its near-limit hits included).
//   - NearLimit: of a descriptor not over its limit, the hits that took
//     the counter above the near-limit threshold (⌊limit ×
//     NearLimitRatio⌋, in float32 as upstream computes it); of one over
//     its limit, the hits between that threshold and the limit.
//   - OverLimit: the hits beyond the limit (all of them when the counter
//     was already at its limit); also for a rule in shadow mode.
//   - ShadowMode: the same hits as OverLimit, for a rule in shadow mode
//     (not for the service's shadow mode: RequestStats.GlobalShadowMode).
//   - NegativeHits: a refund's hits (is_negative_hits; no other count).
//
// A counter's use before the descriptor is the limit less what remained
// untouched (a refused request charges nothing); after it, that plus the
// hits. A burst-tier rule (Sluice's) counts its hits by its result alone:
// within (and near), or over. A descriptor answered while the store
// failed counts only TotalHits.
type Counts struct {
	TotalHits, WithinLimit, NearLimit, OverLimit, ShadowMode, NegativeHits uint64
}

// RequestStats is one ShouldRateLimit call's statistics.
type RequestStats struct {
	// Domain is the request's domain (as sent: it may be empty or invalid
	// when Err is set).
	Domain string
	// Duration is the time (Options.Now) from the call to its answer.
	Duration time.Duration
	// Err is the call's error (nil: answered).
	Err error
	// StoreFailed reports that the store failed (or the call's context
	// ended while it decided): the request was answered with an error
	// (Unavailable when FailClosed), or OK (FailOpen). Upstream's
	// redis_error; any other Err is its service_error.
	StoreFailed bool
	// GlobalShadowMode reports that Options.ShadowMode answered OK a
	// request that was over a limit not in shadow mode itself.
	GlobalShadowMode bool
	// DomainNotFound is the number of descriptors of a request whose
	// domain has no rules (0 otherwise): upstream counts each.
	DomainNotFound int
}

// requestReport is a request's statistics in the making.
type requestReport struct {
	start            time.Time
	storeFailed      bool
	globalShadowMode bool
	domainNotFound   int
}

// reportRequest hands the request's statistics to the sink.
func (s *Service) reportRequest(sink StatsSink, domain string, rep *requestReport, err error) {
	sink.Request(RequestStats{Domain: domain, Duration: s.opts.Now().Sub(rep.start), Err: err,
		StoreFailed: rep.storeFailed, GlobalShadowMode: rep.globalShadowMode, DomainNotFound: rep.domainNotFound})
}

// reportDescriptors hands the sink the statistics of the descriptors of
// ds that were decided (recorded), or, when failed, of those with a limit
// (as failed). charged reports that the store granted the request: the
// answers' remaining is after their hits (even when a burst tier refused
// later and they were given back).
func (s *Service) reportDescriptors(sink StatsSink, ds []descriptor, charged, failed bool, rep *requestReport) {
	for i := range ds {
		d := &ds[i]
		switch {
		case d.limit == nil || d.limit.Unlimited:
			continue
		case failed:
			d.res = ResultFailed
		case !d.recorded:
			continue
		}
		ruleShadow := d.match.Rule != nil && d.match.Rule.ShadowMode && d.limit == d.match.Rule.Limit
		if d.res == ResultShadow && s.opts.ShadowMode && !ruleShadow {
			rep.globalShadowMode = true
		}
		sink.Descriptor(DescriptorStats{Domain: d.domain, Key: s.metrics.statKey(d), Result: d.res, Hits: d.hits,
			Counts: s.counts(d, charged, ruleShadow)})
	}
}

// counts returns the counters envoyproxy/ratelimit adds for d (see
// Counts). Source: envoyproxy/ratelimit's src/limiter/base_limiter.go.
func (s *Service) counts(d *descriptor, charged, ruleShadow bool) Counts {
	hits := d.hits
	c := Counts{TotalHits: hits}
	over := d.res == ResultOver || d.res == ResultShadow
	switch {
	case d.refund:
		return Counts{NegativeHits: hits}
	case d.res == ResultDegraded || d.res == ResultFailed:
		return c
	case d.tiered():
		switch d.res {
		case ResultNear:
			c.NearLimit = hits
			c.WithinLimit = hits
		case ResultWithin:
			c.WithinLimit = hits
		default:
			c.OverLimit = hits
			if ruleShadow {
				c.ShadowMode = hits
			}
		}
		return c
	}
	limit := uint64(d.bound.RequestsPerUnit)
	used := limit - min(uint64(d.answer.status.LimitRemaining), limit)
	var before, after uint64
	if charged && !over { // the answer's remaining is after the hits
		after, before = used, used-min(hits, used)
	} else { // not charged: as if it had been
		before, after = used, used+min(hits, math.MaxUint64-used)
	}
	near := uint64(math.Floor(float64(float32(limit) * float32(s.opts.NearLimitRatio))))
	if !over {
		c.WithinLimit = hits
		if after > near {
			c.NearLimit = after - max(near, before)
		}
		return c
	}
	if before >= limit {
		c.OverLimit = hits
	} else {
		c.OverLimit = after - limit
		c.NearLimit = limit - max(near, before)
	}
	if ruleShadow {
		c.ShadowMode = c.OverLimit
	}
	return c
}
