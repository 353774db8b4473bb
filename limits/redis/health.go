package redisstore

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"
)

// ErrUnavailable is wrapped by the errors of Take when Redis could not
// answer: no reply within Options.Timeout, a connection refused or lost,
// a reply saying Redis cannot serve now (LOADING, BUSY, MASTERDOWN,
// CLUSTERDOWN, TRYAGAIN, READONLY), or the circuit breaker open after
// Options.BreakerFailures such round trips in a row (then the error also
// wraps gobreaker.ErrOpenState, and comes at once). Check it with
// errors.Is.
//
// Source: issue 15, "Redis trouble" (short timeouts, a circuit breaker).
var ErrUnavailable = errors.New("limits/redis: Redis unavailable")

// Defaults of Options.
const (
	// DefaultTimeout bounds each round trip to Redis: far above a healthy
	// one (well below a millisecond on a LAN; a few milliseconds for a
	// full batch of MaxBatch scripts) and above Redis's usual stalls (a
	// fork for a snapshot, tens of milliseconds), yet short enough that a
	// Redis that stopped answering costs at most BreakerFailures × 200 ms
	// of slow answers before the breaker opens. A call queued behind a
	// round trip in flight waits for it first: at most about twice the
	// timeout in all.
	DefaultTimeout = 200 * time.Millisecond
	// DefaultBreakerFailures consecutive failed round trips to a node
	// open its breaker. A round trip carries a whole batch, so under load
	// that is many failed calls.
	DefaultBreakerFailures = 3
	// DefaultBreakerProbe is how long an open breaker fails calls at once
	// before one round trip probes Redis again: a restarted Redis is used
	// again within a second.
	DefaultBreakerProbe = time.Second
	// DefaultMaxBatch bounds the scripts of one round trip.
	DefaultMaxBatch = 128
)

// Health is the store's view of Redis, for a status page and metrics.
// Counters count from New.
type Health struct {
	// State is "up" (no breaker open), "down" (a node's breaker is open:
	// its calls fail at once with ErrUnavailable) or "half-open" (a probe
	// is testing a node again).
	State string
	// Breaker is the worst of the nodes' circuit breakers' states, in
	// gobreaker's terms: "closed", "half-open" or "open".
	Breaker string
	// Nodes is the number of Redis nodes the store has sent to (its
	// batchers): 1 for a single Redis, the masters used for a cluster.
	Nodes int
	// LastError is the text of the last error that meant Redis could not
	// answer ("" if none yet), at LastErrorAt.
	LastError   string
	LastErrorAt time.Time
	// Calls is the calls sent to Redis (Takes, and other scripts on the
	// request path), Scripts the scripts that carried them (EVALSHA and
	// EVAL: one for all of a round trip's Takes on one resource; a script
	// resent after NOSCRIPT or a cluster redirection counts again),
	// RoundTrips the round trips that carried those (pipelines;
	// RoundTrips ÷ Calls is the round trips per request), Failures the
	// round trips that failed for want of Redis, Refused the calls failed
	// at once by an open breaker.
	Calls, Scripts, RoundTrips, Failures, Refused uint64
	// Timeout is Options.Timeout as applied.
	Timeout time.Duration
	// Latency is the distribution of the round trips' durations.
	Latency Latency
}

// LatencyBounds are the upper bounds of Latency's buckets, in seconds
// (Prometheus's le): 0.5 ms to 1 s.
var LatencyBounds = [...]float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}

// Latency is a histogram of round-trip durations (each a pipeline of
// scripts, failed ones included), counted from New.
type Latency struct {
	// Buckets[i] counts the round trips of at most LatencyBounds[i] (and
	// more than the bound before); the last counts the slower ones.
	Buckets [len(LatencyBounds) + 1]uint64
	// Count is their number, Sum their total duration.
	Count uint64
	Sum   time.Duration
}

// stats are the store's counters and its last failure.
type stats struct {
	calls, scripts, roundTrips, failures, refused atomic.Uint64
	latency                                       [len(LatencyBounds) + 1]atomic.Uint64
	latencySum                                    atomic.Int64 // ns

	mu        sync.Mutex
	lastErr   string
	lastErrAt time.Time
}

// noteFailure records a failed round trip.
func (s *stats) noteFailure(err error) {
	s.failures.Add(1)
	s.mu.Lock()
	s.lastErr, s.lastErrAt = err.Error(), time.Now()
	s.mu.Unlock()
}

// observe counts a round trip of d.
func (s *stats) observe(d time.Duration) {
	i := 0
	for i < len(LatencyBounds) && d.Seconds() > LatencyBounds[i] {
		i++
	}
	s.latency[i].Add(1)
	s.latencySum.Add(int64(d))
}

// Health returns the store's view of Redis now. It is safe for
// concurrent use and does not contact Redis.
func (s *Store) Health() Health {
	h := Health{
		Calls: s.calls.Load(), Scripts: s.scripts.Load(), RoundTrips: s.roundTrips.Load(), Failures: s.failures.Load(), Refused: s.refused.Load(),
		Timeout: s.timeout,
	}
	for i := range s.latency {
		h.Latency.Buckets[i] = s.latency[i].Load()
		h.Latency.Count += h.Latency.Buckets[i]
	}
	h.Latency.Sum = time.Duration(s.latencySum.Load())
	s.mu.Lock()
	h.LastError, h.LastErrorAt = s.lastErr, s.lastErrAt
	s.mu.Unlock()
	worst := gobreaker.StateClosed
	each := func(b *batcher) {
		h.Nodes++
		// State (not the mirror): it turns open into half-open once the
		// open period is over.
		switch st := b.brk.State(); {
		case st == gobreaker.StateOpen:
			worst = st
		case st == gobreaker.StateHalfOpen && worst == gobreaker.StateClosed:
			worst = st
		}
	}
	if s.cluster == nil {
		each(s.single)
	} else {
		s.nodes.Range(func(_, v any) bool { each(v.(*batcher)); return true })
	}
	h.Breaker = worst.String()
	switch worst {
	case gobreaker.StateOpen:
		h.State = "down"
	case gobreaker.StateHalfOpen:
		h.State = "half-open"
	default:
		h.State = "up"
	}
	return h
}

// clusterOf returns c as a cluster client, or nil.
func clusterOf(c redis.UniversalClient) *redis.ClusterClient {
	cc, _ := c.(*redis.ClusterClient)
	return cc
}
