package client_test

import (
	"context"
	"math"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluice-rl/sluice/client"
	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/resources"
	"github.com/sluice-rl/sluice/server"
	"github.com/sluice-rl/sluice/server/capacity"
)

const cfg = `
resources:
  - identifier_glob: fair
    capacity: 100
    algorithm: {kind: FAIR_SHARE, lease_length: 60, refresh_interval: 1, learning_mode_duration: 0}
  - identifier_glob: other
    capacity: 10
    algorithm: {kind: FAIR_SHARE, lease_length: 60, refresh_interval: 30, learning_mode_duration: 0}
  - identifier_glob: short
    capacity: 100
    safe_capacity: 7
    algorithm: {kind: FAIR_SHARE, lease_length: 2, refresh_interval: 1, learning_mode_duration: 0}
`

// TestMain checks that no test leaves goroutines behind (refresh loops,
// connections) once clients are closed and servers stopped.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// quiet is the tests' logger: it discards logs unless SLUICE_TEST_LOG is
// set, so the tests print nothing when they pass.
var quiet = testutil.Logger()

type testServer struct {
	*capacity.Service
	addr     string
	requests atomic.Int64 // GetCapacity RPCs
	hs       *http.Server
}

func startServer(t *testing.T) *testServer {
	t.Helper()
	repo, err := resources.Parse([]byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{addr: lis.Addr().String()}
	srv, err := server.New(context.Background(), server.Config{Listen: server.Listen{Advertise: ts.addr}, Repository: server.Repository{Fixed: repo}, Runtime: server.Runtime{Logger: quiet}})
	if err != nil {
		t.Fatal(err)
	}
	ts.Service = srv.Capacity()
	h := srv.Handler()
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	ts.hs = &http.Server{Protocols: p, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/GetCapacity") {
			ts.requests.Add(1)
		}
		h.ServeHTTP(w, r)
	})}
	go func() { _ = ts.hs.Serve(lis) }()
	t.Cleanup(func() { ts.hs.Close() })
	return ts
}

// eventually waits for cond (generously: an outcome, not a timing).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, what, cond)
}

// Over real gRPC, one client's resources ride in one bulk request: the
// server holds a lease for each under the same client id.
func TestLeasesInOneBulkRequest(t *testing.T) {
	ts := startServer(t)
	c, err := client.New(ts.addr, client.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fair, err := c.Resource("fair", 30)
	if err != nil {
		t.Fatal(err)
	}
	other, err := c.Resource("other", 4)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "both leases", func() bool { return fair.Capacity() == 30 && other.Capacity() == 4 })
	for _, id := range []string{"fair", "other"} {
		st, err := ts.Status(id)
		if err != nil || len(st.Leases) != 1 || st.Leases[0].Client != c.ID() {
			t.Fatalf("%s: %+v %v", id, st, err)
		}
	}
	if err := fair.Ask(-1); err == nil {
		t.Fatal("Ask(-1) succeeded")
	}
}

// Ask sends the new wants (once the resource's 5 s window has ended) and
// the new lease is told on Changes.
func TestAskGetsNewLease(t *testing.T) {
	clock := newFakeClock()
	c, _ := manualClient(t, cfg, clock)
	fair, err := c.Resource("fair", 30)
	if err != nil {
		t.Fatal(err)
	}
	run(clock, time.Second, c)
	if got := fair.Capacity(); got != 30 {
		t.Fatalf("first lease %v, want 30", got)
	}
	changes := fair.Changes()
	if err := fair.Ask(60); err != nil {
		t.Fatal(err)
	}
	run(clock, 5*time.Second, c)
	if got := fair.Capacity(); got != 60 {
		t.Fatalf("lease %v after Ask(60), want 60", got)
	}
	select {
	case v := <-changes:
		if v != 60 {
			t.Fatalf("change notification %v, want 60", v)
		}
	default:
		t.Fatal("no change notification")
	}
}

// Two clients of one resource end with fair shares; when one releases, the
// other takes what it gave back (on fake time).
func TestFairShareBetweenClients(t *testing.T) {
	clock := newFakeClock()
	srv := fakeServer(t, cfg, clock)
	a := clientOf(t, capacity.InProcessClient(srv), clock)
	b := clientOf(t, capacity.InProcessClient(srv), clock)
	if a.ID() == b.ID() {
		t.Fatalf("two clients share id %q", a.ID())
	}
	ra, _ := a.Resource("fair", 80)
	rb, _ := b.Resource("fair", 80)
	run(clock, 30*time.Second, a, b)
	if ra.Capacity() != 50 || rb.Capacity() != 50 {
		t.Fatalf("shares %v and %v after 30 s, want 50/50", ra.Capacity(), rb.Capacity())
	}
	// Release gives the capacity back to the other client.
	if err := ra.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if ra.Capacity() != 0 {
		t.Fatalf("released resource has capacity %v", ra.Capacity())
	}
	run(clock, 10*time.Second, a, b)
	if rb.Capacity() != 80 {
		t.Fatalf("b has %v after a released, want 80", rb.Capacity())
	}
}

func TestFollowsMastershipRedirect(t *testing.T) {
	master := startServer(t)
	follower := startServer(t)
	follower.SetMastership(false, master.addr)
	c, _ := client.New(follower.addr, client.WithLogger(quiet))
	defer c.Close()
	r, _ := c.Resource("fair", 10)
	eventually(t, "lease from the master", func() bool { return r.Capacity() == 10 })
	if c.Server() != master.addr {
		t.Fatalf("client talks to %s, want master %s", c.Server(), master.addr)
	}
}

func TestFailsOverToNextAddress(t *testing.T) {
	ts := startServer(t)
	dead, _ := net.Listen("tcp", "127.0.0.1:0")
	deadAddr := dead.Addr().String()
	dead.Close()
	c, _ := client.New(deadAddr+","+ts.addr, client.WithLogger(quiet))
	defer c.Close()
	r, _ := c.Resource("fair", 10)
	eventually(t, "lease via the second address", func() bool { return r.Capacity() == 10 })
}

func TestFallbackModes(t *testing.T) {
	for _, tt := range []struct {
		mode client.Mode
		want float64
	}{
		{client.Safe, 7},
		{client.Pessimistic, 0},
		{client.Optimistic, 30},
	} {
		t.Run(tt.mode.String(), func(t *testing.T) {
			ts := startServer(t)
			c, _ := client.New(ts.addr, client.WithMode(tt.mode), client.WithLogger(quiet))
			defer c.Close()
			r, _ := c.Resource("short", 30)
			eventually(t, "first lease", func() bool { return r.Capacity() == 30 })
			// The server goes away; the lease (2 s) runs out.
			ts.hs.Close()
			eventually(t, "fallback after expiry", func() bool {
				_, _, _, ok := r.Lease()
				return !ok && r.Capacity() == tt.want
			})
		})
	}
}

func TestCloseReleases(t *testing.T) {
	ts := startServer(t)
	c, _ := client.New(ts.addr, client.WithLogger(quiet))
	r, _ := c.Resource("fair", 10)
	eventually(t, "lease", func() bool { return r.Capacity() == 10 })
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	st, err := ts.Status("fair")
	if err == nil && len(st.Leases) != 0 {
		t.Fatalf("leases after Close: %+v", st.Leases)
	}
	if _, err := c.Resource("x", 1); err == nil {
		t.Fatal("Resource on a closed client succeeded")
	}
}

func TestParseMode(t *testing.T) {
	for _, s := range []string{"safe", "Pessimistic", "OPTIMISTIC"} {
		if _, err := client.ParseMode(s); err != nil {
			t.Errorf("ParseMode(%q): %v", s, err)
		}
	}
	if _, err := client.ParseMode("yolo"); err == nil {
		t.Error("ParseMode(yolo) succeeded")
	}
}

// Several handles on one resource share one lease: their wants add up, and
// the lease is given back only when the last handle is released (on fake
// time).
func TestResourceHandlesShareOneLease(t *testing.T) {
	clock := newFakeClock()
	c, srv := manualClient(t, cfg, clock)
	a, err := c.Resource("fair", 20)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Resource("fair", 15)
	if err != nil {
		t.Fatal(err)
	}
	run(clock, time.Second, c)
	if a.Capacity() != 35 || b.Capacity() != 35 {
		t.Fatalf("capacities %v %v, want one lease of 35 for both handles", a.Capacity(), b.Capacity())
	}
	if a.Wants() != 20 || b.Wants() != 15 || a.TotalWants() != 35 {
		t.Fatalf("wants %v %v total %v", a.Wants(), b.Wants(), a.TotalWants())
	}
	if st, _ := srv.Status("fair"); len(st.Leases) != 1 || st.Leases[0].Wants != 35 {
		t.Fatalf("server sees %+v, want one lease wanting 35", st.Leases)
	}
	if _, err := c.ResourceWithPriority("fair", 1, 7); err == nil {
		t.Fatal("a handle at another priority was accepted")
	}
	if err := b.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := b.Ask(99); err == nil {
		t.Fatal("Ask on a released handle succeeded")
	}
	run(clock, 5*time.Second, c)
	if a.Capacity() != 20 {
		t.Fatalf("capacity %v, want the remaining handle's wants, 20", a.Capacity())
	}
	if st, err := srv.Status("fair"); err != nil || len(st.Leases) != 1 {
		t.Fatalf("lease released while a handle remains: %+v %v", st, err)
	}
	if err := a.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st, _ := srv.Status("fair"); len(st.Leases) != 0 {
		t.Fatalf("lease kept after the last handle: %+v", st.Leases)
	}
	if a.Capacity() != 0 {
		t.Fatalf("capacity after release %v", a.Capacity())
	}
}

func TestKillSwitch(t *testing.T) {
	ts := startServer(t)
	c, err := client.New(ts.addr, client.WithMode(client.Pessimistic), client.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r, _ := c.Resource("fair", 20)
	eventually(t, "a lease", func() bool { return r.Capacity() == 20 })
	lim := client.NewRateLimiter(r, 0)
	c.SetKillSwitch(true)
	if !c.KillSwitch() || !math.IsInf(r.Capacity(), 1) || !math.IsInf(lim.Rate(), 1) {
		t.Fatalf("kill switch on: capacity %v, limiter rate %v", r.Capacity(), lim.Rate())
	}
	for range 1000 {
		if !lim.Allow() {
			t.Fatal("a limiter refused with the kill switch on")
		}
	}
	c.SetKillSwitch(false)
	if r.Capacity() != 20 || lim.Rate() != 20 {
		t.Fatalf("kill switch off: capacity %v, rate %v", r.Capacity(), lim.Rate())
	}
}

// Capacity another client gives back reaches a client that wants it at
// once, pushed on its Watch stream, not at its next request (its refresh
// interval here is 30 s).
func TestPushedLease(t *testing.T) {
	ts := startServer(t)
	a, err := client.New(ts.addr, client.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ra, err := a.Resource("other", 10)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "a's lease of 10", func() bool { return ra.Capacity() == 10 })
	b, err := client.New(ts.addr, client.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	eventually(t, "b's watch", func() bool { return ts.Watched(b.ID()) })
	rb, err := b.Resource("other", 10)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "b's first lease", func() bool { _, _, _, ok := rb.Lease(); return ok })
	if got := rb.Capacity(); got != 0 {
		t.Fatalf("b got %v while a holds everything", got)
	}
	before := ts.requests.Load()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "b's pushed lease of 10", func() bool { return rb.Capacity() == 10 })
	if n := ts.requests.Load(); n != before {
		t.Fatalf("%d GetCapacity requests since a left: b's lease came by a request, not a push", n-before)
	}
}
