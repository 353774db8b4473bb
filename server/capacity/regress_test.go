package capacity

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-rl/sluice/algorithm"
	pb "github.com/sluice-rl/sluice/api/doorman"
	"github.com/sluice-rl/sluice/api/doorman/doormanconnect"
	"github.com/sluice-rl/sluice/internal/hooks"
	"github.com/sluice-rl/sluice/resources"
)

// serve serves s on a kernel-chosen loopback port until the test ends and
// returns its address.
func serve(t *testing.T, s *Service) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	hs := &http.Server{Handler: handler(s), Protocols: p}
	go func() { _ = hs.Serve(lis) }()
	t.Cleanup(func() { hs.Close() })
	return lis.Addr().String()
}

// fakeClockServer returns a server of the configuration cfg on a fake
// clock, and the clock.
func fakeClockServer(t *testing.T, cfg string) (*Service, *fakeClock) {
	t.Helper()
	repo, err := resources.Parse([]byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	return New(Options{Address: "127.0.0.1:1", Config: repo, Now: clk.now}), clk
}

func grpcStub(t *testing.T, addr string) pb.CapacityClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewCapacityClient(conn)
}

// YouTube Doorman's Go client releases with a resource_id list made by
// make([]string, n) and then appended to: n empty strings, then the n real
// ids. Sluice used to reject it as InvalidArgument, and the Doorman client
// retried forever. Now the empty ids are skipped (and counted), the real
// ones released.
func TestReleaseCapacityDoormanClientShape(t *testing.T) {
	s := newTestServer(t)
	addr := serve(t, s)
	stub := grpcStub(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ids := []string{"fixed/a", "fixed/b"}
	for _, id := range ids {
		if _, err := stub.GetCapacity(ctx, &pb.GetCapacityRequest{ClientId: proto.String("doorman-client"),
			Resource: []*pb.ResourceRequest{{ResourceId: proto.String(id), Priority: proto.Int64(0), Wants: proto.Float64(5)}}}); err != nil {
			t.Fatal(err)
		}
	}
	release := make([]string, len(ids)) // as Doorman's client builds it
	release = append(release, ids...)
	if _, err := stub.ReleaseCapacity(ctx, &pb.ReleaseCapacityRequest{ClientId: proto.String("doorman-client"), ResourceId: release}); err != nil {
		t.Fatalf("ReleaseCapacity %q: %v, want OK", release, err)
	}
	for _, id := range ids {
		st, err := s.Status(id)
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Leases) != 0 {
			t.Errorf("%s: leases %+v after release, want none", id, st.Leases)
		}
	}
	if got := testutil.ToFloat64(s.metrics.emptyReleaseIDs); got != 2 {
		t.Errorf("sluice_server_release_empty_resource_ids_total = %v, want 2", got)
	}
	// An empty client id is still refused.
	if _, err := stub.ReleaseCapacity(ctx, &pb.ReleaseCapacityRequest{ClientId: proto.String(""), ResourceId: ids}); err == nil {
		t.Error("ReleaseCapacity with an empty client_id accepted")
	}
}

// A server made without an Address used to answer Discovery with
// is_master and no master_address (a semantic error in the design). It
// now names the address the request reached.
func TestDiscoveryWithoutAddress(t *testing.T) {
	s := New(Options{})
	addr := serve(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := grpcStub(t, addr).Discovery(ctx, &pb.DiscoveryRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if !d.GetIsMaster() || d.GetMastership().GetMasterAddress() != addr {
		t.Fatalf("Discovery: is_master %v, master_address %q; want true, %q", d.GetIsMaster(), d.GetMastership().GetMasterAddress(), addr)
	}
}

// Sweep read a resource's learning mode after releasing its lock, while
// the parent link rewrites it (SetParams) under that lock: a data race on
// every intermediate server, shown here under -race. Sweep reads learning
// mode for a resource without leases; one stays (in learning mode) after
// its only client released it, while an intermediate sweeps and refreshes
// with its parent, each in a tight loop on its own goroutine, for a second.
func TestSweepBesideParentLink(t *testing.T) {
	root := startNode(t, "root", `
resources:
  - identifier_glob: r
    capacity: 100
    algorithm: {kind: FAIR_SHARE, lease_length: 30, refresh_interval: 1, learning_mode_duration: 30}
`)
	h := &hooks.Server{ManualParent: true}
	mid := New(Options{ID: "mid", Address: "127.0.0.1:1", Parent: []string{root.addr}, Hooks: h})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	getCap(t, mid, "c", "r", 10) // takes the link's first turn inline
	if _, err := mid.ReleaseCapacity(ctx, &pb.ReleaseCapacityRequest{
		ClientId: proto.String("c"), ResourceId: []string{"r"}}); err != nil {
		t.Fatal(err)
	}
	stop := time.Now().Add(time.Second)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for time.Now().Before(stop) {
			mid.Sweep()
		}
	}()
	steps := 0
	for ; time.Now().Before(stop); steps++ {
		h.StepParent(ctx)
	}
	<-done
	if st, err := mid.Status("r"); err != nil || len(st.Leases) != 0 || !st.Learning {
		t.Fatalf("mid's resource: %+v, %v; want it kept without leases in learning mode", st, err)
	}
	if p, _ := mid.Parent(); p.LastError != "" || steps < 2 {
		t.Fatalf("parent link: %d turns, last error %q", steps, p.LastError)
	}
}

// Doorman's 5-second rule on the wire: a client's second request within
// 5 s is answered with its current lease, undecided, and counted.
func TestMinRequestIntervalOverRPC(t *testing.T) {
	s, clk := fakeClockServer(t, `
resources:
  - identifier_glob: r
    capacity: 100
    algorithm: {kind: FAIR_SHARE, lease_length: 60, refresh_interval: 1, learning_mode_duration: 0}
`)
	if got := getCap(t, s, "a", "r", 80).GetResponse()[0].GetGets().GetCapacity(); got != 80 {
		t.Fatalf("first request: %v, want 80", got)
	}
	clk.t = clk.t.Add(pb.MinRequestInterval - time.Second)
	if got := getCap(t, s, "a", "r", 20).GetResponse()[0].GetGets().GetCapacity(); got != 80 {
		t.Fatalf("request 4 s later: %v, want the current lease 80", got)
	}
	if got := testutil.ToFloat64(s.metrics.early); got != 1 {
		t.Fatalf("sluice_server_early_requests_total = %v, want 1", got)
	}
	clk.t = clk.t.Add(time.Second)
	if got := getCap(t, s, "a", "r", 20).GetResponse()[0].GetGets().GetCapacity(); got != 20 {
		t.Fatalf("request 5 s later: %v, want 20", got)
	}
}

// fakeParent is a parent that pushes down an algorithm kind no Sluice
// knows: what a newer or misconfigured parent could send.
type fakeParent struct {
	doormanconnect.UnimplementedCapacityHandler
	kind int32
}

func (f fakeParent) GetServerCapacity(_ context.Context, req *connect.Request[pb.GetServerCapacityRequest]) (*connect.Response[pb.GetServerCapacityResponse], error) {
	out := &pb.GetServerCapacityResponse{}
	for _, rr := range req.Msg.GetResource() {
		out.Response = append(out.Response, &pb.ServerCapacityResourceResponse{
			ResourceId: rr.ResourceId,
			Gets:       &pb.Lease{ExpiryTime: proto.Int64(time.Now().Add(time.Minute).Unix()), RefreshInterval: proto.Int64(5), Capacity: proto.Float64(10)},
			Algorithm: &pb.Algorithm{Kind: pb.Algorithm_Kind(f.kind).Enum(), LeaseLength: proto.Int64(60), RefreshInterval: proto.Int64(5),
				LearningModeDuration: proto.Int64(0)},
		})
	}
	return connect.NewResponse(out), nil
}

// An algorithm pushed down that this server cannot build runs as
// NO_ALGORITHM, counted (and logged once), not mapped silently.
func TestUnknownAlgorithmFallsBackToNone(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle(doormanconnect.NewCapacityHandler(fakeParent{kind: 99}))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	hs := &http.Server{Handler: mux, Protocols: p}
	go func() { _ = hs.Serve(lis) }()
	defer hs.Close()

	s := New(Options{ID: "leaf", Address: "127.0.0.1:1", Parent: []string{lis.Addr().String()}, Hooks: &hooks.Server{ManualParent: true}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := s.GetCapacity(ctx, &pb.GetCapacityRequest{ClientId: proto.String("c"),
		Resource: []*pb.ResourceRequest{{ResourceId: proto.String("r"), Priority: proto.Int64(0), Wants: proto.Float64(500)}}})
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.Status("r")
	if err != nil {
		t.Fatal(err)
	}
	if st.Algorithm != algorithm.NoAlgorithm {
		t.Fatalf("algorithm %v, want NO_ALGORITHM", st.Algorithm)
	}
	if got := resp.GetResponse()[0].GetGets().GetCapacity(); got != 500 {
		t.Fatalf("granted %v, want what the client asks (500) under NO_ALGORITHM", got)
	}
	if got := testutil.ToFloat64(s.metrics.algoFallbacks); got < 1 {
		t.Fatalf("sluice_server_algorithm_fallbacks_total = %v, want ≥ 1", got)
	}
}

// Shares converge over refreshes 5 s apart (the rounds the binary's wire
// test cannot wait for): FAIR_SHARE hands a newcomer what is free, then
// each its fair share as the holders refresh.
func TestFairShareConvergesOverRefreshes(t *testing.T) {
	s, clk := fakeClockServer(t, `
resources:
  - identifier_glob: fair
    capacity: 100
    algorithm: {kind: FAIR_SHARE, lease_length: 60, refresh_interval: 5, learning_mode_duration: 0}
`)
	gets := func(client string) (float64, float64) {
		r := getCap(t, s, client, "fair", 80).GetResponse()[0]
		return r.GetGets().GetCapacity(), r.GetSafeCapacity()
	}
	if got, _ := gets("a"); got != 80 {
		t.Fatalf("a alone: %v, want 80", got)
	}
	if got, _ := gets("b"); got != 20 {
		t.Fatalf("b: %v, want 20 (what is free)", got)
	}
	clk.t = clk.t.Add(pb.MinRequestInterval)
	if got, _ := gets("a"); got != 50 {
		t.Fatalf("a after b arrived: %v, want 50", got)
	}
	if got, safe := gets("b"); got != 50 || safe != 50 {
		t.Fatalf("b: %v (safe capacity %v), want 50 (100/2)", got, safe)
	}
}

// algorithm.Kind carries the wire enum's values and names without
// importing the wire: the two must agree.
func TestKindsMatchTheWire(t *testing.T) {
	for v, name := range pb.Algorithm_Kind_name {
		if k := algorithm.Kind(v); !k.Valid() || k.String() != name {
			t.Errorf("wire %d %s: algorithm.Kind says valid %v, %q", v, name, k.Valid(), k.String())
		}
	}
	for _, k := range []algorithm.Kind{algorithm.NoAlgorithm, algorithm.Static, algorithm.ProportionalShare, algorithm.FairShare} {
		if pb.Algorithm_Kind(k).String() != k.String() {
			t.Errorf("%v is %v on the wire", k, pb.Algorithm_Kind(k))
		}
	}
}
