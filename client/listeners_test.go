package client_test

import (
	"context"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/api/doorman/doormanconnect"
	"github.com/sluice-rl/sluice/client"
	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/resources"
	"github.com/sluice-rl/sluice/server/capacity"
)

// newFakeClock returns the clock the client tests move by hand.
func newFakeClock() *testutil.Clock { return testutil.NewClock(time.Unix(1_800_000_000, 0)) }

// fakeServer returns an in-process server on clock holding the resources
// of yaml.
func fakeServer(t *testing.T, yaml string, clock *testutil.Clock) *capacity.Service {
	t.Helper()
	repo, err := resources.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return capacity.New(capacity.Options{Address: "s:1", Config: repo, Now: clock.Now, Logger: quiet})
}

// clientOf returns a client of srv refreshed by hand (Step) on clock; the
// test's cleanup closes it.
func clientOf(t *testing.T, srv doormanconnect.CapacityClient, clock *testutil.Clock, opts ...client.Option) *client.Client {
	t.Helper()
	opts = append([]client.Option{manualOf(srv), client.WithClock(clock.Now), client.WithLogger(quiet)}, opts...)
	c, err := client.New("s:1", opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bounded(t, "Close", func() { c.Close() }) })
	return c
}

// manualClient returns a client refreshed by hand (Step) on clock, of an
// in-process server on the same clock holding the resources of yaml.
func manualClient(t *testing.T, yaml string, clock *testutil.Clock, opts ...client.Option) (*client.Client, *capacity.Service) {
	t.Helper()
	srv := fakeServer(t, yaml, clock)
	return clientOf(t, capacity.InProcessClient(srv), clock, opts...), srv
}

// run drives clients as their refresh loops would, on clock, for d: each is
// stepped at once, then whenever its previous Step said.
func run(clock *testutil.Clock, d time.Duration, cs ...*client.Client) {
	end := clock.Now().Add(d)
	next := make([]time.Time, len(cs))
	for {
		now := clock.Now()
		first := end
		for i, c := range cs {
			if !next[i].After(now) {
				next[i] = now.Add(max(step(c), time.Millisecond))
			}
			if next[i].Before(first) {
				first = next[i]
			}
		}
		if !now.Before(end) {
			return
		}
		clock.Advance(first.Sub(now))
	}
}

const listenerCfg = `
resources:
  - identifier_glob: r
    capacity: 100
    algorithm: {kind: FAIR_SHARE, lease_length: 20, refresh_interval: 5, learning_mode_duration: 0}
`

// bounded runs f and fails the test if it has not returned within 10 s:
// a deadlock shows as a failure, not a hung test (the stuck goroutine is
// leaked).
func bounded(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not return within 10 s: deadlocked", what)
	}
}

// Listeners never run under the client's or the resource's locks: a
// listener may call back into the client and its resource on every path
// that tells listeners (a grant or an expiry in Step, Ask, a second handle,
// Release, SetKillSwitch, Close).
func TestListenersRunWithoutClientLocks(t *testing.T) {
	for _, tt := range []struct {
		name   string
		mode   client.Mode
		change func(t *testing.T, c *client.Client, res *client.Resource, clock *testutil.Clock)
	}{
		{"grant in Step", client.Pessimistic, func(t *testing.T, c *client.Client, _ *client.Resource, _ *testutil.Clock) {
			step(c)
		}},
		{"expiry in Step", client.Pessimistic, func(t *testing.T, c *client.Client, _ *client.Resource, clock *testutil.Clock) {
			step(c)
			clock.Advance(30 * time.Second) // the 20 s lease ran out
			step(c)
		}},
		{"Ask", client.Optimistic, func(t *testing.T, _ *client.Client, res *client.Resource, _ *testutil.Clock) {
			if err := res.Ask(20); err != nil {
				t.Error(err)
			}
		}},
		{"second handle", client.Optimistic, func(t *testing.T, c *client.Client, _ *client.Resource, _ *testutil.Clock) {
			if _, err := c.Resource("r", 5); err != nil {
				t.Error(err)
			}
		}},
		{"Release of one of two handles", client.Optimistic, func(t *testing.T, c *client.Client, _ *client.Resource, _ *testutil.Clock) {
			h, err := c.Resource("r", 5)
			if err != nil {
				t.Fatal(err)
			}
			if err := h.Release(context.Background()); err != nil {
				t.Error(err)
			}
		}},
		{"Release of the last handle", client.Optimistic, func(t *testing.T, _ *client.Client, res *client.Resource, _ *testutil.Clock) {
			if err := res.Release(context.Background()); err != nil {
				t.Error(err)
			}
		}},
		{"SetKillSwitch", client.Pessimistic, func(t *testing.T, c *client.Client, _ *client.Resource, _ *testutil.Clock) {
			c.SetKillSwitch(true)
		}},
		{"Close", client.Optimistic, func(t *testing.T, c *client.Client, _ *client.Resource, _ *testutil.Clock) {
			if err := c.Close(); err != nil {
				t.Error(err)
			}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clock := newFakeClock()
			c, _ := manualClient(t, listenerCfg, clock, client.WithMode(tt.mode))
			res, err := c.Resource("r", 10)
			if err != nil {
				t.Fatal(err)
			}
			var calls atomic.Int64
			res.OnChange(func(float64) {
				calls.Add(1)
				// Everything a listener might reasonably ask.
				_ = c.Server()
				_ = c.KillSwitch()
				_ = res.Capacity()
				_, _, _, _ = res.Lease()
				_, _ = res.SafeCapacity()
				_ = res.TotalWants()
				_ = res.Ask(res.Wants()) // no change: no new notification
			})
			before := calls.Load()
			bounded(t, tt.name, func() { tt.change(t, c, res, clock) })
			if calls.Load() == before {
				t.Fatalf("%s told no listener", tt.name)
			}
		})
	}
}

// A listener may itself change the resource's capacity: the change is
// delivered, after the listener returns, to every listener and on Changes.
func TestListenerMayChangeTheCapacity(t *testing.T) {
	clock := newFakeClock()
	c, _ := manualClient(t, listenerCfg, clock, client.WithMode(client.Optimistic))
	res, err := c.Resource("r", 10)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []float64
	res.OnChange(func(v float64) {
		mu.Lock()
		seen = append(seen, v)
		mu.Unlock()
		if v == 20 {
			_ = res.Ask(30) // from inside a listener
		}
	})
	bounded(t, "Ask", func() {
		if err := res.Ask(20); err != nil {
			t.Error(err)
		}
	})
	mu.Lock()
	defer mu.Unlock()
	if want := []float64{10, 20, 30}; len(seen) != len(want) || seen[0] != 10 || seen[1] != 20 || seen[2] != 30 {
		t.Fatalf("listener saw %v, want %v", seen, want)
	}
	select {
	case v := <-res.Changes():
		if v != 30 {
			t.Fatalf("Changes has %v, want 30", v)
		}
	default:
		t.Fatal("nothing on Changes")
	}
}

// Listeners of one resource are called one at a time, and the last value
// each sees is the resource's capacity, whatever goroutines change it
// concurrently.
func TestListenersSerializedNewestLast(t *testing.T) {
	clock := newFakeClock()
	c, _ := manualClient(t, listenerCfg, clock, client.WithMode(client.Optimistic))
	res, err := c.Resource("r", 1)
	if err != nil {
		t.Fatal(err)
	}
	var inside, overlaps atomic.Int64
	var last atomic.Value
	res.OnChange(func(v float64) {
		if inside.Add(1) > 1 {
			overlaps.Add(1)
		}
		runtime.Gosched()
		last.Store(v)
		inside.Add(-1)
	})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				if g == 0 {
					c.SetKillSwitch(i%2 == 0)
					continue
				}
				h, err := c.Resource("r", float64(g*1000+i))
				if err != nil {
					t.Error(err)
					return
				}
				_ = h.Release(context.Background())
			}
		}()
	}
	bounded(t, "concurrent changes", wg.Wait)
	if n := overlaps.Load(); n > 0 {
		t.Errorf("listener calls overlapped %d times", n)
	}
	if got, want := last.Load().(float64), res.Capacity(); got != want && !(math.IsInf(got, 1) && math.IsInf(want, 1)) {
		t.Errorf("listener last saw %v, capacity is %v", got, want)
	}
}
