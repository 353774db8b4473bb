package server

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	pb "github.com/sluice-rl/sluice/api/doorman"
	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/internal/testutil/fixture"
	"github.com/sluice-rl/sluice/resources"
)

// runDeadline bounds how long a test waits for Run to return after its
// context ended: far beyond any drain's grace.
const runDeadline = 60 * time.Second

// startServer is the one way the tests of package server start a whole
// server in-process, as `sluice server` does: New(ctx, cfg), then Run in a
// goroutine, on a kernel-picked loopback port unless cfg says where. It
// fails the test if New fails. stop cancels Run's context and returns
// Run's error (waiting at most runDeadline); the test's cleanup calls it
// (once) and fails the test if Run returned an error there.
func startServer(t testing.TB, cfg Config) (s *Server, stop func() error) {
	t.Helper()
	if cfg.Listen.Address == "" && cfg.Listen.Listener == nil {
		cfg.Listen.Address = "127.0.0.1:0"
	}
	s = assemble(t, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var once sync.Once
	var runErr error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case runErr = <-done:
			case <-time.After(runDeadline):
				runErr = context.DeadlineExceeded
				t.Errorf("Run of %s did not return within %v of its context's end", s.Addr(), runDeadline)
			}
		})
		return runErr
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("Run of %s: %v", s.Addr(), err)
		}
	})
	return s, stop
}

// assemble is New(cfg) for the tests that drive a server's parts without
// Run (its Handler, Serve, its services): it fails the test if New fails.
func assemble(t testing.TB, cfg Config) *Server {
	t.Helper()
	s, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

// metricValue returns the value of the series of metric name in reg whose
// labels include labels, and whether there is one.
func metricValue(t testing.TB, reg *prometheus.Registry, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	var pairs []string
	for k, v := range labels {
		pairs = append(pairs, k, v)
	}
	return testutil.MetricValue(t, reg, name, pairs...)
}

// doormanRepo parses fixture.Doorman.
func doormanRepo(t testing.TB) *resources.Repository {
	t.Helper()
	return parseDoorman(t, fixture.Doorman)
}

// parseDoorman parses a Doorman configuration.
func parseDoorman(t testing.TB, yaml string) *resources.Repository {
	t.Helper()
	repo, err := resources.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return repo
}

// capacityRequest asks for wants of resource for client.
func capacityRequest(client, resource string, wants float64) *pb.GetCapacityRequest {
	return &pb.GetCapacityRequest{ClientId: proto.String(client),
		Resource: []*pb.ResourceRequest{{ResourceId: proto.String(resource), Priority: proto.Int64(0), Wants: proto.Float64(wants)}}}
}
