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
)

// Batching: concurrent scripts share round trips. Each Redis node (one for
// a single Redis, one per master of a cluster) has a batcher. While a
// pipeline to the node is in flight, arriving calls queue; when it
// returns, its leader (the call that sent it) hands the queue to its first
// call, which sends up to Options.MaxBatch of it as the next pipeline. So
// no call waits for a timer: alone, a call goes out at once, as one round
// trip of its own; under load, a round trip carries every call that
// arrived during the previous one. No goroutine runs between calls: the
// leader is always a caller.
//
// Under load (the last batch carried more than one call), the leader
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
// want of Redis fail with it (they do not lead another one): so while
// Redis hangs, no call waits longer than Options.Timeout.
//
// Source: issue 15, "Redis trouble" (short timeouts, a circuit breaker;
// "fail-open answers during an outage of Redis are flagged and arrive
// within 50 ms").

// gatherYields bounds the leader's yields (see above).
const gatherYields = 10

// script is a Lua script sent as EVALSHA, and as EVAL when Redis answers
// NOSCRIPT (it then caches it: later EVALSHAs succeed).
type script struct {
	src string
	sha string
}

// newScript returns the script of src.
func newScript(src string) *script {
	h := sha1.Sum([]byte(src))
	return &script{src: src, sha: hex.EncodeToString(h[:])}
}

// call is one script to run in a batch: a request of the take script
// (take set), which the batcher merges with the batch's other requests on
// the same resource into one script (see take.lua), or any other script
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

	// Storage the arguments may point to, and the rest of the ask: the
	// caller's instant (Unix ns) if hasNow (else Redis TIME), tokens, min
	// and max wait (ns).
	key, member string
	nowNs       int64
	hasNow      bool
	tokens, min int64
	maxWait     int64

	lead bool          // handed the lead of the next batch
	done chan struct{} // one send: the result is in, or lead
}

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

// putCall returns c to the pool, keeping nothing it referred to.
func putCall(c *call) {
	clear(c.args)
	c.args = c.args[:0]
	c.sc, c.cmd, c.err, c.res = nil, nil, nil, ""
	c.take, c.la, c.dynKey, c.at, c.hasAt, c.dyn, c.nowNs, c.hasNow = false, nil, nil, 0, false, 0, 0, false
	c.key, c.member, c.base = "", "", ""
	callPool.Put(c)
}

// batcher sends the calls of one Redis node in pipelines, one in flight
// at a time.
type batcher struct {
	st   *Store
	node redis.UniversalClient // *redis.Client of a cluster master, or the store's client
	addr string                // for Health and errors

	brk     *gobreaker.TwoStepCircuitBreaker[struct{}]
	state   atomic.Int32 // the breaker's state (gobreaker.State), mirrored
	probing atomic.Bool  // the node's probe runs (see probeLoop)

	mu    sync.Mutex
	busy  bool    // a pipeline is in flight: calls queue
	last  int     // the number of calls of the last batch
	queue []*call // waiting for the next pipeline
	spare []*call // the previous batch's slice, for reuse

	// The leader's scratch (one round trip in flight at a time).
	cmds  []*command
	group map[string]*command // take commands by resource, while building
	keyIx map[string]int      // a take command's bucket keys, while building
	asks  []*call             // a take command's asks, while building
}

// command is one script of a round trip and the calls it answers: a take
// command answers every take request of the batch on one resource (four
// values each, in order), another one its one call.
type command struct {
	sc     *script
	args   []any
	cmd    *redis.Cmd
	calls  []*call
	limits []*limitArgs // a take command's limits, in ARGV order
	take   bool
}

// newBatcher returns the batcher of node (addr names it).
func (s *Store) newBatcher(node redis.UniversalClient, addr string) *batcher {
	b := &batcher{st: s, node: node, addr: addr}
	b.brk = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        addr,
		MaxRequests: 1,
		Timeout:     s.probe,
		ReadyToTrip: func(n gobreaker.Counts) bool { return n.ConsecutiveFailures >= s.failuresToOpen },
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

// batcherFor returns the batcher of the node holding key.
func (s *Store) batcherFor(key string) (*batcher, error) {
	if s.cluster == nil {
		return s.single, nil
	}
	node, err := s.cluster.MasterForKey(context.Background(), key)
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
// reply). Errors that mean Redis cannot be reached wrap ErrUnavailable.
func (s *Store) run(key string, c *call) error {
	b, err := s.batcherFor(key)
	if err != nil {
		s.noteFailure(err)
		return unavailableError(err)
	}
	b.do(c)
	return c.err
}

// do runs c in a batch: it queues c while a pipeline is in flight, or
// leads the next one.
func (b *batcher) do(c *call) {
	if gobreaker.State(b.state.Load()) != gobreaker.StateClosed {
		// Fail at once while the breaker is open, and while the probe
		// tests Redis (half-open): only the probe closes it.
		c.err = errBreakerOpen
		b.st.refused.Add(1)
		return
	}
	b.mu.Lock()
	if b.busy {
		b.queue = append(b.queue, c)
		b.mu.Unlock()
		<-c.done
		if !c.lead {
			return
		}
		c.lead = false
		b.mu.Lock()
	} else {
		b.busy = true
		b.queue = append(b.queue, c)
	}
	// c leads: it is b.queue[0] (queued first, or handed the lead). Under
	// load, the calls whose goroutines are runnable join first.
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
	b.last = n
	batch := append(b.spare[:0], b.queue[:n]...)
	b.spare = nil
	b.queue = b.queue[:copy(b.queue, b.queue[n:])]
	b.mu.Unlock()

	down := b.roundTrip(batch)
	for _, x := range batch[1:] {
		x.done <- struct{}{}
	}

	b.mu.Lock()
	clear(batch)
	b.spare = batch[:0]
	var next *call
	var failed []*call
	switch {
	case len(b.queue) == 0:
		b.busy = false
	case down != nil:
		// Redis did not answer: the calls that queued meanwhile have
		// waited for it already, and fail with it rather than wait for a
		// round trip of their own (which would most likely time out too).
		failed = slices.Clone(b.queue)
		clear(b.queue)
		b.queue = b.queue[:0]
		b.busy = false
	default:
		next = b.queue[0]
		next.lead = true
	}
	b.mu.Unlock()
	if next != nil {
		next.done <- struct{}{}
	}
	if failed != nil {
		b.st.refused.Add(uint64(len(failed)))
		for _, x := range failed {
			x.err = down
			x.done <- struct{}{}
		}
	}
}

// roundTrip sends batch as one pipeline through the breaker and sets
// every call's cmd and err. It returns nil when Redis answered (even
// with errors of single scripts), else the error for the calls queued
// meanwhile (wrapping ErrUnavailable): Redis could not answer, or the
// breaker refused the batch.
func (b *batcher) roundTrip(batch []*call) error {
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
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), b.st.timeout)
	err = b.exec(ctx, batch)
	cancel()
	d := time.Since(start)
	done(err)
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
// requests (in batch order within each), one per other call.
func (b *batcher) commands(batch []*call) []*command {
	cmds := b.cmds[:0]
	if b.group == nil {
		b.group, b.keyIx = map[string]*command{}, map[string]int{}
	}
	for _, c := range batch {
		if !c.take {
			cmds = append(cmds, &command{sc: c.sc, args: c.args, calls: []*call{c}})
			continue
		}
		m := b.group[c.base]
		if m == nil {
			m = &command{sc: c.sc, take: true}
			b.group[c.base] = m
			cmds = append(cmds, m)
		}
		m.calls = append(m.calls, c)
	}
	clear(b.group)
	for _, m := range cmds {
		if m.take {
			m.args = b.takeArgs(m)
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
	_, _ = pipe.Exec(ctx) // each cmd holds its error
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
// TRYAGAIN, READONLY after a failover). A script's own error is a reply:
// Redis is up.
func unavailable(err error) bool {
	if err == nil {
		return false
	}
	var re redis.Error
	if !errors.As(err, &re) {
		return true
	}
	msg := re.Error()
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
// Options.Timeout. It returns the reply's command (nil with an error);
// errors are as Take's (ErrUnavailable when Redis could not answer). For
// the scripts of the request path other than Take's (TakeHits).
func (s *Store) eval(sc *script, keys []string, args ...any) (*redis.Cmd, error) {
	c := getCall(sc)
	c.args = append(c.args, len(keys))
	for _, k := range keys {
		c.args = append(c.args, k)
	}
	c.args = append(c.args, args...)
	err := s.run(keys[0], c)
	cmd := c.cmd
	putCall(c)
	if err != nil {
		return nil, err
	}
	return cmd, nil
}
