package limits

import (
	"context"
	"errors"
	"strconv"
	"testing"
)

// Engine.Reset finds the bucket as a request does and restores it: a
// drained token bucket is full again (named, below a prefix, from the
// template, a resource's shared default), a dynamic one stops counting
// against max_dynamic_buckets, and a bucket never used reports false.
func TestEngineResetTokenBucket(t *testing.T) {
	tests := []struct {
		name             string
		resource, domain string
		key              Key // the bucket the request draws from
		size             int64
		dynamic          bool
	}{
		{name: "named", resource: "api", domain: "rate_limit", key: Key{"api", "rate_limit"}, size: 10},
		{name: "below a prefix", resource: "api", domain: "a/b/c", key: Key{"api", "a/b/c"}, size: 12, dynamic: true},
		{name: "template", resource: "api", domain: "u1", key: Key{"api", "u1"}, size: 2, dynamic: true},
		{name: "shared default", resource: "shared", domain: "anyone", key: Key{"shared", ""}, size: 7},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine(t, lookupConfig(), nil)
			ctx := t.Context()
			if held, err := e.Reset(ctx, tc.resource, tc.domain); err != nil || held {
				t.Fatalf("reset of a bucket never used: %v, %v; want false, nil", held, err)
			}
			one := Request{Resource: tc.resource, Domain: tc.domain, HasMaxWait: true}
			for i := range tc.size {
				if d := e.Allow(ctx, at(0), one); d.Status != StatusOK {
					t.Fatalf("draining, token %d: %+v", i, d)
				}
			}
			if d := e.Allow(ctx, at(0), one); d.Status != StatusTimeout {
				t.Fatalf("a drained bucket: %v, want TIMEOUT", d.Status)
			}
			if _, ok := state(t, e, tc.key); !ok {
				t.Fatalf("no bucket %+v", tc.key)
			}
			if got, want := e.Store().(*MemoryStore).Dynamic(tc.resource), int64(b2i(tc.dynamic)); got != want {
				t.Fatalf("dynamic count %d before the reset, want %d", got, want)
			}
			held, err := e.Reset(ctx, tc.resource, tc.domain)
			if err != nil || !held {
				t.Fatalf("reset: %v, %v; want true, nil", held, err)
			}
			if _, ok := state(t, e, tc.key); ok || bucketCount(e) != 0 || e.Store().(*MemoryStore).Dynamic(tc.resource) != 0 {
				t.Fatalf("after the reset: bucket %v, %d buckets, dynamic count %d; want none", ok, bucketCount(e), e.Store().(*MemoryStore).Dynamic(tc.resource))
			}
			// At the same instant: full again.
			if d := e.Allow(ctx, at(0), one); d.Status != StatusOK || d.Remaining != float64(tc.size-1) {
				t.Fatalf("after the reset: %+v, want OK with %d left", d, tc.size-1)
			}
		})
	}
}

// A reset burst-tier domain is fresh: its tiers and hits are forgotten,
// the others' are not, and the resource's global log stays (its hits
// still count against the global limit).
func TestEngineResetBurstTiers(t *testing.T) {
	e := newEngine(t, tiered(0, 5, tier(2, hr, hr, 0)), nil)
	ctx := t.Context()
	take := func(domain string) Decision {
		t.Helper()
		return e.Allow(ctx, at(0), Request{Resource: "r", Domain: domain})
	}
	for _, domain := range []string{"a", "a", "b"} {
		if d := take(domain); d.Status != StatusOK {
			t.Fatalf("%s: %+v", domain, d)
		}
	}
	if d := take("a"); d.Status != StatusTimeout || d.Tiers.GlobalLimited {
		t.Fatalf("a past its tier: %+v, want TIMEOUT by its tier", d)
	}
	if held, err := e.Reset(ctx, "r", "a"); err != nil || !held {
		t.Fatalf("reset a: %v, %v", held, err)
	}
	// a is fresh: two more (the global log: 3 + 2 = 5, the global limit).
	for i := range 2 {
		if d := take("a"); d.Status != StatusOK || d.Tiers.TierHits != int64(i+1) {
			t.Fatalf("a after its reset, request %d: %+v", i, d)
		}
	}
	// b was not reset (its tier hit stays), and the global log was kept:
	// nobody gets more this hour.
	if d := take("b"); d.Status != StatusTimeout || !d.Tiers.GlobalLimited || d.Tiers.GlobalHitsLastSecond != 5 {
		t.Fatalf("b: %+v, want TIMEOUT by the global limit (5 hits kept)", d)
	}
	if held, err := e.Reset(ctx, "r", "never"); err != nil || held {
		t.Fatalf("reset of a fresh domain: %v, %v; want false, nil", held, err)
	}
}

// Reset's errors name the field: a *RequestError, and for a resource or
// domain no configured bucket answers for, one that also wraps
// ErrNotConfigured (the global default bucket is never reset); nothing
// changes.
func TestEngineResetErrors(t *testing.T) {
	tests := []struct {
		name             string
		resource, domain string
		field            string
		notConfigured    bool
	}{
		{name: "empty resource", resource: "", domain: "x", field: "resource"},
		{name: "empty domain", resource: "api", domain: "", field: "domain"},
		{name: "bad character", resource: "a b", domain: "x", field: "resource"},
		{name: "unknown resource", resource: "nope", domain: "x", field: "resource", notConfigured: true},
		{name: "a domain of the global default", resource: "bare", domain: "y", field: "domain", notConfigured: true},
	}
	e := newEngine(t, lookupConfig(), nil)
	if d := e.Allow(t.Context(), at(0), Request{Resource: "nope", Domain: "x"}); d.Status != StatusOK || d.Bucket.Source != SourceGlobalDefault {
		t.Fatalf("the global default: %+v", d)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			held, err := e.Reset(t.Context(), tc.resource, tc.domain)
			var re *RequestError
			if held || !errors.As(err, &re) || re.Field != tc.field || !errors.Is(err, ErrInvalidRequest) {
				t.Fatalf("%v, %v; want a RequestError of field %s", held, err, tc.field)
			}
			if errors.Is(err, ErrNotConfigured) != tc.notConfigured {
				t.Fatalf("%v: wraps ErrNotConfigured %v, want %v", err, !tc.notConfigured, tc.notConfigured)
			}
			if _, ok := state(t, e, Key{}); !ok {
				t.Fatal("the global default bucket was reset")
			}
		})
	}
	// Without a global default, a configured resource's domain that no
	// bucket answers for is the domain's fault, an unconfigured resource
	// the resource's.
	cfg := lookupConfig()
	cfg.GlobalDefault = nil
	bare := newEngine(t, cfg, nil)
	for _, tc := range []struct{ resource, field string }{{"bare", "domain"}, {"nope", "resource"}} {
		_, err := bare.Reset(t.Context(), tc.resource, "y")
		var re *RequestError
		if !errors.As(err, &re) || re.Field != tc.field || !errors.Is(err, ErrNotConfigured) {
			t.Errorf("%s/y without a global default: %v; want ErrNotConfigured, field %s", tc.resource, err, tc.field)
		}
	}
	// A context that ended: nothing done.
	if d := e.Allow(t.Context(), at(0), Request{Resource: "api", Domain: "a"}); d.Status != StatusOK {
		t.Fatal(d.Status)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := e.Reset(ctx, "api", "a"); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled reset: %v", err)
	}
	if _, ok := state(t, e, Key{"api", "a"}); !ok {
		t.Fatal("a cancelled reset removed the bucket")
	}
}

// MemoryStore.Reset keeps the tables whole: with about 20 buckets in
// each shard's table (probe chains, backward-shift deletion), removing
// every third leaves every other one found, and the counts follow.
func TestMemoryStoreResetKeepsTable(t *testing.T) {
	e := newEngine(t, lookupConfig(), nil)
	ctx := t.Context()
	st := e.Store().(*MemoryStore)
	lim := e.cfg.Load().resources["bare"].named["x"] // (answering here for x/…: dynamic)
	const n = 5000
	name := func(i int) string { return "x/" + strconv.Itoa(i) }
	for i := range n {
		if _, err := st.Take(ctx, t0, Key{"bare", name(i)}, lim, Ask{Tokens: 1, Min: 1}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < n; i += 3 {
		if held, err := st.Reset(ctx, Key{"bare", name(i)}); err != nil || !held {
			t.Fatalf("reset %s: %v, %v", name(i), held, err)
		}
	}
	held := map[string]bool{}
	_ = st.Walk(ctx, func(s Snapshot) bool { held[s.Key.Domain] = true; return true })
	for i := range n {
		if held[name(i)] != (i%3 != 0) {
			t.Fatalf("%s: held %v after resetting every third", name(i), held[name(i)])
		}
	}
	if want := n - (n+2)/3; st.Len() != want || len(held) != want || st.Dynamic("bare") != int64(want) {
		t.Fatalf("%d buckets (%d walked, %d dynamic), want %d", st.Len(), len(held), st.Dynamic("bare"), want)
	}
}
