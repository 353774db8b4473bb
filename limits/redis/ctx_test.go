package redisstore

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/limits"
)

// takeCtx is one Take of a token of bigLimit under ctx.
func takeCtx(ctx context.Context, st *Store, domain string) error {
	_, err := st.Take(ctx, time.Now().UnixNano(), limits.Key{Resource: "r", Domain: domain}, bigLimit, limits.Ask{Tokens: 1, Min: 1})
	return err
}

// bucketExists reports whether st holds domain's token bucket of bigLimit.
func bucketExists(t *testing.T, st *Store, domain string) bool {
	t.Helper()
	n, err := st.c.Exists(t.Context(), st.bucketKey("r", domain)).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n == 1
}

// queued returns the number of calls waiting in b's queue.
func (b *batcher) queued() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queue)
}

// idle reports whether b's sender has stopped (no round trip in flight,
// none queued).
func (b *batcher) idle() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.busy
}

// TestContextDoneNotSent: a Take, a TakeHits and an Allow whose context is
// already cancelled or past its deadline are not sent (no call reaches
// Redis, no bucket is created) and fail with an error wrapping ctx.Err();
// the engine answers StatusServerError, not a degraded grant, even for a
// resource that fails open.
func TestContextDoneNotSent(t *testing.T) {
	st := New(client(t), Options{Prefix: prefix(t)})
	canceled, cancel := context.WithCancel(t.Context())
	cancel()
	expired, cancel2 := context.WithDeadline(t.Context(), time.Now().Add(-time.Second))
	defer cancel2()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		want error
	}{{"canceled", canceled, context.Canceled}, {"past its deadline", expired, context.DeadlineExceeded}} {
		t.Run(tc.name, func(t *testing.T) {
			if err := takeCtx(tc.ctx, st, "take"); !errors.Is(err, tc.want) || errors.Is(err, ErrUnavailable) {
				t.Fatalf("Take: %v, want %v wrapped (and not ErrUnavailable)", err, tc.want)
			}
			tl := &limits.Limit{Resource: "r", Kind: limits.KindTemplate, Algorithm: limits.BurstTiers, Gen: 1,
				Tiers: limits.NewTierParams(10, 0, []limits.Tier{{Limit: 5, Window: time.Second}}, false)}
			if _, err := st.TakeHits(tc.ctx, time.Now().UnixNano(), limits.Key{Resource: "r", Domain: "hits"}, tl, limits.Ask{Tokens: 1, Min: 1}); !errors.Is(err, tc.want) {
				t.Fatalf("TakeHits: %v, want %v wrapped", err, tc.want)
			}
			var events []limits.EventType
			cfg := &limits.Config{Resources: map[string]*limits.Resource{"open": {Default: &limits.Bucket{Size: 10, FillRate: 1}, OnStoreError: limits.FailOpen}}}
			e, err := limits.New(cfg, limits.Options{Store: st, Listener: limits.ListenerFunc(func(ev limits.Event) { events = append(events, ev.Type) })})
			if err != nil {
				t.Fatal(err)
			}
			d := e.Allow(tc.ctx, time.Now(), limits.Request{Resource: "open", Domain: "d"})
			if d.Status != limits.StatusServerError || d.Degraded || !errors.Is(d.Err, tc.want) || len(events) != 1 || events[0] != limits.EventServerError {
				t.Fatalf("Allow on a fail-open resource: %+v, events %v; want StatusServerError (not degraded), %v wrapped", d, events, tc.want)
			}
		})
	}
	if h := st.Health(); h.Calls != 0 || h.RoundTrips != 0 || h.Failures != 0 || h.Refused != 0 {
		t.Fatalf("health %+v: want nothing sent, nothing failed", h)
	}
	if n, err := st.c.Keys(t.Context(), st.prefix+"*").Result(); err != nil || len(n) != 0 {
		t.Fatalf("keys %v %v: want none", n, err)
	}
	if err := takeCtx(t.Context(), st, "take"); err != nil || !bucketExists(t, st, "take") {
		t.Fatalf("a live context: %v", err)
	}
}

// TestContextLeavesQueue: Redis hangs (SIGSTOP) under a round trip in
// flight, with a Timeout of a minute. Callers queued behind it leave at
// once when their context ends — cancelled, or past its deadline — with
// ctx.Err() wrapped, not ErrUnavailable, while Redis still hangs (were
// they waiting for the round trip, they would fail with it, a minute
// later); so does the caller whose call is in flight, when its context is
// cancelled. Once Redis continues, the round trip in flight completes;
// the calls that left the queue were never sent (their buckets do not
// exist), nothing counts as a failure, and Takes succeed.
func TestContextLeavesQueue(t *testing.T) {
	srv, c := pausedRedis(t)
	st := New(c, Options{Prefix: prefix(t), Timeout: time.Minute, BreakerFailures: 1})
	defer st.Close()
	if err := takeCtx(t.Context(), st, "warm"); err != nil {
		t.Fatalf("Redis up: %v", err)
	}
	b := st.single
	srv.Pause()

	inflight, cancelInflight := context.WithCancel(t.Context())
	errs := make(chan error, 3)
	go func() { errs <- takeCtx(inflight, st, "inflight") }()
	// In flight: sent (counted as the second call, after warm's), not
	// merely "the sender is busy", which warm's sender may still be when
	// the call has not even queued (and then it and the next would share
	// a batch).
	testutil.Eventually(t, 10*time.Second, "the first call in flight", func() bool {
		return b.queued() == 0 && !b.idle() && st.Health().Calls == 2
	})

	queued, cancelQueued := context.WithCancel(t.Context())
	go func() { errs <- takeCtx(queued, st, "canceled") }()
	testutil.Eventually(t, 10*time.Second, "the second call queued", func() bool { return b.queued() == 1 })
	cancelQueued()
	if err := <-errs; !errors.Is(err, context.Canceled) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("cancelled while queued: %v, want context.Canceled wrapped", err)
	}

	short, cancelShort := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancelShort()
	if err := takeCtx(short, st, "deadline"); !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("past its deadline while queued: %v, want context.DeadlineExceeded wrapped", err)
	}

	cancelInflight()
	if err := <-errs; !errors.Is(err, context.Canceled) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("cancelled in flight: %v, want context.Canceled wrapped", err)
	}
	if h := st.Health(); h.Failures != 0 || h.State != "up" {
		t.Fatalf("Redis still paused, every caller gone: %+v, want no failure", h)
	}

	srv.Resume()
	testutil.Eventually(t, 20*time.Second, "the round trip in flight ends once Redis continues", b.idle)
	if err := takeCtx(t.Context(), st, "after"); err != nil {
		t.Fatalf("Redis continued: %v", err)
	}
	for _, d := range []string{"canceled", "deadline"} {
		if bucketExists(t, st, d) {
			t.Errorf("the call that left the queue (%s) was sent", d)
		}
	}
	if h := st.Health(); h.Calls != 3 || h.Failures != 0 || h.Refused != 0 || h.State != "up" || h.LastError != "" {
		t.Fatalf("health %+v: want 3 calls sent (warm, inflight, after), no failure", h)
	}
}

// TestContextDeadlineShorterThanStall: Redis hangs (SIGSTOP), the store's
// Timeout is a minute and one failure would open its breaker. Concurrent
// callers whose deadlines come in 50 ms, and an Allow on a resource that
// fails open, all fail with context.DeadlineExceeded wrapped (the Allow
// answers StatusServerError, not a degraded grant); the round trip, whose
// deadline is its callers' latest, ends then, while Redis still hangs
// (the batcher goes idle), and counts as no failure: the breaker stays
// closed, and once Redis continues, Takes succeed.
func TestContextDeadlineShorterThanStall(t *testing.T) {
	srv, c := pausedRedis(t)
	st := New(c, Options{Prefix: prefix(t), Timeout: time.Minute, BreakerFailures: 1})
	defer st.Close()
	cfg := &limits.Config{Resources: map[string]*limits.Resource{"open": {Default: &limits.Bucket{Size: 10, FillRate: 1}, OnStoreError: limits.FailOpen}}}
	e, err := limits.New(cfg, limits.Options{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	if err := takeCtx(t.Context(), st, "warm"); err != nil {
		t.Fatalf("Redis up: %v", err)
	}
	srv.Pause()

	var wg sync.WaitGroup
	errs := make([]error, 10)
	for i := range errs {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
			defer cancel()
			errs[i] = takeCtx(ctx, st, "d")
		})
	}
	var d limits.Decision
	wg.Go(func() {
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		d = e.Allow(ctx, time.Now(), limits.Request{Resource: "open", Domain: "d"})
	})
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrUnavailable) {
			t.Fatalf("call %d: %v, want context.DeadlineExceeded wrapped", i, err)
		}
	}
	if d.Status != limits.StatusServerError || d.Degraded || !errors.Is(d.Err, context.DeadlineExceeded) {
		t.Fatalf("Allow on a fail-open resource: %+v, want StatusServerError (not degraded), DeadlineExceeded wrapped", d)
	}
	testutil.Eventually(t, 20*time.Second, "the round trip ends at its callers' deadline, Redis still paused", st.single.idle)
	if h := st.Health(); h.Failures != 0 || h.State != "up" || h.Breaker != "closed" || h.LastError != "" {
		t.Fatalf("health %+v: want no failure, the breaker closed", h)
	}
	srv.Resume()
	if err := takeCtx(t.Context(), st, "after"); err != nil {
		t.Fatalf("Redis continued: %v", err)
	}
}
