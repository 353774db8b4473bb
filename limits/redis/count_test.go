package redisstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/testutil/redistest"
	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/limits/rls"
)

// loadBuckets creates n token buckets of resource "r" in st (domains
// d0000000 on), each granted one token of ten filling one in 1000 s, so
// that none expires for 1000 s: from 64 goroutines, in round trips of up
// to st's MaxBatch.
func loadBuckets(b testing.TB, st *Store, n int) {
	l := &limits.Limit{Resource: "r", Kind: limits.KindTemplate, Algorithm: limits.TokenBucket,
		Bucket: limits.Bucket{Size: 10, FillRate: 0.001}, Params: limits.Bucket{Size: 10, FillRate: 0.001}.Params(), Gen: 1}
	const workers = 64
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n && errs[w] == nil; i += workers {
				k := limits.Key{Resource: "r", Domain: "d" + fmt.Sprintf("%07d", i)}
				_, errs[w] = st.Take(b.Context(), time.Now().UnixNano(), k, l, limits.Ask{Tokens: 1, Min: 1})
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
}

// TestEstimateLenSendsNoScan: EstimateLen, what the sluice_limits_buckets
// gauge reads at every scrape, sends no SCAN (Redis's INFO commandstats,
// cmdstat_scan, is the same before and after) but one DBSIZE per node,
// and answers the keys of the database: on a redis-server of its own
// holding 1000 buckets and nothing else, 1000; on the test cluster, the
// sum of its masters' DBSIZEs. While the breaker is open it fails at once
// with ErrUnavailable.
func TestEstimateLenSendsNoScan(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: startOwnRedis(t)})
	t.Cleanup(func() { c.Close() })
	st := New(c, Options{Prefix: prefix(t), BreakerFailures: 1, BreakerProbe: time.Hour})
	t.Cleanup(func() { _ = st.Close() })
	loadBuckets(t, st, 1000)
	scans, dbsizes := redistest.CommandCalls(t, c, "scan"), redistest.CommandCalls(t, c, "dbsize")
	for range 3 {
		if n, err := st.EstimateLen(t.Context()); err != nil || n != 1000 {
			t.Fatalf("EstimateLen: %d %v, want 1000", n, err)
		}
	}
	if got := redistest.CommandCalls(t, c, "scan") - scans; got != 0 {
		t.Fatalf("EstimateLen sent %d SCANs, want 0", got)
	}
	if got := redistest.CommandCalls(t, c, "dbsize") - dbsizes; got != 3 {
		t.Fatalf("3 EstimateLens sent %d DBSIZEs, want 3", got)
	}

	openBreaker(t, st.single)
	if _, err := st.EstimateLen(t.Context()); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("breaker open: %v, want ErrUnavailable", err)
	}
	if got := redistest.CommandCalls(t, c, "dbsize") - dbsizes; got != 3 {
		t.Fatalf("breaker open: a DBSIZE was sent")
	}

	// On the test cluster, other tests' keys may expire meanwhile: the sum
	// of the masters' DBSIZEs before and after bound the answer.
	cc := clusterClient(t)
	cst := New(cc, Options{Prefix: prefix(t)})
	t.Cleanup(func() { _ = cst.Close() })
	if err := cc.Set(t.Context(), prefix(t)+"{x}", "1", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	clusterKeys := func() int64 {
		var sum atomic.Int64 // (ForEachMaster runs fn concurrently)
		err := cc.ForEachMaster(t.Context(), func(ctx context.Context, m *redis.Client) error {
			n, err := m.DBSize(ctx).Result()
			sum.Add(n)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return sum.Load()
	}
	before := clusterKeys()
	n, err := cst.EstimateLen(t.Context())
	if after := clusterKeys(); err != nil || int64(n) > before || int64(n) < after || n < 1 {
		t.Fatalf("cluster: EstimateLen %d %v, want the masters' DBSIZEs, %d then %d", n, err, before, after)
	}
}

// BenchmarkBucketCount measures the store's count of its buckets,
// EstimateLen (what the sluice_limits_buckets gauge reads at every
// scrape of /metrics), with SLUICE_BENCH_BUCKETS token buckets in a
// redis-server of its own (default 1 000 000; loading them, through
// Take, takes about ten seconds): its time a call, and the SCANs it sends
// a call (scans/op, from Redis's INFO commandstats).
//
//	go test -run '^$' -bench BucketCount -benchtime 5x ./limits/redis
//
// On a 2-core VM shared with other work, at 1 000 000 buckets: 15 to 35
// µs, no SCAN and 0.6 KB allocated a call (one DBSIZE round trip on
// loopback); the SCAN of the prefix it replaced (Len, before 2026-11-27)
// took 0.99 to 1.06 s, 1952 SCANs and 42 MB a call.
func BenchmarkBucketCount(b *testing.B) {
	n := 1_000_000
	if v := os.Getenv("SLUICE_BENCH_BUCKETS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			b.Fatalf("SLUICE_BENCH_BUCKETS: %v", err)
		}
	}
	c := redis.NewClient(&redis.Options{Addr: startOwnRedis(b)})
	b.Cleanup(func() { c.Close() })
	st := New(c, Options{Timeout: time.Minute, MaxBatch: 1024})
	b.Cleanup(func() { _ = st.Close() })
	start := time.Now()
	loadBuckets(b, st, n)
	b.Logf("%d buckets loaded in %v", n, time.Since(start).Round(time.Millisecond))
	scans := redistest.CommandCalls(b, c, "scan")
	var got int
	var err error
	b.ReportAllocs()
	for b.Loop() {
		if got, err = st.EstimateLen(b.Context()); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(redistest.CommandCalls(b, c, "scan")-scans)/float64(b.N), "scans/op")
	b.ReportMetric(float64(got), "buckets")
}

// TestWalkScanBudget: with 200 000 other keys in the database, a walk of
// the buckets (and of Envoy's counters) sends at most WalkScanCalls SCANs
// and returns limits.ErrWalkBudget, after calling fn with what it found;
// over a small keyspace it finishes without the error.
func TestWalkScanBudget(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: startOwnRedis(t)})
	t.Cleanup(func() { c.Close() })
	st := New(c, Options{Prefix: prefix(t)})
	t.Cleanup(func() { _ = st.Close() })
	loadBuckets(t, st, 10)
	walk := func() (int, error) {
		n := 0
		err := st.Walk(t.Context(), func(limits.Snapshot) bool { n++; return true })
		return n, err
	}
	if n, err := walk(); err != nil || n != 10 {
		t.Fatalf("small keyspace: %d buckets, %v; want 10, nil", n, err)
	}
	if err := c.Eval(t.Context(), "for i = 1, 200000 do redis.call('SET', 'other:'..i, 'x') end return 1", nil).Err(); err != nil {
		t.Fatal(err)
	}
	scans := redistest.CommandCalls(t, c, "scan")
	_, err := walk()
	if !errors.Is(err, limits.ErrWalkBudget) {
		t.Fatalf("walk over 200 010 keys: %v, want limits.ErrWalkBudget", err)
	}
	if got := redistest.CommandCalls(t, c, "scan") - scans; got != WalkScanCalls {
		t.Fatalf("the walk sent %d SCANs, want %d", got, WalkScanCalls)
	}
	scans = redistest.CommandCalls(t, c, "scan")
	if err := NewRLS(st).Walk(t.Context(), func(rls.Counter) bool { return true }); !errors.Is(err, limits.ErrWalkBudget) {
		t.Fatalf("Envoy counters walk: %v, want limits.ErrWalkBudget", err)
	}
	if got := redistest.CommandCalls(t, c, "scan") - scans; got != WalkScanCalls {
		t.Fatalf("the counters walk sent %d SCANs, want %d", got, WalkScanCalls)
	}
}
