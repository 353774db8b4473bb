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
	// Unanswered: Redis has not answered since the server started (it
	// is not ready). Refusal is Redis's refusal of the server's
	// credentials or TLS now (absent: none), at RefusalAt; AuthFailures
	// the round trips and pings refused so (sluice_redis_auth_failures_total).
	Unanswered   bool       `json:"unanswered,omitempty"`
	Refusal      string     `json:"refusal,omitempty"`
	RefusalAt    *time.Time `json:"refusal_at,omitempty"`
	AuthFailures uint64     `json:"auth_failures"`
	// MeanRoundTrip is the mean round trip; Timeout the bound on one.
	MeanRoundTrip float64 `json:"mean_round_trip_seconds"`
	Timeout       float64 `json:"timeout_seconds"`
}

// RedisStatusOf is the Redis section for a store's health.
func RedisStatusOf(h limits.StoreHealth) *RedisStatus {
	rs := &RedisStatus{State: h.State, Breaker: h.Breaker, Nodes: h.Nodes, LastError: h.LastError,
		Calls: h.Calls, Scripts: h.Scripts, RoundTrips: h.RoundTrips, Failures: h.Failures, Refused: h.Refused, Timeout: h.Timeout.Seconds()}
	rs.Unanswered, rs.Refusal, rs.AuthFailures = h.Unanswered, h.Refusal, h.Refusals
	if !h.RefusalAt.IsZero() {
		at := h.RefusalAt.UTC()
		rs.RefusalAt = &at
	}
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
