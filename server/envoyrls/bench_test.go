package envoyrls_test

import (
	"context"
	"fmt"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/limits/rls"
	"github.com/sluice-rl/sluice/server/envoyrls"
)

// BenchmarkShouldRateLimit is the handler alone (no gRPC), on the memory
// store, as rls-bench calls it: one descriptor, 10 000 values, headers on;
// limits=2: the descriptor's rule has two limits (rate_limits), a second
// and a calendar month.
func BenchmarkShouldRateLimit(b *testing.B) {
	for _, bc := range []struct{ name, rule string }{
		{"limits=1", "rate_limit: {unit: second, requests_per_unit: 1000000000}"},
		{"limits=2", "rate_limits: [{unit: second, requests_per_unit: 1000000000}, {unit: month, requests_per_unit: 4000000000, calendar: UTC}]"},
	} {
		b.Run(bc.name, func(b *testing.B) { benchShouldRateLimit(b, bc.rule) })
	}
}

func benchShouldRateLimit(b *testing.B, rule string) {
	svc, err := envoyrls.New(envoyrls.Options{Store: rls.NewMemoryStore(), Headers: envoyrls.Headers{Draft: true}, Registry: prometheus.NewRegistry()})
	if err != nil {
		b.Fatal(err)
	}
	svc.SetConfig(rulesOf(b, "domain: bench\ndescriptors: [{key: k, "+rule+"}]\n"))
	reqs := make([]*rlsv3.RateLimitRequest, 10000)
	for i := range reqs {
		reqs[i] = &rlsv3.RateLimitRequest{Domain: "bench", HitsAddend: 1,
			Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("k", fmt.Sprint("k", i))}}
	}
	b.ReportAllocs()
	ctx := context.Background()
	b.ResetTimer()
	for i := range b.N {
		resp, err := svc.ShouldRateLimit(ctx, reqs[i%len(reqs)])
		if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
			b.Fatal(resp, err)
		}
	}
}
