package capacity

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	pb "github.com/sluice-rl/sluice/api/doorman"
	"github.com/sluice-rl/sluice/api/doorman/doormanconnect"
	"github.com/sluice-rl/sluice/internal/grpcconnect"
	"github.com/sluice-rl/sluice/internal/hooks"
	"github.com/sluice-rl/sluice/internal/testutil"
)

// askMany sends one GetCapacity for ids (as one client).
func askMany(t *testing.T, s *Service, client string, ids []string) {
	t.Helper()
	req := &pb.GetCapacityRequest{ClientId: proto.String(client)}
	for _, id := range ids {
		req.Resource = append(req.Resource, &pb.ResourceRequest{ResourceId: proto.String(id), Priority: proto.Int64(0), Wants: proto.Float64(1)})
	}
	if _, err := s.GetCapacity(context.Background(), req); err != nil {
		t.Fatal(err)
	}
}

// 100 000 distinct resource ids (configured templates, unmatched, and at an
// intermediate server) leave the number of series bounded.
func TestMetricsCardinalityBounded(t *testing.T) {
	t.Parallel() // its own services and registries; the longest test here, beside the trees that wait
	s := newTestServer(t)
	const n = 100_000
	batch := make([]string, 0, 1000)
	for i := range n {
		if i%2 == 0 {
			batch = append(batch, fmt.Sprintf("fixed/%d", i)) // template "fixed/*"
		} else {
			batch = append(batch, fmt.Sprintf("random/%d", i)) // no template
		}
		if len(batch) == cap(batch) {
			askMany(t, s, fmt.Sprintf("c%d", i), batch)
			batch = batch[:0]
		}
	}
	askMany(t, s, "fair-client", []string{"fair"})
	got, mfs := testutil.Series(t, registry(t, s), "sluice_server_")
	t.Logf("root: %d series after %d distinct resource ids", got, n+1)
	// 3 labels (fixed/*, fair, unmatched) × 7 per-resource metrics, plus
	// the fixed families.
	if got > 60 {
		t.Fatalf("%d series, want a bounded number", got)
	}
	var labels []string
	for _, mf := range mfs {
		if mf.GetName() == "sluice_server_resources" {
			for _, m := range mf.GetMetric() {
				labels = append(labels, fmt.Sprintf("%s=%v", m.GetLabel()[0].GetValue(), m.GetGauge().GetValue()))
			}
		}
	}
	if strings.Join(labels, " ") == "" || !strings.Contains(strings.Join(labels, " "), "fixed/*=50000") || !strings.Contains(strings.Join(labels, " "), "unmatched=50000") {
		t.Fatalf("per-label resource counts %v", labels)
	}

	// At an intermediate server resources have no template: per id, up to
	// MaxResourceSeries, then "other".
	root := New(Options{ID: "root", Address: "root:1", Logger: slog.New(slog.DiscardHandler)})
	mid := New(Options{ID: "mid", Address: "127.0.0.1:2", Parent: []string{"root:1"}, Registry: prometheus.NewRegistry(),
		Hooks: &hooks.Server{ParentDial: func(string) doormanconnect.CapacityClient { return grpcconnect.Capacity{S: root} }}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); mid.Run(ctx, time.Second) }()
	defer func() { cancel(); <-done }()
	const midN = 20_000
	for i := 0; i < midN; i += 1000 {
		batch = batch[:0]
		for j := i; j < i+1000; j++ {
			batch = append(batch, fmt.Sprintf("r/%d", j))
		}
		askMany(t, mid, "c", batch)
	}
	// More resources than one GetServerCapacity may carry: the link sends
	// them in parts, and every one got its lease.
	if g := getCap(t, mid, "c", fmt.Sprintf("r/%d", midN-1), 1).GetResponse()[0].GetGets().GetCapacity(); g != 1 {
		t.Fatalf("the last resource got %v from the intermediate, want 1", g)
	}
	got, _ = testutil.Series(t, registry(t, mid), "sluice_server_resource")
	t.Logf("intermediate: %d per-resource series after %d distinct resource ids", got, midN)
	if want := 7 * (MaxResourceSeries + 1); got != want {
		t.Fatalf("%d per-resource series, want %d (%d ids + other, 7 metrics)", got, want, MaxResourceSeries)
	}
}

// The capacity service's part of package server's
// TestMetricsMastershipAndConfig (the configuration reloads are counted by
// the composition root, and tested there).
func TestMetricsMastershipAndConfigInfo(t *testing.T) {
	s := newTestServer(t)
	s.SetMastership(false, "x:1")
	s.SetMastership(true, "")
	_, mfs := testutil.Series(t, registry(t, s), "sluice_server_")
	for _, line := range testutil.MissingSeries(mfs,
		`sluice_server_mastership_changes_total{change="lost"} 1`,
		`sluice_server_mastership_changes_total{change="won"} 1`,
		`sluice_server_config_info{hash="`+s.Config().Hash()+`",templates="2"} 1`,
	) {
		t.Errorf("missing %s", line)
	}
}
