package envoyrls_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/limits/rls"
	"github.com/sluice-rl/sluice/server/envoyrls"
)

const resetRules = `
domain: edge
descriptors:
  - key: route
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: path
    descriptors:
      - key: method
        algorithm: fixed_window
        rate_limit: {unit: hour, requests_per_unit: 1}
  - key: tenant
    value: "acme-*"
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: internal
    rate_limit: {unlimited: true}
  - key: health
`

// entries is a descriptor's entries, key, value, key, value…
func entries(kv ...string) []rls.Entry {
	var es []rls.Entry
	for i := 0; i+1 < len(kv); i += 2 {
		es = append(es, rls.Entry{Key: kv[i], Value: kv[i+1]})
	}
	return es
}

// Reset restores the counter of the rule a descriptor matches, as a
// request would match it (a token bucket, a fixed window, a
// share_threshold wildcard's shared counter), and no other; a full one
// counts 0, an unlimited rule has none.
func TestReset(t *testing.T) {
	tests := []struct {
		name  string
		drain []string // the descriptor drained, key, value…
		reset []string // the descriptor reset
		other []string // a descriptor drained too, not reset
	}{
		{name: "token bucket", drain: []string{"route", "a"}, reset: []string{"route", "a"}, other: []string{"route", "b"}},
		{name: "fixed window", drain: []string{"path", "/x", "method", "GET"}, reset: []string{"path", "/x", "method", "GET"}, other: []string{"path", "/x", "method", "PUT"}},
		{name: "shared wildcard", drain: []string{"tenant", "acme-1"}, reset: []string{"tenant", "acme-2"}, other: []string{"route", "a"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := start(t, envoyrls.Options{}, resetRules)
			drain := func(kv []string) {
				t.Helper()
				for range 3 {
					r.ask(t, "edge", desc(kv...))
				}
				if resp := r.ask(t, "edge", desc(kv...)); resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
					t.Fatalf("%v drained: %v", kv, resp)
				}
			}
			drain(tc.drain)
			drain(tc.other)
			n, err := r.svc.Reset(context.Background(), "edge", entries(tc.reset...))
			if err != nil || n != 1 {
				t.Fatalf("Reset: %d, %v; want 1, nil", n, err)
			}
			if resp := r.ask(t, "edge", desc(tc.drain...)); resp.OverallCode != rlsv3.RateLimitResponse_OK {
				t.Fatalf("%v after the reset: %v", tc.drain, resp)
			}
			if resp := r.ask(t, "edge", desc(tc.other...)); resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("%v, not reset: %v", tc.other, resp)
			}
		})
	}
	r := start(t, envoyrls.Options{}, resetRules)
	if n, err := r.svc.Reset(context.Background(), "edge", entries("route", "never")); n != 0 || err != nil {
		t.Fatalf("a full bucket: %d, %v; want 0, nil", n, err)
	}
	if n, err := r.svc.Reset(context.Background(), "edge", entries("internal", "x")); n != 0 || err != nil {
		t.Fatalf("an unlimited rule: %d, %v; want 0, nil", n, err)
	}
}

// A rule of several limits (rate_limits) has a counter per limit
// (rls.LimitBucket): Reset forgets every one.
func TestResetEveryLimit(t *testing.T) {
	store := rls.NewMemoryStore()
	r := start(t, envoyrls.Options{Store: store})
	cfg, err := rls.NewConfig(&rls.Domain{Name: "d", Descriptors: []*rls.Rule{{
		Key:        "k",
		Limit:      &rls.Limit{RequestsPerUnit: 10, Unit: rls.Second},
		MoreLimits: []*rls.Limit{{RequestsPerUnit: 100, Unit: rls.Hour}, {RequestsPerUnit: 1000, Unit: rls.Day}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	r.svc.SetConfig(cfg)
	m := cfg.Match("d", entries("k", "v"))
	var hits []rls.Hit
	for i, l := range []*rls.Limit{m.Rule.Limit, m.Rule.MoreLimits[0], m.Rule.MoreLimits[1]} {
		hits = append(hits, rls.Hit{Bucket: rls.LimitBucket(m.Bucket, i), Policy: l.Policy(rls.TokenBucket), Hits: 1})
	}
	hits = append(hits, rls.Hit{Bucket: rls.Bucket("d", entries("k", "other")), Policy: hits[0].Policy, Hits: 1})
	if ok, err := store.Decide(context.Background(), time.Now().UnixMicro(), "d", hits, make([]rls.Result, len(hits))); !ok || err != nil {
		t.Fatal(ok, err)
	}
	n, err := r.svc.Reset(context.Background(), "d", entries("k", "v"))
	if err != nil || n != 3 {
		t.Fatalf("Reset: %d, %v; want 3 (a counter per limit)", n, err)
	}
	if store.Len() != 1 {
		t.Fatalf("%d counters left, want 1 (k=other's)", store.Len())
	}
}

// A rule with burst tiers: Reset makes its counter's tier domain fresh on
// the limits engine.
func TestResetBurstTiers(t *testing.T) {
	r, eng := startTiers(t, envoyrls.Options{})
	for range 6 {
		r.ask(t, "api", desc("tenant", "acme"))
	}
	if resp := r.ask(t, "api", desc("tenant", "acme")); resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("acme past its tiers: %v", resp)
	}
	if resp := r.ask(t, "api", desc("tenant", "globex")); resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("globex: %v", resp)
	}
	n, err := r.svc.Reset(context.Background(), "api", entries("tenant", "acme"))
	if err != nil || n != 1 {
		t.Fatalf("Reset: %d, %v; want 1", n, err)
	}
	if resp := r.ask(t, "api", desc("tenant", "acme")); resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != 5 {
		t.Fatalf("acme after the reset: %v, want OK with 5 left (fresh: the tiers' 2 + 4, less this one)", resp)
	}
	domains := map[string]bool{}
	_ = eng.Store().Walk(context.Background(), func(s limits.Snapshot) bool { domains[s.Key.Domain] = true; return true })
	if !domains["acme"] || !domains["globex"] || len(domains) != 2 {
		t.Fatalf("the engine's tier domains: %v", domains)
	}
	// Without a limits engine that resets: an error, not a silent 0.
	r2 := start(t, envoyrls.Options{})
	r2.svc.SetConfig(r.svc.Config())
	if _, err := r2.svc.Reset(context.Background(), "api", entries("tenant", "acme")); err == nil || errors.Is(err, envoyrls.ErrNoRule) {
		t.Fatalf("no limits engine: %v", err)
	}
}

// Reset's errors: the field at fault for bad input (a
// *limits.RequestError), ErrNoRule naming the descriptor when it matches
// no rule with a limit, the store's error otherwise.
func TestResetErrors(t *testing.T) {
	r := start(t, envoyrls.Options{}, resetRules)
	long := strings.Repeat("x", envoyrls.MaxNameBytes+1)
	for _, tc := range []struct {
		name    string
		domain  string
		entries []rls.Entry
		field   string // a RequestError's; "" for ErrNoRule
	}{
		{name: "empty domain", entries: entries("route", "a"), field: "domain"},
		{name: "long domain", domain: long, entries: entries("route", "a"), field: "domain"},
		{name: "no entries", domain: "edge", field: "descriptor"},
		{name: "empty key", domain: "edge", entries: []rls.Entry{{Key: "route", Value: "a"}, {Value: "b"}}, field: "descriptor[1].key"},
		{name: "long value", domain: "edge", entries: entries("route", long), field: "descriptor[0].value"},
		{name: "no such domain", domain: "nope", entries: entries("route", "a")},
		{name: "no such rule", domain: "edge", entries: entries("colour", "red")},
		{name: "a rule without a limit", domain: "edge", entries: entries("health", "x")},
		{name: "deeper than the rules", domain: "edge", entries: entries("route", "a", "method", "GET")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, err := r.svc.Reset(context.Background(), tc.domain, tc.entries)
			var re *limits.RequestError
			switch {
			case n != 0:
				t.Fatalf("%d reset", n)
			case tc.field != "" && (!errors.As(err, &re) || re.Field != tc.field):
				t.Fatalf("%v; want a RequestError of field %s", err, tc.field)
			case tc.field == "" && (!errors.Is(err, envoyrls.ErrNoRule) || !strings.Contains(err.Error(), `"`+tc.entries[0].Key+"=")):
				t.Fatalf("%v; want ErrNoRule naming the descriptor", err)
			}
		})
	}
	f := start(t, envoyrls.Options{Store: failing{}}, resetRules)
	if _, err := f.svc.Reset(context.Background(), "edge", entries("route", "a")); !errors.Is(err, limits.ErrStaleConfig) {
		t.Fatalf("a failing store: %v, want its error", err)
	}
}
