package parentlink

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/sluice-rl/sluice/algorithm"
	pb "github.com/sluice-rl/sluice/api/doorman"
	"github.com/sluice-rl/sluice/api/doorman/doormanconnect"
	v1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/internal/grpcconnect"
	"github.com/sluice-rl/sluice/internal/testutil"
)

var fb = Fallback{LeaseLength: 60 * time.Second, RefreshInterval: 16 * time.Second}

// parent is one task of a fake parent node: the master grants every
// resource 10 for 30 s, refresh 4 s; the others redirect to it (or fail,
// down).
type parent struct {
	pb.UnimplementedCapacityServer
	addr   string
	master *string // the node's master's address
	down   bool

	mu       sync.Mutex
	asked    [][]string // resource ids per GetServerCapacity answered
	released [][]string
	clients  []string // client ids of the releases
}

var errDown = errors.New("down")

func (p *parent) redirect() *pb.Mastership {
	if *p.master == p.addr {
		return nil
	}
	return &pb.Mastership{MasterAddress: proto.String(*p.master)}
}

func (p *parent) Discovery(context.Context, *pb.DiscoveryRequest) (*pb.DiscoveryResponse, error) {
	if p.down {
		return nil, errDown
	}
	return &pb.DiscoveryResponse{IsMaster: proto.Bool(*p.master == p.addr), Mastership: &pb.Mastership{MasterAddress: proto.String(*p.master)}}, nil
}

func (p *parent) GetServerCapacity(_ context.Context, req *pb.GetServerCapacityRequest) (*pb.GetServerCapacityResponse, error) {
	if p.down {
		return nil, errDown
	}
	if m := p.redirect(); m != nil {
		return &pb.GetServerCapacityResponse{Mastership: m}, nil
	}
	out := &pb.GetServerCapacityResponse{}
	var ids []string
	for _, r := range req.GetResource() {
		ids = append(ids, r.GetResourceId())
		out.Response = append(out.Response, &pb.ServerCapacityResourceResponse{ResourceId: r.ResourceId,
			Gets: &pb.Lease{Capacity: proto.Float64(10), ExpiryTime: proto.Int64(time.Now().Add(30 * time.Second).Unix()), RefreshInterval: proto.Int64(4)}})
	}
	p.mu.Lock()
	p.asked = append(p.asked, ids)
	p.mu.Unlock()
	return out, nil
}

func (p *parent) ReleaseCapacity(_ context.Context, req *pb.ReleaseCapacityRequest) (*pb.ReleaseCapacityResponse, error) {
	p.mu.Lock()
	p.released = append(p.released, req.GetResourceId())
	p.clients = append(p.clients, req.GetClientId())
	p.mu.Unlock()
	return &pb.ReleaseCapacityResponse{}, nil
}

// node is a fake parent node of tasks a:1 and b:1.
func node(master string) (map[string]*parent, func(string) doormanconnect.CapacityClient) {
	m := new(string)
	*m = master
	tasks := map[string]*parent{"a:1": {addr: "a:1", master: m}, "b:1": {addr: "b:1", master: m}}
	return tasks, func(addr string) doormanconnect.CapacityClient { return grpcconnect.Capacity{S: tasks[addr]} }
}

// server is a fake intermediate holding resources by id (R = string).
type server struct {
	ids      []string
	answered [][]string
	leases   map[string]*Lease
}

func (s *server) Request() (*pb.GetServerCapacityRequest, []string) {
	req := &pb.GetServerCapacityRequest{ServerId: proto.String("mid")}
	for _, id := range s.ids {
		req.Resource = append(req.Resource, &pb.ServerCapacityResourceRequest{ResourceId: proto.String(id)})
	}
	return req, slices.Clone(s.ids)
}

func (s *server) Answered(rs []string, resp *pb.GetServerCapacityResponse) time.Duration {
	s.answered = append(s.answered, rs)
	next := time.Hour
	for _, rr := range resp.GetResponse() {
		pl := s.leases[rr.GetResourceId()]
		if pl == nil {
			pl = new(Lease)
			s.leases[rr.GetResourceId()] = pl
		}
		pl.Adopt(rr, fb)
		if d, ok := pl.Due(time.Now(), 0); ok {
			next = min(next, d)
		}
	}
	return next
}

func (s *server) Pushed([]*v1.PushedLease) {}

func newLink(t *testing.T, ids []string, dial func(string) doormanconnect.CapacityClient) (*Link[string], *server) {
	t.Helper()
	srv := &server{ids: ids, leases: map[string]*Lease{}}
	l := New[string](srv, Options{ID: "mid", Addresses: []string{"a:1", "b:1"}, Dial: dial, MaxResources: 2,
		Rand: rand.New(rand.NewPCG(1, 2)), Logger: testutil.Logger()})
	return l, srv
}

// One turn follows the redirect of a task that is not the master, asks
// for every resource in parts of at most MaxResources, hands each part's
// answer back, and returns the parent's refresh interval.
func TestStepFollowsRedirectInParts(t *testing.T) {
	tasks, dial := node("b:1")
	l, srv := newLink(t, []string{"r1", "r2", "r3", "r4", "r5"}, dial)
	if next := l.Step(context.Background()); next != 4*time.Second {
		t.Fatalf("next turn in %v, want the parent's refresh interval 4s", next)
	}
	want := [][]string{{"r1", "r2"}, {"r3", "r4"}, {"r5"}}
	if !slices.EqualFunc(srv.answered, want, slices.Equal) || !slices.EqualFunc(tasks["b:1"].asked, want, slices.Equal) {
		t.Fatalf("answered %v, the master asked %v; want %v", srv.answered, tasks["b:1"].asked, want)
	}
	if st := l.Status(); st.Current != "b:1" || st.LastError != "" || st.LastOK.IsZero() || l.Failing() {
		t.Fatalf("status %+v, want the master b:1, answering", st)
	}
	if pl := srv.leases["r5"]; !pl.OK || pl.Capacity != 10 || pl.Refresh != 4*time.Second {
		t.Fatalf("r5's lease %+v", pl)
	}
}

// A failing parent task: the turn backs off (at most maxBackoff), records
// the error, and fails over to the master that Discovery names; the next
// turn succeeds there.
func TestStepFailsOverToTheMaster(t *testing.T) {
	tasks, dial := node("b:1")
	tasks["a:1"].down = true
	l, _ := newLink(t, []string{"r"}, dial)
	next := l.Step(context.Background())
	if next <= 0 || next > maxBackoff {
		t.Fatalf("after a failure the next turn is in %v, want a backoff in (0, %v]", next, maxBackoff)
	}
	if st := l.Status(); st.Current != "b:1" || st.LastError == "" || !l.Failing() {
		t.Fatalf("status %+v after a failure, want an error and b:1 current", st)
	}
	l.Step(context.Background())
	if st := l.Status(); st.LastError != "" || l.Failing() {
		t.Fatalf("status %+v after the failover, want no error", st)
	}
}

// Released resources are given back on the next turn under the server's
// id, in parts of at most MaxResources; nothing is asked for a server
// without resources.
func TestReleaseOnNextTurn(t *testing.T) {
	tasks, dial := node("a:1")
	l, _ := newLink(t, nil, dial)
	l.Release([]string{"x", "y", "z"})
	if next := l.Step(context.Background()); next != time.Second {
		t.Fatalf("a turn without resources: next in %v, want 1s", next)
	}
	a := tasks["a:1"]
	if want := [][]string{{"x", "y"}, {"z"}}; !slices.EqualFunc(a.released, want, slices.Equal) || a.clients[0] != "mid" {
		t.Fatalf("released %v by %v, want %v by mid", a.released, a.clients, want)
	}
	if len(a.asked) != 0 {
		t.Fatalf("asked for %v without resources", a.asked)
	}
}

// A Lease without word from the parent has no capacity and only expired
// grants; with an answer it takes the capacity, the algorithm and its
// parameters pushed down, and an unknown kind falls back to NO_ALGORITHM.
func TestLeaseAdopt(t *testing.T) {
	var pl Lease
	if p := pl.Params(fb); p.Capacity != 0 || p.Kind != algorithm.FairShare || p.RefreshInterval != noLeaseRefresh ||
		p.LearningModeDuration != fb.LeaseLength || !p.MaxExpiry.Before(time.Unix(2, 0)) {
		t.Fatalf("no lease yet: %+v", p)
	}
	exp := time.Unix(2_000_000_000, 0)
	rr := &pb.ServerCapacityResourceResponse{ResourceId: proto.String("r"),
		Gets: &pb.Lease{Capacity: proto.Float64(-1), ExpiryTime: proto.Int64(exp.Unix()), RefreshInterval: proto.Int64(0)}}
	if pl.Adopt(rr, fb) {
		t.Fatal("no algorithm pushed: fell back")
	}
	if p := pl.Params(fb); !pl.OK || p.Capacity != 0 || p.Kind != algorithm.FairShare || p.LeaseLength != fb.LeaseLength ||
		p.RefreshInterval != fb.RefreshInterval || !p.MaxExpiry.Equal(exp) || pl.Refresh != time.Second {
		t.Fatalf("without an algorithm: %+v (refresh %v)", p, pl.Refresh)
	}
	rr.Algorithm = &pb.Algorithm{Kind: pb.Algorithm_PROPORTIONAL_SHARE.Enum(), LeaseLength: proto.Int64(20), RefreshInterval: proto.Int64(5),
		LearningModeDuration: proto.Int64(7), Parameters: []*pb.NamedParameter{{Name: proto.String("decay_factor"), Value: proto.String("0.25")}}}
	rr.SafeCapacity = proto.Float64(3)
	rr.PreviousExpiryTime = proto.Int64(exp.Unix() - 10)
	pl.Adopt(rr, fb)
	p := pl.Params(fb)
	if p.Kind != algorithm.ProportionalShare || p.LeaseLength != 20*time.Second || p.RefreshInterval != 5*time.Second ||
		p.LearningModeDuration != 7*time.Second || !p.HasSafeCapacity || p.SafeCapacity != 3 ||
		!p.LearningEndsBy.Equal(exp.Add(-10*time.Second)) || pl.Decay != 0.25 || len(pl.Parameters) != 1 {
		t.Fatalf("pushed down: %+v, decay %v", p, pl.Decay)
	}
	rr.Algorithm.Kind = pb.Algorithm_Kind(99).Enum()
	if !pl.Adopt(rr, fb) || pl.Params(fb).Kind != algorithm.NoAlgorithm {
		t.Fatalf("an unknown kind: %v, want NO_ALGORITHM", pl.Params(fb).Kind)
	}
}

// Sequences order the answers and the pushed leases: an older one is
// stale, 0 never is; a push applies only to a lease held.
func TestLeaseSequenceAndPush(t *testing.T) {
	var pl Lease
	if pl.Push(&v1.PushedLease{Capacity: 5, Sequence: 1}) {
		t.Fatal("a push applied without a lease")
	}
	if pl.Stale(3) || !pl.Stale(3) || !pl.Stale(2) || pl.Stale(0) {
		t.Fatal("sequence 3 then 3, 2, 0")
	}
	pl.Adopt(&pb.ServerCapacityResourceResponse{Gets: &pb.Lease{Capacity: proto.Float64(1), ExpiryTime: proto.Int64(100)}}, fb)
	if pl.Push(&v1.PushedLease{Capacity: 5, ExpiryTime: 200, Sequence: 2}) {
		t.Fatal("an older push applied")
	}
	if !pl.Push(&v1.PushedLease{Capacity: 5, ExpiryTime: 200, Sequence: 4}) || pl.Capacity != 5 || pl.Expiry.Unix() != 200 {
		t.Fatalf("a newer push: %+v", pl)
	}
}

// Due: the refresh interval, at least minRequest, and before expiry by
// expiryMargin; once the lease has ended, the refresh interval alone;
// nothing without a lease.
func TestLeaseDue(t *testing.T) {
	var pl Lease
	if _, ok := pl.Due(time.Now(), 0); ok {
		t.Fatal("due without a lease")
	}
	now := time.Unix(1000, 0)
	pl = Lease{OK: true, Refresh: 4 * time.Second, Expiry: now.Add(30 * time.Second)}
	for _, c := range []struct {
		expiry   time.Duration
		min, due time.Duration
	}{
		{30 * time.Second, 0, 4 * time.Second},
		{30 * time.Second, 5 * time.Second, 5 * time.Second},
		{2 * time.Second, 0, 1500 * time.Millisecond},
		{300 * time.Millisecond, 0, 300 * time.Millisecond},
		{-time.Second, 0, 4 * time.Second},               // expired: the refresh interval
		{0, 5 * time.Second, 4 * time.Second},            // ended: minRequest does not apply
		{-time.Second, 5 * time.Second, 4 * time.Second}, // the parent decides at once
	} {
		pl.Expiry = now.Add(c.expiry)
		if d, _ := pl.Due(now, c.min); d != c.due {
			t.Errorf("expiry in %v, min %v: due in %v, want %v", c.expiry, c.min, d, c.due)
		}
	}
}

func TestParamsFromWire(t *testing.T) {
	ps := paramsFromWire([]*pb.NamedParameter{
		{Name: proto.String("decay_factor"), Value: proto.String("0.5")},
		{Name: proto.String("flag")}, // no value
		nil,
	})
	want := []algorithm.Parameter{{Name: "decay_factor", Value: "0.5"}, {Name: "flag"}, {}}
	if len(ps) != len(want) {
		t.Fatalf("got %v, want %v", ps, want)
	}
	for i := range want {
		if ps[i] != want[i] {
			t.Errorf("parameter %d: got %v, want %v", i, ps[i], want[i])
		}
	}
}
