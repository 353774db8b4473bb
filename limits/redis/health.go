package redisstore

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"

	"github.com/sluice-rl/sluice/limits"
)

// ErrUnavailable is wrapped by the errors of Take when Redis could not
// answer: no reply within Options.Timeout, a connection refused or lost,
// a reply saying Redis cannot serve now (LOADING, BUSY, MASTERDOWN,
// CLUSTERDOWN, TRYAGAIN, READONLY), or the circuit breaker open after
// Options.BreakerFailures such round trips in a row (then the error also
// wraps gobreaker.ErrOpenState, and comes at once). Check it with
// errors.Is.
//
// Source: docs/redis.md, "When Redis fails" (short timeouts, a circuit
// breaker).
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

// stats are the store's counters and its last failure.
type stats struct {
	calls, scripts, roundTrips, failures, refused atomic.Uint64
	probes, probeFailures, refusals               atomic.Uint64
	// unanswered: Redis has not answered since Open's first PING failed
	// (cleared by a round trip, a probe or the reach loop answered);
	// refusing: a refusal is noted (refusal).
	unanswered, refusing atomic.Bool
	latency              [len(limits.StoreLatencyBounds) + 1]atomic.Uint64
	latencySum           atomic.Int64 // ns

	mu        sync.Mutex
	lastErr   string
	lastErrAt time.Time
	refusal   string // the refusal now (Refusal), "" when none
	refusalAt time.Time
}

// noteFailure records a failed round trip (and a refusal, Refusal).
func (s *Store) noteFailure(err error) {
	if Refusal(err) {
		s.noteRefusal(err)
	}
	s.failures.Add(1)
	s.mu.Lock()
	s.lastErr, s.lastErrAt = err.Error(), time.Now()
	s.mu.Unlock()
}

// observe counts a round trip of d.
func (s *stats) observe(d time.Duration) {
	i := 0
	for i < len(limits.StoreLatencyBounds) && d.Seconds() > limits.StoreLatencyBounds[i] {
		i++
	}
	s.latency[i].Add(1)
	s.latencySum.Add(int64(d))
}

// Health returns the store's view of Redis now (see limits.StoreHealth
// for its fields: the nodes are the single Redis or the cluster's
// masters, the pings the probes' PINGs, Timeout is Options.Timeout). It
// is safe for concurrent use and does not contact Redis.
func (s *Store) Health() limits.StoreHealth {
	h := limits.StoreHealth{
		Calls: s.calls.Load(), Scripts: s.scripts.Load(), RoundTrips: s.roundTrips.Load(), Failures: s.failures.Load(), Refused: s.refused.Load(),
		Probes: s.probes.Load(), ProbeFailures: s.probeFailures.Load(), Timeout: s.timeout,
		Unanswered: s.unanswered.Load(), Refusals: s.refusals.Load(),
	}
	for i := range s.latency {
		h.Latency.Buckets[i] = s.latency[i].Load()
		h.Latency.Count += h.Latency.Buckets[i]
	}
	h.Latency.Sum = time.Duration(s.latencySum.Load())
	s.mu.Lock()
	h.LastError, h.LastErrorAt = s.lastErr, s.lastErrAt
	h.Refusal, h.RefusalAt = s.refusal, s.refusalAt
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
					b.st.noteAnswer()
				} else {
					b.st.probeFailures.Add(1)
					if Refusal(err) {
						b.st.noteRefusal(err)
					}
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
