package redisstore

import (
	"context"
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Batching: concurrent scripts share round trips. Each Redis node (one for
// a single Redis, one per master of a cluster) has a batcher. While a
// pipeline to the node is in flight, arriving calls queue; when it
// returns, the batcher sends up to Options.MaxBatch of the queue as the
// next pipeline. So no call waits for a timer: alone, a call goes out at
// once, as one round trip of its own; under load, a round trip carries
// every call that arrived during the previous one.
//
// The round trips run on a goroutine of the batcher (its sender, loop),
// started by the call that finds it idle and ending when the queue is
// empty: no goroutine runs between calls, and no caller runs a round trip,
// so every caller can leave when its context ends. A caller waits for its
// answer or its context, whichever comes first:
//
//   - a call whose context is done when it arrives, or when the sender
//     takes it from the queue, is not sent (it takes no tokens) and fails
//     with an error wrapping ctx.Err();
//   - a caller whose context ends while its call waits in the queue
//     leaves at once, and the call is not sent;
//   - a caller whose context ends while its call is in flight leaves at
//     once too (the outcome unknown: the script may have run), without
//     waiting for the round trip, which goes on for the others.
//
// A round trip's own context bounds it, and never outlives every caller
// in it: its deadline is the store's Timeout from its start, or, when
// every call it carries has a deadline and the latest of them comes
// sooner, that latest deadline; and it is cancelled as soon as the last
// of its callers has left. It carries the values of its first call's
// context (a trace, say), not its cancellation. A round trip cut short
// this way (by its callers, before the Timeout) says nothing about Redis:
// it is neither a failure nor a success for the circuit breaker, and the
// calls queued behind it do not fail with it.
//
// Under load (the last batch carried more than one call), the sender
// first yields the processor (runtime.Gosched), up to gatherYields times
// while the queue grows, so that callers whose goroutines are runnable
// (a gRPC handler about to call) join its batch rather than wait a round
// trip for the next one: a yield costs well under a microsecond of the
// server's CPU, a round trip Redis tens of microseconds. Under
// quota-bench (50 callers, 10 000 buckets) a round trip carried 15
// requests instead of 12.
//
// Every round trip passes the node's circuit breaker (gobreaker): after
// Options.BreakerFailures consecutive round trips that failed for want of
// Redis (see unavailable) it opens, and every call fails at once with
// ErrUnavailable, without queueing, until the breaker closes. No call
// probes Redis: opening starts the node's probe (health.go's probeLoop,
// one goroutine per open node), which every Options.BreakerProbe sends a
// PING with Options.Timeout through the breaker (half-open) and closes it
// when Redis answers. The calls queued behind a round trip that fails for
// want of Redis fail with it (they are not sent in another one): so while
// Redis hangs, no call waits longer than Options.Timeout.
//
// Source: docs/redis.md, "When Redis fails" (short timeouts, a circuit
// breaker; fail-open answers during an outage of Redis are flagged and
// arrive within 50 ms) and "Failures and what they mean" (the request's
// deadline and cancellation reach Redis).

// gatherYields bounds the leader's yields (see above).
const gatherYields = 10

// script is a Lua script sent as EVALSHA, and as EVAL when Redis answers
// NOSCRIPT (it then caches it: later EVALSHAs succeed).
type script struct {
	src string
	sha string
	// summary names it in spans: db.query.summary, "EVALSHA take".
	summary string
}

// newScript returns the script of src, called name.
func newScript(name, src string) *script {
	h := sha1.Sum([]byte(src))
	return &script{src: src, sha: hex.EncodeToString(h[:]), summary: "EVALSHA " + name}
}

// call is one script to run in a batch: a request of the take script
// (take set), which the batcher merges with the batch's other requests on
// the same resource into one script (see take.lua), a request of Envoy's
// rate limit service (rls set), merged likewise with the batch's others
// of the same domain (see rls.lua), or any other script
// (args holds its command from its third word on: numkeys, the keys, the
// arguments; the batcher puts EVALSHA and the hash, or EVAL and the
// source, in front). Calls are pooled (getCall, putCall): arguments may
// point into the call (a *string or *int64 field), which go-redis writes
// without boxing.
type call struct {
	sc   *script
	args []any // another script's: "evalsha", sha, numkeys, keys..., argv...
	cmd  *redis.Cmd
	err  error

	// A take request: its limit's arguments, its resource's key prefix
	// (its group) and dynamic set, the instant (Unix ns) of the change to
	// its limit's generation if hasAt, its dynamic flag (0/1), and res, its
	// part of the reply (four packed doubles).
	take   bool
	la     *limitArgs
	base   string
	dynKey any
	at     int64
	hasAt  bool
	dyn    int
	res    string

	// An RLS request (rls.go): its counters' keys, each once, and its
	// hits; base is its domain's hash tag, res its part of the reply.
	rls   bool
	rkeys []string
	rhits []rlsHit

	// Storage the arguments may point to, and the rest of the ask: the
	// caller's instant (Unix ns) if hasNow (else Redis TIME), tokens, min
	// and max wait (ns).
	key, member string
	nowNs       int64
	hasNow      bool
	tokens, min int64
	maxWait     int64

	// The caller's side: its context; the call's state (queued, sent,
	// done, abandoned), which the sender and the caller move on with
	// compare-and-swap, so that exactly one of them decides what becomes
	// of the call; the round trip carrying it, set before it is sent; and
	// done, which receives one send once the call is done (never for an
	// abandoned call).
	ctx   context.Context
	state atomic.Int32
	trip  *trip
	done  chan struct{}
	// span is the call's span while tracing (trace.go): the round trip
	// links it, and it links the round trip; nil otherwise.
	span trace.Span
}

// The states of a call.
const (
	// callQueued: waiting for a round trip (or not yet queued).
	callQueued int32 = iota
	// callSent: in a round trip in flight.
	callSent
	// callDone: its answer or error is set, and done receives a send.
	callDone
	// callAbandoned: its caller left (its context ended); nobody waits
	// for it, and it is not returned to the pool.
	callAbandoned
)

var callPool = sync.Pool{New: func() any {
	return &call{args: make([]any, 0, 20), done: make(chan struct{}, 1)}
}}

// The first words of the commands, boxed once.
var (
	argEvalSha any = "evalsha"
	argEval    any = "eval"
)

// getCall returns a pooled call for sc, its args holding the two words
// the batcher fills in.
func getCall(sc *script) *call {
	c := callPool.Get().(*call)
	c.sc = sc
	c.args = append(c.args[:0], argEvalSha, nil)
	return c
}

// putCall returns c to the pool, keeping nothing it referred to. An
// abandoned call is left to the garbage collector: the sender may still
// write its answer.
func putCall(c *call) {
	if c.state.Load() == callAbandoned {
		return
	}
	select { // done and never received (a test's round trip)
	case <-c.done:
	default:
	}
	c.state.Store(callQueued)
	c.ctx, c.trip, c.span = nil, nil, nil
	clear(c.args)
	c.args = c.args[:0]
	c.sc, c.cmd, c.err, c.res = nil, nil, nil, ""
	c.take, c.la, c.dynKey, c.at, c.hasAt, c.dyn, c.nowNs, c.hasNow = false, nil, nil, 0, false, 0, 0, false
	c.key, c.member, c.base = "", "", ""
	if c.rls {
		clear(c.rkeys)
		c.rls, c.rkeys, c.rhits = false, c.rkeys[:0], c.rhits[:0]
	}
	callPool.Put(c)
}

// batcher sends the calls of one Redis node in pipelines, one in flight
// at a time.
type batcher struct {
	st   *Store
	node redis.UniversalClient // *redis.Client of a cluster master, or the store's client
	addr string                // for Health and errors
	peer []attribute.KeyValue  // server.address and server.port, while tracing

	brk     *gobreaker.TwoStepCircuitBreaker[struct{}]
	state   atomic.Int32 // the breaker's state (gobreaker.State), mirrored
	probing atomic.Bool  // the node's probe runs (see probeLoop)

	mu    sync.Mutex
	busy  bool    // the sender runs: calls queue for it
	last  int     // the number of calls of the last batch
	queue []*call // waiting for the next pipeline
	spare []*call // the previous batch's slice, for reuse

	// The sender's scratch (one round trip in flight at a time).
	cmds  []*command
	group map[string]*command // take commands by resource, while building
	keyIx map[string]int      // a take command's bucket keys, while building
	asks  []*call             // a take command's asks, while building
}

// command is one script of a round trip and the calls it answers: a take
// command answers every take request of the batch on one resource (four
// values each, in order), an RLS command every RLS request of the batch
// on one domain (in order), another one its one call.
type command struct {
	sc     *script
	args   []any
	cmd    *redis.Cmd
	calls  []*call
	limits []*limitArgs // a take command's limits, in ARGV order
	take   bool
	rls    bool
}

// newBatcher returns the batcher of node (addr names it).
func (s *Store) newBatcher(node redis.UniversalClient, addr string) *batcher {
	b := &batcher{st: s, node: node, addr: addr}
	if s.tracer != nil {
		b.peer = peerAttrs(addr)
	}
	b.brk = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        addr,
		MaxRequests: 1,
		Timeout:     s.probe,
		ReadyToTrip: func(n gobreaker.Counts) bool { return n.ConsecutiveFailures >= s.failuresToOpen },
		// A round trip its callers cut short says nothing about Redis.
		IsExcluded: func(err error) bool { return errors.Is(err, errCallersLeft) },
		OnStateChange: func(_ string, _, to gobreaker.State) {
			// Mirror first: a probe that is ending reads it after
			// clearing probing (see probeLoop).
			b.state.Store(int32(to))
			if to == gobreaker.StateOpen && b.probing.CompareAndSwap(false, true) {
				s.startProbe(b)
			}
		},
	})
	return b
}

// batcherFor returns the batcher of the node holding key (on a cluster,
// ctx bounds loading the cluster's slots, when the client must).
func (s *Store) batcherFor(ctx context.Context, key string) (*batcher, error) {
	if s.cluster == nil {
		return s.single, nil
	}
	node, err := s.cluster.MasterForKey(ctx, key)
	if err != nil {
		return nil, err
	}
	if b, ok := s.nodes.Load(node); ok {
		return b.(*batcher), nil
	}
	b, _ := s.nodes.LoadOrStore(node, s.newBatcher(node, node.Options().Addr))
	return b.(*batcher), nil
}

// run runs c on the node holding key, sharing a round trip with the
// calls that queue meanwhile, and returns c's error (c.cmd holds the
// reply) once c is done, or as soon as ctx ends (see above: the error
// then wraps ctx.Err(), and c is abandoned: putCall leaves it). Errors
// that mean Redis cannot be reached wrap ErrUnavailable.
func (s *Store) run(ctx context.Context, key string, c *call) (err error) {
	if err := ctx.Err(); err != nil {
		return notSent(err)
	}
	if s.tracer != nil {
		var span trace.Span
		if ctx, span = s.startCall(ctx, c); span != nil {
			defer func() { endSpan(span, err) }()
		}
	}
	b, err := s.batcherFor(ctx, key)
	if err != nil {
		if err := ctx.Err(); err != nil {
			return notSent(err)
		}
		s.noteFailure(err)
		return unavailableError(err)
	}
	if c.span != nil {
		c.span.SetAttributes(b.peer...)
	}
	return b.do(ctx, c)
}

// notSent is the error of a call not sent because its context ended
// (err is ctx.Err()): it did nothing.
func notSent(err error) error {
	return fmt.Errorf("limits/redis: the request's context ended before it was sent (nothing done): %w", err)
}

// leftInFlight is the error of a call whose caller left while its round
// trip was in flight (err is ctx.Err()): its outcome is unknown.
func leftInFlight(err error) error {
	return fmt.Errorf("limits/redis: the request's context ended during its round trip (outcome unknown): %w", err)
}

// errCallersLeft is what a round trip cut short by its callers (their
// deadlines, or all of them gone) reports to the breaker: excluded, it
// counts neither as a failure nor as a success.
var errCallersLeft = errors.New("limits/redis: the round trip's callers left")

// do queues c (whose context is ctx) for the sender, starting the sender
// if idle, and waits until c is done or ctx ends.
func (b *batcher) do(ctx context.Context, c *call) error {
	if gobreaker.State(b.state.Load()) != gobreaker.StateClosed {
		// Fail at once while the breaker is open, and while the probe
		// tests Redis (half-open): only the probe closes it.
		b.st.refused.Add(1)
		return errBreakerOpen
	}
	c.ctx = ctx
	b.mu.Lock()
	b.queue = append(b.queue, c)
	idle := !b.busy
	b.busy = true
	b.mu.Unlock()
	if idle {
		go b.loop()
	}
	select {
	case <-c.done:
		if c.err == errCutShort {
			// Its deadline has come (the connection's read deadline may
			// fire before ctx's timer): the error wraps ctx.Err(), which
			// is set by the time the caller sees it.
			<-ctx.Done()
			return leftInFlight(ctx.Err())
		}
		return c.err
	case <-ctx.Done():
	}
	switch {
	case c.state.CompareAndSwap(callQueued, callAbandoned):
		return notSent(ctx.Err())
	case c.state.CompareAndSwap(callSent, callAbandoned):
		c.trip.leave()
		return leftInFlight(ctx.Err())
	}
	<-c.done // done meanwhile: its answer is in
	if c.err == errCutShort {
		return leftInFlight(ctx.Err())
	}
	return c.err
}

// loop is the sender: it sends the queue in pipelines, one at a time,
// until the queue is empty.
func (b *batcher) loop() {
	b.mu.Lock()
	for {
		// Under load, the calls whose goroutines are runnable join first.
		for i := 0; i < gatherYields && b.last > 1 && len(b.queue) < b.st.maxBatch; i++ {
			n0 := len(b.queue)
			b.mu.Unlock()
			runtime.Gosched()
			b.mu.Lock()
			if len(b.queue) == n0 {
				break
			}
		}
		n := min(len(b.queue), b.st.maxBatch)
		if n == 0 {
			b.busy = false
			b.mu.Unlock()
			return
		}
		b.last = n
		batch := append(b.spare[:0], b.queue[:n]...)
		b.spare = nil
		b.queue = b.queue[:copy(b.queue, b.queue[n:])]
		b.mu.Unlock()

		var down error
		if t, sent := b.start(batch); t != nil {
			down = b.roundTrip(t, sent)
			t.cancel()
			finish(sent)
		}

		b.mu.Lock()
		clear(batch)
		b.spare = batch[:0]
		if down != nil && len(b.queue) > 0 {
			// Redis did not answer: the calls that queued meanwhile have
			// waited for it already, and fail with it rather than wait for
			// a round trip of their own (which would most likely time out
			// too).
			failed := slices.Clone(b.queue)
			clear(b.queue)
			b.queue = b.queue[:0]
			b.mu.Unlock()
			for _, x := range failed {
				x.err = down
				if finish1(x, callQueued) {
					b.st.refused.Add(1)
				}
			}
			b.mu.Lock()
		}
	}
}

// finish hands the calls of a round trip their answers: each one still
// sent becomes done (an abandoned one is left alone).
func finish(sent []*call) {
	for _, c := range sent {
		finish1(c, callSent)
	}
}

// finish1 makes c, in state from, done, unless its caller left, and
// reports whether it did.
func finish1(c *call, from int32) bool {
	if !c.state.CompareAndSwap(from, callDone) {
		return false
	}
	c.done <- struct{}{}
	return true
}

// trip is one round trip: its context and the callers waiting for it.
type trip struct {
	ctx    context.Context
	cancel context.CancelFunc
	// bound reports that ctx's deadline is its callers' (every call has
	// a deadline, and the latest comes before the Timeout).
	bound    bool
	deadline time.Time

	mu   sync.Mutex
	live int  // callers waiting for it
	gone bool // every caller left: ctx is cancelled
}

// leave is called by a caller that leaves the round trip in flight: the
// last one to leave cancels it.
func (t *trip) leave() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.live--; t.live == 0 {
		t.gone = true
		t.cancel()
	}
}

// cutShort reports whether the round trip, which failed, ended for want
// of its callers: its deadline, theirs, has come (the connection's read
// deadline may fire before ctx's timer), or all of them left.
func (t *trip) cutShort() bool {
	if t.bound && !time.Now().Before(t.deadline) {
		return true
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.gone
}

// errCutShort marks the calls of a round trip cut short by its callers:
// do returns leftInFlight once the call's context is done.
var errCutShort = errors.New("limits/redis: the round trip was cut short by its callers")

// start begins the round trip of batch: the calls whose context is done
// become done with notSent, those whose caller left are dropped, and the
// others are sent. It returns the round trip and its calls, or nil when
// there is none to send. The round trip's context ends at the Timeout, or
// at its callers' latest deadline when every one has a deadline and the
// latest comes sooner, or when every caller has left.
func (b *batcher) start(batch []*call) (*trip, []*call) {
	t := &trip{}
	t.mu.Lock() // until ctx and live are set: callers leaving wait
	defer t.mu.Unlock()
	sent := batch[:0]
	var latest time.Time
	all := true
	for _, c := range batch {
		if err := c.ctx.Err(); err != nil {
			c.err = notSent(err)
			finish1(c, callQueued)
			continue
		}
		c.trip = t
		if !c.state.CompareAndSwap(callQueued, callSent) {
			continue // abandoned
		}
		sent = append(sent, c)
		if d, ok := c.ctx.Deadline(); !ok {
			all = false
		} else if d.After(latest) {
			latest = d
		}
	}
	if len(sent) == 0 {
		return nil, nil
	}
	deadline := time.Now().Add(b.st.timeout)
	if all && latest.Before(deadline) {
		deadline, t.bound = latest, true
	}
	t.deadline = deadline
	t.ctx, t.cancel = context.WithDeadline(context.WithoutCancel(sent[0].ctx), deadline)
	t.live = len(sent)
	return t, sent
}

// roundTrip sends batch as one pipeline through the breaker, under t's
// context, and sets every call's cmd and err. It returns nil when Redis
// answered (even with errors of single scripts), or when the round trip
// was cut short by its callers, else the error for the calls queued
// meanwhile (wrapping ErrUnavailable): Redis could not answer, or the
// breaker refused the batch.
func (b *batcher) roundTrip(t *trip, batch []*call) error {
	if gobreaker.State(b.state.Load()) != gobreaker.StateClosed {
		// Open since this batch queued: fail it without asking the
		// breaker, which would let the batch probe once the open period
		// is over (only the node's probe does that).
		return b.refuse(batch)
	}
	done, err := b.brk.Allow()
	if err != nil { // opened meanwhile
		return b.refuse(batch)
	}
	b.st.calls.Add(uint64(len(batch)))
	ctx, span := t.ctx, trace.Span(nil)
	if b.st.tracer != nil {
		ctx, span = b.startTrip(ctx, batch)
	}
	start := time.Now()
	err = b.exec(ctx, batch)
	d := time.Since(start)
	if span != nil {
		endSpan(span, err)
	}
	if err != nil && t.cutShort() {
		// Not Redis's failure: the calls fail with their contexts.
		done(errCallersLeft)
		for _, c := range batch {
			if c.err != nil {
				c.err = errCutShort
			}
		}
		err = nil
	} else {
		done(err)
		if err == nil {
			b.st.noteAnswer()
		}
	}
	b.st.stats.observe(d)
	if err != nil {
		b.st.noteFailure(err)
	}
	if b.st.observe != nil {
		b.st.observe("batch", d, err)
	}
	if err != nil {
		return &storeError{err: fmt.Errorf("queued behind a round trip that failed: %w", err), down: true}
	}
	return nil
}

// refuse fails batch at once, the breaker being open, and returns the
// error.
func (b *batcher) refuse(batch []*call) error {
	for _, c := range batch {
		c.err = errBreakerOpen
	}
	b.st.refused.Add(uint64(len(batch)))
	return errBreakerOpen
}

// exec runs batch as one pipeline (commands), then, in a second round
// trip, EVAL for the scripts Redis did not have (NOSCRIPT), and, on a
// cluster, the commands redirected (MOVED, ASK) through the cluster
// client. It returns the first error that means Redis cannot be reached
// (see unavailable), nil when Redis answered, even with errors of single
// scripts.
func (b *batcher) exec(ctx context.Context, batch []*call) error {
	cmds := b.commands(batch)
	defer b.release(cmds)
	b.send(ctx, cmds, false)
	var noScript, moved []*command
	var down error
	for _, m := range cmds {
		switch err := m.cmd.Err(); {
		case err == nil:
		case unavailable(err):
			if down == nil {
				down = err
			}
		case redis.HasErrorPrefix(err, "NOSCRIPT"):
			noScript = append(noScript, m)
		case b.st.cluster != nil && isRedirect(err):
			moved = append(moved, m)
		}
	}
	if len(noScript) > 0 && down == nil {
		b.send(ctx, noScript, true)
		for _, m := range noScript {
			if err := m.cmd.Err(); unavailable(err) && down == nil {
				down = err
			}
		}
	}
	for _, m := range moved {
		// The cluster client follows the redirection (and reloads its
		// slots).
		b.st.roundTrips.Add(1)
		b.st.scripts.Add(1)
		m.cmd = evalCmd(ctx, m, false)
		if err := b.st.cluster.Process(ctx, m.cmd); redis.HasErrorPrefix(err, "NOSCRIPT") {
			b.st.roundTrips.Add(1)
			b.st.scripts.Add(1)
			m.cmd = evalCmd(ctx, m, true)
			_ = b.st.cluster.Process(ctx, m.cmd)
		}
	}
	for _, m := range cmds {
		m.answer()
	}
	return down
}

// answer hands m's reply, or its error, to its calls.
func (m *command) answer() {
	if err := m.cmd.Err(); err != nil {
		err = scriptError(err)
		for _, c := range m.calls {
			c.err = err
		}
		return
	}
	if m.rls {
		m.answerRLS()
		return
	}
	if !m.take {
		m.calls[0].cmd = m.cmd
		return
	}
	v, ok := m.cmd.Val().(string)
	if !ok || len(v) != takeReply*len(m.calls) {
		err := fmt.Errorf("limits/redis: take: reply %T of %d bytes for %d requests", m.cmd.Val(), len(v), len(m.calls))
		for _, c := range m.calls {
			c.err = err
		}
		return
	}
	for i, c := range m.calls {
		c.res = v[takeReply*i : takeReply*(i+1)]
	}
}

// commands returns batch's commands: one per resource for the take
// requests and one per domain for the RLS requests (in batch order within
// each), one per other call.
func (b *batcher) commands(batch []*call) []*command {
	cmds := b.cmds[:0]
	if b.group == nil {
		b.group, b.keyIx = map[string]*command{}, map[string]int{}
	}
	for _, c := range batch {
		if !c.take && !c.rls {
			cmds = append(cmds, &command{sc: c.sc, args: c.args, calls: []*call{c}})
			continue
		}
		// (A resource's base, "{r…}", and a domain's tag, "{e…}", never
		// meet.)
		m := b.group[c.base]
		if m == nil {
			m = &command{sc: c.sc, take: c.take, rls: c.rls}
			b.group[c.base] = m
			cmds = append(cmds, m)
		}
		m.calls = append(m.calls, c)
	}
	clear(b.group)
	for _, m := range cmds {
		switch {
		case m.take:
			m.args = b.takeArgs(m)
		case m.rls:
			m.args = b.rlsArgs(m)
		}
	}
	b.cmds = cmds
	return cmds
}

// release forgets the round trip's commands.
func (b *batcher) release(cmds []*command) {
	clear(cmds)
	b.cmds = cmds[:0]
}

// takeArgs builds a take command (see take.lua): its bucket keys each
// once; the numbers of its limits and its asks (the requests' limit,
// tokens, min, max wait, dynamic flag and now), each limit and ask once,
// packed into one string; each limit's two stored configurations; then
// its requests as pairs of a bucket and an ask, packed into one string.
// In the common case of many requests under one limit, a request is its
// key and four bytes, and a round trip has four arguments more: Redis
// makes a Lua string of every argument, and the script would parse every
// number.
func (b *batcher) takeArgs(m *command) []any {
	clear(b.keyIx)
	var keys []*call // the first call of each bucket
	asks := b.asks[:0]
	for _, c := range m.calls {
		if _, ok := b.keyIx[c.key]; !ok {
			b.keyIx[c.key] = len(keys) + 2
			keys = append(keys, c)
		}
		if !slices.Contains(m.limits, c.la) {
			m.limits = append(m.limits, c.la)
		}
		if !slices.ContainsFunc(asks, c.sameAsk) {
			asks = append(asks, c)
		}
	}
	args := make([]any, 0, 4+len(keys)+1+2*len(m.limits)+1)
	args = append(args, argEvalSha, nil, 1+len(keys), m.calls[0].dynKey)
	for _, c := range keys {
		args = append(args, &c.key)
	}
	nums := make([]byte, 0, 8*(3+takeLimitNums*len(m.limits)+takeAskNums*len(asks)))
	nums = appendDoubles(nums, float64(len(m.limits)), float64(len(asks)), float64(len(m.calls[0].base)+3))
	for _, la := range m.limits {
		var at int64
		var hasAt bool
		for _, c := range m.calls { // the change instant of la's generation
			if c.la == la {
				at, hasAt = c.at, c.hasAt
				break
			}
		}
		atHi, atLo := splitNs(at)
		nums = appendDoubles(append(nums, la.nums...), float64(b2i(hasAt)), atHi, atLo)
	}
	for _, c := range asks {
		nowHi, nowLo := splitNs(c.nowNs)
		nums = appendDoubles(nums, float64(slices.Index(m.limits, c.la)+1), float64(c.tokens), float64(c.min), float64(c.maxWait),
			float64(c.dyn), float64(b2i(c.hasNow)), nowHi, nowLo)
	}
	args = append(args, nums)
	for _, la := range m.limits {
		args = append(args, &la.config[0], &la.config[1])
	}
	reqs := make([]byte, 0, 4*len(m.calls))
	for _, c := range m.calls { // indexes below 2^16: see maxBatchLimit
		reqs = binary.BigEndian.AppendUint16(reqs, uint16(b.keyIx[c.key]))
		reqs = binary.BigEndian.AppendUint16(reqs, uint16(slices.IndexFunc(asks, c.sameAsk)+1))
	}
	args = append(args, reqs)
	clear(asks)
	b.asks = asks[:0]
	return args
}

// The numbers of a limit and of an ask in a take command (see take.lua).
const (
	takeLimitNums = 9
	takeAskNums   = 8
)

// appendDoubles appends vs to b as little-endian IEEE doubles (take.lua
// reads them with struct.unpack).
func appendDoubles(b []byte, vs ...float64) []byte {
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
	}
	return b
}

// splitNs returns the instant ns (Unix ns) split as take.lua takes and
// stores instants: seconds and nanoseconds, both truncated toward zero
// (so of ns's sign), each exact as a double.
func splitNs(ns int64) (float64, float64) {
	return float64(ns / 1e9), float64(ns % 1e9)
}

// sameAsk reports whether c and d ask alike: the same limit, tokens, min,
// max wait, dynamic flag and now.
func (c *call) sameAsk(d *call) bool {
	return c.la == d.la && c.tokens == d.tokens && c.min == d.min && c.maxWait == d.maxWait && c.dyn == d.dyn &&
		c.hasNow == d.hasNow && c.nowNs == d.nowNs
}

// send runs cmds as one pipeline of EVALSHA (EVAL with eval).
func (b *batcher) send(ctx context.Context, cmds []*command, eval bool) {
	pipe := b.node.Pipeline()
	for _, m := range cmds {
		m.cmd = evalCmd(ctx, m, eval)
		_ = pipe.Process(ctx, m.cmd)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		// Each cmd holds its error, except when the pipeline never
		// reached Redis on a connection: go-redis returns that error
		// (a connection's AUTH refused, say) without setting it on the
		// commands, which hold no reply (a nil reply is redis.Nil).
		for _, m := range cmds {
			if m.cmd.Err() == nil && m.cmd.Val() == nil {
				m.cmd.SetErr(err)
			}
		}
	}
	b.st.roundTrips.Add(1)
	b.st.scripts.Add(uint64(len(cmds)))
}

// evalCmd returns m's command: EVALSHA, or EVAL with eval.
func evalCmd(ctx context.Context, m *command, eval bool) *redis.Cmd {
	if eval {
		m.args[0], m.args[1] = argEval, &m.sc.src
	} else {
		m.args[0], m.args[1] = argEvalSha, &m.sc.sha
	}
	return redis.NewCmd(ctx, m.args...)
}

// isRedirect reports a MOVED or ASK reply.
func isRedirect(err error) bool {
	if _, ok := redis.IsMovedError(err); ok {
		return true
	}
	_, ok := redis.IsAskError(err)
	return ok
}

// unavailable reports whether err means that Redis cannot answer now
// (the round trip counts as a failure for the breaker): no reply at all
// (connection refused or lost, a timeout, a closed client), or a reply
// saying Redis cannot serve (LOADING, BUSY, MASTERDOWN, CLUSTERDOWN,
// TRYAGAIN, READONLY after a failover), or a refusal of this client's
// credentials (Refusal: WRONGPASS, NOAUTH, a TLS handshake refused). A
// script's own error is a reply: Redis is up.
func unavailable(err error) bool {
	if err == nil {
		return false
	}
	var re redis.Error
	if !errors.As(err, &re) {
		return true
	}
	msg := re.Error()
	if authRefusal(msg) {
		return true // Redis serves, but not this client: see Refusal
	}
	for _, p := range unavailablePrefixes {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

var unavailablePrefixes = []string{"LOADING", "BUSY ", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "READONLY"}

// scriptError wraps a script's error for Take: in ErrUnavailable when
// Redis could not answer.
func scriptError(err error) error {
	if unavailable(err) {
		return unavailableError(err)
	}
	return &storeError{err: err}
}

// unavailableError wraps err in ErrUnavailable.
func unavailableError(err error) error { return &storeError{err: err, down: true} }

// storeError is a store's error: "limits/redis: " and the cause, which
// it wraps, with ErrUnavailable when Redis could not answer.
type storeError struct {
	err  error
	down bool
}

func (e *storeError) Error() string {
	if e.down {
		return "limits/redis: Redis unavailable: " + e.err.Error()
	}
	return "limits/redis: " + e.err.Error()
}

func (e *storeError) Unwrap() []error {
	if e.down {
		return []error{ErrUnavailable, e.err}
	}
	return []error{e.err}
}

// errBreakerOpen answers the calls refused by an open breaker.
var errBreakerOpen error = &storeError{err: gobreaker.ErrOpenState, down: true}

// eval runs sc over keys (one slot: keys[0] picks the node) and args as
// Take runs its script: sharing round trips, through the breaker, with
// Options.Timeout and ctx (the caller's). It returns the reply's command
// (nil with an error); errors are as Take's (ErrUnavailable when Redis
// could not answer, ctx.Err() wrapped when ctx ended). For the scripts of
// the request path other than Take's (TakeHits, CopyLog's).
func (s *Store) eval(ctx context.Context, sc *script, keys []string, args ...any) (*redis.Cmd, error) {
	c := getCall(sc)
	c.args = append(c.args, len(keys))
	for _, k := range keys {
		c.args = append(c.args, k)
	}
	c.args = append(c.args, args...)
	if err := s.run(ctx, keys[0], c); err != nil {
		putCall(c) // (an abandoned call is not read: the sender may still write it)
		return nil, err
	}
	cmd := c.cmd
	putCall(c)
	return cmd, nil
}
