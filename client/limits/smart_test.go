package limits_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	sluicev1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/client/limits"
	"github.com/sluice-rl/sluice/ratelimit"
)

// failOpen is a fallback that admits everything, for tests about when the
// fallback decides rather than what it decides.
var failOpen = limits.WithFallback(func(string, string) *ratelimit.Limiter { return nil })

// TestSmartSteadyState: scenario 5 on virtual time, with a service 10 ms
// away. Only the first call waits for the network; the 199 others take a
// local token at once, the top-ups running in the background, each one
// request for Batch tokens with min_tokens 1 and max_wait 0.
func TestSmartSteadyState(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newService(t)
		s.before.Store(int64(10 * time.Millisecond))
		c, reg := newClient(t, "limits.test:1", startPipe(t, s), limits.WithSmart(limits.Smart{Batch: 10, LowWater: 5}))
		for i := range 200 {
			start := time.Now()
			g, err := c.Acquire(context.Background(), "api", "fast", 1)
			if err != nil || g.Source != limits.FromLocalBucket {
				t.Fatalf("call %d = %+v, %v; want a local token", i, g, err)
			}
			want := time.Duration(0)
			if i == 0 {
				want = 10 * time.Millisecond // the first top-up
			}
			if took := time.Since(start); took != want {
				t.Fatalf("call %d took %v, want %v", i, took, want)
			}
			time.Sleep(20 * time.Millisecond) // 50 calls a second
		}
		// 200 tokens used, 5 to 15 left: 20 or 21 top-ups of 10.
		if n := s.requests.Load(); n < 20 || n > 21 {
			t.Errorf("%d requests for 200 calls, want 20 or 21", n)
		}
		for _, r := range s.received() {
			if r.GetTokens() != 10 || r.GetMinTokens() != 1 || r.GetMaxWait() == nil || r.GetMaxWait().AsDuration() != 0 {
				t.Fatalf("top-up %v: want tokens 10, min_tokens 1, max_wait 0", r)
			}
		}
		if got := metric(t, reg, "sluice_quota_client_local_tokens_total", "event", "used"); got != 200 {
			t.Errorf("used %v, want 200", got)
		}
		if got := metric(t, reg, "sluice_quota_client_local_tokens_total", "event", "expired"); got != 0 {
			t.Errorf("expired %v, want 0", got)
		}
		if got := metric(t, reg, "sluice_quota_client_decisions_total", "mode", "smart", "outcome", "allowed"); got != 200 {
			t.Errorf("allowed %v, want 200", got)
		}
	})
}

// TestSmartExpiry: fetched tokens unused for the TTL expire and are
// counted; the next call fetches anew.
func TestSmartExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newService(t)
		c, reg := newClient(t, "limits.test:1", startPipe(t, s), limits.WithSmart(limits.Smart{Batch: 10, TTL: time.Second}))
		ctx := context.Background()
		if _, err := c.Acquire(ctx, "api", "fast", 1); err != nil {
			t.Fatal(err)
		}
		time.Sleep(999 * time.Millisecond)
		if g, err := c.Acquire(ctx, "api", "fast", 1); err != nil || g.Remaining != 8 {
			t.Fatalf("before the TTL: %+v, %v; want 8 left", g, err)
		}
		time.Sleep(time.Millisecond)
		if g, err := c.Acquire(ctx, "api", "fast", 1); err != nil || g.Remaining != 9 {
			t.Fatalf("at the TTL: %+v, %v; want a fresh 10, 9 left", g, err)
		}
		if got := metric(t, reg, "sluice_quota_client_local_tokens_total", "event", "expired"); got != 8 {
			t.Errorf("expired %v, want 8", got)
		}
		if got := s.requests.Load(); got != 2 {
			t.Errorf("%d requests, want 2", got)
		}
	})
}

// TestSmartRejected: the service grants part of a batch, then rejects the
// top-up; calls that find the local bucket empty are rejected locally with
// the service's retry-after, and nothing is asked before it.
func TestSmartRejected(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newService(t)
		c, reg := newClient(t, "limits.test:1", startPipe(t, s), limits.WithSmart(limits.Smart{Batch: 10}))
		ctx := context.Background()
		for i := range 2 { // the bucket's 2 tokens, in one partial grant
			if g, err := c.Acquire(ctx, "api", "strict", 1); err != nil || g.Source != limits.FromLocalBucket {
				t.Fatalf("call %d = %+v, %v", i, g, err)
			}
		}
		synctest.Wait() // the top-up started at the low-water mark is rejected
		for i := range 3 {
			_, err := c.Acquire(ctx, "api", "strict", 1)
			var rej *limits.RejectedError
			if !errors.As(err, &rej) || rej.Fallback || rej.Status != sluicev1.AllowResponse_REJECTED_TIMEOUT || rej.RetryAfter != time.Second {
				t.Fatalf("empty call %d: %v; want the service's REJECTED_TIMEOUT, retry after 1s", i, err)
			}
		}
		if got := s.requests.Load(); got != 2 {
			t.Errorf("%d requests, want 2 (a grant and a rejection; none before the retry-after)", got)
		}
		time.Sleep(time.Second)
		if g, err := c.Acquire(ctx, "api", "strict", 1); err != nil || g.Source != limits.FromLocalBucket {
			t.Fatalf("after the retry-after: %+v, %v", g, err)
		}
		if got := metric(t, reg, "sluice_quota_client_decisions_total", "mode", "smart", "outcome", "rejected"); got != 3 {
			t.Errorf("rejected %v, want 3", got)
		}
	})
}

// TestSmartFallback: with the service stalled, the first call waits for
// its top-up's timeout, then every call goes to the fallback limiter at
// once, and a top-up is tried every Smart.Retry; when the service answers
// again, calls take local tokens.
func TestSmartFallback(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newService(t)
		s.stall.Store(true)
		c, reg := newClient(t, "limits.test:1", startPipe(t, s), limits.WithSmart(limits.Smart{Retry: time.Second}), failOpen)
		acquire := func(want limits.Source, took time.Duration) {
			t.Helper()
			start := time.Now()
			g, err := c.Acquire(context.Background(), "api", "fast", 1)
			if err != nil || g.Source != want || time.Since(start) != took {
				t.Fatalf("Acquire = %+v, %v after %v; want %v after %v", g, err, time.Since(start), want, took)
			}
		}
		acquire(limits.FromFallback, limits.DefaultTimeout) // the first top-up times out
		acquire(limits.FromFallback, 0)
		if got := s.requests.Load(); got != 1 {
			t.Errorf("%d requests, want 1 (no retry before Smart.Retry)", got)
		}
		time.Sleep(time.Second)
		acquire(limits.FromFallback, 0) // starts a top-up, does not wait for it
		synctest.Wait()                 // the top-up is in flight, stalled
		if got := s.requests.Load(); got != 2 {
			t.Errorf("%d requests, want 2", got)
		}
		s.stall.Store(false)
		time.Sleep(time.Second + limits.DefaultTimeout) // Smart.Retry after that top-up's timeout
		acquire(limits.FromFallback, 0)                 // starts a top-up, answered this time
		synctest.Wait()
		acquire(limits.FromLocalBucket, 0)
		if got := metric(t, reg, "sluice_quota_client_requests_total", "call", "topup", "result", "timeout"); got != 2 {
			t.Errorf("top-up timeouts %v, want 2", got)
		}
		if got := metric(t, reg, "sluice_quota_client_decisions_total", "mode", "smart", "outcome", "fallback_allowed"); got != 4 {
			t.Errorf("fallback decisions %v, want 4", got)
		}
	})
}

// TestSmartLargeCall: a call for more than a batch asks for its shortfall.
func TestSmartLargeCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newService(t)
		c, _ := newClient(t, "limits.test:1", startPipe(t, s), limits.WithSmart(limits.Smart{Batch: 10}))
		g, err := c.Acquire(context.Background(), "api", "fast", 25)
		if err != nil || g.Granted != 25 {
			t.Fatalf("Acquire(25) = %+v, %v", g, err)
		}
		if got := s.received()[0].GetTokens(); got != 25 {
			t.Errorf("asked for %d, want 25", got)
		}
	})
}

// TestSmartNoBucket: scenario 3 in the smart mode: the fallback decides,
// and the top-up is not asked again before Smart.Retry.
func TestSmartNoBucket(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newService(t)
		c, reg := newClient(t, "limits.test:1", startPipe(t, s), limits.WithSmart(limits.Smart{}), failOpen)
		for range 3 {
			g, err := c.Acquire(context.Background(), "unconfigured", "x", 1)
			if err != nil || g.Source != limits.FromFallback {
				t.Fatalf("Acquire = %+v, %v; want a fallback grant", g, err)
			}
		}
		if got := s.requests.Load(); got != 1 {
			t.Errorf("%d requests, want 1", got)
		}
		if got := metric(t, reg, "sluice_quota_client_fallbacks_total", "reason", "no_bucket"); got != 3 {
			t.Errorf("no_bucket fallbacks %v, want 3", got)
		}
	})
}

// TestSmartConcurrent: parallel callers over real loopback gRPC share one
// local bucket: every call is granted, and the client never uses more
// tokens than the service gave it.
func TestSmartConcurrent(t *testing.T) {
	s := newService(t)
	c, reg := newClient(t, startLoopback(t, s), limits.WithTimeout(10*time.Second), limits.WithSmart(limits.Smart{Batch: 50}))
	const workers, calls = 8, 200
	errs := make(chan error, workers)
	for range workers {
		go func() {
			for range calls {
				if _, err := c.Acquire(context.Background(), "api", "bench", 1); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	used := metric(t, reg, "sluice_quota_client_local_tokens_total", "event", "used")
	fetched := metric(t, reg, "sluice_quota_client_local_tokens_total", "event", "fetched")
	if used != workers*calls || fetched < used {
		t.Errorf("used %v of %v fetched, want %d used", used, fetched, workers*calls)
	}
	if n := s.requests.Load(); n > workers*calls/50+workers {
		t.Errorf("%d requests for %d calls in batches of 50", n, workers*calls)
	}
}
