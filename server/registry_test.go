package server

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	pb "github.com/sluice-rl/sluice/api/doorman"
	"github.com/sluice-rl/sluice/internal/testutil"
)

// Two servers given one Config.Registry: the second New returns an error
// naming a metric the registry already holds (a prometheus
// AlreadyRegisteredError underneath), and does not panic.
func TestNewTwiceOnOneRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	startServer(t, Config{ID: "first", Repository: Repository{Fixed: doormanRepo(t)}, Runtime: Runtime{Registry: reg}})
	s, err := New(context.Background(), Config{ID: "second", Listen: Listen{Address: "127.0.0.1:0"}, Repository: Repository{Fixed: doormanRepo(t)}, Runtime: Runtime{Registry: reg}})
	if err == nil {
		s.close()
		t.Fatal("the second New on one Registry: nil error, want one naming a metric")
	}
	if !strings.Contains(err.Error(), "metrics: sluice_") || !strings.Contains(err.Error(), "already registered") {
		t.Errorf("the second New on one Registry: %q, want \"metrics: sluice_… already registered\"", err)
	}
	if _, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); !ok {
		t.Errorf("the second New's error %q wraps no prometheus.AlreadyRegisteredError", err)
	}
}

// A Registry that holds any one of the services' metrics (here one of the
// same name and another help string) is an error naming it, whichever
// service registers it.
func TestNewRegistryHoldsAMetric(t *testing.T) {
	for _, name := range []string{
		"sluice_server_requests_total",                  // the RPC metrics
		"sluice_server_config_reloads_total",            // the server's own
		"sluice_server_is_master",                       // capacity
		"sluice_limits_events_total",                    // limits
		"sluice_limits_buckets",                         // limits
		"sluice_copies_sessions",                        // sessions
		"sluice_envoy_ratelimit_invalid_requests_total", // Envoy's rate limit service
	} {
		t.Run(name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			reg.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: "Registered before the server."}))
			s, err := New(context.Background(), Config{Listen: Listen{Address: "127.0.0.1:0"}, Runtime: Runtime{Registry: reg}})
			if err == nil {
				s.close()
				t.Fatalf("New: nil error, want one naming %s", name)
			}
			if !strings.Contains(err.Error(), "metrics: registering "+name+":") {
				t.Errorf("New: %q, want an error naming %s", err, name)
			}
		})
	}
}

// Two servers on separate registries run side by side in one process:
// each answers a request and counts it in its own registry.
func TestServersOnSeparateRegistries(t *testing.T) {
	regs := []*prometheus.Registry{prometheus.NewRegistry(), prometheus.NewRegistry()}
	var servers []*Server
	for i, reg := range regs {
		s, _ := startServer(t, Config{ID: []string{"a", "b"}[i], Repository: Repository{Fixed: doormanRepo(t)}, Runtime: Runtime{Registry: reg}})
		servers = append(servers, s)
	}
	for i, s := range servers {
		c := pb.NewCapacityClient(testutil.Dial(t, s.Addr()))
		resp, err := c.GetCapacity(t.Context(), capacityRequest("alice", "fixed/a", 5))
		if err != nil || len(resp.GetResponse()) != 1 || resp.GetResponse()[0].GetGets().GetCapacity() != 5 {
			t.Fatalf("server %d: GetCapacity: %v, %v; want a lease of 5", i, resp, err)
		}
		if v, ok := metricValue(t, regs[i], "sluice_server_requests_total",
			map[string]string{"method": "/doorman.Capacity/GetCapacity", "code": "ok"}); !ok || v != 1 {
			t.Errorf("server %d's registry: sluice_server_requests_total of GetCapacity = %v (present %v), want 1", i, v, ok)
		}
	}
}
