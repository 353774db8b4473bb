package server

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/sluice-rl/sluice/api/doorman"
	v1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/internal/testutil/etcdtest"
	"github.com/sluice-rl/sluice/internal/testutil/fixture"
	"github.com/sluice-rl/sluice/internal/testutil/redistest"
	"github.com/sluice-rl/sluice/lease"
	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/limits/copies"
	"github.com/sluice-rl/sluice/limits/limitsyaml"
	redisstore "github.com/sluice-rl/sluice/limits/redis"
	"github.com/sluice-rl/sluice/resources"
)

// The composition root's tests: each mode of `sluice server` assembled
// in-process with New and Run (startServer), answering over real gRPC on
// loopback.

// writeFile writes data to name in a new temporary directory and returns
// its path.
func writeFile(t *testing.T, name, data string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// httpGet GETs url and returns the status code and the body.
func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// Standalone, as `sluice server --config FILE`: the file's Doorman
// templates answer GetCapacity with a lease over gRPC; /readyz is 200 once
// the configuration is loaded; Run returns nil when its context ends, and
// the port is closed then.
func TestComposeStandalone(t *testing.T) {
	s, stop := startServer(t, Config{ID: "standalone", Repository: Repository{Path: writeFile(t, "config.yaml", fixture.Doorman)}})
	ctx := t.Context()
	c := pb.NewCapacityClient(testutil.Dial(t, s.Addr()))
	resp, err := c.GetCapacity(ctx, capacityRequest("alice", "fixed/a", 5))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetResponse()) != 1 {
		t.Fatalf("GetCapacity: %v, want one lease", resp)
	}
	l := resp.GetResponse()[0]
	// fixed/*: STATIC, capacity 10, lease 20 s, refresh 5 s.
	if l.GetResourceId() != "fixed/a" || l.GetGets().GetCapacity() != 5 || l.GetGets().GetRefreshInterval() != 5 ||
		l.GetGets().GetExpiryTime() <= time.Now().Unix() || l.GetGets().GetExpiryTime() > time.Now().Add(21*time.Second).Unix() {
		t.Fatalf("fixed/a's lease: %v, want 5 for 20 s, refreshed every 5 s", l)
	}
	if resp, err := c.GetCapacity(ctx, capacityRequest("bob", "fixed/a", 50)); err != nil || resp.GetResponse()[0].GetGets().GetCapacity() != 10 {
		t.Fatalf("STATIC caps every client at the capacity, 10: %v, %v", resp, err)
	}
	if d, err := c.Discovery(ctx, &pb.DiscoveryRequest{}); err != nil || !d.GetIsMaster() || d.GetMastership().GetMasterAddress() != s.Addr() {
		t.Fatalf("Discovery: %v, %v; want this server, master", d, err)
	}
	if code, body := httpGet(t, "http://"+s.Addr()+"/readyz"); code != http.StatusOK || body != "ok\n" {
		t.Fatalf("/readyz: %d %q", code, body)
	}
	if err := stop(); err != nil {
		t.Fatalf("Run after its context ended: %v, want nil", err)
	}
	if _, err := http.Get("http://" + s.Addr() + "/healthz"); err == nil {
		t.Fatal("the port still answers after Run returned")
	}
}

// treeYAML is the root's configuration of TestComposeTree: FAIR_SHARE
// without learning mode, so that a new master grants at once.
const treeYAML = `
resources:
  - identifier_glob: r
    capacity: 100
    algorithm: {kind: FAIR_SHARE, lease_length: 20, refresh_interval: 1, learning_mode_duration: 0}
`

// A tree on etcd, as `sluice server --election etcd` and `--parent`: two
// tasks of a root elect a master on an embedded etcd; the other task
// redirects GetCapacity to it; an intermediate server given both tasks as
// parents gets its capacity from the master and hands it to its client;
// when the master stops, the other task takes over.
func TestComposeTree(t *testing.T) {
	etcd := etcdtest.StartEtcd(t)
	ctx := t.Context()
	repo := parseDoorman(t, treeYAML)
	root := func() (*Server, func() error) {
		return startServer(t, Config{Election: Election{Kind: "etcd", Key: "/" + t.Name() + "/root"}, Etcd: Etcd{Endpoints: []string{etcd.Endpoint}}, Repository: Repository{Fixed: repo}})
	}
	a, stopA := root()
	b, stopB := root()
	ca, cb := pb.NewCapacityClient(testutil.Dial(t, a.Addr())), pb.NewCapacityClient(testutil.Dial(t, b.Addr()))
	discover := func(c pb.CapacityClient) *pb.DiscoveryResponse {
		t.Helper()
		d, err := c.Discovery(ctx, &pb.DiscoveryRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	var master, other *Server
	var mc, oc pb.CapacityClient
	stopMaster := stopA
	testutil.Eventually(t, 30*time.Second, "one task of the root to be master, the other to know it", func() bool {
		da, db := discover(ca), discover(cb)
		switch {
		case da.GetIsMaster() && !db.GetIsMaster() && db.GetMastership().GetMasterAddress() == a.Addr():
			master, other, mc, oc = a, b, ca, cb
		case db.GetIsMaster() && !da.GetIsMaster() && da.GetMastership().GetMasterAddress() == b.Addr():
			master, other, mc, oc = b, a, cb, ca
			stopMaster = stopB
		default:
			return false
		}
		return true
	})
	for _, s := range []*Server{master, other} {
		if code, body := httpGet(t, "http://"+s.Addr()+"/readyz"); code != http.StatusOK {
			t.Errorf("/readyz of %s: %d %q", s.Addr(), code, body)
		}
	}
	// The other task redirects: no lease, the master's address.
	resp, err := oc.GetCapacity(ctx, capacityRequest("direct", "r", 10))
	if err != nil || len(resp.GetResponse()) != 0 || resp.GetMastership().GetMasterAddress() != master.Addr() {
		t.Fatalf("GetCapacity at the other task: %v, %v; want a redirect to %s", resp, err, master.Addr())
	}
	if _, err := other.Capacity().Status("r"); err == nil {
		t.Error("the other task holds state for r after redirecting")
	}
	resp, err = mc.GetCapacity(ctx, capacityRequest("direct", "r", 10))
	if err != nil || len(resp.GetResponse()) != 1 || resp.GetResponse()[0].GetGets().GetCapacity() != 10 {
		t.Fatalf("GetCapacity at the master: %v, %v; want 10", resp, err)
	}

	// The intermediate server: its parent is the root (either task).
	mid, _ := startServer(t, Config{ID: "mid", Parent: Parent{Addresses: []string{other.Addr(), master.Addr()}}})
	cm := pb.NewCapacityClient(testutil.Dial(t, mid.Addr()))
	testutil.Eventually(t, 60*time.Second, "the intermediate server to grant its client 30 from the root's capacity", func() bool {
		resp, err := cm.GetCapacity(ctx, capacityRequest("leaf-client", "r", 30))
		return err == nil && len(resp.GetResponse()) == 1 && resp.GetResponse()[0].GetGets().GetCapacity() == 30
	})
	st, err := master.Capacity().Status("r")
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(st.Leases, func(l lease.Lease) bool { return l.Client == "mid" })
	if i < 0 || st.Leases[i].Has < 30 {
		t.Fatalf("the master's leases of r: %+v; want the intermediate server, mid, holding at least its client's 30", st.Leases)
	}
	if ps, ok := mid.Capacity().Parent(); !ok || ps.Current != master.Addr() {
		t.Errorf("the intermediate server's parent link: %+v (%v), want it at the master %s", ps, ok, master.Addr())
	}

	// The master stops (resigning): the other task takes over.
	if err := stopMaster(); err != nil {
		t.Fatalf("the master's Run: %v", err)
	}
	testutil.Eventually(t, 30*time.Second, "the other task to become master", func() bool { return discover(oc).GetIsMaster() })
}

// apiYAML is the limits section of the Redis tests: one bucket of 3
// tokens that hardly refills, no waiting.
const apiYAML = `
resources:
  api:
    domains:
      small: {size: 3, fill_rate: 0.001, wait_timeout: 0s, max_tokens_per_request: 3}
`

// allowOn asks the server at c for tokens of api/small.
func allowOn(t *testing.T, c v1.LimitsClient, tokens int64) *v1.AllowResponse {
	t.Helper()
	resp, err := c.Allow(t.Context(), &v1.AllowRequest{Resource: "api", Domain: "small", Tokens: tokens, MaxWait: durationpb.New(0)})
	if err != nil {
		t.Fatalf("Allow %d: %v", tokens, err)
	}
	return resp
}

// sharedBucket checks that the servers at a and b decide api/small on
// one bucket: 3 tokens in all, whichever server is asked (remaining is
// fractional: the bucket refills 0.001 tokens a second).
func sharedBucket(t *testing.T, a, b v1.LimitsClient) {
	t.Helper()
	if r := allowOn(t, a, 2); r.GetStatus() != v1.AllowResponse_OK || r.GetGranted() != 2 || r.GetRemaining() < 1 || r.GetRemaining() >= 1.01 {
		t.Fatalf("2 of 3 tokens from the first server: %v", r)
	}
	if r := allowOn(t, b, 2); r.GetStatus() == v1.AllowResponse_OK || r.GetGranted() != 0 {
		t.Fatalf("2 more from the second server, 1 left in the shared bucket: %v, want a refusal", r)
	}
	if r := allowOn(t, b, 1); r.GetStatus() != v1.AllowResponse_OK || r.GetGranted() != 1 || r.GetRemaining() >= 0.01 {
		t.Fatalf("the last token from the second server: %v", r)
	}
	if r := allowOn(t, a, 1); r.GetStatus() == v1.AllowResponse_OK {
		t.Fatalf("a 4th token from the first server: %v, want a refusal", r)
	}
}

// redisServer runs a server whose limits (apiYAML) are on the Redis of
// client, with the key prefix prefix, as `sluice server --redis` (without
// etcd: no fleet). closed counts the closes of its shared store.
func redisServer(t *testing.T, c redis.UniversalClient, prefix string, closed *atomic.Int32) (*Server, func() error) {
	t.Helper()
	cfg, err := limitsyaml.ParseSection([]byte(apiYAML))
	if err != nil {
		t.Fatal(err)
	}
	sh := sharedOn(redisstore.New(c, redisstore.Options{Prefix: prefix}), c)
	sh.Copies = nil
	closeStore := sh.Close
	sh.Close = func() error { closed.Add(1); return closeStore() }
	return startServer(t, Config{Repository: Repository{Fixed: resources.Compose(nil, cfg, nil, nil)}, Store: Store{Shared: sh}})
}

// Redis, as `sluice server --redis`: two servers on one redis-server
// decide sluice.v1.Limits/Allow on one bucket, a key of Redis; each closes
// its shared store when Run ends.
func TestComposeRedis(t *testing.T) {
	srv := redistest.StartT(t)
	var closed atomic.Int32
	newClient := func() redis.UniversalClient {
		return redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	}
	a, stopA := redisServer(t, newClient(), "compose:", &closed)
	b, stopB := redisServer(t, newClient(), "compose:", &closed)
	sharedBucket(t, v1.NewLimitsClient(testutil.Dial(t, a.Addr())), v1.NewLimitsClient(testutil.Dial(t, b.Addr())))
	check := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer check.Close()
	keys, err := check.Keys(t.Context(), "compose:*").Result()
	if err != nil || !slices.ContainsFunc(keys, func(k string) bool { return strings.Contains(k, "api") && strings.Contains(k, "small") }) {
		t.Fatalf("keys on Redis: %q, %v; want api/small's bucket", keys, err)
	}
	for _, stop := range []func() error{stopA, stopB} {
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	}
	if n := closed.Load(); n != 2 {
		t.Errorf("shared stores closed %d times after both Runs returned, want 2", n)
	}
}

// Redis Cluster, as `sluice server --redis-cluster`: two servers on a
// three-master cluster decide on one bucket, a key of the cluster.
func TestComposeRedisCluster(t *testing.T) {
	cl := redistest.StartClusterT(t, 3)
	var closed atomic.Int32
	a, _ := redisServer(t, cl.Client(), "cluster:", &closed)
	b, _ := redisServer(t, cl.Client(), "cluster:", &closed)
	sharedBucket(t, v1.NewLimitsClient(testutil.Dial(t, a.Addr())), v1.NewLimitsClient(testutil.Dial(t, b.Addr())))
	check := cl.Client()
	defer check.Close()
	var found atomic.Bool
	err := check.ForEachMaster(t.Context(), func(ctx context.Context, m *redis.Client) error {
		keys, err := m.Keys(ctx, "cluster:*").Result()
		if slices.ContainsFunc(keys, func(k string) bool { return strings.Contains(k, "api") && strings.Contains(k, "small") }) {
			found.Store(true)
		}
		return err
	})
	if err != nil || !found.Load() {
		t.Fatalf("api/small's bucket on the cluster's masters: found %v, %v", found.Load(), err)
	}
}

// A Charon fleet, as `sluice server --redis --etcd-endpoints`: two servers
// sharing a Redis (the copy log) and an etcd (the fleet); a session opened
// on one, a Reserve through the other is forwarded to the session's home,
// and the holds are counted once across the fleet.
func TestComposeFleet(t *testing.T) {
	etcd := etcdtest.StartEtcd(t)
	srv := redistest.StartT(t)
	fleetServer := func() (*Server, v1.LimitsClient) {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
		s, _ := startServer(t, Config{Etcd: Etcd{Endpoints: []string{etcd.Endpoint}}, Repository: Repository{Fixed: resources.Compose(nil, nil, fixture.Sandboxes(), nil)}, Store: Store{Shared: sharedOn(redisstore.New(c, redisstore.Options{Prefix: "fleet:"}), c)}, Sessions: Sessions{Fleet: Fleet{Prefix: "/" + t.Name()}}})
		lc := v1.NewLimitsClient(testutil.Dial(t, s.Addr()))
		// A member serves holds once it has its epoch.
		testutil.Eventually(t, 30*time.Second, s.Addr()+" to serve holds", func() bool {
			r, err := lc.OpenSession(t.Context(), &v1.OpenSessionRequest{})
			if err != nil {
				return false
			}
			_, _ = lc.CloseSession(t.Context(), &v1.CloseSessionRequest{SessionId: r.GetSessionId()})
			return true
		})
		return s, lc
	}
	// Assembled but not run, a member has no epoch: every Reserve would
	// answer Unavailable, so it is not ready.
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	joining := assemble(t, Config{Listen: Listen{Address: "127.0.0.1:0"}, Etcd: Etcd{Endpoints: []string{etcd.Endpoint}},
		Repository: Repository{Fixed: resources.Compose(nil, nil, fixture.Sandboxes(), nil)},
		Store:      Store{Shared: sharedOn(redisstore.New(c, redisstore.Options{Prefix: "fleet:"}), c)}, Sessions: Sessions{Fleet: Fleet{Prefix: "/" + t.Name()}}})
	if ok, why := joining.Ready(); ok || !strings.Contains(why, "not a member of the fleet") {
		t.Errorf("a member without its epoch: Ready %v %q, want not ready, not a member of the fleet", ok, why)
	}
	joining.close()
	a, ca := fleetServer()
	b, cb := fleetServer()
	ctx := t.Context()
	for _, s := range []*Server{a, b} {
		if _, ok := s.Sessions().Fleet(); !ok {
			t.Fatalf("%s has no fleet", s.Addr())
		}
		// Ready once its engine asked the copy log about the resource's
		// learning mode (within sessions' learnEvery of joining).
		testutil.Eventually(t, 30*time.Second, s.Addr()+" to be ready", func() bool { ok, _ := s.Ready(); return ok })
	}

	// Two members and a fresh Redis, which cannot tell fresh from
	// emptied: a learning period that one member's first look at the
	// resource started waited for the other's only, and both being ready
	// says it is over, so the first reserves below are granted.

	// A session homed on a, its holds reserved through b.
	sa := open(t, ca)
	r, err := cb.Reserve(ctx, &v1.ReserveRequest{SessionId: sa, Resource: "cookbook/sandboxes", Domain: "globex", Copies: 3})
	if err != nil || r.GetStatus() != v1.ReserveResponse_OK || r.GetGranted() != 3 || r.GetGlobalHolds() != 3 {
		t.Fatalf("Reserve through b in a's session: %v, %v", r, err)
	}
	if n, _ := metricValue(t, b.Registry(), "sluice_copies_forwarded_total", nil); n != 1 {
		t.Errorf("b forwarded %v requests, want 1", n)
	}
	if n, _ := metricValue(t, a.Registry(), "sluice_copies_forwarded_total", nil); n != 0 {
		t.Errorf("a forwarded %v requests, want 0", n)
	}
	snap := a.Sessions().Snapshot()
	if globalHolds(snap) != 3 || len(snap.Sessions) != 1 || snap.Sessions[0].Holds[0].Copies != 3 {
		t.Fatalf("a's contributions after the forwarded reserve: %+v, want a's session holding 3", snap)
	}
	if h := globalHolds(b.Sessions().Snapshot()); h != 0 {
		t.Errorf("b contributes %d holds, want none: the session is a's", h)
	}

	// A session homed on b: of the global limit of 5, a's 3 leave 2.
	sb := open(t, cb)
	r, err = cb.Reserve(ctx, &v1.ReserveRequest{SessionId: sb, Resource: "cookbook/sandboxes", Domain: "umbrella", Copies: 3, MinCopies: 1})
	if err != nil || r.GetGranted() != 2 || r.GetGlobalHolds() != 5 {
		t.Fatalf("Reserve of 3 in b's session with 3 of 5 held in a's: %v, %v; want 2 granted, 5 held", r, err)
	}
	// Through a, a's session: none left; the holds counted once are 5.
	r, err = ca.Reserve(ctx, &v1.ReserveRequest{SessionId: sa, Resource: "cookbook/sandboxes", Domain: "acme", Copies: 1})
	if err != nil || r.GetStatus() != v1.ReserveResponse_REJECTED_OVER_LIMIT || r.GetGlobalHolds() != 5 {
		t.Fatalf("Reserve at the global limit: %v, %v", r, err)
	}
	// Releasing through b, forwarded home to a, frees a's copies.
	if _, err := cb.Release(ctx, &v1.ReleaseRequest{SessionId: sa, Resource: "cookbook/sandboxes", Domain: "globex", Copies: 3}); err != nil {
		t.Fatal(err)
	}
	if h := globalHolds(a.Sessions().Snapshot()); h != 0 {
		t.Errorf("a still contributes %d holds after the forwarded release", h)
	}
	r, err = ca.Reserve(ctx, &v1.ReserveRequest{SessionId: sa, Resource: "cookbook/sandboxes", Domain: "acme", Copies: 3})
	if err != nil || r.GetGranted() != 3 || r.GetGlobalHolds() != 5 {
		t.Fatalf("Reserve after the release: %v, %v; want 3 granted, 5 held", r, err)
	}
}

// New returns an error, and assembles nothing, for a configuration it
// cannot serve.
func TestNewErrors(t *testing.T) {
	badBucket := &limits.Config{Resources: map[string]*limits.Resource{"x": {Default: &limits.Bucket{Size: 1}}}}
	withLimits := writeFile(t, "config.yaml", fixture.Doorman+`
limits:
  resources:
    api:
      domains:
        small: {size: 3, fill_rate: 1}
`)
	quota := writeFile(t, "quota.yaml", fixture.QuotaService)
	badFile := writeFile(t, "bad.yaml", `
limits:
  resources:
    api:
      domains:
        small: {size: 3, fill_rate: -1}
`)
	for _, tc := range []struct {
		name string
		cfg  Config
		want string // in the error
	}{
		{"invalid limits", Config{Repository: Repository{Fixed: resources.Compose(nil, badBucket, nil, nil)}}, "fill_rate"},
		{"invalid limits in the configuration file", Config{Repository: Repository{Path: badFile}}, "fill_rate"},
		{"invalid copy-limited resources", Config{Repository: Repository{Fixed: resources.Compose(nil, nil, &copies.Config{Resources: map[string]copies.Resource{"no spaces": {DomainLimit: 1}}}, nil)}}, "resource name"},
		{"limits configured twice", Config{Repository: Repository{Path: withLimits, QuotaServicePath: quota}}, "configured twice"},
		{"a missing configuration file", Config{Repository: Repository{Path: filepath.Join(t.TempDir(), "none.yaml")}}, "none.yaml"},
		{"election etcd without endpoints", Config{Election: Election{Kind: "etcd", Key: "/k"}}, "Etcd.Endpoints: required with Election.Kind etcd"},
		{"election etcd without a key", Config{Election: Election{Kind: "etcd"}, Etcd: Etcd{Endpoints: []string{"127.0.0.1:1"}}}, "Election.Key: required"},
		{"configuration on etcd without endpoints", Config{Repository: Repository{Path: "etcd:/config"}}, "Etcd.Endpoints: required with Repository.Path etcd:/KEY"},
		{"a bad election kind", Config{Election: Election{Kind: "zookeeper"}}, `Election.Kind: "zookeeper"`},
		{"a path and a fixed document", Config{Repository: Repository{Path: withLimits, Fixed: resources.Compose(nil, nil, nil, nil)}}, "Repository.Fixed: set with Repository.Path"},
		{"limits twice, fixed", Config{Repository: Repository{QuotaServicePath: quota, Fixed: resources.Compose(nil, &limits.Config{}, nil, nil)}}, "Repository.QuotaServicePath: limits configured twice: in the limits section of Repository.Fixed"},
		{"a negative grace", Config{Listen: Listen{Grace: -time.Second}}, "Listen.Grace: -1s"},
		{"a missing certificate", Config{Listen: Listen{TLS: TLS{CertFile: filepath.Join(t.TempDir(), "none.pem"), KeyFile: "k.pem"}}}, "Listen.TLS: tls: loading"},
		{"a certificate without its key", Config{Parent: Parent{TLS: TLS{CertFile: "c.pem"}}}, "Parent.TLS: tls: a client certificate needs both"},
		{"TLS files and a built TLS", Config{Etcd: Etcd{TLS: TLS{CAFile: "ca.pem", Config: &tls.Config{}}}}, "Etcd.TLS.Config: set with Etcd.TLS's files"},
		{"Redis and Redis Cluster", Config{Store: Store{Redis: "redis://127.0.0.1:1/0", Cluster: []string{"127.0.0.1:2"}}}, "Store.Cluster: set with Store.Redis"},
		{"Redis and a shared store", Config{Store: Store{Redis: "redis://127.0.0.1:1/0", Shared: &Shared{}}}, "Store.Shared: set with Store.Redis"},
		{"a negative Redis timeout", Config{Store: Store{Redis: "redis://127.0.0.1:1/0", Timeout: -time.Second}}, "Store.Timeout: -1s"},
		{"a bad Redis URL", Config{Store: Store{Redis: "memcached://127.0.0.1:1"}}, "Store.Redis: "},
		{"Redis and Sentinel", Config{Store: Store{Redis: "redis://127.0.0.1:1/0", Sentinel: "redis://127.0.0.1:2?master_name=m"}}, "Store.Sentinel: set with Store.Redis"},
		{"a bad cluster URL", Config{Store: Store{Cluster: []string{"redis://127.0.0.1:1?addr=127.0.0.1:2&bogus=1"}}}, "Store.Cluster: redis: unexpected option: bogus"},
		{"Sentinel without a master name", Config{Store: Store{Sentinel: "redis://127.0.0.1:1"}}, "Store.Sentinel: no master_name"},
		{"Redis TLS on plaintext", Config{Store: Store{Redis: "redis://127.0.0.1:1/0", TLSServerName: "redis.example"}}, "Store.TLS: set with a redis:// url: use rediss://"},
		{"a missing Redis CA", Config{Store: Store{Redis: "rediss://127.0.0.1:1/0", TLS: TLS{CAFile: filepath.Join(t.TempDir(), "none.pem")}}}, "Store.TLS: tls: open"},
		{"a missing Redis password file", Config{Store: Store{Redis: "redis://127.0.0.1:1/0", PasswordFile: filepath.Join(t.TempDir(), "none")}}, "Store.PasswordFile: limits/redis: the password file"},
		{"Redis TLS without Redis", Config{Store: Store{TLS: TLS{CAFile: "ca.pem"}}}, "Store.TLS: set without a Redis"},
		{"a key prefix without Redis", Config{Store: Store{KeyPrefix: "a:"}}, "Store.KeyPrefix: set without a Redis"},
		{"a password file without Redis", Config{Store: Store{PasswordFile: "pw"}}, "Store.PasswordFile: set without a Redis"},
		{"a near-limit ratio above 1", Config{Envoy: EnvoyRateLimit{NearLimitRatio: 1.5}}, "Envoy.NearLimitRatio: 1.5, want a fraction in (0, 1]"},
		{"a bad address", Config{Listen: Listen{Address: "127.0.0.1:http-nope"}}, "http-nope"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(t.Context(), tc.cfg)
			if err == nil {
				t.Fatalf("New: %v, nil error", s)
			}
			if s != nil {
				t.Errorf("New returned a server with its error %v", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New: %v; want it to say %q", err, tc.want)
			}
		})
	}
}
