package testutil

import (
	"sync"
	"time"
)

// Clock is a clock a test moves by hand. Now and Advance are safe for
// concurrent use (handlers on other goroutines may read it). The zero
// Clock reads the zero time; NewClock starts it elsewhere.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock reading start.
func NewClock(start time.Time) *Clock { return &Clock{now: start} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock d forward (backward if d < 0).
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
