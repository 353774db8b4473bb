package status

import (
	"time"

	"github.com/sluice-rl/sluice/limits"
)

// RedisStatus is the status page's Redis section: the limits store's
// view of Redis (limits/redis.Health). Durations are seconds.
type RedisStatus struct {
	// State is "up", "down" (a breaker open: decisions fail at once) or
	// "half-open" (probing); Breaker the worst breaker state (closed,
	// half-open, open); Nodes the Redis nodes used.
	State   string `json:"state"`
	Breaker string `json:"breaker"`
	Nodes   int    `json:"nodes"`
	// LastError is the last failure's text, at LastErrorAt (absent: none).
	LastError   string     `json:"last_error,omitempty"`
	LastErrorAt *time.Time `json:"last_error_at,omitempty"`
	// Calls, Scripts, RoundTrips, Failures and Refused are the store's
	// counters (sluice_redis_*_total); RoundTripsPerCall the round trips
	// per request (below 1 when requests share round trips).
	Calls             uint64  `json:"calls"`
	Scripts           uint64  `json:"scripts"`
	RoundTrips        uint64  `json:"round_trips"`
	Failures          uint64  `json:"failures"`
	Refused           uint64  `json:"refused"`
	RoundTripsPerCall float64 `json:"round_trips_per_call"`
	// MeanRoundTrip is the mean round trip; Timeout the bound on one.
	MeanRoundTrip float64 `json:"mean_round_trip_seconds"`
	Timeout       float64 `json:"timeout_seconds"`
}

// RedisStatusOf is the Redis section for a store's health.
func RedisStatusOf(h limits.StoreHealth) *RedisStatus {
	rs := &RedisStatus{State: h.State, Breaker: h.Breaker, Nodes: h.Nodes, LastError: h.LastError,
		Calls: h.Calls, Scripts: h.Scripts, RoundTrips: h.RoundTrips, Failures: h.Failures, Refused: h.Refused, Timeout: h.Timeout.Seconds()}
	if !h.LastErrorAt.IsZero() {
		at := h.LastErrorAt.UTC()
		rs.LastErrorAt = &at
	}
	if h.Calls > 0 {
		rs.RoundTripsPerCall = float64(h.RoundTrips) / float64(h.Calls)
	}
	if h.Latency.Count > 0 {
		rs.MeanRoundTrip = h.Latency.Sum.Seconds() / float64(h.Latency.Count)
	}
	return rs
}
