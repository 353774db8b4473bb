package upstreamstats_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-rl/sluice/limits/limitsyaml"
	"github.com/sluice-rl/sluice/limits/rls"
	"github.com/sluice-rl/sluice/server/envoyrls"
	"github.com/sluice-rl/sluice/server/envoyrls/upstreamstats"
)

// benchSink is a sink sending to a UDP socket on loopback, flushed every
// second (the counters' sends are off the request's path).
func benchSink(b *testing.B) *upstreamstats.Sink {
	addr := drainUDP(b)
	// (Quiet: a loop faster than the socket fills gostats' queue, which
	// drops and logs.)
	quiet := slog.New(slog.DiscardHandler)
	s, err := upstreamstats.New(upstreamstats.Options{Address: addr, Protocol: "udp", FlushInterval: time.Second, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

// drainUDP returns the address of a UDP socket on loopback that reads
// and drops what it receives.
func drainUDP(b *testing.B) string {
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 64<<10)
		for {
			if _, _, err := conn.ReadFrom(buf); err != nil {
				return
			}
		}
	}()
	b.Cleanup(func() { conn.Close(); <-done })
	return conn.LocalAddr().String()
}

// BenchmarkDescriptor is one descriptor's statistics on a key whose
// counters exist: the steady state allocates nothing.
func BenchmarkDescriptor(b *testing.B) {
	s := benchSink(b)
	d := envoyrls.DescriptorStats{Domain: "edge", Key: "remote_address", Result: envoyrls.ResultNear, Hits: 3,
		Counts: envoyrls.Counts{TotalHits: 3, WithinLimit: 3, NearLimit: 1}}
	s.Descriptor(d)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			s.Descriptor(d)
		}
	})
}

// BenchmarkRequest is one call's statistics, its response_time timer
// written to the sink's buffer at once.
func BenchmarkRequest(b *testing.B) {
	s := benchSink(b)
	r := envoyrls.RequestStats{Domain: "edge", Duration: 3 * time.Millisecond}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		s.Request(r)
	}
}

// BenchmarkShouldRateLimit is envoyrls' benchmark (the handler alone, one
// descriptor, 10 000 values, the memory store) with the sink: compare
// with envoyrls' BenchmarkShouldRateLimit, which has none.
func BenchmarkShouldRateLimit(b *testing.B) {
	domains, err := limitsyaml.ParseEnvoyRateLimit("bench", []byte("domain: bench\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 1000000000}}]\n"))
	if err != nil {
		b.Fatal(err)
	}
	cfg, err := rls.NewConfig(domains...)
	if err != nil {
		b.Fatal(err)
	}
	svc, err := envoyrls.New(envoyrls.Options{Store: rls.NewMemoryStore(), Headers: envoyrls.Headers{Draft: true}, Stats: benchSink(b)})
	if err != nil {
		b.Fatal(err)
	}
	svc.SetConfig(cfg)
	reqs := make([]*rlsv3.RateLimitRequest, 10000)
	for i := range reqs {
		reqs[i] = &rlsv3.RateLimitRequest{Domain: "bench", HitsAddend: 1, Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: fmt.Sprint("k", i)}}}}}
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		resp, err := svc.ShouldRateLimit(ctx, reqs[i%len(reqs)])
		if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
			b.Fatal(resp, err)
		}
	}
}
