package redisstore

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/limits"
)

// commandCalls returns how many times Redis ran cmd (lower case, e.g.
// "scan") since it started: INFO commandstats' cmdstat_<cmd> calls.
func commandCalls(t testing.TB, c *redis.Client, cmd string) int64 {
	t.Helper()
	info, err := c.Info(t.Context(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^cmdstat_` + regexp.QuoteMeta(cmd) + `:calls=(\d+)`).FindStringSubmatch(info)
	if m == nil {
		return 0
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	return n
}

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

// BenchmarkBucketCount measures the store's count of its buckets (what
// the sluice_limits_buckets gauge reads at every scrape of /metrics)
// with SLUICE_BENCH_BUCKETS token buckets in a redis-server of its own
// (default 1 000 000; loading them takes tens of seconds): its time a
// call, and the SCANs it sends a call (scans/op, from Redis's INFO
// commandstats).
//
//	go test -run '^$' -bench BucketCount -benchtime 5x ./limits/redis
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
	scans := commandCalls(b, c, "scan")
	var got int
	b.ReportAllocs()
	for b.Loop() {
		got = st.Len()
	}
	b.ReportMetric(float64(commandCalls(b, c, "scan")-scans)/float64(b.N), "scans/op")
	b.ReportMetric(float64(got), "buckets")
}
