package quota_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/resources"
	"github.com/sluice-rl/sluice/server/capacity"
	"github.com/sluice-rl/sluice/server/rlqs/quota"
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

// TestLifecycle drives one session on a hand-moved clock: the first
// report gets an assignment whose time to live is the lease's; reports
// with the same demand send nothing until the refresh is due, and then
// the same rate (which the proxy extends); a bucket counting no request
// for its lease length is abandoned and its lease released.
func TestLifecycle(t *testing.T) {
	clock := testutil.NewClock(time.Unix(1_000_000, 0))
	c := leaser(t, clock, fairShare(10, 4))
	s := quota.New("envoy", c, quota.Options{UnconfiguredTTL: time.Minute, Smoothing: 0.5}, quota.Discard)
	ctx := context.Background()
	report := func(demand float64) []quota.Action {
		t.Helper()
		as, err := s.Report(ctx, clock.Now(), []quota.Usage{{Resource: "d/name=a", Requests: demand, Elapsed: 1}})
		if err != nil {
			t.Fatal(err)
		}
		return as
	}
	as := report(40)
	if len(as) != 1 || as[0].Kind != quota.Assign || as[0].Rate > 40 || as[0].Rate < 39 || as[0].TTL != 10*time.Second {
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
	// (the session paces its requests itself).
	clock.Advance(3 * time.Second)
	as, err := s.Tick(ctx, clock.Now())
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
		if as, err := s.Tick(ctx, clock.Now()); err != nil || len(as) > 0 && as[0].Kind == quota.Abandon {
			t.Fatalf("%v %+v before the lease length ran out", err, as)
		}
	}
	clock.Advance(2 * time.Second) // 11 s: 1 s + the lease length
	as, err = s.Tick(ctx, clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(as) != 1 || as[0].Kind != quota.Abandon {
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
	s := quota.New("envoy", c, quota.Options{DenyUnconfigured: true, UnconfiguredTTL: 10 * time.Second}, quota.Discard)
	as, err := s.Report(context.Background(), clock.Now(), []quota.Usage{{Resource: "d/name=a", Requests: 1, Elapsed: 1}})
	if err != nil || len(as) != 1 || as[0].Kind != quota.DenyAll || as[0].TTL != 10*time.Second {
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
	s := quota.New("envoy", c, quota.Options{UnconfiguredTTL: 10 * time.Second}, quota.Discard)
	ctx := context.Background()
	usage := []quota.Usage{{Resource: "d/name=a", Requests: 30, Elapsed: 1}}
	if as, err := s.Report(ctx, clock.Now(), usage); err != nil || len(as) != 1 || as[0].Kind != quota.AllowAll {
		t.Fatalf("%+v %v, want ALLOW_ALL", as, err)
	}
	c.SetConfig(withTemplate)
	clock.Advance(5 * time.Second) // half the unconfigured answer's time to live
	if _, err := s.Report(ctx, clock.Now(), usage); err != nil {
		t.Fatal(err)
	}
	as, err := s.Tick(ctx, clock.Now())
	if err != nil || len(as) != 1 || as[0].Kind != quota.Assign || as[0].Rate < 29 || as[0].Rate > 30 {
		t.Fatalf("after the template was added: %+v %v, want an assignment of about 30", as, err)
	}
	if st, err := c.Status("d/name=a"); err != nil || st.Clients != 1 {
		t.Fatalf("the bucket's lease: %+v %v", st, err)
	}
	c.SetConfig(parse(t, empty))
	clock.Advance(4 * time.Second) // the refresh
	as, err = s.Report(ctx, clock.Now(), usage)
	if err != nil || len(as) != 1 || as[0].Kind != quota.AllowAll {
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
	s := quota.New("envoy", c, quota.Options{UnconfiguredTTL: time.Minute}, quota.Discard)
	as, err := s.Report(context.Background(), clock.Now(), []quota.Usage{{Resource: "d/name=a", Requests: 40, Elapsed: 1}})
	if err != nil || len(as) != 1 || as[0].TTL != 4*time.Second {
		t.Fatalf("first report: %+v, %v; want an assignment for 4 s", as, err)
	}
	if next := s.Next(); !next.Equal(time.Unix(1_000_002, 0)) {
		t.Fatalf("renewal due at %v, want halfway to the lease's end (2 s)", next)
	}
}
