package redisstore

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/limits"
)

// Collector returns a prometheus.Collector of the store's Health, read at
// every scrape (nothing on the request path: the store counts with
// atomics), under the names sluice_redis_*: up, breaker_state (0 closed,
// 1 half-open, 2 open), calls_total, scripts_total, round_trips_total,
// failures_total, refused_total, auth_failures_total and the histogram round_trip_seconds
// (limits.StoreLatencyBounds). Register it once per registry; each call
// returns a new collector.
//
// Source: docs/redis.md, "Watching it" (the status page and the metrics
// show the Redis state, script latency and degraded answers; the degraded
// answers are sluice_limits_events_total{event="degraded"}, by resource).
func (s *Store) Collector() prometheus.Collector { return newCollector(s) }

// collector exports a store's Health (see Store.Collector).
type collector struct {
	store                                             interface{ Health() limits.StoreHealth }
	up, breaker, calls, scripts, roundTrips, failures *prometheus.Desc
	refused, latency, authFailures                    *prometheus.Desc
}

func newCollector(st interface{ Health() limits.StoreHealth }) *collector {
	return &collector{
		store:        st,
		up:           prometheus.NewDesc("sluice_redis_up", "1 while no circuit breaker of the limits store's Redis nodes is open (limits decisions reach Redis), else 0.", nil, nil),
		breaker:      prometheus.NewDesc("sluice_redis_breaker_state", "The worst circuit breaker state of the limits store's Redis nodes: 0 closed, 1 half-open (probing), 2 open (calls fail at once).", nil, nil),
		calls:        prometheus.NewDesc("sluice_redis_calls_total", "Limits store calls sent to Redis (requests: one per Allow that reached Redis).", nil, nil),
		scripts:      prometheus.NewDesc("sluice_redis_scripts_total", "Lua scripts sent to Redis by the limits store (EVALSHA and EVAL: one per resource per round trip for the token buckets; resent after NOSCRIPT or a cluster redirection counts again).", nil, nil),
		roundTrips:   prometheus.NewDesc("sluice_redis_round_trips_total", "Round trips (pipelines) to Redis carrying the limits store's scripts: round trips ÷ calls is the round trips per request.", nil, nil),
		failures:     prometheus.NewDesc("sluice_redis_failures_total", "Round trips to Redis that failed for want of Redis (timeout, connection refused or lost, LOADING, BUSY, ...).", nil, nil),
		refused:      prometheus.NewDesc("sluice_redis_refused_total", "Limits store calls failed at once: by an open circuit breaker, or with the round trip they queued behind when it failed for want of Redis.", nil, nil),
		authFailures: prometheus.NewDesc("sluice_redis_auth_failures_total", "Round trips and pings Redis refused for this server's credentials or TLS handshake (WRONGPASS, NOAUTH, an unknown CA, a missing client certificate): a configuration to fix, not a Redis away.", nil, nil),
		latency:      prometheus.NewDesc("sluice_redis_round_trip_seconds", "Duration of the limits store's round trips to Redis (each a pipeline of scripts), failed ones included.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.up, c.breaker, c.calls, c.scripts, c.roundTrips, c.failures, c.refused, c.authFailures, c.latency} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	h := c.store.Health()
	up, state := 0.0, 2.0
	switch h.Breaker {
	case "closed":
		up, state = 1, 0
	case "half-open":
		state = 1
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, up)
	ch <- prometheus.MustNewConstMetric(c.breaker, prometheus.GaugeValue, state)
	ch <- prometheus.MustNewConstMetric(c.calls, prometheus.CounterValue, float64(h.Calls))
	ch <- prometheus.MustNewConstMetric(c.scripts, prometheus.CounterValue, float64(h.Scripts))
	ch <- prometheus.MustNewConstMetric(c.roundTrips, prometheus.CounterValue, float64(h.RoundTrips))
	ch <- prometheus.MustNewConstMetric(c.failures, prometheus.CounterValue, float64(h.Failures))
	ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(h.Refused))
	ch <- prometheus.MustNewConstMetric(c.authFailures, prometheus.CounterValue, float64(h.Refusals))
	buckets := make(map[float64]uint64, len(limits.StoreLatencyBounds))
	var cum uint64
	for i, le := range limits.StoreLatencyBounds {
		cum += h.Latency.Buckets[i]
		buckets[le] = cum
	}
	ch <- prometheus.MustNewConstHistogram(c.latency, h.Latency.Count, h.Latency.Sum.Seconds(), buckets)
}
