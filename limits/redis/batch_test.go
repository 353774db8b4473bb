package redisstore

import (
	"testing"
	"time"

	"github.com/sluice-rl/sluice/limits"
)

// BenchmarkAllowParallel: Allow from 50 goroutines per core on one hot
// bucket; reports the mean scripts per round trip.
func BenchmarkAllowParallel(b *testing.B) {
	st := New(client(b), Options{Prefix: prefix(b)})
	cfg := &limits.Config{Resources: map[string]*limits.Resource{"r": {Default: &limits.Bucket{Size: 1e9, FillRate: 1e6}}}}
	e, _ := limits.New(cfg, limits.Options{Store: st})
	req := limits.Request{Resource: "r", Domain: "d"}
	b.ReportAllocs()
	b.SetParallelism(25)
	h0 := st.Health()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if d := e.Allow(time.Now(), req); d.Status != limits.StatusOK {
				b.Error(d)
				return
			}
		}
	})
	h := st.Health()
	b.ReportMetric(float64(h.Scripts-h0.Scripts)/float64(max(h.RoundTrips-h0.RoundTrips, 1)), "scripts/roundtrip")
}
