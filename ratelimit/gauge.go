package ratelimit

import (
	"container/list"
	"context"
	"fmt"
	"math"
	"sync"
)

// Gauge is a counting semaphore for in-flight limits: at most
// floor(capacity) holders at once. Lowering the capacity never revokes a
// held slot: it only stops new acquisitions until enough holders release.
// Waiters are served first come, first served. It is safe for concurrent
// use. The zero value is a gauge of capacity 0, as NewGauge(0) returns: it
// admits nothing (TryAcquire is false, Acquire waits) until SetCapacity
// raises its capacity. A Gauge must not be copied after first use.
//
// Source: doorman-design.md, "Client library" (GaugeResource).
type Gauge struct {
	mu       sync.Mutex
	capacity float64
	slots    int64 // floor(capacity), MaxInt64 for +Inf
	inUse    int64
	waiters  list.List // of chan struct{}
}

// NewGauge returns a gauge of the given capacity (negative or NaN: 0;
// +Inf: unlimited).
func NewGauge(capacity float64) *Gauge {
	g := &Gauge{}
	g.setLocked(capacity)
	return g
}

func (g *Gauge) setLocked(c float64) {
	switch {
	case !(c > 0):
		c = 0
		g.slots = 0
	case c >= math.MaxInt64:
		g.slots = math.MaxInt64
	default:
		g.slots = int64(math.Floor(c))
	}
	g.capacity = c
}

// Capacity returns the capacity.
func (g *Gauge) Capacity() float64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.capacity
}

// InUse returns the number of slots held.
func (g *Gauge) InUse() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return int(g.inUse)
}

// SetCapacity changes the capacity at once and wakes waiters that now fit.
func (g *Gauge) SetCapacity(c float64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.setLocked(c)
	g.wakeLocked()
}

func (g *Gauge) wakeLocked() {
	for g.waiters.Len() > 0 && g.inUse < g.slots {
		e := g.waiters.Front()
		g.waiters.Remove(e)
		g.inUse++
		close(e.Value.(chan struct{}))
	}
}

// TryAcquire takes a slot if one is free now (and nobody is waiting).
func (g *Gauge) TryAcquire() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.inUse < g.slots && g.waiters.Len() == 0 {
		g.inUse++
		return true
	}
	return false
}

// Acquire blocks until a slot is free and takes it, or returns an error
// wrapping ctx.Err() (at once if ctx is already done).
func (g *Gauge) Acquire(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("ratelimit: gauge: %w", err)
	}
	g.mu.Lock()
	if g.inUse < g.slots && g.waiters.Len() == 0 {
		g.inUse++
		g.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	e := g.waiters.PushBack(ch)
	g.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		g.mu.Lock()
		defer g.mu.Unlock()
		select {
		case <-ch: // granted meanwhile: hand the slot on
			g.inUse--
			g.wakeLocked()
		default:
			g.waiters.Remove(e)
		}
		return fmt.Errorf("ratelimit: gauge: %w", ctx.Err())
	}
}

// Release gives a slot back. Releasing more than is held is a no-op.
func (g *Gauge) Release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.inUse > 0 {
		g.inUse--
	}
	g.wakeLocked()
}
