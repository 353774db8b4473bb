package limits

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

// FuzzAllow drives the engine with arbitrary requests against a
// configuration drawn from the input: it must never panic, never grant
// outside what was asked, never create a bucket for an invalid request,
// and name the field of every invalid request. The configuration also has
// burst-tier resources ("tiers", "muted/t" under a namespace that ignores
// limits, and any "open/…" under one that allows unconfigured resources),
// their parameters folded from the same input into valid ranges: a
// burst-tier answer never waits, never shows a window above its limit or
// a second above H or G, and an unlimited one grants all that was asked.
func FuzzAllow(f *testing.F) {
	f.Add("api", "rate_limit/10.0.0.1", int64(1), int64(0), int64(0), false, int64(0), int64(10), 1.0, int64(1000))
	f.Add("api", "user-1", int64(5), int64(2), int64(int64(time.Second)), true, int64(time.Millisecond), int64(3), 0.5, int64(0))
	f.Add("", "", int64(-1), int64(-1), int64(-1), true, int64(-1), int64(0), 0.0, int64(-1))
	f.Add("api", "a b", int64(math.MaxInt64), int64(math.MaxInt64), int64(math.MaxInt64), true, int64(math.MaxInt64), int64(math.MaxInt64), math.Inf(1), int64(math.MaxInt64))
	f.Add("shared", "x/y/z", int64(1<<53), int64(1), int64(0), true, int64(math.MinInt64), int64(1<<53), 1e-9, int64(1))
	f.Add("nope", "d", int64(0), int64(0), int64(0), false, int64(0), int64(1), 1e9, int64(0))
	f.Add("tiers", "user-1", int64(3), int64(1), int64(5), false, int64(time.Second), int64(4), 1.0, int64(2000))
	f.Add("tiers", "vip/eu", int64(50), int64(0), int64(0), false, int64(1), int64(7), 0.0, int64(1))
	f.Add("tiers", "blocked", int64(1), int64(0), int64(0), false, int64(0), int64(1), 1.0, int64(0))
	f.Add("open/new", "d", int64(1<<53), int64(1), int64(0), false, int64(-5), int64(0), 1.0, int64(0))
	f.Add("muted/t", "d", int64(9), int64(0), int64(3), false, int64(math.MaxInt64), int64(2), 1.0, int64(math.MinInt64))
	f.Fuzz(func(t *testing.T, resource, domain string, tokens, minTokens, maxWait int64, hasMaxWait bool, dt, size int64, rate float64, waitMs int64) {
		b := Bucket{Size: size, FillRate: rate, WaitTimeout: time.Duration(waitMs) * time.Millisecond, MaxDebt: 10 * time.Second, MaxIdle: time.Second}
		fold := func(x int64, m uint64) int64 { return int64(uint64(x) % m) }
		window := time.Duration(1+fold(waitMs, 10_000)) * time.Millisecond
		t1 := Tier{Limit: 1 + fold(size, 1000), Window: window, Active: window * time.Duration(1+fold(dt, 4)), Cooldown: time.Duration(fold(maxWait, uint64(time.Hour)))}
		t2 := Tier{Limit: 2 * t1.Limit, Window: window, Active: window, Cooldown: 2 * t1.Cooldown, Skippable: hasMaxWait}
		tiers := &Resource{Algorithm: BurstTiers, HardLimit: fold(tokens, 20), GlobalLimit: fold(minTokens, 30), Tiers: []Tier{t1, t2}, MaxDynamicBuckets: 2,
			TierDomains: map[string]TierDomain{"vip": {HardLimit: Unbounded, Tiers: []Tier{t2}}, "blocked": {Tiers: []Tier{}}}}
		cfg := &Config{
			GlobalDefault: &b,
			Namespaces:    map[string]Namespace{"open/": {AllowUnconfigured: true}, "muted/": {IgnoreConfigured: true}},
			Resources: map[string]*Resource{
				"api":     {Buckets: map[string]Bucket{"rate_limit": b, "a/b": b}, Template: &b, MaxDynamicBuckets: 2},
				"shared":  {Default: &b, Buckets: map[string]Bucket{"x": b}},
				"tiers":   tiers,
				"muted/t": cloneResource(tiers),
			},
		}
		if (&Config{GlobalDefault: &b}).Validate() != nil {
			// The token buckets are invalid: the burst tiers alone.
			cfg.GlobalDefault = nil
			delete(cfg.Resources, "api")
			delete(cfg.Resources, "shared")
		}
		e, err := New(cfg, Options{})
		if err != nil {
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("config error %v does not wrap ErrInvalidConfig", err)
			}
			return
		}
		req := Request{Resource: resource, Domain: domain, Tokens: tokens, MinTokens: minTokens, MaxWait: time.Duration(maxWait), HasMaxWait: hasMaxWait}
		now := t0
		for i := range 3 {
			before := bucketCount(e)
			d := e.Allow(t.Context(), time.Unix(0, now), req)
			switch d.Status {
			case StatusOK:
				want := max(tokens, 1)
				lo := minTokens
				if lo == 0 {
					lo = want
				}
				if d.Granted < lo || d.Granted > want || d.Wait < 0 || d.Algorithm == TokenBucket && d.Wait > b.WaitTimeout || hasMaxWait && d.Wait > time.Duration(maxWait) || d.RetryAfter != 0 || d.RetryNever {
					t.Fatalf("call %d: %+v for %+v", i, d, req)
				}
			case StatusInvalidRequest:
				var re *RequestError
				if !errors.As(d.Err, &re) || re.Field == "" || !strings.HasPrefix(d.Err.Error(), re.Field+": ") {
					t.Fatalf("invalid request without a field: %v", d.Err)
				}
				if bucketCount(e) != before {
					t.Fatalf("an invalid request created a bucket")
				}
			case StatusTimeout:
				if d.RetryNever == (d.RetryAfter > 0) {
					t.Fatalf("timeout: retry after %v, never %v", d.RetryAfter, d.RetryNever)
				}
			case StatusNoBucket, StatusTooManyBuckets, StatusTooManyTokensRequested:
				if !d.RetryNever {
					t.Fatalf("%v without RetryNever", d.Status)
				}
			default:
				t.Fatalf("status %v (%v)", d.Status, d.Err)
			}
			if d.Status != StatusOK && (d.Granted != 0 || bucketCount(e) != before) {
				t.Fatalf("a rejection granted %d or created a bucket", d.Granted)
			}
			if d.Remaining < 0 || d.Remaining > float64(d.Limit) || math.IsNaN(d.Remaining) {
				t.Fatalf("remaining %v of %d", d.Remaining, d.Limit)
			}
			if d.Algorithm == BurstTiers {
				c := d.Tiers
				switch {
				case d.Wait != 0:
					t.Fatalf("a burst-tier answer waits: %+v", d)
				case d.Unlimited && d.Status == StatusOK && d.Granted != max(tokens, 1):
					t.Fatalf("unlimited, yet granted %d of %d", d.Granted, tokens)
				case d.Unlimited:
				case c.Tier > 0 && c.TierHits > c.TierLimit,
					d.Status == StatusOK && c.HardLimit > 0 && c.DomainHitsLastSecond > c.HardLimit,
					d.Status == StatusOK && c.GlobalLimit > 0 && c.GlobalHitsLastSecond > c.GlobalLimit:
					t.Fatalf("over a limit: %+v", d)
				}
			}
			now += dt
		}
		if _, err := e.Reap(t.Context(), time.Unix(0, now)); err != nil {
			t.Fatal(err)
		}
		_ = e.Walk(t.Context(), time.Unix(0, now), func(bi BucketInfo) bool {
			if bi.Tokens < 0 || bi.Tokens > float64(bi.Size) || bi.Fraction < 0 || bi.Fraction > 1 {
				t.Fatalf("walk: %+v", bi)
			}
			return true
		})
	})
}
