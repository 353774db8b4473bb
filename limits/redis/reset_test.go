package redisstore

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/limits/rls"
)

// resetClients are the Redis the reset tests run on: one server, and the
// three-master cluster (where a script over keys of two slots would fail
// with CROSSSLOT: each reset's keys are in one slot).
func resetClients(t *testing.T) []struct {
	name string
	c    redis.UniversalClient
} {
	return []struct {
		name string
		c    redis.UniversalClient
	}{{"redis", client(t)}, {"cluster", clusterClient(t)}}
}

// RLS.Reset deletes the buckets' counters under both algorithms, in one
// script on the domain's slot, and no others: the next decision finds
// them full (a token bucket) and empty (a fixed window).
func TestRLSReset(t *testing.T) {
	for _, rc := range resetClients(t) {
		t.Run(rc.name, func(t *testing.T) {
			ctx := context.Background()
			st := New(rc.c, Options{Prefix: prefix(t), callerTime: true})
			r := NewRLS(st)
			const now = int64(1_800_000_000_000_000)
			tb := rls.Policy{Algorithm: rls.TokenBucket, Limit: 2, Period: 3600e6}
			fw := rls.Policy{Algorithm: rls.FixedWindow, Limit: 2, Period: 3600e6}
			const domain = "d{x}" // (braces escaped: the hash tag stays the domain's)
			bucket := func(v string) string { return rls.Bucket(domain, []rls.Entry{{Key: "k", Value: v}}) }
			drain := func(b string, p rls.Policy) {
				t.Helper()
				res := make([]rls.Result, 1)
				if ok, err := r.Decide(ctx, now, domain, []rls.Hit{{Bucket: b, Policy: p, Hits: 2}}, res); !ok || err != nil {
					t.Fatalf("drain: %v, %v", ok, err)
				}
			}
			drain(bucket("a"), tb)
			drain(bucket("a"), fw)
			drain(bucket("b"), fw)
			drain(bucket("other"), tb)
			n, err := r.Reset(ctx, domain, []string{bucket("a"), bucket("b"), bucket("never")})
			if err != nil || n != 3 {
				t.Fatalf("Reset: %d, %v; want 3 (a under both algorithms, b), nil", n, err)
			}
			hits := []rls.Hit{{Bucket: bucket("a"), Policy: tb, Hits: 1}, {Bucket: bucket("a"), Policy: fw, Hits: 1},
				{Bucket: bucket("b"), Policy: fw, Hits: 1}, {Bucket: bucket("other"), Policy: tb}}
			res := make([]rls.Result, len(hits))
			if ok, err := r.Decide(ctx, now, domain, hits, res); !ok || err != nil {
				t.Fatalf("after the reset: %v, %v, %+v", ok, err, res)
			}
			for i, want := range []uint32{1, 1, 1, 0} {
				if res[i].Remaining != want {
					t.Errorf("hit %d (%v): %d left, want %d", i, hits[i].Policy.Algorithm, res[i].Remaining, want)
				}
			}
			var walked []string
			if err := r.Walk(ctx, func(c rls.Counter) bool { walked = append(walked, c.Bucket); return true }); err != nil {
				t.Fatal(err)
			}
			if len(walked) != 4 {
				t.Errorf("walked %d counters after the decision, want 4 (a twice, b, other): %q", len(walked), walked)
			}
			if n, err := r.Reset(ctx, domain, nil); n != 0 || err != nil {
				t.Fatalf("Reset of nothing: %d, %v", n, err)
			}
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			if _, err := r.Reset(cctx, domain, []string{bucket("a")}); !errors.Is(err, context.Canceled) {
				t.Fatalf("a cancelled reset: %v", err)
			}
			many := make([]string, rls.MaxHits+1)
			for i := range many {
				many[i] = fmt.Sprint(i)
			}
			if _, err := r.Reset(ctx, domain, many); err == nil {
				t.Fatalf("%d buckets: no error", len(many))
			}
		})
	}
}

// Store.Reset under an engine: a drained token bucket is full again, a
// dynamic bucket frees its place under max_dynamic_buckets (its member of
// the resource's dynamic set goes), and a burst-tier domain is fresh
// while the resource's global log stays.
func TestStoreReset(t *testing.T) {
	for _, rc := range resetClients(t) {
		t.Run(rc.name, func(t *testing.T) {
			ctx := context.Background()
			st := New(rc.c, Options{Prefix: prefix(t), callerTime: true})
			slow := limits.Bucket{Size: 2, FillRate: 0.001, MaxTokensPerRequest: 2}
			cfg := &limits.Config{Resources: map[string]*limits.Resource{
				"api": {Buckets: map[string]limits.Bucket{"small": slow}, Template: &slow, MaxDynamicBuckets: 1},
				"tiers": {Algorithm: limits.BurstTiers, GlobalLimit: 5,
					Tiers: []limits.Tier{{Limit: 2, Window: time.Hour, Active: time.Hour}}},
			}}
			e, err := limits.New(cfg, limits.Options{Store: st})
			if err != nil {
				t.Fatal(err)
			}
			now := time.Unix(1_800_000_000, 0)
			allow := func(resource, domain string, tokens int64) limits.Decision {
				return e.Allow(ctx, now, limits.Request{Resource: resource, Domain: domain, Tokens: tokens, HasMaxWait: true})
			}
			// A token bucket.
			if d := allow("api", "small", 2); d.Status != limits.StatusOK {
				t.Fatalf("drain small: %+v", d)
			}
			if d := allow("api", "small", 1); d.Status != limits.StatusTimeout {
				t.Fatalf("small drained: %v", d.Status)
			}
			if held, err := e.Reset(ctx, "api", "small"); err != nil || !held {
				t.Fatalf("reset small: %v, %v", held, err)
			}
			if d := allow("api", "small", 2); d.Status != limits.StatusOK {
				t.Fatalf("small after its reset: %+v, want 2 granted (full)", d)
			}
			// A dynamic bucket: the one place under max_dynamic_buckets.
			if d := allow("api", "u1", 1); d.Status != limits.StatusOK {
				t.Fatalf("u1: %v", d.Status)
			}
			if d := allow("api", "u2", 1); d.Status != limits.StatusTooManyBuckets {
				t.Fatalf("u2 past max_dynamic_buckets: %v", d.Status)
			}
			if held, err := e.Reset(ctx, "api", "u1"); err != nil || !held {
				t.Fatalf("reset u1: %v, %v", held, err)
			}
			if d := allow("api", "u2", 1); d.Status != limits.StatusOK {
				t.Fatalf("u2 once u1 was reset: %v", d.Status)
			}
			if held, err := e.Reset(ctx, "api", "never"); err != nil || held {
				t.Fatalf("reset of a bucket never used: %v, %v", held, err)
			}
			// Burst tiers: a's tier refuses its third hit; reset, a takes two
			// more, and then the global log (3 + 2 = 5) refuses b.
			for _, domain := range []string{"a", "a", "b"} {
				if d := allow("tiers", domain, 1); d.Status != limits.StatusOK {
					t.Fatalf("tiers %s: %+v", domain, d)
				}
			}
			if d := allow("tiers", "a", 1); d.Status != limits.StatusTimeout {
				t.Fatalf("a past its tier: %v", d.Status)
			}
			if held, err := e.Reset(ctx, "tiers", "a"); err != nil || !held {
				t.Fatalf("reset tiers/a: %v, %v", held, err)
			}
			for i := range 2 {
				if d := allow("tiers", "a", 1); d.Status != limits.StatusOK || d.Tiers.TierHits != int64(i+1) {
					t.Fatalf("a after its reset, request %d: %+v", i, d)
				}
			}
			if d := allow("tiers", "b", 1); d.Status != limits.StatusTimeout || !d.Tiers.GlobalLimited {
				t.Fatalf("b: %+v, want refused by the global limit (the global log kept)", d)
			}
			// Every bucket but the reset ones: small, u2, tiers a and b.
			if n := walkLen(t, st); n != 4 {
				t.Errorf("%d buckets walked, want 4", n)
			}
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			if _, err := st.Reset(cctx, limits.Key{Resource: "api", Domain: "small"}); !errors.Is(err, context.Canceled) {
				t.Fatalf("a cancelled reset: %v", err)
			}
		})
	}
}
