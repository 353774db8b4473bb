package limits

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"
)

// benchBucket grants almost always: 100 tokens refilled at 10⁶ per second.
var benchBucket = Bucket{Size: 100, FillRate: 1e6, WaitTimeout: time.Second, MaxDebt: time.Second}

// benchEngine returns an engine with n dynamic buckets already created
// (resource "r", domains "user-0000000" …). Engines are kept across
// benchmark runs: building a million buckets takes a second.
func benchEngine(b *testing.B, n int) *Engine {
	b.Helper()
	benchMu.Lock()
	defer benchMu.Unlock()
	if e, ok := benchEngines[n]; ok {
		return e
	}
	cfg := &Config{Resources: map[string]*Resource{"r": {Template: &benchBucket}}}
	e, err := New(cfg, Options{})
	if err != nil {
		b.Fatal(err)
	}
	var buf [12]byte
	for i := range n {
		if d := e.Allow(b.Context(), time.Unix(0, t0), Request{Resource: "r", Domain: domainOf(&buf, i)}); d.Status != StatusOK {
			b.Fatal(d.Status)
		}
	}
	benchEngines[n] = e
	return e
}

// advance moves benchNow forward to now.
func advance(now int64) {
	for {
		if old := benchNow.Load(); old >= now || benchNow.CompareAndSwap(old, now) {
			return
		}
	}
}

var (
	benchMu      sync.Mutex
	benchEngines = map[int]*Engine{}
	benchNow     = func() *atomic.Int64 { var n atomic.Int64; n.Store(t0); return &n }()
)

// stride visits every index of n once per n steps in a scattered order
// (a prime step coprime with n), so that consecutive decisions touch
// unrelated buckets.
func stride(n int) int {
	for _, p := range []int{7919, 104729, 1299709} {
		if n%p != 0 && p < n {
			return p
		}
	}
	return 1
}

// domainOf writes the i-th benchmark domain ("user-0000042") into buf and
// returns it as a string sharing buf: a request's domain freshly decoded,
// in the cache, as a server hands it to the engine.
func domainOf(buf *[12]byte, i int) string {
	copy(buf[:], "user-")
	for j := 11; j >= 5; j-- {
		buf[j] = byte('0' + i%10)
		i /= 10
	}
	return unsafe.String(&buf[0], len(buf))
}

// BenchmarkAllow is one decision on an existing bucket (a dynamic bucket
// of a resource with a template): validation, lookup, the store's lock and
// table, Step, the decision. Goal: ≤ 150 ns and 0 allocations at 10 and at
// 1 000 000 buckets.
//
// At a million buckets, "uniform" spreads the decisions evenly over all of
// them in a scattered order, so that every decision misses the cache (its
// bucket's slot was last touched a million decisions ago): it measures the
// machine's memory latency (one dependent miss costs about 200 ns on the
// 2-core VM the figures in docs/performance.md come from) more than the engine.
// "hot" spreads them over 1 000 of the million buckets, as skewed real
// traffic does: the cost of a decision with a million buckets present.
//
// The benchmarks share one clock (benchNow), which only moves forward,
// since they share their engines.
func BenchmarkAllow(b *testing.B) {
	for _, c := range []struct {
		name    string
		buckets int
		active  int
	}{
		{"buckets=10", 10, 10},
		{"buckets=1000000/hot", 1_000_000, 1_000},
		{"buckets=1000000/uniform", 1_000_000, 1_000_000},
	} {
		b.Run(c.name+"/serial", func(b *testing.B) {
			e := benchEngine(b, c.buckets)
			step, scale := stride(c.active), c.buckets/c.active
			var buf [12]byte
			now := benchNow.Load()
			defer func() { advance(now) }()
			i := 0
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				now += 1000
				if i += step; i >= c.active {
					i -= c.active
				}
				if d := e.Allow(b.Context(), time.Unix(0, now), Request{Resource: "r", Domain: domainOf(&buf, i*scale)}); d.Status != StatusOK {
					b.Fatal(d.Status)
				}
			}
		})
		b.Run(c.name+"/parallel", func(b *testing.B) {
			e := benchEngine(b, c.buckets)
			step, scale := stride(c.active), c.buckets/c.active
			var seed atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			start := benchNow.Load()
			b.RunParallel(func(pb *testing.PB) {
				var buf [12]byte
				i := int(seed.Add(1)*7) % c.active
				now := start
				defer func() { advance(now) }()
				for pb.Next() {
					now += 1000
					if i += step; i >= c.active {
						i -= c.active
					}
					e.Allow(b.Context(), time.Unix(0, now), Request{Resource: "r", Domain: domainOf(&buf, i*scale)})
				}
			})
		})
	}
}

// BenchmarkAllowNamed is a decision on a named bucket, and on a key below a
// prefix (one more map lookup per '/').
func BenchmarkAllowNamed(b *testing.B) {
	cfg := &Config{Resources: map[string]*Resource{"api": {Buckets: map[string]Bucket{"rate_limit": benchBucket}}}}
	for _, domain := range []string{"rate_limit", "rate_limit/192.168.11.3"} {
		b.Run(domain, func(b *testing.B) {
			e, err := New(cfg, Options{})
			if err != nil {
				b.Fatal(err)
			}
			now := t0
			b.ReportAllocs()
			for b.Loop() {
				now += 1000
				e.Allow(b.Context(), time.Unix(0, now), Request{Resource: "api", Domain: domain})
			}
		})
	}
}

// BenchmarkStep is the pure arithmetic alone.
func BenchmarkStep(b *testing.B) {
	p := benchBucket.Params()
	s := State{}
	now := t0
	b.ReportAllocs()
	for b.Loop() {
		now += 1000
		s, _ = Step(s, p, now, Ask{Tokens: 1, Min: 1, MaxWait: int64(time.Second)})
	}
}

// BenchmarkMemoryPerBucket creates 1 000 000 dynamic buckets (domains of
// 12 bytes, "user-0000000") through Allow and reports the heap they take,
// per bucket. Goal: ≤ 256 bytes.
func BenchmarkMemoryPerBucket(b *testing.B) {
	const n = 1_000_000
	domains := make([]string, n)
	for i := range domains {
		domains[i] = fmt.Sprintf("user-%07d", i)
	}
	cfg := &Config{Resources: map[string]*Resource{"r": {Template: &benchBucket}}}
	var perBucket float64
	b.ReportAllocs()
	for b.Loop() {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		e, err := New(cfg, Options{})
		if err != nil {
			b.Fatal(err)
		}
		for _, d := range domains {
			e.Allow(b.Context(), time.Unix(0, t0), Request{Resource: "r", Domain: d})
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if bucketCount(e) != n {
			b.Fatalf("%d buckets", bucketCount(e))
		}
		perBucket = float64(after.HeapAlloc-before.HeapAlloc) / n
		runtime.KeepAlive(e)
	}
	b.ReportMetric(perBucket, "bytes/bucket")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkWalk walks 1 000 000 buckets.
func BenchmarkWalk(b *testing.B) {
	e := benchEngine(b, 1_000_000)
	now := time.Unix(0, benchNow.Load())
	b.ReportAllocs()
	for b.Loop() {
		n := 0
		_ = e.Walk(b.Context(), now, func(BucketInfo) bool { n++; return true })
		if n != 1_000_000 {
			b.Fatalf("walked %d buckets", n)
		}
	}
}

// BenchmarkQuery is a status page over 1 000 000 buckets: the 50 buckets
// with the lowest fraction among those below 1 (all of them), and a page
// deep in the order. Goal: well under a second.
func BenchmarkQuery(b *testing.B) {
	e := benchEngine(b, 1_000_000)
	now := time.Unix(0, t0)
	byFraction := func(x, y *BucketInfo) bool { return x.Fraction < y.Fraction }
	for _, c := range []struct {
		name   string
		offset int
	}{{"first page", 0}, {"page 2000", 100_000}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				p, err := e.Query(b.Context(), now, Query{Filter: func(bi *BucketInfo) bool { return bi.Fraction < 1 }, Less: byFraction, Offset: c.offset, Limit: 50})
				if err != nil || p.Total != 1_000_000 || len(p.Buckets) != 50 {
					b.Fatalf("%d buckets of %d: %v", len(p.Buckets), p.Total, err)
				}
			}
		})
	}
}
