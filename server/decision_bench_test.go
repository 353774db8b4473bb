package server

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"

	qs "github.com/sluice-rl/sluice/api/quotaservice"
	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/internal/testutil/redistest"
	"github.com/sluice-rl/sluice/limits/limitsyaml"
	redisstore "github.com/sluice-rl/sluice/limits/redis"
	"github.com/sluice-rl/sluice/resources"
)

// BenchmarkDecisionGRPC compares one decision of the quota service's
// Allow and of Envoy's ShouldRateLimit over real gRPC on loopback, as
// quota-bench and rls-bench load them (10 000 keys round-robin, 50
// callers, 4 connections), in one process and one sitting. cpu-µs/op is
// the process's CPU (client and server) per decision.
func BenchmarkDecisionGRPC(b *testing.B) { decisionGRPC(b, nil) }

// BenchmarkDecisionGRPCRedis is BenchmarkDecisionGRPC with both stores
// on a real redis-server (its CPU is not in cpu-µs/op): with
// -cpuprofile, where the server's CPU per decision goes on each path.
func BenchmarkDecisionGRPCRedis(b *testing.B) {
	rs := redistest.StartT(b)
	c := redis.NewClient(&redis.Options{Addr: rs.Addr})
	defer c.Close()
	st := redisstore.New(c, redisstore.Options{Prefix: "bench:"})
	decisionGRPC(b, &Shared{Limits: st, RLS: redisstore.NewRLS(st), Close: st.Close})
}

func decisionGRPC(b *testing.B, shared *Shared) {
	quota, err := limitsyaml.ParseQuotaService([]byte(`
namespaces:
  bench:
    max_dynamic_buckets: 0
    dynamic_bucket_template: {size: 1000000, fill_rate: 1000000, max_tokens_per_request: 1000000}
`))
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "bench.yaml"), []byte("domain: bench\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 1000000000}}]\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	srv, _ := startServer(b, Config{Repository: Repository{EnvoyRateLimitPath: dir, Fixed: resources.Compose(nil, quota, nil, nil)}, Store: Store{Shared: shared}})
	const conns, keys = 4, 10_000
	ccs := make([]*grpc.ClientConn, conns)
	for i := range ccs {
		cc := testutil.Dial(b, srv.Addr())
		ccs[i] = cc
	}
	calls := map[string]func(ctx context.Context, i int64) error{}
	allow := make([]*qs.AllowRequest, keys)
	should := make([]*rlsv3.RateLimitRequest, keys)
	for i := range keys {
		allow[i] = &qs.AllowRequest{Namespace: "bench", BucketName: fmt.Sprint("k", i), TokensRequested: 1}
		should[i] = &rlsv3.RateLimitRequest{Domain: "bench", HitsAddend: 1, Descriptors: []*ratelimitv3.RateLimitDescriptor{{
			Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: fmt.Sprint("k", i)}}}}}
	}
	calls["quota-allow"] = func(ctx context.Context, i int64) error {
		_, err := qs.NewQuotaServiceClient(ccs[i%conns]).Allow(ctx, allow[i%keys])
		return err
	}
	calls["envoy-rls"] = func(ctx context.Context, i int64) error {
		_, err := rlsv3.NewRateLimitServiceClient(ccs[i%conns]).ShouldRateLimit(ctx, should[i%keys])
		return err
	}
	for _, name := range []string{"quota-allow", "envoy-rls"} {
		b.Run(name, func(b *testing.B) {
			call := calls[name]
			var next atomic.Int64
			ctx := context.Background()
			b.SetParallelism(25)
			cpu0 := cpuTime()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := call(ctx, next.Add(1)); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}

// cpuTime returns the process's user and system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
