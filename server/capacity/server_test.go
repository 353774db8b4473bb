package capacity

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/sluice-rl/sluice/api/doorman"
	"github.com/sluice-rl/sluice/internal/testutil/fixture"
	"github.com/sluice-rl/sluice/lease"
	"github.com/sluice-rl/sluice/resources"
)

func newTestServer(tb testing.TB) *Service {
	tb.Helper()
	return newTestServerWith(tb, Options{})
}

// newTestServerWith is newTestServer with opts' Horizon and Election.
func newTestServerWith(tb testing.TB, opts Options) *Service {
	tb.Helper()
	repo, err := resources.Parse([]byte(fixture.Doorman))
	if err != nil {
		tb.Fatal(err)
	}
	return New(Options{ID: "test", Address: "127.0.0.1:1", Config: repo, Registry: prometheus.NewRegistry(),
		Horizon: opts.Horizon, Election: opts.Election})
}

// registry returns the registry s's metrics live in (newTestServer's).
func registry(tb testing.TB, s *Service) *prometheus.Registry {
	tb.Helper()
	reg, ok := s.opts.Registry.(*prometheus.Registry)
	if !ok {
		tb.Fatalf("the service's metrics are in %T, not a *prometheus.Registry", s.opts.Registry)
	}
	return reg
}

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func getCap(t *testing.T, s *Service, client, resource string, wants float64) *pb.GetCapacityResponse {
	t.Helper()
	resp, err := s.GetCapacity(context.Background(), &pb.GetCapacityRequest{
		ClientId: proto.String(client),
		Resource: []*pb.ResourceRequest{{ResourceId: proto.String(resource), Priority: proto.Int64(0), Wants: proto.Float64(wants)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestMastershipRedirectAndReset(t *testing.T) {
	s := newTestServer(t)
	if got := getCap(t, s, "a", "fair", 30).GetResponse()[0].GetGets().GetCapacity(); got != 30 {
		t.Fatalf("got %v", got)
	}
	s.SetMastership(false, "10.0.0.9:15000")
	resp := getCap(t, s, "a", "fair", 30)
	if len(resp.GetResponse()) != 0 || resp.GetMastership().GetMasterAddress() != "10.0.0.9:15000" {
		t.Fatalf("non-master answered %v", resp)
	}
	d, _ := s.Discovery(context.Background(), &pb.DiscoveryRequest{})
	if d.GetIsMaster() || d.GetMastership().GetMasterAddress() != "10.0.0.9:15000" {
		t.Fatalf("discovery %v", d)
	}
	// Winning again starts from an empty state in learning mode (the
	// lease length, 60 s): a newcomer gets 0.
	s.SetMastership(true, "")
	if _, err := s.Status("fair"); err == nil {
		t.Fatal("state survived losing mastership")
	}
	st := getCap(t, s, "b", "fair", 30)
	_ = st
	status, _ := s.Status("fair")
	if status.Learning {
		// learning_mode_duration: 0 in the template: no learning.
		t.Fatal("learning mode although the template sets learning_mode_duration 0")
	}
}

func TestConfigReloadAppliesToExistingResources(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	repo, _ := resources.Parse([]byte(fixture.Doorman))
	s := New(Options{Config: repo, Now: clk.now})
	getCap(t, s, "a", "fixed/x", 50)
	next, err := resources.Parse([]byte(`
resources:
  - identifier_glob: "fixed/*"
    capacity: 20
    algorithm: {kind: STATIC, lease_length: 20, refresh_interval: 5}
`))
	if err != nil {
		t.Fatal(err)
	}
	s.SetConfig(next)
	clk.t = clk.t.Add(pb.MinRequestInterval) // a's next request is decided, not answered early
	if got := getCap(t, s, "a", "fixed/x", 50).GetResponse()[0].GetGets().GetCapacity(); got != 20 {
		t.Fatalf("after reload got %v, want 20", got)
	}
	// A resource no template matches is granted what it asks.
	if got := getCap(t, s, "a", "unknown", 1234).GetResponse()[0].GetGets().GetCapacity(); got != 1234 {
		t.Fatalf("unmatched got %v", got)
	}
}

func TestSweepForgetsIdleResources(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	repo, _ := resources.Parse([]byte(fixture.Doorman))
	s := New(Options{Config: repo, Now: clk.now})
	getCap(t, s, "a", "fixed/x", 5)
	s.Sweep()
	if _, err := s.Status("fixed/x"); err != nil {
		t.Fatal("resource with a live lease was swept")
	}
	// The lease (20 s) and the allowance after it (lease.ExpiryAllowance).
	clk.t = clk.t.Add(21*time.Second + lease.ExpiryAllowance)
	s.Sweep()
	if _, err := s.Status("fixed/x"); err == nil {
		t.Fatal("resource without leases kept after sweep")
	}
}

// A new master learns for a lease length, unless it is told when its
// predecessor's leases end (SetLeasesEndBy): then until that at the
// latest, for resources it already knows and those it meets later, and
// not at all when that is past. A config reload keeps it; winning
// mastership again forgets it.
func TestLeasesEndBy(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	repo, err := resources.Parse([]byte(`
resources:
  - identifier_glob: "*"
    capacity: 100
    algorithm: {kind: FAIR_SHARE, lease_length: 60, refresh_interval: 10}
`))
	if err != nil {
		t.Fatal(err)
	}
	s := New(Options{Config: repo, Now: clk.now})
	s.SetMastership(false, "")
	s.SetMastership(true, "")
	learning := func(id string) bool {
		t.Helper()
		getCap(t, s, "probe", id, 1)
		st, err := s.Status(id)
		if err != nil {
			t.Fatal(err)
		}
		return st.Learning
	}
	if !learning("a") {
		t.Fatal("a new master is not learning")
	}
	s.SetLeasesEndBy(clk.t.Add(20 * time.Second))
	clk.t = clk.t.Add(21 * time.Second)
	if learning("a") || learning("b") {
		t.Fatal("learning past the end of the predecessor's leases")
	}
	s.SetConfig(repo)
	if learning("a") {
		t.Fatal("a config reload brought learning mode back")
	}
	// A new term: learning for a lease length again, unless told; a past
	// end means no learning at all.
	s.SetMastership(false, "")
	s.SetMastership(true, "")
	if !learning("a") {
		t.Fatal("a new term is not learning")
	}
	s.SetLeasesEndBy(clk.t.Add(-time.Second))
	if learning("a") {
		t.Fatal("learning although every lease of the predecessor has ended")
	}
	// A zero end changes nothing.
	s.SetMastership(false, "")
	s.SetMastership(true, "")
	s.SetLeasesEndBy(time.Time{})
	if !learning("c") {
		t.Fatal("a zero end ended learning mode")
	}
}

// A master keeps its lease horizon (Options.Horizon) before the first answer of
// its term that hands out more than 0, and only then: answers of 0 do not
// keep it, a failure answers Unavailable (what was decided stays booked),
// no lease of more than 0 is pushed before it is kept, and a new term
// keeps it again.
func TestHorizonBeforeFirstGrant(t *testing.T) {
	calls := 0
	var fail error
	// fair: capacity 100, no learning
	s := newTestServerWith(t, Options{Horizon: HorizonFunc(func(context.Context) error { calls++; return fail })})
	s.SetMastership(false, "")
	s.SetMastership(true, "")
	ask := func(client string, wants float64) (float64, error) {
		resp, err := s.GetCapacity(context.Background(), &pb.GetCapacityRequest{
			ClientId: proto.String(client),
			Resource: []*pb.ResourceRequest{{ResourceId: proto.String("fair"), Priority: proto.Int64(0), Wants: proto.Float64(wants)}},
		})
		if err != nil {
			return 0, err
		}
		return resp.GetResponse()[0].GetGets().GetCapacity(), nil
	}
	if got, err := ask("idle", 0); err != nil || got != 0 || calls != 0 {
		t.Fatalf("an answer of 0: %v, %v, %d keeps; want 0, nil, 0", got, err, calls)
	}
	fail = errors.New("etcd is away")
	if _, err := ask("a", 100); status.Code(err) != codes.Unavailable || calls != 1 {
		t.Fatalf("keeping failed: %v after %d keeps, want Unavailable after 1", err, calls)
	}
	// The watched requester is granted 0 (a holds everything booked),
	// waits, and is offered what a gives back: not pushed, since the
	// horizon is not kept.
	pushed := 0
	cancel, err := s.Watch("w", &Watcher{Deliver: func(string, lease.Grant) bool { pushed++; return true }, Stop: func() {}})
	if err != nil {
		t.Fatal(err)
	}
	defer cancel()
	if got, err := ask("w", 50); err != nil || got != 0 {
		t.Fatalf("w got %v, %v; want 0 (a holds everything)", got, err)
	}
	if _, err := s.ReleaseCapacity(context.Background(), &pb.ReleaseCapacityRequest{ClientId: proto.String("a"), ResourceId: []string{"fair"}}); err != nil {
		t.Fatal(err)
	}
	if pushed != 0 {
		t.Fatalf("%d leases pushed before the horizon was kept", pushed)
	}
	fail = nil
	if got, err := ask("b", 10); err != nil || got != 10 || calls != 2 {
		t.Fatalf("b got %v, %v after %d keeps; want 10, nil after 2", got, err, calls)
	}
	if got, err := ask("c", 10); err != nil || got != 10 || calls != 2 {
		t.Fatalf("kept once a term: c got %v, %v after %d keeps", got, err, calls)
	}
	s.SetMastership(false, "")
	s.SetMastership(true, "")
	if got, err := ask("b", 10); err != nil || got != 10 || calls != 3 {
		t.Fatalf("a new term: b got %v, %v after %d keeps; want 10, nil after 3", got, err, calls)
	}
}
