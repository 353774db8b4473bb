package redisstore

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluice-rl/sluice/limits"
)

// fixedHealth is a store whose Health is h.
type fixedHealth struct{ h limits.StoreHealth }

func (f fixedHealth) Health() limits.StoreHealth { return f.h }

// TestCollector: the collector exports a Health as the sluice_redis_*
// metrics, names, help, types and values (the latency histogram
// cumulative, its buckets limits.StoreLatencyBounds), for each breaker
// state.
func TestCollector(t *testing.T) {
	h := limits.StoreHealth{State: "half-open", Breaker: "half-open", Calls: 7, Scripts: 5, RoundTrips: 4, Failures: 2, Refused: 3, Refusals: 6,
		Latency: limits.StoreLatency{Count: 4, Sum: 1500 * time.Millisecond}}
	h.Latency.Buckets[0], h.Latency.Buckets[1], h.Latency.Buckets[len(h.Latency.Buckets)-1] = 1, 2, 1
	const want = `
# HELP sluice_redis_auth_failures_total Round trips and pings Redis refused for this server's credentials or TLS handshake (WRONGPASS, NOAUTH, an unknown CA, a missing client certificate): a configuration to fix, not a Redis away.
# TYPE sluice_redis_auth_failures_total counter
sluice_redis_auth_failures_total 6
# HELP sluice_redis_breaker_state The worst circuit breaker state of the limits store's Redis nodes: 0 closed, 1 half-open (probing), 2 open (calls fail at once).
# TYPE sluice_redis_breaker_state gauge
sluice_redis_breaker_state 1
# HELP sluice_redis_calls_total Limits store calls sent to Redis (requests: one per Allow that reached Redis).
# TYPE sluice_redis_calls_total counter
sluice_redis_calls_total 7
# HELP sluice_redis_failures_total Round trips to Redis that failed for want of Redis (timeout, connection refused or lost, LOADING, BUSY, ...).
# TYPE sluice_redis_failures_total counter
sluice_redis_failures_total 2
# HELP sluice_redis_refused_total Limits store calls failed at once: by an open circuit breaker, or with the round trip they queued behind when it failed for want of Redis.
# TYPE sluice_redis_refused_total counter
sluice_redis_refused_total 3
# HELP sluice_redis_round_trip_seconds Duration of the limits store's round trips to Redis (each a pipeline of scripts), failed ones included.
# TYPE sluice_redis_round_trip_seconds histogram
sluice_redis_round_trip_seconds_bucket{le="0.0005"} 1
sluice_redis_round_trip_seconds_bucket{le="0.001"} 3
sluice_redis_round_trip_seconds_bucket{le="0.0025"} 3
sluice_redis_round_trip_seconds_bucket{le="0.005"} 3
sluice_redis_round_trip_seconds_bucket{le="0.01"} 3
sluice_redis_round_trip_seconds_bucket{le="0.025"} 3
sluice_redis_round_trip_seconds_bucket{le="0.05"} 3
sluice_redis_round_trip_seconds_bucket{le="0.1"} 3
sluice_redis_round_trip_seconds_bucket{le="0.25"} 3
sluice_redis_round_trip_seconds_bucket{le="0.5"} 3
sluice_redis_round_trip_seconds_bucket{le="1"} 3
sluice_redis_round_trip_seconds_bucket{le="+Inf"} 4
sluice_redis_round_trip_seconds_sum 1.5
sluice_redis_round_trip_seconds_count 4
# HELP sluice_redis_round_trips_total Round trips (pipelines) to Redis carrying the limits store's scripts: round trips ÷ calls is the round trips per request.
# TYPE sluice_redis_round_trips_total counter
sluice_redis_round_trips_total 4
# HELP sluice_redis_scripts_total Lua scripts sent to Redis by the limits store (EVALSHA and EVAL: one per resource per round trip for the token buckets; resent after NOSCRIPT or a cluster redirection counts again).
# TYPE sluice_redis_scripts_total counter
sluice_redis_scripts_total 5
# HELP sluice_redis_up 1 while no circuit breaker of the limits store's Redis nodes is open (limits decisions reach Redis), else 0.
# TYPE sluice_redis_up gauge
sluice_redis_up 0
`
	if err := testutil.CollectAndCompare(newCollector(fixedHealth{h}), strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		breaker   string
		up, state float64
	}{{"closed", 1, 0}, {"half-open", 0, 1}, {"open", 0, 2}} {
		c := newCollector(fixedHealth{limits.StoreHealth{Breaker: tc.breaker}})
		if up, st := collectOne(t, c, "sluice_redis_up"), collectOne(t, c, "sluice_redis_breaker_state"); up != tc.up || st != tc.state {
			t.Errorf("breaker %s: up %v state %v, want %v %v", tc.breaker, up, st, tc.up, tc.state)
		}
	}
}

// collectOne returns the value of c's metric named name: a gauge's or a
// counter's value, a histogram's count.
func collectOne(t *testing.T, c prometheus.Collector, name string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		switch m := mf.GetMetric()[0]; {
		case m.GetGauge() != nil:
			return m.GetGauge().GetValue()
		case m.GetHistogram() != nil:
			return float64(m.GetHistogram().GetSampleCount())
		}
		return mf.GetMetric()[0].GetCounter().GetValue()
	}
	t.Fatalf("no %s", name)
	return 0
}

// TestStoreCollector: a store's Collector registers (pedantically) and
// exports its Health: up after a Take on Redis, one call, one round trip
// in the latency histogram.
func TestStoreCollector(t *testing.T) {
	st := New(client(t), Options{Prefix: prefix(t)})
	t.Cleanup(func() { _ = st.Close() })
	if err := takeCtx(t.Context(), st, "d"); err != nil {
		t.Fatal(err)
	}
	c := st.Collector()
	if n := testutil.CollectAndCount(c); n != 9 {
		t.Fatalf("%d metrics, want 9", n)
	}
	for name, want := range map[string]float64{"sluice_redis_up": 1, "sluice_redis_breaker_state": 0, "sluice_redis_calls_total": 1,
		"sluice_redis_failures_total": 0, "sluice_redis_refused_total": 0, "sluice_redis_round_trip_seconds": 1, "sluice_redis_auth_failures_total": 0} {
		if got := collectOne(t, c, name); got != want {
			t.Errorf("%s %v, want %v", name, got, want)
		}
	}
}
