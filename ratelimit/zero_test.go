package ratelimit

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// The zero Limiter is usable: a SmoothBursty limiter at rate 0 with no
// stored permits, reading time.Now, that admits nothing until SetRate gives
// it a rate (like golang.org/x/time/rate's zero Limiter, which rejects all
// events).
func TestZeroValueLimiter(t *testing.T) {
	t.Run("admits nothing", func(t *testing.T) {
		var l Limiter
		if l.Rate() != 0 {
			t.Fatalf("Rate %v, want 0", l.Rate())
		}
		if l.Allow() || l.AllowAt(t0) || l.AllowN(t0, 1) {
			t.Fatal("the zero limiter admitted a permit")
		}
		if !l.AllowN(t0, 0) {
			t.Fatal("AllowN(0) refused")
		}
		if r := l.Reserve(); r.OK() || r.Delay() != time.Duration(1<<63-1) {
			t.Fatalf("Reserve: OK %v, delay %v; want not OK", r.OK(), r.Delay())
		}
		l.Reserve().Cancel() // not OK: nothing to give back, no panic
		if got := l.Tokens(); got != 0 {
			t.Fatalf("Tokens %v, want 0", got)
		}
		if got := l.TokensAt(t0); got != 0 {
			t.Fatalf("TokensAt %v, want 0", got)
		}
	})
	t.Run("Wait with a cancelled context", func(t *testing.T) {
		var l Limiter
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := l.Wait(ctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("Wait: %v, want context.Canceled", err)
		}
	})
	t.Run("Wait at rate 0 until SetRate", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var l Limiter
			done := make(chan error, 1)
			go func() { done <- l.Wait(context.Background()) }()
			synctest.Wait()
			select {
			case err := <-done:
				t.Fatalf("Wait returned %v at rate 0", err)
			default:
			}
			l.SetRate(10)
			if err := <-done; err != nil {
				t.Fatalf("Wait after SetRate: %v", err)
			}
		})
	})
	t.Run("SetRate", func(t *testing.T) {
		var l Limiter
		l.SetRateAt(t0, 10)
		if l.Rate() != 10 {
			t.Fatalf("Rate %v, want 10", l.Rate())
		}
		// No burst: one permit every 100 ms, nothing stored.
		if !l.AllowAt(t0) || l.AllowAt(at(50)) || !l.AllowAt(at(100)) {
			t.Fatal("not spaced at 10/s")
		}
		if got := l.TokensAt(at(10_000)); got != 0 {
			t.Fatalf("stored %v permits after idling, want 0 (no burst)", got)
		}
		l.SetRate(0)
		if l.AllowAt(at(20_000)) {
			t.Fatal("admitted at rate 0")
		}
	})
}

// The zero Gauge has capacity 0: it admits nothing until SetCapacity.
func TestZeroValueGauge(t *testing.T) {
	var g Gauge
	if g.Capacity() != 0 || g.TryAcquire() {
		t.Fatal("the zero gauge admitted a holder")
	}
	g.SetCapacity(1)
	if !g.TryAcquire() || g.TryAcquire() {
		t.Fatal("capacity 1: want one holder")
	}
	g.Release()
	if g.InUse() != 0 {
		t.Fatalf("in use %d after release", g.InUse())
	}
}
