package state_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	pb "github.com/sluice-rl/sluice/api/doorman"
	"github.com/sluice-rl/sluice/api/doorman/doormanconnect"
	"github.com/sluice-rl/sluice/internal/hooks"
	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/resources"
	"github.com/sluice-rl/sluice/server/capacity"
	"github.com/sluice-rl/sluice/server/rlqs/state"
	"github.com/sluice-rl/sluice/server/status/view"
)

// fairShare is a configuration of one FAIR_SHARE template "d/*" of
// capacity 100, out of learning mode, with the lease length and refresh
// interval given (seconds).
func fairShare(leaseLength, refresh int) string {
	return fmt.Sprintf(`
resources:
  - identifier_glob: "d/*"
    capacity: 100
    algorithm: {kind: FAIR_SHARE, lease_length: %d, refresh_interval: %d, learning_mode_duration: 0}
`, leaseLength, refresh)
}

// parse parses config, failing the test on an error.
func parse(t *testing.T, config string) *resources.Repository {
	t.Helper()
	repo, err := resources.Parse([]byte(config))
	if err != nil {
		t.Fatal(err)
	}
	return repo
}

// leaser returns a root capacity service of config on clock.
func leaser(t *testing.T, clock *testutil.Clock, config string) *capacity.Service {
	return capacity.New(capacity.Options{ID: "root", Config: parse(t, config), Now: clock.Now, Logger: testutil.Logger()})
}

// TestLifecycle drives one stream on a hand-moved clock: the first
// report gets an assignment whose time to live is the lease's; reports
// with the same demand send nothing until the refresh is due, and then
// the same rate (which the proxy extends); a bucket counting no request
// for its lease length is abandoned and its lease released.
func TestLifecycle(t *testing.T) {
	clock := testutil.NewClock(time.Unix(1_000_000, 0))
	c := leaser(t, clock, fairShare(10, 4))
	s := state.New("envoy", c, state.Options{UnconfiguredTTL: time.Minute, Smoothing: 0.5}, state.Discard)
	ctx := context.Background()
	report := func(demand float64) []state.Action {
		t.Helper()
		as, err := state.Perform(ctx, c, s, s.Report(clock.Now(), []state.Usage{{Resource: "d/name=a", Requests: demand, Elapsed: 1}}))
		if err != nil {
			t.Fatal(err)
		}
		return as
	}
	as := report(40)
	if len(as) != 1 || as[0].Kind != state.Assign || as[0].Rate > 40 || as[0].Rate < 39 || as[0].TTL != 10*time.Second {
		t.Fatalf("first report: %+v, want an assignment of about 40 for 10 s", as)
	}
	rate := as[0].Rate
	clock.Advance(time.Second)
	if as := report(40); len(as) != 0 {
		t.Fatalf("a report with the same demand before the refresh: %+v, want nothing", as)
	}
	if next := s.Next(); !next.Equal(time.Unix(1_000_004, 0)) {
		t.Fatalf("next due at %v, want the refresh 4 s after the decision", next)
	}
	// Due at 4 s: decided then, though within Doorman's 5-second rule
	// (the stream paces its requests itself).
	clock.Advance(3 * time.Second)
	as, err := state.Perform(ctx, c, s, s.Tick(clock.Now()))
	if err != nil {
		t.Fatal(err)
	}
	if len(as) != 1 || as[0].Rate != rate || as[0].TTL != 10*time.Second {
		t.Fatalf("renewal: %+v, want rate %v again for 10 s", as, rate)
	}
	// No request from now on: abandoned a lease length after the last
	// report that counted one (at 1 s), its lease released.
	clock.Advance(time.Second)
	for range 2 { // at 7 s and 9 s
		clock.Advance(2 * time.Second)
		report(0)
		if as, err := state.Perform(ctx, c, s, s.Tick(clock.Now())); err != nil || len(as) > 0 && as[0].Kind == state.Abandon {
			t.Fatalf("%v %+v before the lease length ran out", err, as)
		}
	}
	clock.Advance(2 * time.Second) // 11 s: 1 s + the lease length
	as, err = state.Perform(ctx, c, s, s.Tick(clock.Now()))
	if err != nil {
		t.Fatal(err)
	}
	if len(as) != 1 || as[0].Kind != state.Abandon {
		t.Fatalf("after a lease length without requests: %+v, want an abandon", as)
	}
	if st, err := c.Status("d/name=a"); err == nil && st.Clients != 0 {
		t.Errorf("the abandoned bucket's lease is still held: %+v", st)
	}
	if !s.Next().IsZero() {
		t.Errorf("next due at %v with no bucket", s.Next())
	}
}

// TestUnconfigured: a bucket no template matches gets the blanket answer,
// renewed at half its time to live; nothing is leased.
func TestUnconfigured(t *testing.T) {
	clock := testutil.NewClock(time.Unix(1_000_000, 0))
	c := leaser(t, clock, "resources: []\n")
	s := state.New("envoy", c, state.Options{Unconfigured: typev3.RateLimitStrategy_DENY_ALL, UnconfiguredTTL: 10 * time.Second}, state.Discard)
	as, err := state.Perform(context.Background(), c, s, s.Report(clock.Now(), []state.Usage{{Resource: "d/name=a", Requests: 1, Elapsed: 1}}))
	if err != nil || len(as) != 1 || as[0].Kind != state.Blanket || as[0].Rule != typev3.RateLimitStrategy_DENY_ALL || as[0].TTL != 10*time.Second {
		t.Fatalf("%+v %v, want DENY_ALL for 10 s", as, err)
	}
	if next := s.Next(); !next.Equal(clock.Now().Add(5 * time.Second)) {
		t.Errorf("next due at %v, want in 5 s", next)
	}
	if _, err := c.Status("d/name=a"); err == nil {
		t.Error("an unconfigured bucket was leased")
	}
}

// TestLiveReload: a template added for an unconfigured bucket leases it at
// its next renewal; a template removed turns a leased bucket unconfigured
// at its next decision, its lease released.
func TestLiveReload(t *testing.T) {
	clock := testutil.NewClock(time.Unix(1_000_000, 0))
	const empty = "resources: []\n"
	c := leaser(t, clock, empty)
	withTemplate := parse(t, fairShare(10, 4))
	s := state.New("envoy", c, state.Options{UnconfiguredTTL: 10 * time.Second}, state.Discard)
	ctx := context.Background()
	usage := []state.Usage{{Resource: "d/name=a", Requests: 30, Elapsed: 1}}
	if as, err := state.Perform(ctx, c, s, s.Report(clock.Now(), usage)); err != nil || len(as) != 1 || as[0].Kind != state.Blanket || as[0].Rule != typev3.RateLimitStrategy_ALLOW_ALL {
		t.Fatalf("%+v %v, want ALLOW_ALL", as, err)
	}
	c.SetConfig(withTemplate)
	clock.Advance(5 * time.Second) // half the unconfigured answer's time to live
	if _, err := state.Perform(ctx, c, s, s.Report(clock.Now(), usage)); err != nil {
		t.Fatal(err)
	}
	as, err := state.Perform(ctx, c, s, s.Tick(clock.Now()))
	if err != nil || len(as) != 1 || as[0].Kind != state.Assign || as[0].Rate < 29 || as[0].Rate > 30 {
		t.Fatalf("after the template was added: %+v %v, want an assignment of about 30", as, err)
	}
	if st, err := c.Status("d/name=a"); err != nil || st.Clients != 1 {
		t.Fatalf("the bucket's lease: %+v %v", st, err)
	}
	c.SetConfig(parse(t, empty))
	clock.Advance(4 * time.Second) // the refresh
	as, err = state.Perform(ctx, c, s, s.Report(clock.Now(), usage))
	if err != nil || len(as) != 1 || as[0].Kind != state.Blanket || as[0].Rule != typev3.RateLimitStrategy_ALLOW_ALL {
		t.Fatalf("after the template was removed: %+v %v, want ALLOW_ALL", as, err)
	}
	if st, err := c.Status("d/name=a"); err == nil && st.Clients != 0 {
		t.Errorf("the unconfigured bucket's lease is still held: %+v", st)
	}
}

// TestRenewBeforeExpiry: a lease whose refresh interval is not shorter
// than what is left of it (an intermediate's leases end with its own) is
// renewed halfway to its expiry, not after it has ended.
func TestRenewBeforeExpiry(t *testing.T) {
	clock := testutil.NewClock(time.Unix(1_000_000, 0))
	c := leaser(t, clock, fairShare(4, 4))
	s := state.New("envoy", c, state.Options{UnconfiguredTTL: time.Minute}, state.Discard)
	as, err := state.Perform(context.Background(), c, s, s.Report(clock.Now(), []state.Usage{{Resource: "d/name=a", Requests: 40, Elapsed: 1}}))
	if err != nil || len(as) != 1 || as[0].TTL != 4*time.Second {
		t.Fatalf("first report: %+v, %v; want an assignment for 4 s", as, err)
	}
	if next := s.Next(); !next.Equal(time.Unix(1_000_002, 0)) {
		t.Fatalf("renewal due at %v, want halfway to the lease's end (2 s)", next)
	}
}

// generous bounds a wait for an outcome that, when the code is right, is
// immediate: it fails a test that would otherwise hang, and is no timing
// claim.
const generous = 20 * time.Second

// heldLeaser is the capacity service with its GetCapacityPaced held:
// entered receives when a call starts, which then waits until release is
// closed.
type heldLeaser struct {
	*capacity.Service
	entered, release chan struct{}
}

func (l heldLeaser) GetCapacityPaced(ctx context.Context, req *pb.GetCapacityRequest) (*pb.GetCapacityResponse, error) {
	l.entered <- struct{}{}
	<-l.release
	return l.Service.GetCapacityPaced(ctx, req)
}

// TestStatusReadDuringCapacityCall: while a report's GetCapacity is in
// flight (held until the test releases it, as an intermediate's may wait
// on its parent), the status page's read of the stream (Buckets), Next
// and Conflict return at once with the state the report left; the
// answer, once it comes, is applied.
func TestStatusReadDuringCapacityCall(t *testing.T) {
	clock := testutil.NewClock(time.Unix(1_000_000, 0))
	c := leaser(t, clock, fairShare(10, 4))
	s := state.New("envoy", c, state.Options{UnconfiguredTTL: time.Minute, Smoothing: 0.5}, state.Discard)
	held := heldLeaser{Service: c, entered: make(chan struct{}), release: make(chan struct{})}
	type result struct {
		as  []state.Action
		err error
	}
	done := make(chan result, 1)
	go func() {
		as, err := state.Perform(t.Context(), held, s, s.Report(clock.Now(), []state.Usage{{Resource: "d/name=a", Requests: 40, Elapsed: 1}}))
		done <- result{as, err}
	}()
	select {
	case <-held.entered:
	case <-time.After(generous):
		t.Fatal("the report asked for no lease")
	}
	read := make(chan []view.BucketStatus, 1)
	go func() {
		_ = s.Next()
		_ = s.Conflict([]state.Usage{{Resource: "d/name=a"}})
		read <- s.Buckets()
	}()
	select {
	case bs := <-read:
		if len(bs) != 1 || bs[0].Wants != 40 || bs[0].Sent {
			t.Errorf("during the call: %+v, want the bucket wanting 40, nothing sent yet", bs)
		}
	case <-time.After(generous):
		t.Fatal("the status read waited on the capacity call in flight")
	}
	close(held.release)
	r := <-done
	if r.err != nil || len(r.as) != 1 || r.as[0].Kind != state.Assign {
		t.Fatalf("after the call: %+v %v, want an assignment", r.as, r.err)
	}
	if bs := s.Buckets(); len(bs) != 1 || !bs[0].Sent || bs[0].Assigned != r.as[0].Rate {
		t.Errorf("after the call: %+v, want the assignment sent", bs)
	}
}

// TestReady: a stream makes no capacity call itself. A report returns
// the one request to make; a redirect for an answer is ErrNotMaster; the
// end of the stream returns the release of every lease it held, which
// gives the capacity back.
func TestReady(t *testing.T) {
	clock := testutil.NewClock(time.Unix(1_000_000, 0))
	c := leaser(t, clock, fairShare(10, 4))
	s := state.New("envoy", c, state.Options{UnconfiguredTTL: time.Minute}, state.Discard)
	us := []state.Usage{{Resource: "d/name=a", Requests: 40, Elapsed: 1}, {Resource: "d/name=b", Requests: 20, Elapsed: 1}}
	rd := s.Report(clock.Now(), us)
	if rd.Ask == nil || len(rd.Ask.GetResource()) != 2 || rd.Ask.GetClientId() != "envoy" || len(rd.Release) != 0 || len(rd.Send) != 0 {
		t.Fatalf("first report: %+v, want one request for both buckets", rd)
	}
	if _, err := c.Status("d/name=a"); err == nil {
		t.Fatal("a lease was asked for before the caller asked")
	}
	if _, err := s.Apply(rd, &pb.GetCapacityResponse{Mastership: &pb.Mastership{}}); !errors.Is(err, state.ErrNotMaster) {
		t.Fatalf("a redirect: %v, want ErrNotMaster", err)
	}
	if _, err := state.Perform(t.Context(), c, s, rd); err != nil {
		t.Fatal(err)
	}
	if st, err := c.Status("d/name=a"); err != nil || st.Clients != 1 {
		t.Fatalf("after the request: %+v %v, want the lease held", st, err)
	}
	end := s.Release()
	if len(end.Release) != 1 || len(end.Release[0].GetResourceId()) != 2 || end.Ask != nil {
		t.Fatalf("the end: %+v, want one release of both leases", end)
	}
	if len(s.Buckets()) != 0 {
		t.Errorf("buckets after the end: %+v", s.Buckets())
	}
	if _, err := state.Perform(t.Context(), c, s, end); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"d/name=a", "d/name=b"} {
		if st, err := c.Status(id); err == nil && st.Clients != 0 {
			t.Errorf("%s after the end: %+v, want no lease", id, st)
		}
	}
}

// TestMetricsAtConstruction: a stream counts in the metrics it was
// built with from its first report; a nil field counts nothing.
func TestMetricsAtConstruction(t *testing.T) {
	clock := testutil.NewClock(time.Unix(1_000_000, 0))
	c := leaser(t, clock, fairShare(10, 4))
	var buckets gauge
	var sent counter
	s := state.New("envoy", c, state.Options{UnconfiguredTTL: time.Minute}, state.Metrics{Buckets: &buckets, Sent: &sent})
	if _, err := state.Perform(t.Context(), c, s, s.Report(clock.Now(), []state.Usage{{Resource: "d/name=a", Requests: 40, Elapsed: 1}})); err != nil {
		t.Fatal(err)
	}
	if buckets != 1 || sent != 1 {
		t.Errorf("buckets %v, sent %v; want 1 and 1", buckets, sent)
	}
}

type gauge float64

func (g *gauge) Inc()          { *g++ }
func (g *gauge) Dec()          { *g-- }
func (g *gauge) Sub(v float64) { *g -= gauge(v) }

type counter int

func (c *counter) Inc() { *c++ }

// TestBurstsBounded: Envoy starts every new token bucket full, so the
// bursts of a stream that wants more than its share (its bucket runs
// empty) are bounded: its token buckets hold state.LimitedBurst's worth
// of their rate, where a stream within its share keeps the default
// burst; its increases replace its bucket at most once per
// state.MinReplaceInterval, and for an increase of less than
// state.MinIncrease at most once per state.SmallIncreaseInterval — its
// renewals meanwhile send the rate sent before, which the proxy extends;
// a decrease is sent at once. On a virtual clock, with leases pushed.
func TestBurstsBounded(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	clock := testutil.NewClock(t0)
	c := leaser(t, clock, fairShare(20, 5))
	ctx := context.Background()
	a := state.New("a", c, state.Options{UnconfiguredTTL: time.Minute, Smoothing: 0.5}, state.Discard)
	b := state.New("b", c, state.Options{UnconfiguredTTL: time.Minute, Smoothing: 0.5}, state.Discard)
	if _, err := c.Watch("b", &capacity.Watcher{Deliver: b.Deliver, Stop: b.Stop}); err != nil {
		t.Fatal(err)
	}
	const res = "d/name=x"
	at := func(d time.Duration) { clock.Advance(t0.Add(d).Sub(clock.Now())) }
	report := func(s *state.Stream, requests, elapsed float64) []state.Action {
		t.Helper()
		as, err := state.Perform(ctx, c, s, s.Report(clock.Now(), []state.Usage{{Resource: res, Requests: requests, Elapsed: elapsed}}))
		if err != nil {
			t.Fatal(err)
		}
		return as
	}
	// pushed returns what b sends for the leases pushed to it so far.
	pushed := func() []state.Action {
		select {
		case <-b.Pushes():
			return b.ApplyPushes(clock.Now())
		default:
			return nil
		}
	}
	tick := func() []state.Action {
		t.Helper()
		as, err := state.Perform(ctx, c, b, b.Tick(clock.Now()))
		if err != nil {
			t.Fatal(err)
		}
		return as
	}
	one := func(what string, as []state.Action, rate float64, burst time.Duration) state.Action {
		t.Helper()
		if len(as) != 1 || as[0].Kind != state.Assign || as[0].Rate > rate || as[0].Rate < rate*(1-2*state.RateMargin) || as[0].Burst != burst {
			t.Fatalf("%s: %+v, want an assignment of %v less at most %v %%, holding %v's worth", what, as, rate, 200*state.RateMargin, burst)
		}
		return as[0]
	}

	// a wants 40 of 100 and gets it: within its share, a full burst.
	one("a's first report", report(a, 40, 1), 40, state.DefaultBurst)
	// b wants 120 and gets the 60 left: limited, a quarter of a second's worth.
	at(600 * time.Millisecond)
	first := one("b's first report", report(b, 120, 1), 60, state.LimitedBurst)
	if s, _ := first.Strategy(time.Second); s.TokenBucket == nil || s.TokenBucket.MaxTokens != 15 {
		t.Fatalf("b's token bucket %+v, want max_tokens 15 (60 a second for 250 ms)", s.TokenBucket)
	}
	// a's demand halves: the 20 it frees are pushed to b at once, but b's
	// bucket was replaced 0.4 s ago: the increase waits until a second
	// after that.
	at(time.Second)
	one("a's drop", report(a, 20, 1), 20, state.DefaultBurst)
	if as := pushed(); len(as) != 0 {
		t.Fatalf("an increase 0.4 s after b's bucket was replaced: %+v, want it held back", as)
	}
	if next := b.Next(); !next.Equal(t0.Add(1600 * time.Millisecond)) {
		t.Fatalf("b due at %v, want a second after its bucket was replaced", next.Sub(t0))
	}
	at(1600 * time.Millisecond)
	inc := one("the increase held back", tick(), 80, state.LimitedBurst)
	// a's demand drops by a tenth: b is pushed 2 more (2.5 %), which waits
	// for SmallIncreaseInterval after the last replacement; b's renewal
	// before then sends the rate it has, which the proxy extends.
	at(2 * time.Second)
	one("a's small drop", report(a, 16, 1), 18, state.DefaultBurst)
	if as := pushed(); len(as) != 0 {
		t.Fatalf("a small increase: %+v, want it held back", as)
	}
	at(5600 * time.Millisecond) // b's renewal: 5 s after its decision
	renewal := one("b's renewal", tick(), 80, state.LimitedBurst)
	if renewal.Rate != inc.Rate || renewal.TTL < 19*time.Second {
		t.Fatalf("b's renewal %+v, want the rate sent before (%v) for what is left of its new lease (19.4 s)", renewal, inc.Rate)
	}
	at(1600*time.Millisecond + state.SmallIncreaseInterval)
	one("the small increase held back", tick(), 82, state.LimitedBurst)
	// b's demand drops below its share within a second of that: the
	// decrease goes at once, with a full burst (b is within its share).
	at(7 * time.Second)
	one("b's drop", report(b, 70*(7-0.6), 7-0.6), 70, state.DefaultBurst)
}

// TestIntermediateLeaseStaysAssigned: on an intermediate, a stream's
// leases end with the intermediate's own lease from its parent, less
// than a second after they are granted when that lease is short and
// about to be renewed. Whatever the phase of the stream's reports against
// the intermediate's renewals, the proxy's assignment (its time to live
// as Envoy reads it: whole seconds) never lapses once granted, with short
// leases and under Doorman's 5-second rule with longer ones. (Leases of
// 5 s or less under the 5-second rule lapse at the intermediate itself:
// docs/rlqs.md.) A root and an intermediate in process, on virtual time
// (testing/synctest).
func TestIntermediateLeaseStaysAssigned(t *testing.T) {
	for _, tt := range []struct {
		name                 string
		leaseLength, refresh int
		minRequest           time.Duration // Doorman's 5-second rule (0: its default)
	}{
		{"2 s leases renewed every second", 2, 1, 200 * time.Millisecond},
		{"8 s leases under the 5-second rule", 8, 4, 0},
	} {
		for _, phase := range []time.Duration{0, 250 * time.Millisecond, 500 * time.Millisecond, 750 * time.Millisecond} {
			t.Run(fmt.Sprintf("%s, phase %v", tt.name, phase), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					first, lapses := intermediateLapses(t, fairShare(tt.leaseLength, tt.refresh), tt.minRequest, phase, 30*time.Second)
					if first < 0 || first > 10*time.Second {
						t.Fatalf("first assignment at %v, want one within 10 s", first)
					}
					if len(lapses) > 0 {
						t.Errorf("the proxy's assignment lapsed %d times, first at %v", len(lapses), lapses[0])
					}
				})
			})
		}
	}
}

// intermediateLapses runs a root of config and an intermediate under it
// (in process, on the bubble's clock) and one stream on the intermediate
// reporting a demand of 60 a second every 100 ms, starting phase after
// the servers, for d; it returns when the stream's first assignment came
// (-1: none) and when, after that, the proxy held none (its time to
// live, in whole seconds, had ended), each since the stream's start.
func intermediateLapses(t *testing.T, config string, minRequest, phase, d time.Duration) (first time.Duration, lapses []time.Duration) {
	h := func() *hooks.Server { return &hooks.Server{MinRequestInterval: minRequest} }
	root := capacity.New(capacity.Options{ID: "root", Config: parse(t, config), Logger: testutil.Logger(), Hooks: h()})
	mh := h()
	mh.ParentDial = func(string) doormanconnect.CapacityClient { return capacity.InProcessClient(root) }
	mid := capacity.New(capacity.Options{ID: "mid", Parent: []string{"root"}, Logger: testutil.Logger(), Hooks: mh})
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for _, c := range []*capacity.Service{root, mid} {
		wg.Go(func() { c.Run(ctx, 100*time.Millisecond) })
	}
	defer wg.Wait()
	defer cancel()

	time.Sleep(phase)
	s := state.New("envoy", mid, state.Options{UnconfiguredTTL: time.Minute}, state.Discard)
	start := time.Now()
	var ends time.Time // the proxy's assignment's end (zero: none yet)
	first = -1
	for elapsed := 1.0; time.Since(start) < d; elapsed = 0.1 {
		now := time.Now()
		if !ends.IsZero() && !now.Before(ends) {
			lapses = append(lapses, now.Sub(start))
		}
		as, err := state.Perform(ctx, mid, s, s.Report(now, []state.Usage{{Resource: "d/name=a", Requests: 60 * elapsed, Elapsed: elapsed}}))
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range as {
			if a.Kind == state.Assign {
				if ends.IsZero() {
					first = now.Sub(start)
				}
				ends = now.Add(a.TTL.Truncate(time.Second)) // as rlqsfilter.Bucket.Assign reads it
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return first, lapses
}
