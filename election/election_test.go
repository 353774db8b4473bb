package election_test

import (
	"context"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/sluice-rl/sluice/election"
	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/internal/testutil/etcdtest"
)

func TestMain(m *testing.M) {
	testutil.QuietLogs()
	goleak.VerifyTestMain(m,
		// The etcd client's and embedded server's process-wide loggers and
		// gRPC's resolver keep goroutines for the life of the process.
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
		goleak.IgnoreAnyFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
		goleak.IgnoreAnyFunction("go.etcd.io/etcd/server/v3/etcdserver.(*EtcdServer).run"),
	)
}

// candidate is one task campaigning in a test.
type candidate struct {
	addr   string
	cli    *clientv3.Client
	el     election.Election
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	history []election.Status
	changed chan struct{}
}

func newClient(t *testing.T, endpoint string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	return cli
}

// start runs an etcd election for addr under key with the given TTL; it is
// stopped (Run's ctx canceled, client closed) in t.Cleanup.
func start(t *testing.T, endpoint, key, addr string, ttl time.Duration) *candidate {
	t.Helper()
	return startWith(t, endpoint, election.EtcdOptions{Key: key, Address: addr, TTL: ttl})
}

// startWith is start with every option.
func startWith(t *testing.T, endpoint string, opts election.EtcdOptions) *candidate {
	t.Helper()
	addr := opts.Address
	c := &candidate{addr: addr, cli: newClient(t, endpoint), done: make(chan struct{}), changed: make(chan struct{}, 1)}
	el, err := election.Etcd(c.cli, opts)
	if err != nil {
		t.Fatal(err)
	}
	c.el = el
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	go func() {
		defer close(c.done)
		if err := el.Run(ctx, c.record); err != nil {
			t.Errorf("%s: Run: %v", addr, err)
		}
	}()
	t.Cleanup(c.stop)
	return c
}

func (c *candidate) stop() {
	c.cancel()
	<-c.done
	c.cli.Close()
}

func (c *candidate) record(st election.Status) {
	c.mu.Lock()
	c.history = append(c.history, st)
	c.mu.Unlock()
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

func (c *candidate) status() election.Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.history) == 0 {
		return election.Status{}
	}
	return c.history[len(c.history)-1]
}

// wasMasterSince reports whether the candidate reported anything but
// mastership from report number i on.
func (c *candidate) lostSince(i int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, st := range c.history[i:] {
		if !st.IsMaster {
			return true
		}
	}
	return false
}

func (c *candidate) reports() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.history)
}

// oneMaster waits until exactly one candidate is master and every other
// reports its address, and returns it.
func oneMaster(t *testing.T, d time.Duration, cs ...*candidate) *candidate {
	t.Helper()
	var m *candidate
	testutil.Eventually(t, d, "one master, known to all", func() bool {
		m = nil
		for _, c := range cs {
			if c.status().IsMaster {
				if m != nil {
					return false
				}
				m = c
			}
		}
		if m == nil {
			return false
		}
		for _, c := range cs {
			if c.status().Master != m.addr {
				return false
			}
		}
		return true
	})
	return m
}

func TestStandalone(t *testing.T) {
	el := election.Standalone("a:1")
	got := make(chan election.Status, 1)
	done := make(chan error)
	go func() { done <- el.Run(context.Background(), func(s election.Status) { got <- s }) }()
	if s := <-got; s != (election.Status{IsMaster: true, Master: "a:1"}) {
		t.Fatalf("status %+v", s)
	}
	if err := el.Resign(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	_ = el.Resign(context.Background()) // twice is fine
}

func TestEtcdOptions(t *testing.T) {
	if _, err := election.Etcd(nil, election.EtcdOptions{Address: "a:1"}); err == nil {
		t.Error("empty key accepted")
	}
	if _, err := election.Etcd(nil, election.EtcdOptions{Key: "/k"}); err == nil {
		t.Error("empty address accepted")
	}
}

func TestEtcdOneMasterResignAndCrash(t *testing.T) {
	t.Parallel() // its own etcd; it mostly waits for a session to expire
	etcd := etcdtest.StartEtcd(t)
	// Long enough that "a resignation hands over before the session could
	// have expired" tells resignation from expiry on a loaded machine.
	const ttl = 10 * time.Second
	a := start(t, etcd.Endpoint, "/sluice/test", "a:1", ttl)
	m := oneMaster(t, 10*time.Second, a)
	if m != a {
		t.Fatal("the only candidate is not master")
	}
	// b and c reach etcd through proxies, so that a crash can be made
	// exact: cutting the proxy stops all traffic, as kill -9 would.
	pb, pc := testutil.NewTCPProxy(t, etcd.Addr), testutil.NewTCPProxy(t, etcd.Addr)
	b := start(t, "http://"+pb.Addr, "/sluice/test", "b:1", ttl)
	c := start(t, "http://"+pc.Addr, "/sluice/test", "c:1", ttl)
	proxyOf := map[*candidate]*testutil.TCPProxy{b: pb, c: pc}
	if m := oneMaster(t, 10*time.Second, a, b, c); m != a {
		t.Fatalf("newcomer %s took mastership from the incumbent", m.addr)
	}

	// A graceful resign hands over at once, not after the TTL.
	began := time.Now()
	if err := a.el.Resign(context.Background()); err != nil {
		t.Fatal(err)
	}
	m = oneMaster(t, 10*time.Second, b, c)
	took := time.Since(began)
	t.Logf("resign: %s master after %v", m.addr, took)
	if took >= ttl {
		t.Errorf("takeover after resign took %v, want well under the TTL %v", took, ttl)
	}
	if a.status().IsMaster {
		t.Error("resigned task still reports mastership")
	}
	// The resigned task keeps following the master (a draining server
	// redirects to it).
	testutil.Eventually(t, 10*time.Second, "resigned task knows the new master", func() bool { return a.status().Master == m.addr })

	// A crash (no more traffic, no revoke): the others take over once the
	// session's TTL has run out, and not before.
	other := b
	if m == b {
		other = c
	}
	began = time.Now()
	proxyOf[m].Cut(true)
	testutil.Eventually(t, ttl+30*time.Second, "takeover after crash", func() bool { return other.status().IsMaster })
	took = time.Since(began)
	t.Logf("crash: %s master after %v (TTL %v)", other.addr, took, ttl)
	if took < ttl-time.Second {
		t.Errorf("takeover after a crash took %v: before the crashed master's session (TTL %v) could have expired", took, ttl)
	}
	testutil.Eventually(t, ttl+30*time.Second, "crashed task reports the loss", func() bool { return !m.status().IsMaster })
}

func TestEtcdHiccupKeepsMastership(t *testing.T) {
	t.Parallel() // its own etcd; it mostly waits out TTLs
	etcd := etcdtest.StartEtcd(t)
	// Ten times the hiccup, so that renewals have time to resume on a
	// loaded machine (gRPC's reconnect backoff is 1 s and up).
	const ttl = 10 * time.Second
	px := testutil.NewTCPProxy(t, etcd.Addr)
	a := start(t, "http://"+px.Addr, "/sluice/hiccup", "a:1", ttl)
	oneMaster(t, 10*time.Second, a)
	b := start(t, etcd.Endpoint, "/sluice/hiccup", "b:1", ttl)
	if m := oneMaster(t, 10*time.Second, a, b); m != a {
		t.Fatal("wrong master")
	}
	mark := a.reports()

	// A hiccup shorter than the TTL: every connection drops, renewals
	// fail, and the master stays master.
	px.Cut(true)
	time.Sleep(time.Second)
	px.Cut(false)
	time.Sleep(ttl + time.Second)
	if a.lostSince(mark) {
		t.Fatalf("a 1 s network hiccup cost mastership (TTL %v); reports %v", ttl, a.history[mark:])
	}
	if b.status().IsMaster {
		t.Fatal("the other candidate became master during a hiccup")
	}

	// A partition longer than the TTL: the session is truly gone, the
	// master steps down, the other takes over.
	px.Cut(true)
	testutil.Eventually(t, 3*ttl, "master steps down when its session expires", func() bool { return !a.status().IsMaster })
	testutil.Eventually(t, 3*ttl, "other takes over", func() bool { return b.status().IsMaster })
	px.Cut(false)
	if m := oneMaster(t, 5*ttl, a, b); m != b {
		t.Fatal("after the partition heals the old master came back")
	}
}

// The lease horizon: the first master of a node knows nothing of a
// predecessor (zero) and writes a horizon that covers an unknown one; a
// successor after a handover learns when the previous master's leases end
// (within HorizonTTL). A master keeps (renews) a horizon only once it
// called KeepHorizon, before its first grant: one that never did lets the
// horizon it found lapse. Once the horizon has lapsed (here: deleted, as
// its etcd lease would), a new master learns that every lease has ended.
func TestLeaseHorizon(t *testing.T) {
	t.Parallel() // its own etcd; it mostly waits for renewals
	etcd := etcdtest.StartEtcd(t)
	cli := etcd.Client(t)
	longest := func() time.Duration { return 2 * time.Second }
	horizonTTL := election.HorizonTTL(longest(), time.Second)
	opts := func(addr string) election.EtcdOptions {
		return election.EtcdOptions{Key: "/horizon", Address: addr, TTL: time.Second, LongestLease: longest}
	}
	// left returns the horizon's etcd lease and its whole seconds left
	// (-1: no horizon).
	left := func() (clientv3.LeaseID, int64) {
		t.Helper()
		resp, err := cli.Get(context.Background(), "/horizon.leases")
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) == 0 {
			return 0, -1
		}
		id := clientv3.LeaseID(resp.Kvs[0].Lease)
		ttl, err := cli.TimeToLive(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		return id, ttl.TTL
	}
	a := startWith(t, etcd.Endpoint, opts("a:1"))
	if m := oneMaster(t, 20*time.Second, a); !m.status().LeasesEndBy.IsZero() {
		t.Fatalf("the first master was told its predecessor's leases end by %v", m.status().LeasesEndBy)
	}
	if _, n := left(); n < 0 || n > int64(horizonTTL/time.Second) {
		t.Fatalf("the first master's horizon has %d s left, want one of at most %v", n, horizonTTL)
	}
	// b is built the way a server builds it: its capacity service with a
	// LeaseHorizon first, the election given it after.
	bh := new(election.LeaseHorizon)
	if err := bh.KeepHorizon(context.Background()); err == nil {
		t.Fatal("a LeaseHorizon without an election was kept")
	}
	bo := opts("b:1")
	bo.Horizon = bh
	b := startWith(t, etcd.Endpoint, bo)
	oneMaster(t, 20*time.Second, a, b)
	if err := bh.KeepHorizon(context.Background()); err == nil {
		t.Fatal("a task that is not the master kept its LeaseHorizon")
	}
	if err := a.el.Resign(context.Background()); err != nil {
		t.Fatal(err)
	}
	resigned := time.Now()
	testutil.Eventually(t, 20*time.Second, "b takes over", func() bool { return b.status().IsMaster })
	end := b.status().LeasesEndBy
	if bound := resigned.Add(horizonTTL + time.Second); end.Before(resigned) || end.After(bound) {
		t.Fatalf("after a handover: the predecessor's leases end by %v, want between %v and %v", end, resigned, bound)
	}
	// b grants nothing yet: the horizon it found is not renewed.
	found, before := left()
	time.Sleep(2100 * time.Millisecond)
	if id, n := left(); id != found || n > before-2 {
		t.Fatalf("a master that kept no horizon renewed it: %d s left, %d s before", n, before)
	}
	// b keeps one (through the LeaseHorizon it was given): a new etcd
	// lease of HorizonTTL, renewed.
	if err := bh.KeepHorizon(context.Background()); err != nil {
		t.Fatal(err)
	}
	kept, _ := left()
	if kept == found {
		t.Fatal("KeepHorizon put no horizon of its own")
	}
	// Renewed every third of a second: unrenewed it would have 4 s
	// left, renewed within the last 2 s at least 6.
	time.Sleep(4200 * time.Millisecond)
	if id, n := left(); id != kept || n < int64(horizonTTL/time.Second)-3 {
		t.Fatalf("the kept horizon was not renewed: %d s left of %v", n, horizonTTL)
	}
	if err := a.el.(election.Horizon).KeepHorizon(context.Background()); err == nil {
		t.Fatal("a task that is not the master kept the horizon")
	}
	// The horizon lapses (as its etcd lease would, HorizonTTL after the
	// last master stopped renewing it).
	if _, err := cli.Delete(context.Background(), "/horizon.leases"); err != nil {
		t.Fatal(err)
	}
	c := startWith(t, etcd.Endpoint, opts("c:1"))
	testutil.Eventually(t, 20*time.Second, "c campaigns", func() bool { return c.status().Master == "b:1" })
	if err := b.el.Resign(context.Background()); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "c takes over", func() bool { return c.status().IsMaster })
	if end := c.status().LeasesEndBy; end.IsZero() || end.After(time.Now()) {
		t.Fatalf("after the horizon lapsed: the predecessor's leases end by %v, want a time past", end)
	}
	if _, n := left(); n >= 0 {
		t.Fatalf("a master that granted nothing put a horizon (%d s left)", n)
	}
}

// A master keeps its horizon only while its campaign holds mastership in
// etcd: once its campaign key is gone (its session expired there, though
// it has not noticed yet), KeepHorizon fails and puts nothing, since a
// successor may already have read the horizon.
func TestKeepHorizonNeedsMastership(t *testing.T) {
	t.Parallel() // its own etcd
	etcd := etcdtest.StartEtcd(t)
	cli := etcd.Client(t)
	a := startWith(t, etcd.Endpoint, election.EtcdOptions{Key: "/kh", Address: "a:1", TTL: 10 * time.Second,
		LongestLease: func() time.Duration { return 2 * time.Second }})
	oneMaster(t, 20*time.Second, a)
	before, err := cli.Get(context.Background(), "/kh.leases")
	if err != nil || len(before.Kvs) != 1 {
		t.Fatalf("the first master's horizon: %v, %v", before, err)
	}
	if _, err := cli.Delete(context.Background(), "/kh/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	if err := a.el.(election.Horizon).KeepHorizon(context.Background()); err == nil {
		t.Fatal("KeepHorizon succeeded for a campaign whose key is gone")
	}
	after, err := cli.Get(context.Background(), "/kh.leases")
	if err != nil || len(after.Kvs) != 1 || after.Kvs[0].Lease != before.Kvs[0].Lease {
		t.Fatalf("the horizon changed: %v, %v", after, err)
	}
}

// A LeaseHorizon needs the longest lease for its TTL, and belongs to one
// election.
func TestLeaseHorizonOptions(t *testing.T) {
	h := new(election.LeaseHorizon)
	if _, err := election.Etcd(nil, election.EtcdOptions{Key: "/k", Address: "a:1", Horizon: h}); err == nil {
		t.Fatal("a Horizon without LongestLease was accepted")
	}
	longest := func() time.Duration { return time.Second }
	if _, err := election.Etcd(nil, election.EtcdOptions{Key: "/k", Address: "a:1", Horizon: h, LongestLease: longest}); err != nil {
		t.Fatal(err)
	}
	if _, err := election.Etcd(nil, election.EtcdOptions{Key: "/k", Address: "b:1", Horizon: h, LongestLease: longest}); err == nil {
		t.Fatal("one Horizon was given to two elections")
	}
}
