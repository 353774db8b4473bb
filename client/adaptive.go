package client

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-rl/sluice/internal/demand"
)

// AdaptiveOptions tune adaptive demand: a resource that asks the server for
// what the process actually uses instead of a fixed wants.
type AdaptiveOptions struct {
	// Interval is how often demand is measured and wants updated
	// (default 1 s).
	Interval time.Duration
	// Smoothing is the weight of the newest measurement in the
	// exponentially weighted moving average, in (0, 1] (default 0.5:
	// a step change is 94 % learned after four intervals).
	Smoothing float64
	// Headroom is the fraction added to the measured demand (default
	// 0.2), so that demand held back by the limiter itself can grow into
	// the capacity asked for: a process that waits on its limiter uses
	// at most its lease, and asking for a fifth more lets it show more.
	Headroom float64
	// Min and Max bound the wants asked for (Max 0: no upper bound).
	Min, Max float64
}

func (o AdaptiveOptions) withDefaults() AdaptiveOptions {
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	if !(o.Smoothing > 0 && o.Smoothing <= 1) {
		o.Smoothing = demand.DefaultSmoothing
	}
	if !(o.Headroom >= 0) || math.IsInf(o.Headroom, 0) {
		o.Headroom = 0.2
	}
	if !(o.Min >= 0) {
		o.Min = 0
	}
	return o
}

// DemandEstimator turns observations of use into wants: an exponentially
// weighted moving average of the demand measured each interval, plus
// headroom, within bounds. It is deterministic (time is passed in) and safe
// for concurrent use. The average is package internal/demand's, the one
// rule Sluice estimates demand with.
type DemandEstimator struct {
	opts AdaptiveOptions
	mu   sync.Mutex
	avg  demand.Average
}

// NewDemandEstimator returns an estimator with opts (see AdaptiveOptions
// for the defaults).
func NewDemandEstimator(opts AdaptiveOptions) *DemandEstimator {
	return &DemandEstimator{opts: opts.withDefaults()}
}

// Observe records one interval's demand (permits per second for a rate,
// peak concurrency for a gauge) and returns the wants to ask for:
// max(Min, min(Max, ewma × (1 + Headroom))).
func (e *DemandEstimator) Observe(d float64) float64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	w := e.avg.Observe(d, e.opts.Smoothing) * (1 + e.opts.Headroom)
	if e.opts.Max > 0 {
		w = math.Min(w, e.opts.Max)
	}
	return math.Max(w, e.opts.Min)
}

// adapter measures a limiter's use and adapts its resource's wants.
type adapter struct {
	est       *DemandEstimator
	requested atomic.Int64 // permits asked for since the last interval (×1000)
	stop      context.CancelFunc
	done      chan struct{}
}

// runAdapter measures every interval with measure (which is given the
// time since the last measurement, by the client's clock now, and returns
// that interval's demand and resets its counters) and asks res for the
// estimator's wants, until ctx ends. The intervals are waited on a ticker
// (real time, or a testing/synctest bubble's fake time); every time reading
// is the client's clock. When that clock has not moved since the last
// measurement (a virtual clock standing still), nothing is measured: what
// was counted carries over to the next interval.
func runAdapter(ctx context.Context, res *Resource, est *DemandEstimator, interval time.Duration, now func() time.Time, measure func(time.Duration) float64, done chan struct{}) {
	defer close(done)
	t := time.NewTicker(interval)
	defer t.Stop()
	last := now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			at := now()
			elapsed := at.Sub(last)
			if elapsed <= 0 {
				continue
			}
			last = at
			if err := res.Ask(est.Observe(measure(elapsed))); err != nil {
				return // the handle was released
			}
		}
	}
}

// Adapt puts the limiter's resource in adaptive mode: every opts.Interval
// the limiter measures the permits the process asked of it (Allow, Wait,
// Reserve — granted or not) per second of the client's clock (WithClock)
// and asks the server for that, smoothed, with headroom, within bounds (see
// AdaptiveOptions), instead of a fixed wants. The intervals are waited on a
// ticker, so tests run it on fake time (testing/synctest); an interval in
// which the client's clock did not move measures nothing. It runs one
// goroutine, which stops when ctx ends or the resource is released.
// Calling it again replaces the previous adaptation. Safe for concurrent
// use.
func (l *RateLimiter) Adapt(ctx context.Context, opts AdaptiveOptions) {
	opts = opts.withDefaults()
	l.mu.Lock()
	if l.adapt != nil {
		l.adapt.stop()
		<-l.adapt.done
	}
	ctx, cancel := context.WithCancel(ctx)
	a := &adapter{est: NewDemandEstimator(opts), stop: cancel, done: make(chan struct{})}
	l.adapt = a
	l.mu.Unlock()
	go runAdapter(ctx, l.res, a.est, opts.Interval, l.res.c.now, func(elapsed time.Duration) float64 {
		n := float64(a.requested.Swap(0)) / 1000
		return n / elapsed.Seconds()
	}, a.done)
}

// count records n permits asked for (adaptive mode).
func (l *RateLimiter) count(n int) {
	l.mu.Lock()
	a := l.adapt
	l.mu.Unlock()
	if a != nil && n > 0 {
		a.requested.Add(int64(n) * 1000)
	}
}

// Adapt puts the gauge's resource in adaptive mode: every opts.Interval it
// measures the peak concurrency the process asked for (slots held plus
// callers waiting) and asks the server for that, smoothed, with headroom,
// within bounds. Intervals, the client's clock and the goroutine are as for
// RateLimiter.Adapt.
func (g *Gauge) Adapt(ctx context.Context, opts AdaptiveOptions) {
	opts = opts.withDefaults()
	g.mu.Lock()
	if g.adapt != nil {
		g.adapt.stop()
		<-g.adapt.done
	}
	ctx, cancel := context.WithCancel(ctx)
	a := &adapter{est: NewDemandEstimator(opts), stop: cancel, done: make(chan struct{})}
	g.adapt = a
	g.mu.Unlock()
	go runAdapter(ctx, g.res, a.est, opts.Interval, g.res.c.now, func(time.Duration) float64 {
		peak := float64(g.peak.Swap(g.asking.Load()))
		return peak
	}, a.done)
}
