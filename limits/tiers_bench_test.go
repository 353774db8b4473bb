package limits

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkAllowTiers is one decision on a burst-tier resource: lookup,
// the store's lock and table, StepTiers over the domain's exact logs
// (and, with a global limit, the resource's global log under its lock),
// the decision. Goal: 0 allocations once a domain's logs have grown.
//
// "tiers" has two tiers (1000 hits a second for an hour; 1000 more for
// ten minutes, an hour's cooldown), no hard or global limit; "H+G" adds
// a hard limit of 800 per domain and a global limit of 10⁶ a second, so
// every decision also takes the resource's lock and prunes its log. The
// clock moves 2 ms per decision: one domain is asked 500 times a second
// (under its limits: granted, its logs holding 500 entries); 100 000
// domains are each asked once every 200 s (their logs pruned to one entry
// at every decision). granted/op reports the share of grants.
func BenchmarkAllowTiers(b *testing.B) {
	for _, c := range []struct {
		name string
		cfg  *Config
	}{
		{"tiers", tiered(0, 0, tier(1000, sec, hr, 0), tier(1000, sec, 10*mn, hr))},
		{"H+G", tiered(800, 1_000_000, tier(1000, sec, hr, 0), tier(1000, sec, 10*mn, hr))},
	} {
		for _, domains := range []int{1, 100_000} {
			b.Run(fmt.Sprintf("%s/domains=%d", c.name, domains), func(b *testing.B) {
				e := newEngine(b, c.cfg, nil)
				var buf [12]byte
				now := t0
				for i := range domains {
					e.Allow(b.Context(), time.Unix(0, now), Request{Resource: "r", Domain: domainOf(&buf, i)})
				}
				step := stride(domains)
				var granted int64
				i := 0
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					now += 2e6
					if i += step; i >= domains {
						i -= domains
					}
					granted += e.Allow(b.Context(), time.Unix(0, now), Request{Resource: "r", Domain: domainOf(&buf, i)}).Granted
				}
				b.ReportMetric(float64(granted)/float64(b.N), "granted/op")
			})
		}
	}
	// Parallel decisions on 100 000 domains of a resource with a global
	// limit: every one takes the resource's lock.
	b.Run("H+G/domains=100000/parallel", func(b *testing.B) {
		e := newEngine(b, tiered(800, 1_000_000, tier(1000, sec, hr, 0)), nil)
		var seed, clock atomic.Int64
		var buf [12]byte
		for i := range 100_000 {
			e.Allow(b.Context(), time.Unix(0, t0), Request{Resource: "r", Domain: domainOf(&buf, i)})
		}
		clock.Store(t0)
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			var buf [12]byte
			i := int(seed.Add(1)*7919) % 100_000
			for pb.Next() {
				if i += 104729; i >= 100_000 {
					i %= 100_000
				}
				e.Allow(b.Context(), time.Unix(0, clock.Add(2e6)), Request{Resource: "r", Domain: domainOf(&buf, i)})
			}
		})
	})
}

// BenchmarkStepTiers is the pure step alone, on one domain asked 500
// times a second (its logs holding 500 entries).
func BenchmarkStepTiers(b *testing.B) {
	p := newTierParams(800, 1_000_000, []Tier{tier(1000, sec, hr, 0)}, false)
	var s TierState
	var g HitLog
	now := t0
	b.ReportAllocs()
	for b.Loop() {
		now += 2e6
		StepTiers(p, &s, &g, now, Ask{Tokens: 1, Min: 1})
	}
}

// BenchmarkMemoryPerTierDomain creates 100 000 domains of a two-tier
// resource (one hit each: one entry in tier 1's window and one in the
// last second's log) and reports the heap they take, per domain.
func BenchmarkMemoryPerTierDomain(b *testing.B) {
	const n = 100_000
	domains := make([]string, n)
	for i := range domains {
		domains[i] = fmt.Sprintf("user-%07d", i)
	}
	cfg := tiered(10, 0, tier(1000, sec, hr, 0), tier(1000, sec, 10*mn, hr))
	var perDomain float64
	b.ReportAllocs()
	for b.Loop() {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		e := newEngine(b, cfg, nil)
		for _, d := range domains {
			e.Allow(b.Context(), time.Unix(0, t0), Request{Resource: "r", Domain: d})
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if bucketCount(e) != n {
			b.Fatalf("%d domains", bucketCount(e))
		}
		perDomain = float64(after.HeapAlloc-before.HeapAlloc) / n
		runtime.KeepAlive(e)
	}
	b.ReportMetric(perDomain, "bytes/domain")
	b.ReportMetric(0, "ns/op")
}
