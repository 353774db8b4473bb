package capacity

import (
	"context"
	"math"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	pb "github.com/sluice-rl/sluice/api/doorman"
	"github.com/sluice-rl/sluice/api/doorman/doormanconnect"
	"github.com/sluice-rl/sluice/resources"
)

// node is a server of a test tree, serving on loopback.
type node struct {
	*Service
	addr   string
	hs     *http.Server
	cancel context.CancelFunc
	done   chan struct{}
}

func startNode(t *testing.T, id string, cfg string, parent ...string) *node {
	t.Helper()
	return startNodeSweeping(t, 100*time.Millisecond, id, cfg, parent...)
}

// startNodeSweeping is startNode with the interval of Run's sweeps.
func startNodeSweeping(t *testing.T, sweep time.Duration, id string, cfg string, parent ...string) *node {
	t.Helper()
	var repo *resources.Repository
	if cfg != "" {
		var err error
		if repo, err = resources.Parse([]byte(cfg)); err != nil {
			t.Fatal(err)
		}
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n := &node{addr: lis.Addr().String(), done: make(chan struct{})}
	n.Service = New(Options{ID: id, Address: n.addr, Config: repo, Parent: parent})
	// These tests are about the tree on the wall clock; Doorman's 5-second
	// rule has tests of its own (TestMinRequestInterval*).
	n.minRequest = 0
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	n.hs = &http.Server{Handler: handler(n.Service), Protocols: p}
	go func() { _ = n.hs.Serve(lis) }()
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	go func() {
		defer close(n.done)
		n.Run(ctx, sweep)
	}()
	t.Cleanup(n.stop)
	return n
}

func (n *node) stop() {
	n.cancel()
	<-n.done
	n.hs.Close()
}

func stubFor(addr string) doormanconnect.CapacityClient {
	tr := &http.Transport{}
	tr.Protocols = new(http.Protocols)
	tr.Protocols.SetUnencryptedHTTP2(true)
	return doormanconnect.NewCapacityClient(&http.Client{Transport: tr}, "http://"+addr, connect.WithGRPC())
}

func ask(t *testing.T, addr, client, resource string, wants float64) *pb.ResourceResponse {
	t.Helper()
	resp, err := stubFor(addr).GetCapacity(context.Background(), connect.NewRequest(&pb.GetCapacityRequest{
		ClientId: proto.String(client),
		Resource: []*pb.ResourceRequest{{ResourceId: proto.String(resource), Priority: proto.Int64(0), Wants: proto.Float64(wants)}},
	}))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Msg.GetResponse()) != 1 {
		t.Fatalf("no lease in %v", resp.Msg)
	}
	return resp.Msg.GetResponse()[0]
}

const treeConfig = `
resources:
  - identifier_glob: r
    capacity: 100
    safe_capacity: 3
    algorithm: {kind: FAIR_SHARE, lease_length: 4, refresh_interval: 1, learning_mode_duration: 0}
`

// leaf → mid → root: demand flows down as band aggregates, capacity flows
// up; the refresh interval grows by 1/decay_factor per level away from the
// root; no lease outlives the lease of the server that grants it.
func TestTreeThreeLevels(t *testing.T) {
	t.Parallel() // its own nodes on loopback, mostly waiting for refreshes
	root := startNode(t, "root", treeConfig)
	mid := startNode(t, "mid", "", root.addr)
	leaf := startNode(t, "leaf", "", mid.addr)

	type asker struct {
		addr, id string
		wants    float64
	}
	askers := []asker{{leaf.addr, "c1", 80}, {leaf.addr, "c2", 40}, {mid.addr, "c3", 50}}
	got := map[string]*pb.ResourceResponse{}
	// Refresh until the shares settle (each level needs a round).
	deadline := time.Now().Add(20 * time.Second)
	for {
		for _, a := range askers {
			got[a.id] = ask(t, a.addr, a.id, "r", a.wants)
		}
		sum := 0.0
		for _, g := range got {
			sum += g.GetGets().GetCapacity()
		}
		// Max-min fair over the three clients: 33.3 each.
		settled := true
		for _, g := range got {
			if math.Abs(g.GetGets().GetCapacity()-100.0/3) > 0.01 {
				settled = false
			}
		}
		if sum > 100+1e-9 {
			t.Fatalf("Σ leases %v > capacity 100: %v", sum, got)
		}
		if settled {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("shares did not settle: %v", got)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Refresh intervals: root's requesters 1 s, mid's 2 s, leaf's 4 s
	// (capped at the lease length 4).
	if ri := got["c3"].GetGets().GetRefreshInterval(); ri != 2 {
		t.Fatalf("mid's client refresh interval %d, want 2", ri)
	}
	if ri := got["c1"].GetGets().GetRefreshInterval(); ri != 4 {
		t.Fatalf("leaf's client refresh interval %d, want 4", ri)
	}
	// Safe capacity is pushed down.
	if sc := got["c1"].GetSafeCapacity(); sc != 3 {
		t.Fatalf("leaf's safe capacity %v, want 3 (pushed from the root)", sc)
	}
	// No lease outlives its grantor's.
	mr, _ := mid.Status("r")
	lr, _ := leaf.Status("r")
	if lr.Capacity > mr.Capacity+1e-9 {
		t.Fatalf("leaf holds %v, more than mid's %v", lr.Capacity, mr.Capacity)
	}
	midExp := time.Unix(leaseOf(t, root, "r", "mid").Expiry.Unix(), 0)
	for _, l := range lr.Leases {
		if l.Expiry.After(midExp.Add(time.Second)) {
			t.Fatalf("leaf lease to %s expires %v, after mid's lease %v", l.Client, l.Expiry, midExp)
		}
	}
	// The band aggregates reach the root (on mid's next refresh): mid asks
	// as 3 subclients wanting 170.
	deadline = time.Now().Add(5 * time.Second)
	for {
		rs, _ := root.Status("r")
		if len(rs.Leases) == 1 && rs.Leases[0].Subclients == 3 && rs.Leases[0].Wants == 170 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("root sees %+v, want mid standing for 3 clients wanting 170", rs.Leases)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func leaseOf(t *testing.T, n *node, resource, client string) leaseInfo {
	t.Helper()
	st, err := n.Status(resource)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range st.Leases {
		if l.Client == client {
			return leaseInfo{Expiry: l.Expiry, Has: l.Has}
		}
	}
	t.Fatalf("%s holds no lease on %s at %s", client, resource, n.addr)
	return leaseInfo{}
}

type leaseInfo struct {
	Expiry time.Time
	Has    float64
}

// Cut the root off: the intermediate serves from its lease until it
// expires, then grants 0 with expired leases (clients fall back to their
// modes); when the root returns, capacity flows again.
func TestTreeParentLost(t *testing.T) {
	t.Parallel() // its own nodes on loopback, mostly waiting for a lease to expire
	root := startNode(t, "root", treeConfig)
	mid := startNode(t, "mid", "", root.addr)
	g := ask(t, mid.addr, "c", "r", 30)
	if g.GetGets().GetCapacity() != 30 {
		t.Fatalf("first grant %v, want 30", g.GetGets().GetCapacity())
	}
	rootAddr := root.addr
	root.stop()
	// Within the parent's lease (4 s) the mid keeps granting.
	if c := ask(t, mid.addr, "c", "r", 30).GetGets().GetCapacity(); c != 30 {
		t.Fatalf("grant right after losing the parent %v, want 30", c)
	}
	// After it, capacity 0 with an already expired lease.
	deadline := time.Now().Add(10 * time.Second)
	for {
		rr := ask(t, mid.addr, "c", "r", 30)
		if rr.GetGets().GetCapacity() == 0 && rr.GetGets().GetExpiryTime() <= time.Now().Unix() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("mid still grants %v after its parent lease expired", rr.GetGets())
		}
		time.Sleep(200 * time.Millisecond)
	}
	if st, ok := mid.Parent(); !ok || st.LastError == "" {
		t.Fatalf("parent status %+v, want an error", st)
	}
	// Meanwhile the mid answers at once: the resource its sweep forgot is
	// new again, and its first lease cannot come while the parent is down,
	// so a requester with a deadline gets the mid's answer, not its own
	// deadline (the mid used to wait up to 2 s for the parent).
	for range 5 {
		time.Sleep(300 * time.Millisecond) // sweeps every 100 ms forget the idle resource
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := stubFor(mid.addr).GetCapacity(ctx, connect.NewRequest(&pb.GetCapacityRequest{ClientId: proto.String("late"),
			Resource: []*pb.ResourceRequest{{ResourceId: proto.String("r"), Priority: proto.Int64(0), Wants: proto.Float64(30)}}}))
		cancel()
		if err != nil || resp.Msg.GetResponse()[0].GetGets().GetCapacity() != 0 {
			t.Fatalf("a request with a 1 s deadline while the parent is down: %v %v, want capacity 0 at once", resp, err)
		}
	}
	// The root comes back on the same address.
	lis, err := net.Listen("tcp", rootAddr)
	if err != nil {
		t.Skipf("cannot listen on %s again: %v", rootAddr, err)
	}
	repo, _ := resources.Parse([]byte(treeConfig))
	root2 := New(Options{ID: "root2", Address: rootAddr, Config: repo})
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	hs := &http.Server{Handler: handler(root2), Protocols: p}
	go func() { _ = hs.Serve(lis) }()
	defer hs.Close()
	deadline = time.Now().Add(15 * time.Second)
	for {
		if c := ask(t, mid.addr, "c", "r", 30).GetGets().GetCapacity(); c == 30 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("mid did not recover capacity after the root returned")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// A non-master parent task redirects the link to the master.
func TestTreeFollowsParentMastership(t *testing.T) {
	master := startNode(t, "root-a", treeConfig)
	standby := startNode(t, "root-b", treeConfig)
	standby.SetMastership(false, master.addr)
	mid := startNode(t, "mid", "", standby.addr, master.addr)
	if c := ask(t, mid.addr, "c", "r", 30).GetGets().GetCapacity(); c != 30 {
		t.Fatalf("grant via a redirected parent link %v, want 30", c)
	}
	if st, _ := mid.Parent(); st.Current != master.addr {
		t.Fatalf("parent link uses %s, want the master %s", st.Current, master.addr)
	}
}

// When the last client of a resource at an intermediate releases it, the
// intermediate releases it at its parent too, long before the lease would
// have expired there.
func TestTreeReleasePropagates(t *testing.T) {
	root := startNode(t, "root", strings.Replace(treeConfig, "lease_length: 4", "lease_length: 60", 1))
	mid := startNode(t, "mid", "", root.addr)
	if g := ask(t, mid.addr, "c", "r", 30); g.GetGets().GetCapacity() != 30 {
		t.Fatalf("grant %v", g.GetGets().GetCapacity())
	}
	if st, err := root.Status("r"); err != nil || len(st.Leases) != 1 {
		t.Fatalf("root: %+v %v", st, err)
	}
	if _, err := stubFor(mid.addr).ReleaseCapacity(context.Background(), connect.NewRequest(&pb.ReleaseCapacityRequest{
		ClientId: proto.String("c"), ResourceId: []string{"r"},
	})); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := root.Status("r")
		if err != nil || len(st.Leases) == 0 || st.SumHas == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the root still books %v for the intermediate 10 s after its last client left (lease 60 s)", st.SumHas)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
