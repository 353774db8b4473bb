package redisstore

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"
	"go.uber.org/goleak"

	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/internal/testutil/redistest"
	"github.com/sluice-rl/sluice/limits"
)

// pausedRedis starts a redis-server of the test's own, a client of it as
// sluice server makes one (context deadlines honoured, no retries), and
// checks at the end of the test that no goroutine the test started is
// left (the store's probes included; the caller closes the store). The
// server is resumed before it is stopped.
func pausedRedis(t *testing.T) (*redistest.Server, *redis.Client) {
	t.Helper()
	leaks := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, leaks) }) // runs last
	srv, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Resume(); srv.Stop() })
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { c.Close() })
	return srv, c
}

// probeGoroutines counts the goroutines running a probe of st's
// breakers: the store's count, checked against the goroutines' stacks
// (which also hold other tests' stores' probes, so at least as many). A
// probe's goroutine that has not run yet shows startProbe's wrapper of
// the go statement (startProbe.gowrap1), not probeLoop.
func probeGoroutines(t *testing.T, st *Store) int {
	t.Helper()
	buf := make([]byte, 1<<20)
	n := runtime.Stack(buf, true)
	stacks := string(buf[:n])
	all := strings.Count(stacks, "(*batcher).probeLoop(") + strings.Count(stacks, "(*Store).startProbe.gowrap")
	if r := int(st.running.Load()); r > all {
		t.Fatalf("the store counts %d probes, the stacks show %d", r, all)
	}
	return int(st.running.Load())
}

// bigLimit is a token bucket no test here empties.
var bigLimit = &limits.Limit{Resource: "r", Kind: limits.KindTemplate, Algorithm: limits.TokenBucket,
	Bucket: limits.Bucket{Size: 1e9, FillRate: 1e6}, Params: limits.Bucket{Size: 1e9, FillRate: 1e6}.Params(), Gen: 1}

// take is one Take of a token of bigLimit, and how long it took.
func take(st *Store, domain string) (time.Duration, error) {
	start := time.Now()
	_, err := st.Take(context.Background(), time.Now().UnixNano(), limits.Key{Resource: "r", Domain: domain}, bigLimit, limits.Ask{Tokens: 1, Min: 1})
	return time.Since(start), err
}

// TestBreakerProbeOffRequestPath: Redis hangs (SIGSTOP). Concurrent Takes
// all fail with the round trip in flight (the queued ones do not lead
// round trips of their own: one failure, none waits twice the Timeout);
// after BreakerFailures failed round trips the breaker opens and, for
// several probe periods, every Take fails at once while the node's probe
// PINGs Redis in the background (no call carries the probe, which would
// take the Timeout: 2 s); a fail-open resource is granted, degraded.
// Once Redis continues, the probe closes the breaker, Takes succeed
// again, and the probe ends.
func TestBreakerProbeOffRequestPath(t *testing.T) {
	srv, c := pausedRedis(t)
	const timeout, probe = 2 * time.Second, 100 * time.Millisecond
	st := New(c, Options{Prefix: prefix(t), Timeout: timeout, BreakerFailures: 2, BreakerProbe: probe})
	defer st.Close()
	if _, err := take(st, "d"); err != nil {
		t.Fatalf("Redis up: %v", err)
	}

	srv.Pause()
	// Twenty calls at once: one leads a round trip, the others queue
	// behind it and fail with it.
	var wg sync.WaitGroup
	start := make(chan struct{})
	took := make([]time.Duration, 20)
	errs := make([]error, 20)
	for i := range took {
		wg.Go(func() {
			<-start
			took[i], errs[i] = take(st, "d")
		})
	}
	close(start)
	wg.Wait()
	for i := range took {
		if !errors.Is(errs[i], ErrUnavailable) || took[i] > timeout*3/2 {
			t.Fatalf("call %d with Redis paused: %v after %v, want ErrUnavailable within about the timeout (%v)", i, errs[i], took[i], timeout)
		}
	}
	// (The round trip carries the calls that queued before it left: at
	// least its leader; the others are refused.)
	if h := st.Health(); h.Failures != 1 || h.Calls+h.Refused != 1+20 || h.State != "up" {
		t.Fatalf("20 calls during one failed round trip: %+v, want 1 failure, the queued calls refused, the breaker closed", h)
	}
	// The second failed round trip opens the breaker.
	if d, err := take(st, "d"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Redis paused: %v after %v", err, d)
	}
	h := st.Health()
	if h.State != "down" || h.Failures != 2 {
		t.Fatalf("after 2 failed round trips: %+v, want down", h)
	}

	// Three probe periods and more (a probe's PING waits the 2 s timeout
	// in the middle): every call fails at once, none sends anything.
	cfg := &limits.Config{Resources: map[string]*limits.Resource{"open": {Default: &limits.Bucket{Size: 1, FillRate: 0.001}, OnStoreError: limits.FailOpen}}}
	e, err := limits.New(cfg, limits.Options{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	n, worst := 0, time.Duration(0)
	for opened := time.Now(); time.Since(opened) < 6*probe || n < 20; n++ {
		d, err := take(st, "d")
		if !errors.Is(err, ErrUnavailable) || !errors.Is(err, gobreaker.ErrOpenState) || d > time.Second {
			t.Fatalf("call %d, breaker open: %v after %v, want ErrUnavailable (open) at once", n, err, d)
		}
		worst = max(worst, d)
		if dec := e.Allow(t.Context(), time.Now(), limits.Request{Resource: "open", Domain: "x"}); dec.Status != limits.StatusOK || !dec.Degraded {
			t.Fatalf("fail-open resource, breaker open: %+v", dec)
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("%d Takes with the breaker open: the slowest took %v", n, worst)
	testutil.Eventually(t, 10*time.Second, "the probe PINGs the paused Redis", func() bool { return st.Health().Probes > 0 })
	if h2 := st.Health(); h2.RoundTrips != h.RoundTrips || h2.Calls != h.Calls || h2.Failures != h.Failures {
		t.Fatalf("breaker open: %+v (when it opened %+v), want no round trip", h2, h)
	}
	if g := probeGoroutines(t, st); g != 1 {
		t.Fatalf("%d probe goroutines for one open node, want 1", g)
	}

	srv.Resume()
	back := testutil.Eventually(t, 20*time.Second, "Takes succeed once Redis continues", func() bool {
		_, err := take(st, "d")
		return err == nil
	})
	t.Logf("Redis continued: Takes succeed again after %v", back.Round(time.Millisecond))
	if h := st.Health(); h.State != "up" || h.Breaker != "closed" || h.Probes == 0 {
		t.Fatalf("after the probe: %+v", h)
	}
	testutil.Eventually(t, 10*time.Second, "the probe ends once the breaker is closed", func() bool { return probeGoroutines(t, st) == 0 })
}

// TestBreakerProbeClose: while Redis hangs, the probe of a node fails
// again and again (reopening the breaker each time) and stays one
// goroutine; Close stops it, after which no goroutine is left (goleak)
// and the breaker stays open (calls fail at once).
func TestBreakerProbeClose(t *testing.T) {
	srv, c := pausedRedis(t)
	st := New(c, Options{Prefix: prefix(t), Timeout: 50 * time.Millisecond, BreakerFailures: 1, BreakerProbe: 20 * time.Millisecond})
	t.Cleanup(func() { st.Close() }) // should the test end early
	if _, err := take(st, "d"); err != nil {
		t.Fatalf("Redis up: %v", err)
	}
	srv.Pause()
	if _, err := take(st, "d"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Redis paused: %v", err)
	}
	testutil.Eventually(t, 20*time.Second, "three failed probes", func() bool { return st.Health().ProbeFailures >= 3 })
	if g := probeGoroutines(t, st); g != 1 {
		t.Fatalf("%d probe goroutines for one open node, want 1", g)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if g := probeGoroutines(t, st); g != 0 {
		t.Fatalf("%d probe goroutines after Close", g)
	}
	st.Close() // idempotent
	srv.Resume()
	time.Sleep(100 * time.Millisecond) // five probe periods: nothing probes now
	if _, err := take(st, "d"); !errors.Is(err, gobreaker.ErrOpenState) {
		t.Fatalf("after Close, Redis back: %v, want the breaker still open", err)
	}
}

// openBreaker opens b's breaker as failed round trips do (the store has
// BreakerFailures 1), which starts b's probe.
func openBreaker(t *testing.T, b *batcher) {
	t.Helper()
	done, err := b.brk.Allow()
	if err != nil {
		t.Fatal(err)
	}
	done(errors.New("test: a round trip failed"))
	if gobreaker.State(b.state.Load()) != gobreaker.StateOpen || !b.probing.Load() {
		t.Fatalf("breaker %v after a failed round trip, probing %v: want open, probing", gobreaker.State(b.state.Load()), b.probing.Load())
	}
}

// failPings makes a cluster node's client fail every PING while on is
// set, as a master that stopped answering; other commands pass.
type failPings struct{ on *atomic.Bool }

func (failPings) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h failPings) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.on.Load() && cmd.Name() == "ping" {
			err := errors.New("test: no answer")
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}
func (failPings) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestClusterProbeOfFormerMaster: on a Redis Cluster, the probe of a node
// that is no longer a master of the cluster (as the old master after a
// failover: here a node, dead, that none of the cluster's slots name)
// stops after its first failed PING, and the node's batcher is dropped
// (Health counts the masters alone, and is up again); the probe of a
// master that does not answer goes on, its batcher kept, until Close
// stops it. No goroutine is left (goleak).
func TestClusterProbeOfFormerMaster(t *testing.T) {
	leaks := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, leaks) }) // runs last
	cc := clusterClient(t)
	st := New(cc, Options{Prefix: prefix(t), Timeout: 500 * time.Millisecond, BreakerFailures: 1, BreakerProbe: 20 * time.Millisecond})
	t.Cleanup(func() { st.Close() }) // should the test end early
	for _, d := range []string{"a", "b", "c", "d", "e", "f"} {
		if _, err := take(st, d); err != nil {
			t.Fatal(err)
		}
	}
	masters := st.Health().Nodes
	if masters < 1 {
		t.Fatalf("Health after Takes: %+v", st.Health())
	}

	// A former master: a node the store sent to, dead now, that the
	// cluster's slots no longer name; its client closed, as go-redis
	// closes a node's a minute after it left the slots.
	dead := redistest.StartT(t)
	former := redis.NewClient(&redis.Options{Addr: dead.Addr, MaxRetries: -1, DialerRetries: 1})
	dead.Stop()
	former.Close()
	fb := st.newBatcher(former, dead.Addr)
	st.nodes.Store(former, fb)
	openBreaker(t, fb)
	if h := st.Health(); h.State != "down" || h.Nodes != masters+1 {
		t.Fatalf("the former master's breaker open: %+v", h)
	}
	testutil.Eventually(t, 10*time.Second, "the former master's probe to end", func() bool { return probeGoroutines(t, st) == 0 })
	if _, ok := st.nodes.Load(former); ok {
		t.Fatal("the former master's batcher is still in the store")
	}
	if h := st.Health(); h.State != "up" || h.Nodes != masters || h.ProbeFailures == 0 {
		t.Fatalf("after the former master's probe: %+v, want up, %d nodes", h, masters)
	}

	// A master that does not answer PINGs: its probe goes on.
	node, err := cc.MasterForKey(t.Context(), st.bucketKey("r", "a"))
	if err != nil {
		t.Fatal(err)
	}
	v, ok := st.nodes.Load(node)
	if !ok {
		t.Fatal("no batcher for the master of r")
	}
	var silent atomic.Bool
	silent.Store(true)
	node.AddHook(failPings{&silent})
	failed := st.Health().ProbeFailures
	openBreaker(t, v.(*batcher))
	testutil.Eventually(t, 10*time.Second, "three failed probes of the master", func() bool { return st.Health().ProbeFailures >= failed+3 })
	if g := probeGoroutines(t, st); g != 1 {
		t.Fatalf("%d probe goroutines for one silent master, want 1", g)
	}
	if w, ok := st.nodes.Load(node); !ok || w != v {
		t.Fatal("the silent master's batcher was dropped")
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if g := probeGoroutines(t, st); g != 0 {
		t.Fatalf("%d probe goroutines after Close", g)
	}
	silent.Store(false)
}
