package server

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/sluice-rl/sluice/api/doorman"
	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/resources"
)

// BenchmarkGetCapacityGRPC measures GetCapacity over real gRPC on loopback
// (grpc-go stubs, as a Doorman client) with n clients refreshing on one
// FAIR_SHARE resource. It reports requests per second and the p99 latency.
func BenchmarkGetCapacityGRPC(b *testing.B) {
	for _, n := range []int{100, 10_000} {
		b.Run(fmt.Sprintf("clients=%d", n), func(b *testing.B) {
			repo, err := resources.Parse([]byte(`
resources:
  - identifier_glob: r
    capacity: 1000
    algorithm: {kind: FAIR_SHARE, lease_length: 60, refresh_interval: 10, learning_mode_duration: 0}
`))
			if err != nil {
				b.Fatal(err)
			}
			// A whole server, as `sluice server` runs one.
			srv, _ := startServer(b, Config{Repository: Repository{Fixed: repo}})

			const conns = 8
			stubs := make([]pb.CapacityClient, conns)
			for i := range stubs {
				cc := testutil.Dial(b, srv.Addr())
				stubs[i] = pb.NewCapacityClient(cc)
			}
			reqs := make([]*pb.GetCapacityRequest, n)
			for i := range reqs {
				reqs[i] = &pb.GetCapacityRequest{ClientId: proto.String(fmt.Sprintf("client-%d", i)), Resource: []*pb.ResourceRequest{{
					ResourceId: proto.String("r"), Priority: proto.Int64(0), Wants: proto.Float64(float64(i%50) + 1),
				}}}
			}
			ctx := context.Background()
			// Every client holds a lease before measuring.
			for i, r := range reqs {
				if _, err := stubs[i%conns].GetCapacity(ctx, r); err != nil {
					b.Fatal(err)
				}
			}
			var next atomic.Int64
			var mu sync.Mutex
			var lat []time.Duration
			b.SetParallelism(8)
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pbt *testing.PB) {
				local := make([]time.Duration, 0, 1024)
				for pbt.Next() {
					i := next.Add(1)
					t0 := time.Now()
					if _, err := stubs[i%conns].GetCapacity(ctx, reqs[i%int64(n)]); err != nil {
						b.Error(err)
						return
					}
					local = append(local, time.Since(t0))
				}
				mu.Lock()
				lat = append(lat, local...)
				mu.Unlock()
			})
			elapsed := time.Since(start)
			b.StopTimer()
			if len(lat) == 0 {
				return
			}
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "req/s")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}
