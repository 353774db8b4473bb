package redisstore

import (
	"context"
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
	// Redis that stopped answering costs at most BreakerFailures round
	// trips of 200 ms before the breaker opens. While Redis does not
	// answer, no call waits longer than the timeout: the calls queued
	// behind a round trip that fails fail with it. When Redis is slow
	// but answers, a call queued behind a round trip in flight waits for
	// it first: at most about twice the timeout in all.
	DefaultTimeout = 200 * time.Millisecond
	// DefaultBreakerFailures consecutive failed round trips to a node
	// open its breaker. A round trip carries a whole batch, so under load
	// that is many failed calls.
	DefaultBreakerFailures = 3
	// DefaultBreakerProbe is the period of an open breaker's probe: a
	// goroutine of the store, off the request path, sends the node a PING
	// (bounded by the timeout) every second, and closes the breaker when
	// Redis answers; a Redis that is back is used again within about a
	// second. Calls fail at once meanwhile.
	DefaultBreakerProbe = time.Second
	// DefaultMaxBatch bounds the scripts of one round trip.
	DefaultMaxBatch = 128
	// maxBatchLimit bounds Options.MaxBatch: the take script's requests
	// name their bucket (2 to the batch's size + 1) and ask in 16 bits.
	maxBatchLimit = 1<<16 - 2
)

// Health is the store's view of Redis, for a status page and metrics.
// Counters count from New.
type Health struct {
	// State is "up" (no breaker open), "down" (a node's breaker is open:
	// its calls fail at once with ErrUnavailable) or "half-open" (the
	// node's probe is testing it again; its calls still fail at once).
	State string
	// Breaker is the worst of the nodes' circuit breakers' states, in
	// gobreaker's terms: "closed", "half-open" or "open".
	Breaker string
	// Nodes is the number of Redis nodes the store has sent to (its
	// batchers): 1 for a single Redis, the masters used for a cluster (a
	// former master whose probe found it gone no longer counts).
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
	// without a round trip of their own: at once by an open breaker, or
	// queued behind a round trip that failed for want of Redis.
	Calls, Scripts, RoundTrips, Failures, Refused uint64
	// Probes is the PINGs the open breakers' probes sent, ProbeFailures
	// those Redis did not answer (within Timeout). Neither counts in the
	// round trips, failures or latency above.
	Probes, ProbeFailures uint64
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
	probes, probeFailures                         atomic.Uint64
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
		Probes: s.probes.Load(), ProbeFailures: s.probeFailures.Load(), Timeout: s.timeout,
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

// startProbe starts b's probe (probeLoop), unless the store is closed.
// b.probing is set: at most one probe per node runs. It is called by the
// breaker's OnStateChange, under the breaker's lock: it only starts the
// goroutine.
func (s *Store) startProbe(b *batcher) {
	s.probeMu.Lock()
	defer s.probeMu.Unlock()
	if s.closing.Err() != nil {
		return // closed: nothing probes any more (the breaker stays open)
	}
	s.probeWG.Add(1)
	s.running.Add(1)
	go b.probeLoop()
}

// probeLoop is b's probe, started when its breaker opens: every
// Options.BreakerProbe, the open period being over, it takes the
// breaker's one half-open request, sends the node a PING bounded by
// Options.Timeout, and reports it: an answer closes the breaker (and the
// probe ends), none opens it for another period. It ends when the
// breaker is closed or the store is closed (Close cancels the PING in
// flight), and, on a cluster, when a PING fails and the node is no longer
// a master of the cluster (gone): after a failover the old master may
// never answer again (go-redis closes its client a minute after it left
// the cluster's slots), so its probe would run forever. Its batcher is
// then dropped from Store.nodes too, out of Health (which would say
// "down" for good); the calls of its slots go to the new master's.
// No call waits for it: calls fail at once while the breaker is not
// closed (see do).
func (b *batcher) probeLoop() {
	defer b.st.probeWG.Done()
	defer b.st.running.Add(-1)
	t := time.NewTimer(b.st.probe)
	defer t.Stop()
	for {
		select {
		case <-b.st.closing.Done():
			return
		case <-t.C:
		}
		wait := b.st.probe
		if gobreaker.State(b.state.Load()) != gobreaker.StateClosed {
			switch done, err := b.brk.Allow(); {
			case err == nil:
				b.st.probes.Add(1)
				ctx, cancel := context.WithTimeout(b.st.closing, b.st.timeout)
				err := b.node.Ping(ctx).Err()
				cancel()
				failed := unavailable(err)
				if !failed {
					err = nil // an answer, even an error, is Redis
				} else {
					b.st.probeFailures.Add(1)
				}
				done(err)
				if failed && b.gone() {
					// Calls go to the node's successor (batcherFor):
					// nothing will close this breaker. Probing stays
					// set, so the dropped batcher never probes again.
					b.st.nodes.CompareAndDelete(b.node, b)
					return
				}
			case errors.Is(err, gobreaker.ErrOpenState):
				// The timer can fire at the very end of the open period
				// (gobreaker's clock is read under its lock): try again
				// shortly.
				wait = time.Millisecond
			}
		}
		if gobreaker.State(b.state.Load()) == gobreaker.StateClosed {
			// End, unless the breaker opened again meanwhile and its
			// OnStateChange saw probing still set: then this probe goes
			// on (OnStateChange mirrors the state before testing probing,
			// so one of the two always sees the other).
			b.probing.Store(false)
			if gobreaker.State(b.state.Load()) == gobreaker.StateClosed || !b.probing.CompareAndSwap(false, true) {
				return
			}
		}
		t.Reset(wait)
	}
}

// gone reports whether b's node is no longer a master of the store's
// cluster: the cluster's slots, read again (ForEachMaster reloads them,
// within Options.Timeout), name other masters only. It is false for a
// single Redis, and when the slots cannot be read: the probe goes on.
func (b *batcher) gone() bool {
	cc := b.st.cluster
	if cc == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(b.st.closing, b.st.timeout)
	defer cancel()
	var master atomic.Bool
	err := cc.ForEachMaster(ctx, func(_ context.Context, c *redis.Client) error {
		if c == b.node {
			master.Store(true)
		}
		return nil
	})
	return err == nil && !master.Load()
}

// clusterOf returns c as a cluster client, or nil.
func clusterOf(c redis.UniversalClient) *redis.ClusterClient {
	cc, _ := c.(*redis.ClusterClient)
	return cc
}
