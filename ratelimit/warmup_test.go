package ratelimit

import (
	"context"
	"math"
	"testing"
	"testing/synctest"
	"time"

	"pgregory.net/rapid"
)

// Guava's trapezoid, worked by hand: rate 1/s (stable interval 1 s), warm-up
// 4 s, cold factor 3 (cold interval 3 s): thresholdPermits = 0.5·4/1 = 2,
// maxPermits = 2 + 2·4/(1+3) = 4, slope = (3−1)/(4−2) = 1. Starting cold
// (4 stored), the first permit costs the area from 4 to 3 stored permits,
// (3+2)/2 = 2.5 s, the second (2+1)/2 = 1.5 s — together the warm-up
// period — and from then on 1 s each.
func TestWarmingUpTrapezoid(t *testing.T) {
	l := NewWarmingUp(1, 4*time.Second, 3)
	steps := []struct {
		ms   int
		want bool
	}{{0, true}, {2499, false}, {2500, true}, {3999, false}, {4000, true}, {4999, false}, {5000, true}, {6000, true}, {6999, false}, {7000, true}}
	for _, s := range steps {
		if got := l.AllowAt(at(s.ms)); got != s.want {
			t.Fatalf("t=%dms: Allow = %v, want %v", s.ms, got, s.want)
		}
	}
	// Idle for the warm-up period and more: cold again (coolDown = 4/4 = 1 s
	// per stored permit), the first permit costs 2.5 s again.
	if !l.AllowAt(at(20_000)) {
		t.Fatal("refused after idling")
	}
	if l.AllowAt(at(22_499)) || !l.AllowAt(at(22_500)) {
		t.Fatal("not cold after idling for longer than the warm-up period")
	}
	// Reserve shows the same schedule.
	w := NewWarmingUp(1, 4*time.Second, 3)
	var delays []time.Duration
	for range 4 {
		delays = append(delays, w.ReserveN(at(0), 1).DelayFrom(at(0)))
	}
	want := []time.Duration{0, 2500 * time.Millisecond, 4 * time.Second, 5 * time.Second}
	for i := range want {
		if delays[i] != want[i] {
			t.Fatalf("reservation %d delay %v, want %v (all %v)", i, delays[i], want[i], delays)
		}
	}
}

// A warming-up limiter reaches its stable rate and, after a rate change,
// keeps its coldness in proportion.
func TestWarmingUpSetRate(t *testing.T) {
	l := NewWarmingUp(10, 2*time.Second, 3)
	n := 0
	for ms := 0; ms <= 10_000; ms += 10 {
		if l.AllowAt(at(ms)) {
			n++
		}
	}
	// 10 s at 10/s, minus what the cold start costs (the warm-up period
	// hands out fewer permits than the stable rate would): between 80 and
	// 101.
	if n < 80 || n > 101 {
		t.Fatalf("admitted %d in 10 s at 10/s with a 2 s warm-up", n)
	}
	l.SetRateAt(at(10_000), 20)
	if got := l.Rate(); got != 20 {
		t.Fatalf("rate %v", got)
	}
}

// Property: a warming-up limiter never admits more than a bursty one with
// the same number of stored permits would: over any window of length T, at
// most r·T + maxPermits + n.
func TestPropertyWarmingUpWindowBound(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r := rapid.Float64Range(0.5, 500).Draw(t, "rate")
		warm := time.Duration(rapid.Int64Range(int64(100*time.Millisecond), int64(5*time.Second)).Draw(t, "warmup"))
		cold := rapid.Float64Range(1, 6).Draw(t, "cold factor")
		l := NewWarmingUp(r, warm, cold)
		var admitted []time.Time
		now := t0
		for range rapid.IntRange(1, 300).Draw(t, "n") {
			now = now.Add(time.Duration(rapid.Int64Range(0, int64(3*time.Second/time.Duration(math.Max(r, 1)))).Draw(t, "gap")))
			k := rapid.IntRange(1, 3).Draw(t, "permits")
			if l.AllowN(now, k) {
				for range k {
					admitted = append(admitted, now)
				}
			}
		}
		maxStored := l.warm.maxStored
		for i, start := range admitted {
			T := rapid.Float64Range(0, 5).Draw(t, "window")
			end := start.Add(time.Duration(T * float64(time.Second)))
			count := 0
			for _, a := range admitted[i:] {
				if a.After(end) {
					break
				}
				count++
			}
			if bound := r*T + maxStored + 3; float64(count) > bound+1e-6 {
				t.Fatalf("window %vs admitted %d > %v", T, count, bound)
			}
		}
	})
}

func TestReservations(t *testing.T) {
	l := NewLimiter(10, 0) // one permit per 100 ms
	r1 := l.ReserveN(at(0), 1)
	r2 := l.ReserveN(at(0), 1)
	r3 := l.ReserveN(at(0), 1)
	if !r1.OK() || r1.DelayFrom(at(0)) != 0 || r2.DelayFrom(at(0)) != 100*time.Millisecond || r3.DelayFrom(at(0)) != 200*time.Millisecond {
		t.Fatalf("delays %v %v %v", r1.DelayFrom(at(0)), r2.DelayFrom(at(0)), r3.DelayFrom(at(0)))
	}
	if r3.DelayFrom(at(150)) != 50*time.Millisecond {
		t.Fatalf("delay from 150 ms: %v", r3.DelayFrom(at(150)))
	}
	// Cancelling the last reservation refunds it: the next one takes its place.
	r3.CancelAt(at(0))
	r3.CancelAt(at(0)) // twice is harmless
	if d := l.ReserveN(at(0), 1).DelayFrom(at(0)); d != 200*time.Millisecond {
		t.Fatalf("after cancelling the last reservation the next is due in %v, want 200ms", d)
	}
	// Cancelling one with others queued behind refunds nothing.
	r2.CancelAt(at(0))
	if d := l.ReserveN(at(0), 1).DelayFrom(at(0)); d != 300*time.Millisecond {
		t.Fatalf("after cancelling a queued-over reservation the next is due in %v, want 300ms", d)
	}
	// Rate 0: not OK, nothing taken; +Inf: at once.
	z := NewLimiter(0, 1)
	if r := z.ReserveN(at(0), 1); r.OK() || r.DelayFrom(at(0)) != time.Duration(math.MaxInt64) {
		t.Fatal("a reservation at rate 0 is OK")
	}
	if r := NewLimiter(math.Inf(1), 1).ReserveN(at(0), 1000); !r.OK() || r.DelayFrom(at(0)) != 0 {
		t.Fatal("a reservation at rate +Inf waits")
	}
}

func TestClockOption(t *testing.T) {
	now := t0
	l := NewLimiter(1, 0, WithClock(func() time.Time { return now }))
	if !l.Allow() || l.Allow() {
		t.Fatal("first Allow on the injected clock")
	}
	now = now.Add(time.Second)
	if !l.Allow() {
		t.Fatal("Allow after a second of injected time")
	}
	r := l.Reserve()
	if r.Delay() != time.Second {
		t.Fatalf("delay %v", r.Delay())
	}
	if got := l.Tokens(); got != -2 {
		t.Fatalf("tokens with the Allow and the reservation paid ahead %v, want -2", got)
	}
	r.Cancel()
	if got := l.Tokens(); got != -1 {
		t.Fatalf("tokens after cancel %v, want -1 (the Allow still paid ahead)", got)
	}
}

func TestWaitWarmingUpOnFakeTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewWarmingUp(1, 4*time.Second, 3)
		start := time.Now()
		for range 3 {
			if err := l.Wait(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		if got := time.Since(start); got != 4*time.Second {
			t.Fatalf("three permits from cold took %v, want 0 + 2.5 + 1.5 = 4s", got)
		}
	})
}

// A Wait blocked at one rate re-evaluates when the rate changes: faster
// when it rises, later when it falls.
func TestWaitFollowsRateChanges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewLimiter(1, 0)
		_ = l.Wait(context.Background()) // the next permit is due in 1 s
		start := time.Now()
		done := make(chan time.Duration)
		go func() {
			_ = l.Wait(context.Background())
			done <- time.Since(start)
		}()
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		// At 100 ms the waiter's turn (at 1 s, behind 0.9 s still owed at
		// 1/s) is re-timed at 100/s: 0.9 s / 100 = 9 ms later.
		l.SetRate(100)
		if got := <-done; got != 109*time.Millisecond {
			t.Fatalf("after the rate rose the wait ended at %v, want 109ms", got)
		}
		l.SetRate(1)
		_ = l.Wait(context.Background()) // drain: next due in 1 s
		start = time.Now()
		go func() {
			_ = l.Wait(context.Background())
			done <- time.Since(start)
		}()
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		l.SetRate(0.5) // slower: the rest of the wait stretches
		if got := <-done; got <= time.Second {
			t.Fatalf("after the rate fell the wait ended at %v, want later than 1s", got)
		}
	})
}

// Property: after any sequence of rate changes, within each constant-rate
// segment every window of length T admits at most r·T + r·b + n permits at
// that segment's rate r.
func TestPropertyRateChangesApplyAtOnce(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		b := rapid.Float64Range(0, 1).Draw(t, "burst")
		r := rapid.Float64Range(1, 200).Draw(t, "rate")
		l := NewLimiter(r, b)
		type seg struct {
			start time.Time
			rate  float64
			at    []time.Time
		}
		segs := []*seg{{start: t0, rate: r}}
		now := t0
		for range rapid.IntRange(1, 400).Draw(t, "ops") {
			now = now.Add(time.Duration(rapid.Int64Range(0, int64(50*time.Millisecond)).Draw(t, "gap")))
			if rapid.IntRange(0, 20).Draw(t, "op") == 0 {
				r = rapid.Float64Range(1, 200).Draw(t, "new rate")
				l.SetRateAt(now, r)
				segs = append(segs, &seg{start: now, rate: r})
				continue
			}
			k := rapid.IntRange(1, 3).Draw(t, "permits")
			if l.AllowN(now, k) {
				cur := segs[len(segs)-1]
				for range k {
					cur.at = append(cur.at, now)
				}
			}
		}
		for _, s := range segs {
			for i, start := range s.at {
				for _, T := range []float64{0, 0.05, 0.2, 1} {
					end := start.Add(time.Duration(T * float64(time.Second)))
					count := 0
					for _, a := range s.at[i:] {
						if a.After(end) {
							break
						}
						count++
					}
					if bound := s.rate*T + s.rate*b + 3; float64(count) > bound+1e-6 {
						t.Fatalf("rate %v: %d admitted within %vs, bound %v", s.rate, count, T, bound)
					}
				}
			}
		}
	})
}

// The SmoothWarmingUp limiter kept its lock and Guava's arithmetic: over
// random call sequences on a fake clock it answers exactly as the locked
// limiter it came from (refLimiter, in reference_test.go).
func TestPropertyWarmingUpMatchesReference(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		rateGen := rapid.OneOf(rapid.Float64Range(0.5, 500), rapid.SampledFrom([]float64{0, math.Inf(1), 1}))
		rate := rateGen.Draw(t, "rate")
		warm := time.Duration(rapid.Int64Range(int64(time.Millisecond), int64(5*time.Second)).Draw(t, "warmup"))
		cold := rapid.Float64Range(0, 6).Draw(t, "cold factor")
		l, ref := NewWarmingUp(rate, warm, cold), newRefWarmingUp(rate, warm, cold)
		var rs []*Reservation
		var refs []*refReservation
		now := t0
		for i := range rapid.IntRange(1, 200).Draw(t, "calls") {
			now = now.Add(time.Duration(rapid.Int64Range(0, int64(time.Second)).Draw(t, "gap")))
			switch rapid.IntRange(0, 5).Draw(t, "op") {
			case 0, 1:
				n := rapid.IntRange(1, 4).Draw(t, "n")
				if got, want := l.AllowN(now, n), ref.AllowN(now, n); got != want {
					t.Fatalf("call %d: AllowN %v, reference %v", i, got, want)
				}
			case 2:
				n := rapid.IntRange(1, 4).Draw(t, "n")
				r, rr := l.ReserveN(now, n), ref.ReserveN(now, n)
				if r.OK() != rr.OK() || r.DelayFrom(now) != rr.DelayFrom(now) {
					t.Fatalf("call %d: ReserveN %v %v, reference %v %v", i, r.OK(), r.DelayFrom(now), rr.OK(), rr.DelayFrom(now))
				}
				rs, refs = append(rs, r), append(refs, rr)
			case 3:
				if len(rs) > 0 {
					k := rapid.IntRange(0, len(rs)-1).Draw(t, "reservation")
					rs[k].CancelAt(now)
					refs[k].CancelAt(now)
				}
			case 4:
				rate := rateGen.Draw(t, "new rate")
				l.SetRateAt(now, rate)
				ref.SetRateAt(now, rate)
			default:
				if got, want := l.TokensAt(now), ref.TokensAt(now); got != want {
					t.Fatalf("call %d: TokensAt %v, reference %v", i, got, want)
				}
			}
		}
	})
}
