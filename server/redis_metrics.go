package server

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/limits"
)

// redisHealth is a limits store on Redis (limits/redis.Store): the server
// shows its Health on the status page.
type redisHealth interface {
	Health() limits.StoreHealth
}

// collectorOf is a limits store that exports its own metrics
// (limits/redis.Store: its Health as sluice_redis_*), which the server
// registers.
type collectorOf interface {
	Collector() prometheus.Collector
}

// redisStore returns the limits engine's store when it is on Redis.
func (s *Server) redisStore() (redisHealth, bool) {
	h, ok := s.limits.Store().(redisHealth)
	return h, ok
}

// RedisStatus is the status page's Redis section: the limits store's
// view of Redis (limits.StoreHealth). Durations are seconds.
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

// redisStatus returns the Redis section, or nil when the limits store is
// not on Redis.
func (s *Server) redisStatus() *RedisStatus {
	st, ok := s.redisStore()
	if !ok {
		return nil
	}
	h := st.Health()
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
