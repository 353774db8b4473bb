package ratelimit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluice-rl/sluice/ratelimit"
)

var start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// A SmoothBursty limiter at 2 permits per second with one second of stored
// permits, on a fake clock.
func ExampleNewLimiter() {
	now := start
	l := ratelimit.NewLimiter(2, 1, ratelimit.WithClock(func() time.Time { return now }))
	fmt.Println(l.Allow(), l.Allow()) // the first is granted; the second would have to wait
	now = now.Add(500 * time.Millisecond)
	fmt.Println(l.Allow())
	now = now.Add(10 * time.Second) // idle: up to 2 permits stored
	fmt.Println(l.Tokens())
	// Output:
	// true false
	// true
	// 2
}

// Guava's SmoothWarmingUp: after disuse the first permits come slowly.
func ExampleNewWarmingUp() {
	l := ratelimit.NewWarmingUp(1, 4*time.Second, 3)
	for range 4 {
		fmt.Println(l.ReserveN(start, 1).DelayFrom(start))
	}
	// Output:
	// 0s
	// 2.5s
	// 4s
	// 5s
}

// A reservation: act after its delay, or cancel it to give the permit back.
func ExampleLimiter_ReserveN() {
	l := ratelimit.NewLimiter(10, 0)
	l.AllowN(start, 1)
	r := l.ReserveN(start, 1)
	fmt.Println("act in", r.DelayFrom(start))
	r.CancelAt(start)
	fmt.Println("after cancelling, the next is due in", l.ReserveN(start, 1).DelayFrom(start))
	// Output:
	// act in 100ms
	// after cancelling, the next is due in 100ms
}

// Wait fails at once, without waiting, when the permit would come after
// the deadline.
func ExampleLimiter_Wait() {
	l := ratelimit.NewLimiter(1, 0)
	_ = l.Wait(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	fmt.Println(l.Wait(ctx) != nil)
	// Output: true
}

// A gauge: at most floor(capacity) holders at once.
func ExampleGauge() {
	g := ratelimit.NewGauge(2)
	fmt.Println(g.TryAcquire(), g.TryAcquire(), g.TryAcquire())
	g.Release()
	fmt.Println(g.InUse(), g.TryAcquire())
	// Output:
	// true true false
	// 1 true
}
