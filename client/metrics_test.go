package client_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluice-rl/sluice/client"
	"github.com/sluice-rl/sluice/resources"
	"github.com/sluice-rl/sluice/server/capacity"
)

func TestClientMetrics(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	cfg, err := resources.Parse([]byte(`
resources:
  - identifier_glob: "r"
    capacity: 10
    algorithm: {kind: FAIR_SHARE, lease_length: 20, refresh_interval: 5, learning_mode_duration: 0}
`))
	if err != nil {
		t.Fatal(err)
	}
	srv := capacity.New(capacity.Options{Address: "s:1", Config: cfg, Now: clock, Logger: quiet})
	reg := prometheus.NewRegistry()
	c, err := client.New("s:1", client.WithID("c"), manualOf(capacity.InProcessClient(srv)), client.WithClock(clock), client.WithLogger(quiet), client.WithRegisterer(reg),
		client.WithMode(client.Pessimistic))
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Resource("r", 4)
	if err != nil {
		t.Fatal(err)
	}
	now = now.Add(3 * time.Second) // 3 s without a lease
	step(c)
	if got := res.Capacity(); got != 4 {
		t.Fatalf("capacity %v", got)
	}
	now = now.Add(30 * time.Second) // the 20 s lease ran out 10 s ago
	want := `
# HELP sluice_client_capacity Capacity the resource may use now (its lease, or its fallback), permits/s or units.
# TYPE sluice_client_capacity gauge
sluice_client_capacity{resource="r"} 0
# HELP sluice_client_fallback_seconds_total Seconds the resource has spent without a valid lease (in its fallback mode).
# TYPE sluice_client_fallback_seconds_total counter
sluice_client_fallback_seconds_total{resource="r"} 13
# HELP sluice_client_requests_total RPCs sent to capacity servers, by method and gRPC status code.
# TYPE sluice_client_requests_total counter
sluice_client_requests_total{code="ok",method="GetCapacity"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sluice_client_capacity", "sluice_client_fallback_seconds_total", "sluice_client_requests_total"); err != nil {
		t.Fatal(err)
	}
}
