package limits_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/client/limits"
)

// BenchmarkAcquireNaive: one decision of the naive mode, a request to the
// real service over loopback gRPC each.
func BenchmarkAcquireNaive(b *testing.B) {
	addr, stop, err := serve(newService(b))
	if err != nil {
		b.Fatal(err)
	}
	defer stop()
	c, err := limits.New(addr, limits.WithLogger(quiet), limits.WithTimeout(time.Second))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if g, err := c.Acquire(ctx, "api", "bench", 1); err != nil || g.Source != limits.FromService {
			b.Fatal(g, err)
		}
	}
}

// BenchmarkAcquireSmart: one decision of the smart mode in the steady
// state, from parallel callers: a local token, the top-ups (one request
// per 10 000 tokens) in the background.
func BenchmarkAcquireSmart(b *testing.B) {
	addr, stop, err := serve(newService(b))
	if err != nil {
		b.Fatal(err)
	}
	defer stop()
	c, err := limits.New(addr, limits.WithLogger(quiet), limits.WithTimeout(time.Second),
		limits.WithSmart(limits.Smart{Batch: 10000, LowWater: 5000, TTL: time.Minute}))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := c.Acquire(ctx, "api", "bench", 1); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkReport: adding to a batch, from parallel callers.
func BenchmarkReport(b *testing.B) {
	c, err := limits.New("127.0.0.1:1", limits.WithLogger(quiet), limits.WithReportInterval(time.Hour))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := c.Report("api", "bench", 1); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkRequest: one Request granted at once, a request to the real
// service over loopback gRPC.
func BenchmarkRequest(b *testing.B) {
	addr, stop, err := serveCharon(newCharon(b))
	if err != nil {
		b.Fatal(err)
	}
	defer stop()
	c, err := limits.New(addr, limits.WithLogger(quiet))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if g, err := c.Request(ctx, "api", "bench", 1, 0, 0); err != nil || g.Source != limits.FromService {
			b.Fatal(g, err)
		}
	}
}

// BenchmarkReserveRelease: a ReserveCopies and the Release of its copy,
// two requests to the real service (copies engine) over loopback gRPC,
// in a session opened once.
func BenchmarkReserveRelease(b *testing.B) {
	addr, stop, err := serveCharon(newCharon(b))
	if err != nil {
		b.Fatal(err)
	}
	defer stop()
	c, err := limits.New(addr, limits.WithLogger(quiet))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		h, err := c.ReserveCopies(ctx, "gpus", "bench", 1, 0, 0)
		if err != nil || h.Degraded() {
			b.Fatal(h, err)
		}
		if err := h.Release(ctx, 1); err != nil {
			b.Fatal(err)
		}
	}
}
