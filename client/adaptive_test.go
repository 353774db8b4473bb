package client_test

import (
	"context"
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-rl/sluice/client"
	"github.com/sluice-rl/sluice/server/capacity"
)

func TestDemandEstimator(t *testing.T) {
	e := client.NewDemandEstimator(client.AdaptiveOptions{Smoothing: 0.5, Headroom: 0.25, Min: 2, Max: 100})
	for i, c := range []struct{ in, want float64 }{
		{40, 50},          // first observation taken as is, +25 %
		{80, 75},          // ewma 60
		{1000, 100},       // ewma 530, capped at Max
		{0, 100},          // 265
		{math.NaN(), 100}, // bad input counts as 0: 132.5
		{0, 82.8125},      // 66.25
		{-5, 41.40625},    // 33.125
		{0, 20.703125},    // 16.5625
		{0, 10.3515625},   // 8.28125
		{0, 5.17578125},   // 4.140625
		{0, 2.587890625},  // 2.0703125
		{0, 2},            // floored at Min
	} {
		if got := e.Observe(c.in); math.Abs(got-c.want) > 1e-9 {
			t.Fatalf("observation %d (%v): wants %v, want %v", i, c.in, got, c.want)
		}
	}
}

// fakeTimeClient is a client of an in-process server, refreshed by hand,
// for tests inside a synctest bubble.
func fakeTimeClient(t *testing.T) *client.Client {
	srv := capacity.New(capacity.Options{Address: "s:1", Logger: quiet})
	c, err := client.New("s:1", manualOf(capacity.InProcessClient(srv)), client.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Adaptive demand follows a workload that changes, up and down, within a
// few intervals (on fake time).
func TestAdaptiveRateFollowsWorkload(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := fakeTimeClient(t)
		res, err := c.Resource("r", 1)
		if err != nil {
			t.Fatal(err)
		}
		lim := client.NewRateLimiter(res, 1)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		lim.Adapt(ctx, client.AdaptiveOptions{Interval: time.Second, Smoothing: 0.5, Headroom: 0.2})
		rate := func(perSecond int, d time.Duration) {
			end := time.Now().Add(d)
			for time.Now().Before(end) {
				lim.Allow()
				time.Sleep(time.Second / time.Duration(perSecond))
			}
		}
		near := func(what string, got, want float64) {
			t.Helper()
			if math.Abs(got-want) > 0.1*want {
				t.Fatalf("%s: wants %v, want %v ± 10 %%", what, got, want)
			}
		}
		// Off the adapter's ticks (whole seconds from Adapt): a hit at the
		// very instant of a tick may count in either interval, as the
		// bubble runs the two goroutines in either order.
		time.Sleep(time.Second / 400)
		rate(50, 6*time.Second)
		near("after 6 s at 50/s", res.Wants(), 60)
		rate(10, 6*time.Second)
		near("6 s after dropping to 10/s", res.Wants(), 1.2*(10+40*math.Pow(0.5, 6)))
		rate(200, 6*time.Second)
		near("6 s after rising to 200/s", res.Wants(), 1.2*(200-190*math.Pow(0.5, 6)))
		// Idle: demand decays towards 0.
		time.Sleep(10 * time.Second)
		if w := res.Wants(); w > 1 {
			t.Fatalf("after 10 s idle wants %v", w)
		}
		cancel()
		synctest.Wait()
	})
}

// A gauge in adaptive mode asks for its peak concurrency (held plus
// waiting).
func TestAdaptiveGauge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := fakeTimeClient(t)
		res, _ := c.Resource("g", 0)
		g := client.NewGauge(res)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		g.Adapt(ctx, client.AdaptiveOptions{Interval: time.Second, Smoothing: 1, Headroom: 0})
		// Three callers at once; capacity 0, so they wait: demand 3.
		for range 3 {
			go func() { _ = g.Acquire(ctx) }()
		}
		time.Sleep(1500 * time.Millisecond)
		if w := res.Wants(); w != 3 {
			t.Fatalf("wants %v with three callers asking, want 3", w)
		}
		cancel()
		synctest.Wait()
	})
}

// Adaptive demand is measured per second of the client's clock
// (WithClock), not of time.Now: here the client's clock runs ten times
// faster than the bubble's time that paces the intervals, so 100 permits
// asked per interval are 10 per client second. A client clock that stands
// still measures nothing (the permits count towards the next interval in
// which it moves).
func TestAdaptiveUsesClientClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clock := newFakeClock()
		c, _ := manualClient(t, listenerCfg, clock)
		res, err := c.Resource("r", 1)
		if err != nil {
			t.Fatal(err)
		}
		lim := client.NewRateLimiter(res, 1)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		lim.Adapt(ctx, client.AdaptiveOptions{Interval: time.Second, Smoothing: 1, Headroom: 0.2})
		interval := func(permits int, clientTime time.Duration) {
			for range permits {
				lim.Allow()
			}
			clock.Advance(clientTime)
			time.Sleep(time.Second)
			synctest.Wait()
		}
		interval(100, 0) // the client's clock stands still: nothing measured
		if w := res.Wants(); w != 1 {
			t.Fatalf("wants %v after an interval in which the client's clock stood still, want 1 (unchanged)", w)
		}
		interval(100, 10*time.Second) // 200 permits in 10 client seconds
		if w, want := res.Wants(), 1.2*20; math.Abs(w-want) > 1e-9 {
			t.Fatalf("wants %v, want %v (20 permits per client second, +20 %%)", w, want)
		}
		interval(100, 10*time.Second)
		if w, want := res.Wants(), 1.2*10; math.Abs(w-want) > 1e-9 {
			t.Fatalf("wants %v, want %v (10 permits per client second, +20 %%)", w, want)
		}
		cancel()
		synctest.Wait()
	})
}
