package client_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/sluice-rl/sluice/api/doorman"
	"github.com/sluice-rl/sluice/api/doorman/doormanconnect"
	"github.com/sluice-rl/sluice/client"
	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/server/capacity"
)

// recorder is a capacity server stub that records each GetCapacity it
// passes on: when (by the test's clock) and for which resources with which
// wants. fail makes the next calls fail without reaching the server.
type recorder struct {
	doormanconnect.CapacityClient
	clock *testutil.Clock

	mu   sync.Mutex
	reqs []recorded
	fail int
}

type recorded struct {
	at    time.Duration // since the recorder was made
	wants map[string]float64
}

func (r *recorded) ids() []string {
	var ids []string
	for id := range r.wants {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

func (r *recorder) GetCapacity(ctx context.Context, req *connect.Request[pb.GetCapacityRequest]) (*connect.Response[pb.GetCapacityResponse], error) {
	r.mu.Lock()
	if r.fail > 0 {
		r.fail--
		r.mu.Unlock()
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("down"))
	}
	rec := recorded{at: r.clock.Now().Sub(start), wants: map[string]float64{}}
	for _, rr := range req.Msg.GetResource() {
		rec.wants[rr.GetResourceId()] = rr.GetWants()
	}
	r.reqs = append(r.reqs, rec)
	r.mu.Unlock()
	return r.CapacityClient.GetCapacity(ctx, req)
}

func (r *recorder) requests() []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.reqs)
}

// start is where every fakeClock starts.
var start = newFakeClock().Now()

// recordedClient returns a client refreshed by hand on a fake clock, of an
// in-process server (on the same clock) holding the resources of yaml,
// through a recorder.
func recordedClient(t *testing.T, yaml string, opts ...client.Option) (*client.Client, *recorder, *testutil.Clock) {
	t.Helper()
	clock := newFakeClock()
	rec := &recorder{CapacityClient: capacity.InProcessClient(fakeServer(t, yaml, clock)), clock: clock}
	return clientOf(t, rec, clock, opts...), rec, clock
}

// stepEvery calls Step every tick for d of the fake clock, more often than
// the client asks to be stepped: the client alone keeps to its schedule.
func stepEvery(c *client.Client, clock *testutil.Clock, tick, d time.Duration) {
	end := clock.Now().Add(d)
	for {
		step(c)
		if !clock.Now().Before(end) {
			return
		}
		clock.Advance(tick)
	}
}

// stepAsAsked runs the client as its loop does, for d of the fake clock:
// it steps again when the previous Step said.
func stepAsAsked(c *client.Client, clock *testutil.Clock, d time.Duration) {
	end := clock.Now().Add(d)
	for {
		next := step(c)
		if clock.Now().Add(next).After(end) {
			clock.Advance(end.Sub(clock.Now()))
			return
		}
		clock.Advance(next)
	}
}

func times(reqs []recorded) []time.Duration {
	var ts []time.Duration
	for _, r := range reqs {
		ts = append(ts, r.at)
	}
	return ts
}

func secs(s ...float64) []time.Duration {
	var ds []time.Duration
	for _, x := range s {
		ds = append(ds, time.Duration(x*float64(time.Second)))
	}
	return ds
}

const intervalCfg = `
resources:
  - identifier_glob: one
    capacity: 100
    algorithm: {kind: FAIR_SHARE, lease_length: 60, refresh_interval: 1, learning_mode_duration: 0}
  - identifier_glob: eight
    capacity: 100
    algorithm: {kind: FAIR_SHARE, lease_length: 60, refresh_interval: 8, learning_mode_duration: 0}
  - identifier_glob: thirty
    capacity: 100
    algorithm: {kind: FAIR_SHARE, lease_length: 60, refresh_interval: 30, learning_mode_duration: 0}
`

// The client refreshes at the smallest refresh interval granted among its
// leases — here 8 s, between the 5 s default and the other lease's 30 s —
// all of its resources in one bulk request.
func TestRefreshesAtSmallestGrantedInterval(t *testing.T) {
	for _, drive := range []struct {
		name string
		run  func(*client.Client, *testutil.Clock)
	}{
		{"as asked", func(c *client.Client, clock *testutil.Clock) { stepAsAsked(c, clock, 40*time.Second) }},
		{"stepped every second", func(c *client.Client, clock *testutil.Clock) { stepEvery(c, clock, time.Second, 40*time.Second) }},
	} {
		t.Run(drive.name, func(t *testing.T) {
			c, rec, clock := recordedClient(t, intervalCfg)
			if _, err := c.Resource("eight", 10); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Resource("thirty", 10); err != nil {
				t.Fatal(err)
			}
			drive.run(c, clock)
			reqs := rec.requests()
			if got, want := times(reqs), secs(0, 8, 16, 24, 32, 40); !slices.Equal(got, want) {
				t.Fatalf("requests at %v, want %v", got, want)
			}
			for _, r := range reqs {
				if ids := r.ids(); !slices.Equal(ids, []string{"eight", "thirty"}) {
					t.Fatalf("request at %v carried %v, want both resources", r.at, ids)
				}
			}
		})
	}
}

// Doorman's 5-second rule, client side: a refresh interval of 1 s granted
// by the server is stretched to MinRequestInterval (5 s), however often
// Step is called.
func TestRefreshIntervalStretchedToMinRequestInterval(t *testing.T) {
	if pb.MinRequestInterval != 5*time.Second {
		t.Fatalf("MinRequestInterval %v; this test assumes 5 s", pb.MinRequestInterval)
	}
	for _, drive := range []struct {
		name string
		run  func(*client.Client, *testutil.Clock)
	}{
		{"as asked", func(c *client.Client, clock *testutil.Clock) { stepAsAsked(c, clock, 30*time.Second) }},
		{"stepped every 100 ms", func(c *client.Client, clock *testutil.Clock) {
			stepEvery(c, clock, 100*time.Millisecond, 30*time.Second)
		}},
	} {
		t.Run(drive.name, func(t *testing.T) {
			c, rec, clock := recordedClient(t, intervalCfg)
			res, err := c.Resource("one", 10)
			if err != nil {
				t.Fatal(err)
			}
			drive.run(c, clock)
			if _, _, ri, ok := res.Lease(); !ok || ri != time.Second {
				t.Fatalf("lease's refresh interval %v (ok %v), want the 1 s granted", ri, ok)
			}
			if got, want := times(rec.requests()), secs(0, 5, 10, 15, 20, 25, 30); !slices.Equal(got, want) {
				t.Fatalf("requests at %v, want every 5 s: %v", got, want)
			}
		})
	}
	c, _, _ := recordedClient(t, intervalCfg)
	if _, err := c.Resource("one", 10); err != nil {
		t.Fatal(err)
	}
	if next := step(c); next != 5*time.Second {
		t.Fatalf("Step after a grant of refresh interval 1 s asks to be called in %v, want 5s", next)
	}
}

// Wants that change inside a resource's 5 s window are sent once, with the
// latest wants, when the window ends; a change after it is sent at once.
func TestWantsChangesWithinWindowOneRequest(t *testing.T) {
	c, rec, clock := recordedClient(t, intervalCfg)
	res, err := c.Resource("thirty", 10)
	if err != nil {
		t.Fatal(err)
	}
	step := func() time.Duration { return step(c) }
	step() // t=0: the first request
	clock.Advance(time.Second)
	if err := res.Ask(20); err != nil {
		t.Fatal(err)
	}
	if next := step(); next != 4*time.Second {
		t.Fatalf("Step after a change at 1 s asks to be called in %v, want 4s (the window's end)", next)
	}
	clock.Advance(2 * time.Second)
	if err := res.Ask(30); err != nil {
		t.Fatal(err)
	}
	if next := step(); next != 2*time.Second {
		t.Fatalf("Step after a change at 3 s asks to be called in %v, want 2s", next)
	}
	stepEvery(c, clock, 500*time.Millisecond, 2*time.Second) // to t=5
	reqs := rec.requests()
	if got, want := times(reqs), secs(0, 5); !slices.Equal(got, want) {
		t.Fatalf("requests at %v, want %v: two changes inside the window, one request at its end", got, want)
	}
	if w := reqs[1].wants["thirty"]; w != 30 {
		t.Fatalf("the request at 5 s wants %v, want the latest, 30", w)
	}
	// Outside the window a change is sent at once.
	clock.Advance(7 * time.Second) // t=12
	if err := res.Ask(40); err != nil {
		t.Fatal(err)
	}
	step()
	if got, want := times(rec.requests()), secs(0, 5, 12); !slices.Equal(got, want) {
		t.Fatalf("requests at %v, want %v", got, want)
	}
}

// A new resource is sent at once, but a resource requested less than 5 s
// ago is left out of that request; the two are realigned into one bulk
// request when the first's refresh falls due.
func TestNewResourceSentAtOnceWithoutOthersInWindow(t *testing.T) {
	c, rec, clock := recordedClient(t, intervalCfg)
	if _, err := c.Resource("one", 10); err != nil {
		t.Fatal(err)
	}
	step(c) // t=0
	clock.Advance(time.Second)
	if _, err := c.Resource("eight", 10); err != nil {
		t.Fatal(err)
	}
	step(c) // t=1
	reqs := rec.requests()
	if got, want := times(reqs), secs(0, 1); !slices.Equal(got, want) {
		t.Fatalf("requests at %v, want %v: the new resource at once", got, want)
	}
	if ids := reqs[1].ids(); !slices.Equal(ids, []string{"eight"}) {
		t.Fatalf("the request at 1 s carried %v, want only the new resource", ids)
	}
	stepAsAsked(c, clock, 19*time.Second) // to t=20
	reqs = rec.requests()
	// "one" falls due at 5 s; it waits the second until "eight" may be
	// sent too, and from then on they travel together.
	if got, want := times(reqs), secs(0, 1, 6, 11, 16); !slices.Equal(got, want) {
		t.Fatalf("requests at %v, want %v", got, want)
	}
	for _, r := range reqs[2:] {
		if ids := r.ids(); !slices.Equal(ids, []string{"eight", "one"}) {
			t.Fatalf("request at %v carried %v, want both", r.at, ids)
		}
	}
}

// Retries after a failed RPC are not held back by the 5 s window: the
// failed request was never answered by a master.
func TestRetryAfterFailureNotHeldByWindow(t *testing.T) {
	c, rec, clock := recordedClient(t, intervalCfg)
	res, err := c.Resource("one", 10)
	if err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	rec.fail = 2
	rec.mu.Unlock()
	next := step(c) // t=0: fails
	if next <= 0 || next >= pb.MinRequestInterval {
		t.Fatalf("retry in %v after a failure, want a backoff under 5 s", next)
	}
	stepAsAsked(c, clock, 3*time.Second)
	if got := len(rec.requests()); got != 1 {
		t.Fatalf("%d requests reached the server, want 1 (after two failures)", got)
	}
	if res.Capacity() != 10 {
		t.Fatalf("capacity %v after the retry, want 10", res.Capacity())
	}
}
