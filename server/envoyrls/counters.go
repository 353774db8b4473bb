package envoyrls

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/limits/rls"
	"github.com/sluice-rl/sluice/server/status/view"
)

// Counters returns the counters whose Key starts with prefix, ordered by
// Key, from offset, at most limit of them, described at the clock's now.
// The limits engine's budgets (limits.Budget), which share a Redis store
// with the rules' counters under the empty domain, are not among them.
// It is one walk of the store (rls.Store.Walk, never on a request's path)
// over at most budget counters (≤ 0: all), keeping only offset + limit
// rows.
func (s *Service) Counters(ctx context.Context, prefix string, offset, limit, budget int) (view.CounterPage, error) {
	cfg, now := s.cfg.Load(), s.opts.Now().UnixMicro()
	keep := max(offset, 0) + max(limit, 0)
	p := view.CounterPage{Complete: true}
	err := s.opts.Store.Walk(ctx, func(c rls.Counter) bool {
		if budget > 0 && p.Total == budget {
			p.Complete = false
			return false
		}
		p.Total++
		domain, entries, tag, ok := rls.ParseBucket(c.Bucket)
		if !ok || domain == "" { // (domain "": the limits engine's budgets, in the same store)
			return true
		}
		key := counterKey(domain, entries)
		if !strings.HasPrefix(key, prefix) {
			return true
		}
		p.Matched++
		if keep == 0 {
			return true
		}
		i, _ := slices.BinarySearchFunc(p.Rows, key, func(r view.CounterRow, k string) int { return strings.Compare(r.Key, k) })
		if i >= keep {
			return true
		}
		if len(p.Rows) == keep {
			p.Rows = p.Rows[:keep-1]
		}
		p.Rows = slices.Insert(p.Rows, i, s.counterRow(cfg, now, c, key, domain, entries, tag))
		return true
	})
	p.Rows = p.Rows[min(max(offset, 0), len(p.Rows)):]
	if errors.Is(err, limits.ErrWalkBudget) {
		p.Complete, err = false, nil
	}
	return p, err
}

// counterKey is a counter's Key.
func counterKey(domain string, entries []rls.Entry) string {
	var b strings.Builder
	b.WriteString(domain)
	for _, e := range entries {
		b.WriteByte('/')
		b.WriteString(e.Value)
	}
	return b.String()
}

// counterRow describes counter c at now under cfg.
func (s *Service) counterRow(cfg *rls.Config, now int64, c rls.Counter, key, domain string, entries []rls.Entry, tag string) view.CounterRow {
	row := view.CounterRow{Key: key, Domain: domain, Algorithm: c.Algorithm.String()}
	kv := make([]string, len(entries))
	for i, e := range entries {
		kv[i] = e.Key + "=" + e.Value
	}
	row.Entries = strings.Join(kv, ", ")
	var policy rls.Policy
	if o, ok := strings.CutPrefix(tag, overrideTag); ok {
		row.Override, row.Limit = o, o
		limit, period, ok := parseOverride(o)
		if !ok {
			return row
		}
		policy = rls.Policy{Limit: limit, Period: period.Microseconds()}
	} else if m := cfg.Match(domain, entries); m.Rule != nil && m.Rule.Limit.BurstTiers == "" && !m.Rule.Limit.Unlimited {
		l := m.Rule.Limit
		for i, more := range m.Rule.MoreLimits {
			if rls.LimitBucket(m.Bucket, i+1) == c.Bucket {
				l = more
			}
		}
		row.Rule = m.Rule.Key
		if info := s.metrics.rule(m.Rule); info != nil {
			row.Rule = info.label
		}
		row.Limit = l.String()
		policy = s.policy(l, c.Algorithm)
	} else {
		return row
	}
	if policy.Limit == 0 || policy.Period <= 0 {
		return row
	}
	policy.Algorithm = c.Algorithm
	var res [1]rls.Result
	rls.Decide(now, []rls.Hit{{Bucket: c.Bucket, Policy: policy}}, []rls.State{c.State}, res[:])
	row.Remaining, row.ResetSeconds = res[0].Remaining, float64(res[0].Reset)/1e6
	return row
}

// parseOverride reads an override's tag after overrideTag
// ("5/minute*2"): its limit and period.
func parseOverride(o string) (uint32, time.Duration, bool) {
	rpu, rest, ok := strings.Cut(o, "/")
	unit, mult, hasMult := strings.Cut(rest, "*")
	n, err := strconv.ParseUint(rpu, 10, 32)
	u, uerr := rls.ParseUnit(unit)
	if !ok || err != nil || uerr != nil {
		return 0, 0, false
	}
	period := u.Duration()
	if hasMult {
		m, err := strconv.ParseUint(mult, 10, 32)
		if err != nil {
			return 0, 0, false
		}
		period *= time.Duration(max(m, 1))
	}
	return uint32(n), period, true
}
