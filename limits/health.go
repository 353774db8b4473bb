package limits

import "time"

// StoreHealth is a remote store's view of its backend, for a status page
// and metrics: limits/redis.Store's of Redis (its Health method; the
// memory store has none). It is plain data, so that a status page can
// show it without depending on the store's package. Counters count from
// the store's creation.
//
// Source: docs/redis.md, "Watching it" (the status page and metrics show
// the Redis state, script latency and degraded answers).
type StoreHealth struct {
	// State is "up" (no breaker open), "down" (a node's breaker is open:
	// its calls fail at once) or "half-open" (the node's probe is testing
	// it again; its calls still fail at once).
	State string
	// Breaker is the worst of the nodes' circuit breakers' states, in
	// gobreaker's terms: "closed", "half-open" or "open".
	Breaker string
	// Nodes is the number of backend nodes the store has sent to: 1 for a
	// single Redis, the masters used for a cluster (a former master whose
	// probe found it gone no longer counts).
	Nodes int
	// LastError is the text of the last error that meant the backend
	// could not answer ("" if none yet), at LastErrorAt.
	LastError   string
	LastErrorAt time.Time
	// Unanswered reports that the backend has not answered since the
	// store opened: a Redis away at start (limits/redis.Open) that has not
	// answered yet. A server is not ready then.
	Unanswered bool
	// Refusal is the backend's refusal of this server's credentials or
	// TLS handshake now (Redis's WRONGPASS, NOAUTH, an unknown CA, a
	// missing client certificate), at RefusalAt; "" when none (cleared by
	// the next answer). Refusals counts the round trips and pings it
	// refused.
	Refusal   string
	RefusalAt time.Time
	Refusals  uint64
	// Calls is the calls sent to the backend (Takes, and other scripts on
	// the request path), Scripts the scripts that carried them (on Redis,
	// EVALSHA and EVAL: one for all of a round trip's Takes on one
	// resource; a script resent after NOSCRIPT or a cluster redirection
	// counts again), RoundTrips the round trips that carried those
	// (pipelines; RoundTrips ÷ Calls is the round trips per request),
	// Failures the round trips that failed for want of the backend,
	// Refused the calls failed without a round trip of their own: at once
	// by an open breaker, or queued behind a round trip that failed for
	// want of the backend.
	Calls, Scripts, RoundTrips, Failures, Refused uint64
	// Probes is the pings the open breakers' probes sent, ProbeFailures
	// those the backend did not answer (within Timeout). Neither counts
	// in the round trips, failures or latency above.
	Probes, ProbeFailures uint64
	// Timeout is the bound on one round trip, as applied.
	Timeout time.Duration
	// Latency is the distribution of the round trips' durations.
	Latency StoreLatency
}

// StoreLatencyBounds are the upper bounds of StoreLatency's buckets, in
// seconds (Prometheus's le): 0.5 ms to 1 s.
var StoreLatencyBounds = [...]float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}

// StoreLatency is a histogram of a store's round-trip durations (each a
// pipeline of scripts on Redis, failed ones included).
type StoreLatency struct {
	// Buckets[i] counts the round trips of at most StoreLatencyBounds[i]
	// (and more than the bound before); the last counts the slower ones.
	Buckets [len(StoreLatencyBounds) + 1]uint64
	// Count is their number, Sum their total duration.
	Count uint64
	Sum   time.Duration
}
