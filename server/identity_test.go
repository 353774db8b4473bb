package server

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"

	pb "github.com/sluice-rl/sluice/api/doorman"
	"github.com/sluice-rl/sluice/api/doorman/doormanconnect"
	qs "github.com/sluice-rl/sluice/api/quotaservice"
	v1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/api/sluice/v1/sluicev1connect"
	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/internal/testutil/etcdtest"
	"github.com/sluice-rl/sluice/internal/testutil/fixture"
	"github.com/sluice-rl/sluice/internal/testutil/redistest"
	"github.com/sluice-rl/sluice/internal/testutil/rlqsproxy"
	"github.com/sluice-rl/sluice/internal/tlsutil"
	"github.com/sluice-rl/sluice/limits"
	redisstore "github.com/sluice-rl/sluice/limits/redis"
	"github.com/sluice-rl/sluice/resources"
)

// The identities of the tests: alice by her certificate's CN, bob by his
// SPIFFE ID (his CN, "bob-cn", is not his identity).
const bob = "spiffe://example.org/ns/shop/sa/bob"

// peers are the certificates of an identity test's clients.
type peers struct {
	certs      *testutil.Certs
	alice, bob *tls.Config
}

func newPeers(t *testing.T) peers {
	t.Helper()
	certs := testutil.MakeCerts(t)
	client := func(cn string, uris ...string) *tls.Config {
		cert, key := certs.Client(t, cn, uris...)
		c, err := tlsutil.Client(certs.CA, cert, key)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	return peers{certs: certs, alice: client("alice"), bob: client("bob-cn", bob)}
}

// identityServer runs a server with mTLS and --client-identity cert, the
// document of the tests (Doorman's fixed/* and fair, a token bucket
// users, cookbook/sandboxes), and policy (a file's path; "": none).
func identityServer(t *testing.T, p peers, policy string, cfg Config) *Server {
	t.Helper()
	cfg.ID = "identity"
	cfg.Listen.TLS = TLS{CertFile: p.certs.ServerCert, KeyFile: p.certs.ServerKey, CAFile: p.certs.CA}
	cfg.Listen.Identity = Identity{Source: "cert", PolicyPath: policy}
	if cfg.Repository.Fixed == nil {
		cfg.Repository.Fixed = resources.Compose(doormanRepo(t), &limits.Config{Resources: map[string]*limits.Resource{
			"users": {Template: &limits.Bucket{Size: 1000, FillRate: 1, MaxTokensPerRequest: 10}},
			"admin": {Template: &limits.Bucket{Size: 1000, FillRate: 1, MaxTokensPerRequest: 10}},
		}}, fixture.Sandboxes(), nil)
	}
	s, _ := startServer(t, cfg)
	return s
}

// dialTLS is a grpc-go connection to addr presenting c's certificate.
func dialTLS(t *testing.T, addr string, c *tls.Config) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(c)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// jsonClient is an HTTP/1.1 client presenting c's certificate: Connect's
// JSON goes to net/http's side of the endpoint.
func jsonClient(c *tls.Config) *http.Client {
	return &http.Client{Transport: &http.Transport{TLSClientConfig: c}}
}

// denied checks that err is PermissionDenied (on either transport) and
// says each of says.
func denied(t *testing.T, what string, err error, says ...string) {
	t.Helper()
	code := status.Code(err)
	if ce := new(connect.Error); errors.As(err, &ce) {
		code = codes.Code(ce.Code())
	}
	if code != codes.PermissionDenied {
		t.Errorf("%s: %v, want PermissionDenied", what, err)
		return
	}
	for _, s := range says {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("%s: %v, want it to say %s", what, err, s)
		}
	}
}

// A lease client must use its certificate's identity (or the identity,
// "/" and a suffix) as its client id, on grpc-go's transport and on
// net/http's alike: claiming another's is PermissionDenied naming both.
func TestIdentityLeaseClientIDs(t *testing.T) {
	p := newPeers(t)
	s := identityServer(t, p, "", Config{})
	ctx := t.Context()
	alice := pb.NewCapacityClient(dialTLS(t, s.Addr(), p.alice))
	bobc := pb.NewCapacityClient(dialTLS(t, s.Addr(), p.bob))
	aliceJSON := doormanconnect.NewCapacityClient(jsonClient(p.alice), "https://"+s.Addr(), connect.WithProtoJSON())

	for _, id := range []string{"alice", "alice/worker-1"} {
		if _, err := alice.GetCapacity(ctx, capacityRequest(id, "fixed/a", 2)); err != nil {
			t.Errorf("alice as %s over grpc-go: %v", id, err)
		}
	}
	if _, err := aliceJSON.GetCapacity(ctx, connect.NewRequest(capacityRequest("alice/json", "fixed/a", 2))); err != nil {
		t.Errorf("alice as alice/json over JSON: %v", err)
	}
	if _, err := bobc.GetCapacity(ctx, capacityRequest(bob+"/pod-1", "fixed/a", 2)); err != nil {
		t.Errorf("bob as his SPIFFE ID/pod-1: %v", err)
	}
	_, err := alice.GetCapacity(ctx, capacityRequest(bob+"/pod-1", "fixed/a", 5))
	denied(t, "alice as bob over grpc-go", err, `client_id "`+bob+`/pod-1"`, `identity "alice"`)
	_, err = aliceJSON.GetCapacity(ctx, connect.NewRequest(capacityRequest(bob, "fixed/a", 5)))
	denied(t, "alice as bob over JSON", err, `client_id "`+bob+`"`, `identity "alice"`)
	_, err = bobc.GetCapacity(ctx, capacityRequest("bob-cn", "fixed/a", 5))
	denied(t, "bob as his CN", err, `client_id "bob-cn"`, `identity "`+bob+`"`)
	_, err = alice.GetCapacity(ctx, capacityRequest("alice-2", "fixed/a", 5))
	denied(t, "alice as alice-2", err, `client_id "alice-2"`)

	// Releasing another's lease: refused, and the lease stays.
	_, err = alice.ReleaseCapacity(ctx, &pb.ReleaseCapacityRequest{ClientId: proto.String(bob + "/pod-1"), ResourceId: []string{"fixed/a"}})
	denied(t, "alice releasing bob's lease", err, bob)
	if st, _ := s.Capacity().Status("fixed/a"); len(st.Leases) != 4 {
		t.Errorf("fixed/a has %d leases, want 4 (alice's three, bob's)", len(st.Leases))
	}
	if _, err := alice.ReleaseCapacity(ctx, &pb.ReleaseCapacityRequest{ClientId: proto.String("alice/worker-1"), ResourceId: []string{"fixed/a"}}); err != nil {
		t.Errorf("alice releasing her own: %v", err)
	}

	// An intermediate server is a client of its parent: its server_id too.
	sreq := func(id string) *pb.GetServerCapacityRequest {
		return &pb.GetServerCapacityRequest{ServerId: proto.String(id), Resource: []*pb.ServerCapacityResourceRequest{{
			ResourceId: proto.String("fair"), Wants: []*pb.PriorityBandAggregate{{Priority: proto.Int64(0), NumClients: proto.Int64(1), Wants: proto.Float64(5)}}}}}
	}
	_, err = alice.GetServerCapacity(ctx, sreq("regional"))
	denied(t, "alice as server regional", err, `server_id "regional"`, `identity "alice"`)
	if _, err := alice.GetServerCapacity(ctx, sreq("alice/regional")); err != nil {
		t.Errorf("alice as server alice/regional: %v", err)
	}

	// A Watch of pushed leases: the holder is the caller.
	leases := v1.NewLeasesClient(dialTLS(t, s.Addr(), p.alice))
	w, err := leases.Watch(ctx, &v1.WatchRequest{HolderId: bob})
	if err == nil {
		_, err = w.Recv()
	}
	denied(t, "alice watching bob's leases", err, `holder_id "`+bob+`"`, `identity "alice"`)
	w, err = leases.Watch(ctx, &v1.WatchRequest{HolderId: "alice"})
	if err == nil {
		_, err = w.Recv()
	}
	if err != nil {
		t.Errorf("alice watching her own leases: %v", err)
	}
}

// A session belongs to the identity that opened it: no other can keep it
// alive, reserve, release, transfer, seize into or close it; a staged
// transfer may be seized by another identity into its own session.
func TestIdentitySessionOwner(t *testing.T) {
	p := newPeers(t)
	s := identityServer(t, p, "", Config{})
	ctx := t.Context()
	alice := v1.NewLimitsClient(dialTLS(t, s.Addr(), p.alice))
	bobc := v1.NewLimitsClient(dialTLS(t, s.Addr(), p.bob))
	bobJSON := sluicev1connect.NewLimitsClient(jsonClient(p.bob), "https://"+s.Addr(), connect.WithProtoJSON())

	sa := open(t, alice)
	const res, dom = "cookbook/sandboxes", "globex"
	if r, err := alice.Reserve(ctx, &v1.ReserveRequest{SessionId: sa, Resource: res, Domain: dom, Copies: 2}); err != nil || r.GetGranted() != 2 {
		t.Fatalf("alice reserving in her session: %v, %v", r, err)
	}
	_, err := bobc.Reserve(ctx, &v1.ReserveRequest{SessionId: sa, Resource: res, Domain: dom, Copies: 1})
	denied(t, "bob reserving in alice's session", err, `identity "`+bob+`" may not use`)
	_, err = bobJSON.Reserve(ctx, connect.NewRequest(&v1.ReserveRequest{SessionId: sa, Resource: res, Domain: dom, Copies: 1}))
	denied(t, "bob reserving in alice's session over JSON", err, bob)
	_, err = bobc.Release(ctx, &v1.ReleaseRequest{SessionId: sa, Resource: res, Domain: dom, Copies: 2})
	denied(t, "bob releasing alice's holds", err)
	_, err = bobc.Transfer(ctx, &v1.TransferRequest{SessionId: sa, Resource: res, Domain: dom, Copies: 1})
	denied(t, "bob transferring alice's holds", err)
	_, err = bobc.CloseSession(ctx, &v1.CloseSessionRequest{SessionId: sa})
	denied(t, "bob closing alice's session", err)
	ka, err := bobc.KeepAlive(ctx)
	if err == nil {
		if err = ka.Send(&v1.KeepAliveRequest{SessionId: sa}); err == nil {
			_, err = ka.Recv()
		}
	}
	denied(t, "bob keeping alice's session alive", err)
	if h := globalHolds(s.Sessions().Snapshot()); h != 2 {
		t.Fatalf("%d copies held after bob's attempts, want alice's 2", h)
	}

	// A hand-off: alice stages a transfer, bob seizes it into his own
	// session, not into hers.
	tr, err := alice.Transfer(ctx, &v1.TransferRequest{SessionId: sa, Resource: res, Domain: dom, Copies: 1})
	if err != nil {
		t.Fatalf("alice staging a transfer: %v", err)
	}
	_, err = bobc.Seize(ctx, &v1.SeizeRequest{SessionId: sa, TransferId: tr.GetTransferId()})
	denied(t, "bob seizing into alice's session", err)
	sb := open(t, bobc)
	if sz, err := bobc.Seize(ctx, &v1.SeizeRequest{SessionId: sb, TransferId: tr.GetTransferId()}); err != nil || sz.GetCopies() != 1 {
		t.Errorf("bob seizing alice's transfer into his session: %v, %v", sz, err)
	}
	_, err = alice.CloseSession(ctx, &v1.CloseSessionRequest{SessionId: sb})
	denied(t, "alice closing bob's session", err, `identity "alice"`)

	// A client may not say it acts for another, as a fleet server would.
	fwd := metadata.AppendToOutgoingContext(ctx, "sluice-forwarded", "x", "sluice-forwarded-identity", "alice")
	_, err = bobc.Reserve(fwd, &v1.ReserveRequest{SessionId: sa, Resource: res, Domain: dom, Copies: 1})
	denied(t, "bob saying he forwards alice's request", err, `identity "`+bob+`" forwarded a request for identity "alice"`)

	// The owner keeps it alive and closes it.
	ka, err = alice.KeepAlive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ka.Send(&v1.KeepAliveRequest{SessionId: sa}); err != nil {
		t.Fatal(err)
	}
	if _, err := ka.Recv(); err != nil {
		t.Errorf("alice keeping her session alive: %v", err)
	}
	if _, err := alice.CloseSession(ctx, &v1.CloseSessionRequest{SessionId: sa}); err != nil {
		t.Errorf("alice closing her session: %v", err)
	}
	if h := globalHolds(s.Sessions().Snapshot()); h != 1 {
		t.Errorf("%d copies held, want bob's seized 1", h)
	}
}

// The policy file grants each identity what it may use through each API,
// and is reloaded when it changes; a bad new file is logged and counted,
// and the last good one keeps serving; a bad file at start is New's error
// naming the file and the line.
func TestIdentityPolicy(t *testing.T) {
	p := newPeers(t)
	dir := t.TempDir()
	policy := filepath.Join(dir, "policy.yaml")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(policy+".tmp", []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(policy+".tmp", policy); err != nil {
			t.Fatal(err)
		}
	}
	write(`identities:
  alice:
    lease: [fixed/*]
    allow: [users]
    reserve: [cookbook/**]
    ratelimit: [edge]
  ` + bob + `:
    lease: [fair]
`)
	s := identityServer(t, p, policy, Config{})
	ctx := t.Context()
	aliceConn, bobConn := dialTLS(t, s.Addr(), p.alice), dialTLS(t, s.Addr(), p.bob)
	aliceJSON := jsonClient(p.alice)

	// lease
	if _, err := pb.NewCapacityClient(aliceConn).GetCapacity(ctx, capacityRequest("alice", "fixed/a", 1)); err != nil {
		t.Errorf("alice leasing fixed/a: %v", err)
	}
	_, err := pb.NewCapacityClient(aliceConn).GetCapacity(ctx, capacityRequest("alice", "fair", 1))
	denied(t, "alice leasing fair", err, `identity "alice" may not lease "fair"`, policy)
	_, err = doormanconnect.NewCapacityClient(aliceJSON, "https://"+s.Addr(), connect.WithProtoJSON()).GetCapacity(ctx, connect.NewRequest(capacityRequest("alice", "fair", 1)))
	denied(t, "alice leasing fair over JSON", err, `may not lease "fair"`)
	if _, err := pb.NewCapacityClient(bobConn).GetCapacity(ctx, capacityRequest(bob, "fair", 1)); err != nil {
		t.Errorf("bob leasing fair: %v", err)
	}
	// allow, on sluice.v1.Limits and the quota service
	lim := v1.NewLimitsClient(aliceConn)
	if r, err := lim.Allow(ctx, &v1.AllowRequest{Resource: "users", Domain: "u1", Tokens: 1}); err != nil || r.GetStatus() != v1.AllowResponse_OK {
		t.Errorf("alice's Allow on users: %v, %v", r, err)
	}
	_, err = lim.Allow(ctx, &v1.AllowRequest{Resource: "admin", Domain: "u1", Tokens: 1})
	denied(t, "alice's Allow on admin", err, `identity "alice" may not Allow on "admin"`)
	_, err = v1.NewLimitsClient(bobConn).Allow(ctx, &v1.AllowRequest{Resource: "users", Domain: "u1", Tokens: 1})
	denied(t, "bob's Allow on users", err, bob)
	quota := qs.NewQuotaServiceClient(aliceConn)
	if r, err := quota.Allow(ctx, &qs.AllowRequest{Namespace: "users", BucketName: "u2", TokensRequested: 1}); err != nil || r.GetStatus() != qs.AllowResponse_OK {
		t.Errorf("alice's quota service Allow on users: %v, %v", r, err)
	}
	_, err = quota.Allow(ctx, &qs.AllowRequest{Namespace: "admin", BucketName: "u2", TokensRequested: 1})
	denied(t, "alice's quota service Allow on admin", err, `"admin"`)
	// reserve
	sa := open(t, lim)
	if r, err := lim.Reserve(ctx, &v1.ReserveRequest{SessionId: sa, Resource: "cookbook/sandboxes", Domain: "acme", Copies: 1}); err != nil || r.GetGranted() != 1 {
		t.Errorf("alice reserving cookbook/sandboxes: %v, %v", r, err)
	}
	_, err = lim.Reserve(ctx, &v1.ReserveRequest{SessionId: sa, Resource: "sandboxes", Domain: "acme", Copies: 1})
	denied(t, "alice reserving sandboxes", err, `may not reserve copies of "sandboxes"`)
	// An identity granted no reserve pattern opens no session.
	bl := v1.NewLimitsClient(bobConn)
	_, err = bl.OpenSession(ctx, &v1.OpenSessionRequest{})
	denied(t, "bob opening a session", err, `may not reserve copies of anything`)
	// ratelimit: Envoy's domain
	rl := func(conn *grpc.ClientConn, domain string) error {
		_, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain,
			Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}})
		return err
	}
	if err := rl(aliceConn, "edge"); err != nil {
		t.Errorf("alice rate limiting in edge: %v", err)
	}
	denied(t, "alice rate limiting in core", rl(aliceConn, "core"), `rate limit through Envoy in the domain "core"`)
	denied(t, "bob rate limiting in edge", rl(bobConn, "edge"), bob)

	// A new policy grants bob users: served once it is reloaded.
	write(`identities:
  alice:
    lease: [fixed/*]
  ` + bob + `:
    allow: [users]
`)
	testutil.Eventually(t, 30*time.Second, "the new policy in force", func() bool {
		_, err := bl.Allow(ctx, &v1.AllowRequest{Resource: "users", Domain: "u1", Tokens: 1})
		return err == nil
	})
	_, err = lim.Allow(ctx, &v1.AllowRequest{Resource: "users", Domain: "u1", Tokens: 1})
	denied(t, "alice's Allow on users under the new policy", err)
	// A bad one is refused; the last good one stays.
	failed, _ := metricValue(t, s.Registry(), "sluice_server_config_reloads_total", map[string]string{"result": "failed"})
	write("identities:\n  alice:\n    lease: [\"[\"]\n")
	testutil.Eventually(t, 30*time.Second, "the bad policy's reload counted as failed", func() bool {
		n, _ := metricValue(t, s.Registry(), "sluice_server_config_reloads_total", map[string]string{"result": "failed"})
		return n > failed
	})
	if _, err := bl.Allow(ctx, &v1.AllowRequest{Resource: "users", Domain: "u1", Tokens: 1}); err != nil {
		t.Errorf("bob's Allow on users after a bad policy file: %v, want the last good policy's answer", err)
	}

	// At start, a bad file is New's error, naming the file and the line.
	_, err = New(ctx, Config{Listen: Listen{Address: "127.0.0.1:0", TLS: TLS{CertFile: p.certs.ServerCert, KeyFile: p.certs.ServerKey, CAFile: p.certs.CA},
		Identity: Identity{Source: "cert", PolicyPath: policy}}})
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "Listen.Identity.PolicyPath" || !strings.Contains(err.Error(), policy+": identities.alice.lease[0] (line 3)") {
		t.Errorf("New with a bad policy file: %v, want a FieldError naming the file, the field and the line", err)
	}
}

// Config.validate: identities need mTLS; a policy needs identities.
func TestIdentityConfig(t *testing.T) {
	certs := testutil.MakeCerts(t)
	serverTLS, err := tlsutil.Server(certs.ServerCert, certs.ServerKey, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		l    Listen
		want string
	}{
		{"no TLS", Listen{Identity: Identity{Source: "cert"}}, "Listen.Identity.Source: cert needs client certificates"},
		{"TLS without client certificates", Listen{TLS: TLS{Config: serverTLS}, Identity: Identity{Source: "cert"}}, "Listen.Identity.Source: cert needs client certificates"},
		{"unknown source", Listen{Identity: Identity{Source: "header"}}, `Listen.Identity.Source: "header", want cert`},
		{"policy without source", Listen{Identity: Identity{PolicyPath: "p.yaml"}}, "Listen.Identity.PolicyPath: set without Listen.Identity.Source"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.l.Address = "127.0.0.1:0"
			_, err := New(t.Context(), Config{Listen: tc.l})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New: %v, want %q", err, tc.want)
			}
		})
	}
}

// In a fleet, a session's home checks its owner on requests other
// servers forward: the forwarding server says whose request it is, and
// the home believes it from a server of the fleet (here: one presenting
// the same client certificate as the home forwards with).
func TestIdentityFleet(t *testing.T) {
	p := newPeers(t)
	etcd := etcdtest.StartEtcd(t)
	srv := redistest.StartT(t)
	fleetCert, fleetKey := p.certs.Client(t, "sluice-fleet")
	member := func() (*Server, v1.LimitsClient, v1.LimitsClient) {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
		s := identityServer(t, p, "", Config{Etcd: Etcd{Endpoints: []string{etcd.Endpoint}}, Repository: Repository{Fixed: resources.Compose(nil, nil, fixture.Sandboxes(), nil)},
			Store: Store{Shared: sharedOn(redisstore.New(c, redisstore.Options{Prefix: "fleet:"}), c)}, Sessions: Sessions{Fleet: Fleet{Prefix: "/" + t.Name()}},
			Parent: Parent{TLS: TLS{CAFile: p.certs.CA, CertFile: fleetCert, KeyFile: fleetKey}}})
		alice, bobc := v1.NewLimitsClient(dialTLS(t, s.Addr(), p.alice)), v1.NewLimitsClient(dialTLS(t, s.Addr(), p.bob))
		testutil.Eventually(t, 30*time.Second, s.Addr()+" to serve holds", func() bool {
			r, err := alice.OpenSession(t.Context(), &v1.OpenSessionRequest{})
			if err != nil {
				return false
			}
			_, _ = alice.CloseSession(t.Context(), &v1.CloseSessionRequest{SessionId: r.GetSessionId()})
			return true
		})
		return s, alice, bobc
	}
	a, aliceA, _ := member()
	b, aliceB, bobB := member()
	ctx := t.Context()
	testutil.Learnt(t, aliceA, "cookbook/sandboxes")

	sa := open(t, aliceA) // homed on a
	if r, err := aliceB.Reserve(ctx, &v1.ReserveRequest{SessionId: sa, Resource: "cookbook/sandboxes", Domain: "acme", Copies: 2}); err != nil || r.GetGranted() != 2 {
		t.Fatalf("alice reserving through b in her session on a: %v, %v", r, err)
	}
	_, err := bobB.Reserve(ctx, &v1.ReserveRequest{SessionId: sa, Resource: "cookbook/sandboxes", Domain: "acme", Copies: 1})
	denied(t, "bob reserving through b in alice's session on a", err, `identity "`+bob+`" may not use`)
	_, err = bobB.CloseSession(ctx, &v1.CloseSessionRequest{SessionId: sa})
	denied(t, "bob closing alice's session through b", err)
	if n, _ := metricValue(t, b.Registry(), "sluice_copies_forwarded_total", nil); n != 3 {
		t.Errorf("b forwarded %v requests, want 3", n)
	}
	if h := globalHolds(a.Sessions().Snapshot()); h != 2 {
		t.Errorf("a holds %d copies, want alice's 2", h)
	}
	if _, err := aliceB.CloseSession(ctx, &v1.CloseSessionRequest{SessionId: sa}); err != nil {
		t.Errorf("alice closing her session through b: %v", err)
	}
}

// An RLQS stream is the client of its certificate's identity: its leases
// are held as "IDENTITY/rlqs/N", and the policy's lease grants apply to
// its buckets (a bucket the policy does not grant ends the stream with
// PermissionDenied).
func TestIdentityRLQS(t *testing.T) {
	p := newPeers(t)
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, []byte("identities:\n  alice:\n    lease: [fixed/*]\n  "+bob+":\n    lease: [fair]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := identityServer(t, p, policy, Config{})
	bucket := map[string]string{"name": "a"}
	proxy := func(c *tls.Config) *rlqsproxy.Proxy {
		px, err := rlqsproxy.New(t.Context(), dialTLS(t, s.Addr(), c), rlqsproxy.Options{Domain: "fixed", ReportInterval: 100 * time.Millisecond,
			NoAssignment: typev3.RateLimitStrategy_DENY_ALL, Expired: typev3.RateLimitStrategy_DENY_ALL})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(px.Close)
		return px
	}
	alice, bobp := proxy(p.alice), proxy(p.bob)
	ctx, cancel := context.WithCancel(t.Context())
	da := alice.Drive(ctx, bucket, func() float64 { return 5 })
	db := bobp.Drive(ctx, bucket, func() float64 { return 5 })
	t.Cleanup(func() { cancel(); <-da; <-db })

	testutil.Eventually(t, 30*time.Second, "alice's proxy assigned", func() bool {
		a, ok := alice.Assignment(bucket)
		return ok && a.Rate > 0
	})
	st, err := s.Capacity().Status("fixed/name=a")
	if err != nil || len(st.Leases) != 1 || !strings.HasPrefix(st.Leases[0].Client, "alice/rlqs/") {
		t.Errorf("fixed/name=a: %+v %v, want one lease of alice/rlqs/N", st.Leases, err)
	}
	testutil.Eventually(t, 30*time.Second, "bob's stream ended", func() bool { return bobp.Err() != nil })
	denied(t, "bob's stream on fixed/name=a", bobp.Err(), `may not lease "fixed/name=a"`)
}
