package ratelimit

import (
	"context"
	"errors"
	"math"
	"os"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/time/rate"
	"pgregory.net/rapid"

	"github.com/sluice-rl/sluice/internal/testutil"
)

func TestMain(m *testing.M) {
	testutil.RapidChecks(1000)
	os.Exit(m.Run())
}

var t0 = time.Unix(1_700_000_000, 0)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func TestSmoothBurstySpacing(t *testing.T) {
	// Rate 5/s, no stored permits: one permit per 200 ms.
	l := NewLimiter(5, 0)
	steps := []struct {
		ms   int
		want bool
	}{{0, true}, {0, false}, {100, false}, {199, false}, {200, true}, {399, false}, {400, true}, {1000, true}, {1000, false}, {1200, true}}
	for _, s := range steps {
		if got := l.AllowAt(at(s.ms)); got != s.want {
			t.Fatalf("t=%dms: Allow = %v, want %v", s.ms, got, s.want)
		}
	}
}

func TestStoredPermitsBoundedByBurst(t *testing.T) {
	// Rate 10/s with 1 s of burst: after a long idle, 10 stored + 1 now.
	l := NewLimiter(10, 1)
	l.AllowAt(at(0))
	n := 0
	for l.AllowAt(at(60_000)) {
		n++
	}
	if n != 11 {
		t.Fatalf("burst after idle admitted %d, want 10 stored + 1", n)
	}
	// Half a second of burst: 5 stored.
	l = NewLimiter(10, 0.5)
	l.AllowAt(at(0))
	n = 0
	for l.AllowAt(at(60_000)) {
		n++
	}
	if n != 6 {
		t.Fatalf("burst admitted %d, want 5 stored + 1", n)
	}
}

func TestPaysAhead(t *testing.T) {
	// A request for 10 permits at 1/s is granted at once and makes the next
	// caller wait 10 s (Guava's acquire(10) then acquire(1)).
	l := NewLimiter(1, 0)
	if !l.AllowN(at(0), 10) {
		t.Fatal("big request not granted at once")
	}
	if l.AllowAt(at(9_999)) {
		t.Fatal("next request granted before the debt was paid")
	}
	if !l.AllowAt(at(10_000)) {
		t.Fatal("next request refused after the debt was paid")
	}
	if got := l.TokensAt(at(10_000)); math.Abs(got-(-1)) > 1e-9 {
		t.Fatalf("tokens %v, want -1 (one permit paid ahead)", got)
	}
}

func TestSetRateAppliesFromThatMoment(t *testing.T) {
	l := NewLimiter(1, 0)
	l.AllowAt(at(0)) // next free at 1 s
	l.SetRateAt(at(500), 100)
	// The new rate applies from its moment, to the permit paid ahead too:
	// the 500 ms still owed at 1/s are 5 ms at 100/s (Guava would keep the
	// old debt and admit nothing before 1 s).
	if l.AllowAt(at(504)) || !l.AllowAt(at(505)) || l.AllowAt(at(514)) || !l.AllowAt(at(515)) {
		t.Fatal("rate change not applied from its moment")
	}
	// And when the rate falls, what is owed stretches.
	l.SetRateAt(at(520), 10) // 5 ms owed at 100/s → 50 ms at 10/s
	if l.AllowAt(at(569)) || !l.AllowAt(at(570)) {
		t.Fatal("a falling rate did not stretch the debt")
	}
	l.SetRateAt(at(2000), 0)
	if l.AllowAt(at(100_000)) {
		t.Fatal("rate 0 admitted")
	}
	l.SetRateAt(at(100_000), math.Inf(1))
	for i := 0; i < 1000; i++ {
		if !l.AllowAt(at(100_000)) {
			t.Fatal("rate +Inf refused")
		}
	}
	for _, r := range []float64{-1, math.NaN()} {
		if NewLimiter(r, 1).AllowAt(at(0)) {
			t.Fatalf("rate %v admitted", r)
		}
	}
}

func TestTimeGoingBackwards(t *testing.T) {
	l := NewLimiter(10, 1)
	l.AllowAt(at(5000))
	for i := 0; i < 20; i++ {
		if l.AllowAt(at(0)) && i > 0 {
			t.Fatal("going back in time admitted a permit")
		}
	}
}

// Property: over any window of length T, a limiter at rate r with
// maxBurstSeconds b admits at most r·T + r·b + 1 permits (the +1 is the
// request that pays ahead), whatever the arrival times; and after a rate
// change the new rate applies.
func TestPropertyWindowBound(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r := rapid.Float64Range(0.5, 1000).Draw(t, "rate")
		b := rapid.Float64Range(0, 1).Draw(t, "burst")
		l := NewLimiter(r, b)
		var admitted []time.Time
		now := t0
		n := rapid.IntRange(1, 300).Draw(t, "n")
		for i := 0; i < n; i++ {
			now = now.Add(time.Duration(rapid.Int64Range(0, int64(3*time.Second/time.Duration(math.Max(r, 1)))).Draw(t, "gap")))
			k := rapid.IntRange(1, 3).Draw(t, "permits")
			if l.AllowN(now, k) {
				for j := 0; j < k; j++ {
					admitted = append(admitted, now)
				}
			}
		}
		// Check every window starting at an admission.
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
			if bound := r*T + r*b + 3; float64(count) > bound+1e-6 {
				t.Fatalf("window %vs from %v admitted %d > r·T + r·b + n = %v", T, start.Sub(t0), count, bound)
			}
		}
	})
}

func TestWaitDeadlineFailsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewLimiter(1, 0)
		ctx := context.Background()
		if err := l.Wait(ctx); err != nil { // first permit is free
			t.Fatal(err)
		}
		dctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		start := time.Now()
		err := l.Wait(dctx)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("got %v, want DeadlineExceeded", err)
		}
		if time.Since(start) != 0 {
			t.Fatalf("waited %v before failing", time.Since(start))
		}
		// Nothing was taken: the next permit is still due at 1 s.
		if err := l.Wait(ctx); err != nil || time.Since(start) != time.Second {
			t.Fatalf("next wait: %v after %v, want nil after 1s", err, time.Since(start))
		}
	})
}

func TestWaitWakesOnRateChange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewLimiter(0, 0)
		done := make(chan error)
		go func() { done <- l.Wait(context.Background()) }()
		synctest.Wait()
		select {
		case <-done:
			t.Fatal("Wait returned at rate 0")
		default:
		}
		l.SetRate(10)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}

func TestWaitCancelRefunds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewLimiter(1, 0)
		_ = l.Wait(context.Background()) // next free at 1 s
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error)
		go func() { errc <- l.Wait(ctx) }() // reserves [1s, 2s)
		synctest.Wait()
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v", err)
		}
		start := time.Now()
		_ = l.Wait(context.Background())
		if waited := time.Since(start); waited != time.Second {
			t.Fatalf("after a cancelled wait the next waited %v, want 1s (refunded)", waited)
		}
	})
}

func TestWaitSpacesCallers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewLimiter(10, 0)
		start := time.Now()
		for i := 0; i < 21; i++ {
			if err := l.Wait(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		if got := time.Since(start); got != 2*time.Second {
			t.Fatalf("21 permits at 10/s took %v, want 2s", got)
		}
	})
}

func TestGauge(t *testing.T) {
	g := NewGauge(2.7)
	for i, want := range []bool{true, true, false} {
		if got := g.TryAcquire(); got != want {
			t.Fatalf("capacity 2.7, acquisition %d: %v, want %v (exactly 2 holders)", i+1, got, want)
		}
	}
	g.SetCapacity(1)
	g.Release()
	if g.TryAcquire() {
		t.Fatal("acquired above a lowered capacity")
	}
	g.Release()
	if !g.TryAcquire() || g.InUse() != 1 {
		t.Fatal("could not acquire after releases")
	}
	g.Release()
	g.Release() // more than held: no-op
	if g.InUse() != 0 {
		t.Fatalf("in use %d", g.InUse())
	}
	if NewGauge(math.NaN()).TryAcquire() || NewGauge(-1).TryAcquire() || !NewGauge(math.Inf(1)).TryAcquire() {
		t.Fatal("NaN/negative/Inf capacities")
	}
}

func TestGaugeBlocksAndWakes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := NewGauge(0)
		var wg sync.WaitGroup
		var mu sync.Mutex
		inUse, maxInUse := 0, 0
		for i := 0; i < 20; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := g.Acquire(context.Background()); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				inUse++
				maxInUse = max(maxInUse, inUse)
				mu.Unlock()
				time.Sleep(10 * time.Millisecond)
				mu.Lock()
				inUse--
				mu.Unlock()
				g.Release()
			}()
		}
		synctest.Wait()
		if g.InUse() != 0 {
			t.Fatal("acquired at capacity 0")
		}
		g.SetCapacity(3)
		wg.Wait()
		if maxInUse != 3 {
			t.Fatalf("max in use %d, want 3", maxInUse)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		g.SetCapacity(0)
		if err := g.Acquire(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("got %v", err)
		}
	})
}

// Benchmarks side by side with golang.org/x/time/rate in the same run, on
// one goroutine and in parallel, in two regimes:
//
//   - admitted: a rate far above the call rate (1e12 permits per second,
//     with a full second of burst for x/time/rate), so every call is
//     admitted and changes the limiter;
//   - refused: one permit per 1000 s, so after the first call every call is
//     refused and only reads the limiter.
//
// Run them one benchmark process at a time (the machine is shared):
//
//	flock /tmp/bench.lock go test -run '^$' -bench Allow -count 5 ./ratelimit | benchstat -
func BenchmarkAllow(b *testing.B) {
	for _, c := range allowCases {
		b.Run(c.name+"/sluice", func(b *testing.B) {
			l := NewLimiter(c.rate, 1)
			b.ReportAllocs()
			for b.Loop() {
				l.Allow()
			}
		})
		b.Run(c.name+"/x-time-rate", func(b *testing.B) {
			l := rate.NewLimiter(rate.Limit(c.rate), max(1, int(c.rate)))
			b.ReportAllocs()
			for b.Loop() {
				l.Allow()
			}
		})
	}
}

func BenchmarkAllowParallel(b *testing.B) {
	for _, c := range allowCases {
		b.Run(c.name+"/sluice", func(b *testing.B) {
			l := NewLimiter(c.rate, 1)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					l.Allow()
				}
			})
		})
		b.Run(c.name+"/x-time-rate", func(b *testing.B) {
			l := rate.NewLimiter(rate.Limit(c.rate), max(1, int(c.rate)))
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					l.Allow()
				}
			})
		})
	}
}

var allowCases = []struct {
	name string
	rate float64 // permits per second
}{
	{"admitted", 1e12},
	{"refused", 1e-3},
}

func BenchmarkWaitNoWait(b *testing.B) {
	ctx := context.Background()
	b.Run("sluice", func(b *testing.B) {
		l := NewLimiter(1e12, 1)
		b.ReportAllocs()
		for b.Loop() {
			_ = l.Wait(ctx)
		}
	})
	b.Run("x-time-rate", func(b *testing.B) {
		l := rate.NewLimiter(rate.Limit(1e12), 1e12)
		b.ReportAllocs()
		for b.Loop() {
			_ = l.Wait(ctx)
		}
	})
}

func BenchmarkWaitNoWaitParallel(b *testing.B) {
	ctx := context.Background()
	b.Run("sluice", func(b *testing.B) {
		l := NewLimiter(1e12, 1)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				_ = l.Wait(ctx)
			}
		})
	})
	b.Run("x-time-rate", func(b *testing.B) {
		l := rate.NewLimiter(rate.Limit(1e12), 1e12)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				_ = l.Wait(ctx)
			}
		})
	})
}
