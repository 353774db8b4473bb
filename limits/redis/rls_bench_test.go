package redisstore

import (
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/limits/rls"
)

// rlsBenchPolicy is ../shared/tools/rls-bench's limit: a token bucket of
// 10⁹ a second, which nothing fills.
var rlsBenchPolicy = rls.Policy{Algorithm: rls.TokenBucket, Limit: 1e9, Period: 1e6}

// BenchmarkRLSRedisCPU: RLS.Decide from 50 goroutines (25 per core) on
// the local redis-server, one descriptor a request as
// ../shared/tools/rls-bench sends, on one hot value and on 10 000 values
// in turn; reports Redis's own CPU per request (INFO cpu: user + sys),
// the requests per script and per round trip. BenchmarkAllowRedisCPU's
// twin for Envoy's rate limit service: no gRPC front end or load
// generator shares the cores.
//
//	go test -run '^$' -bench 'RLSRedisCPU|AllowRedisCPU' -benchtime 200000x ./limits/redis
func BenchmarkRLSRedisCPU(b *testing.B) {
	for _, bc := range []struct {
		name   string
		values int
	}{{"hot", 1}, {"values=10000", 10000}} {
		b.Run(bc.name, func(b *testing.B) {
			c := client(b)
			st := New(c, Options{Prefix: prefix(b)})
			red := NewRLS(st)
			hits := make([][]rls.Hit, bc.values)
			for i := range hits {
				hits[i] = []rls.Hit{{Bucket: "bench_k_v" + strconv.Itoa(i), Policy: rlsBenchPolicy, Hits: 1}}
			}
			var next atomic.Uint64
			h0, cpu0 := st.Health(), redisCPU(b, c)
			b.ReportAllocs()
			b.SetParallelism(25)
			b.RunParallel(func(pb *testing.PB) {
				res := make([]rls.Result, 1)
				for pb.Next() {
					if ok, err := red.Decide(b.Context(), 0, "bench", hits[next.Add(1)%uint64(len(hits))], res); err != nil || !ok {
						b.Error(ok, err)
						return
					}
				}
			})
			h, cpu := st.Health(), redisCPU(b, c)
			b.ReportMetric((cpu-cpu0)*1e6/float64(b.N), "redis-µs/op")
			b.ReportMetric(float64(h.Calls-h0.Calls)/float64(max(h.Scripts-h0.Scripts, 1)), "requests/script")
			b.ReportMetric(float64(h.Calls-h0.Calls)/float64(max(h.RoundTrips-h0.RoundTrips, 1)), "requests/roundtrip")
		})
	}
}

// BenchmarkRLSInstructions counts the instructions Redis executes for a
// ShouldRateLimit decision of one descriptor, as BenchmarkTakeInstructions
// does for a token-bucket request: a redis-server of its own under
// valgrind's callgrind; 10 000 counters are made first (as rls-bench's
// 10 000 values are, each used again within its key's life); then each
// of b.N round trips carries exactly perScript requests of one domain
// (one script), each on another of the counters drawn at random (a fixed
// seed), at Redis's clock, on a token bucket that takes 3.6 s to refill a
// hit (so that no key expires meanwhile).
// Reports redis-instructions/request (reading and running the commands,
// writing their replies) and redis-total-instructions/request (the whole
// process, its timers too: key expiry). Skipped without valgrind.
//
//	go test -run '^$' -bench RLSInstructions -benchtime 500x ./limits/redis
//
// limits=2 is a descriptor of two limits (rate_limits): that token
// bucket and a calendar month's budget, each its own counter, decided
// together in the request's one script.
func BenchmarkRLSInstructions(b *testing.B) {
	skipWithoutCallgrind(b)
	for _, perScript := range []int{1, 15} {
		for _, limits := range []int{1, 2} {
			name := "requests=" + strconv.Itoa(perScript)
			if limits > 1 {
				name += "/limits=" + strconv.Itoa(limits)
			}
			b.Run(name, func(b *testing.B) { rlsInstructions(b, perScript, limits) })
		}
	}
}

// rlsInstructions writes callgrind_annotate's output to
// $RLS_CALLGRIND_OUT.<requests> if that is set.
func rlsInstructions(b *testing.B, perScript, limits int) {
	callgrindInstructions(b, 10000, perScript, os.Getenv("RLS_CALLGRIND_OUT"), func(c *redis.Client) func([]int) {
		st := New(c, Options{Prefix: "b:", Timeout: time.Minute})
		red := NewRLS(st)
		policy := rls.Policy{Algorithm: rls.TokenBucket, Limit: 1e6, Period: 3600e9}
		month := rls.Policy{Algorithm: rls.FixedWindow, Limit: 4e9, Period: rls.Month.Duration().Microseconds(), Calendar: rls.Calendar{Unit: rls.Month}}
		now := time.Now().UnixMicro() // (the calendar's window; Redis decides on its own clock)
		return func(vs []int) {
			batch := make([]*call, len(vs))
			for i, v := range vs {
				bucket := "bench_k_v" + strconv.Itoa(v)
				hits := []rls.Hit{{Bucket: bucket, Policy: policy, Hits: 1}}
				if limits > 1 {
					hits = append(hits, rls.Hit{Bucket: rls.LimitBucket(bucket, 1), Policy: month, Hits: 1})
				}
				batch[i] = red.call(now, "bench", hits)
			}
			if err := st.single.sendNow(b.Context(), batch); err != nil {
				b.Fatal(err)
			}
			res := make([]rls.Result, limits)
			for _, c := range batch {
				if c.err != nil || !parseRLS(c.res, res) {
					b.Fatalf("%+v %v", res, c.err)
				}
				putCall(c)
			}
		}
	})
}
