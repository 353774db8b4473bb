package server

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	v1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/limits/copies"
)

// sandboxes is the cookbook/sandboxes: domain limit 3 (acme: 4),
// global limit 5, group trusted = {acme, initech} with limit 4.
var sandboxes = &copies.Config{Resources: map[string]copies.Resource{
	"cookbook/sandboxes": {
		DomainLimit:  3,
		DomainLimits: map[string]int64{"acme": 4},
		GlobalLimit:  5,
		Groups:       []copies.Group{{Name: "trusted", Limit: 4, Domains: []string{"acme", "initech"}}},
	},
}}

// charonServer serves sandboxes (and a rate-limited resource "api") on a
// loopback endpoint at a fake clock; it returns a client of it.
func charonServer(t *testing.T) (*Server, *testutil.Clock, v1.LimitsClient) {
	t.Helper()
	clock := testutil.NewClock(time.Unix(1_700_000_000, 0))
	rate := &limits.Config{Resources: map[string]*limits.Resource{"api": {Default: &limits.Bucket{Size: 10, FillRate: 1, MaxTokensPerRequest: 10}}}}
	s := New(Options{ID: "charon", Now: clock.Now, Limits: rate, Copies: sandboxes})
	addr, _ := startEndpoint(t, s, s.Handler(), nil)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return s, clock, v1.NewLimitsClient(conn)
}

func open(t *testing.T, c v1.LimitsClient) string {
	t.Helper()
	resp, err := c.OpenSession(t.Context(), &v1.OpenSessionRequest{Ttl: durationpb.New(5 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetTtl().AsDuration() != 5*time.Second || len(resp.GetSessionId()) < 16 {
		t.Fatalf("OpenSession: %v", resp)
	}
	return resp.GetSessionId()
}

// Reserve, Release, Transfer and Seize over real gRPC on the issue's
// cookbook/sandboxes, with each error class of the paper.
func TestCharonHolds(t *testing.T) {
	s, _, c := charonServer(t)
	ctx := t.Context()
	a, b := open(t, c), open(t, c)
	reserve := func(session, domain string, n, lo int64) *v1.ReserveResponse {
		t.Helper()
		resp, err := c.Reserve(ctx, &v1.ReserveRequest{SessionId: session, Resource: "cookbook/sandboxes", Domain: domain, Copies: n, MinCopies: lo})
		if err != nil {
			t.Fatalf("Reserve %s %d: %v", domain, n, err)
		}
		return resp
	}
	// acme may hold 4 (its override), all of them from trusted's pool.
	r := reserve(a, "acme", 5, 1)
	if r.GetStatus() != v1.ReserveResponse_OK || r.GetGranted() != 4 || r.GetDomainLimit() != 4 || r.GetGlobalLimit() != 5 ||
		r.GetDomainHolds() != 4 || r.GetGlobalHolds() != 4 || len(r.GetGroups()) != 1 || r.GetGroups()[0].GetHolds() != 4 {
		t.Fatalf("acme ×5, at least 1: %v", r)
	}
	// initech shares trusted's pool, now full.
	if r := reserve(b, "initech", 1, 1); r.GetStatus() != v1.ReserveResponse_REJECTED_OVER_LIMIT || r.GetGranted() != 0 {
		t.Fatalf("initech with trusted full: %v", r)
	}
	// globex is in no group: the global limit leaves it 1 of its 3.
	if r := reserve(b, "globex", 3, 1); r.GetGranted() != 1 || r.GetGlobalHolds() != 5 {
		t.Fatalf("globex with 1 left globally: %v", r)
	}
	// Transfer 2 of acme's from a to b; b seizes them once.
	tr, err := c.Transfer(ctx, &v1.TransferRequest{SessionId: a, Resource: "cookbook/sandboxes", Domain: "acme", Copies: 2, Groups: []string{"trusted"}})
	if err != nil {
		t.Fatal(err)
	}
	sz, err := c.Seize(ctx, &v1.SeizeRequest{SessionId: b, TransferId: tr.GetTransferId()})
	if err != nil || sz.GetCopies() != 2 || sz.GetDomain() != "acme" || len(sz.GetGroups()) != 1 {
		t.Fatalf("Seize: %v, %v", sz, err)
	}
	if _, err := c.Seize(ctx, &v1.SeizeRequest{SessionId: b, TransferId: tr.GetTransferId()}); status.Code(err) != codes.NotFound {
		t.Errorf("second Seize: %v, want NotFound", err)
	}
	// a holds 2 of acme's now: releasing 3 is a client error; 2 is fine.
	rel := func(session string, n int64) error {
		_, err := c.Release(ctx, &v1.ReleaseRequest{SessionId: session, Resource: "cookbook/sandboxes", Domain: "acme", Copies: n, Groups: []string{"trusted"}})
		return err
	}
	if err := rel(a, 3); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("release of 3 with 2 held: %v, want FailedPrecondition", err)
	}
	if err := rel(a, 2); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		call func() error
		code codes.Code
	}{
		{"malformed: no domain", func() error {
			_, err := c.Reserve(ctx, &v1.ReserveRequest{SessionId: a, Resource: "cookbook/sandboxes"})
			return err
		}, codes.InvalidArgument},
		{"unknown resource", func() error {
			_, err := c.Reserve(ctx, &v1.ReserveRequest{SessionId: a, Resource: "nope", Domain: "acme"})
			return err
		}, codes.NotFound},
		{"unknown session", func() error {
			_, err := c.Reserve(ctx, &v1.ReserveRequest{SessionId: "0123456789abcdef0123456789abcdef", Resource: "cookbook/sandboxes", Domain: "acme"})
			return err
		}, codes.NotFound},
		{"reserving a rate-limited resource", func() error {
			_, err := c.Reserve(ctx, &v1.ReserveRequest{SessionId: a, Resource: "api", Domain: "acme"})
			return err
		}, codes.FailedPrecondition},
		{"Allow on a copy-limited resource", func() error {
			_, err := c.Allow(ctx, &v1.AllowRequest{Resource: "cookbook/sandboxes", Domain: "acme"})
			return err
		}, codes.FailedPrecondition},
		{"negative ttl", func() error {
			_, err := c.OpenSession(ctx, &v1.OpenSessionRequest{Ttl: durationpb.New(-time.Second)})
			return err
		}, codes.InvalidArgument},
	} {
		if err := tc.call(); status.Code(err) != tc.code {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.code)
		}
	}
	// Closing b releases what it holds: acme's 2 and globex's 1.
	if _, err := c.CloseSession(ctx, &v1.CloseSessionRequest{SessionId: b}); err != nil {
		t.Fatal(err)
	}
	if snap := s.Copies().Snapshot(); globalHolds(snap) != 0 {
		t.Errorf("after every release and close, %d copies held", globalHolds(snap))
	}
}

// globalHolds sums the holds of a snapshot, over every resource.
func globalHolds(snap copies.Snapshot) int64 {
	var n int64
	for _, r := range snap.Resources {
		n += r.GlobalHolds
	}
	return n
}

// A session ends when its keep-alive stream breaks, and when its ttl
// passes without a keep-alive; each time its holds are released.
func TestCharonSessionsEnd(t *testing.T) {
	s, clock, c := charonServer(t)
	ctx := t.Context()
	hold := func(session string) {
		t.Helper()
		r, err := c.Reserve(ctx, &v1.ReserveRequest{SessionId: session, Resource: "cookbook/sandboxes", Domain: "globex", Copies: 1})
		if err != nil || r.GetGranted() != 1 {
			t.Fatalf("Reserve: %v, %v", r, err)
		}
	}
	held := func() int64 { return globalHolds(s.Copies().Snapshot()) }

	// The stream: keep-alives renew; a broken stream ends the session.
	a := open(t, c)
	hold(a)
	sctx, cancel := context.WithCancel(ctx)
	stream, err := c.KeepAlive(sctx)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		clock.Advance(4 * time.Second) // within the 5 s ttl each time
		if err := stream.Send(&v1.KeepAliveRequest{SessionId: a}); err != nil {
			t.Fatal(err)
		}
		if resp, err := stream.Recv(); err != nil || resp.GetSessionId() != a {
			t.Fatalf("keep-alive answer: %v, %v", resp, err)
		}
		s.expireSessions(t.Context())
	}
	if held() != 1 {
		t.Fatalf("kept alive 12 s on a 5 s ttl: %d held, want 1", held())
	}
	cancel() // the client's connection to the stream breaks
	testutil.Eventually(t, 10*time.Second, "the broken stream's session to release its hold", func() bool { return held() == 0 })

	// The ttl: no keep-alive for longer than 5 s.
	b := open(t, c)
	hold(b)
	clock.Advance(4 * time.Second)
	s.expireSessions(t.Context())
	if held() != 1 {
		t.Fatal("released before its ttl")
	}
	clock.Advance(2 * time.Second)
	s.expireSessions(t.Context())
	if held() != 0 {
		t.Fatalf("%d held after the ttl passed", held())
	}
	if _, err := c.Reserve(ctx, &v1.ReserveRequest{SessionId: b, Resource: "cookbook/sandboxes", Domain: "globex"}); status.Code(err) != codes.NotFound {
		t.Errorf("Reserve in an expired session: %v, want NotFound", err)
	}
}

// 200 concurrent reserves, each in its own session, against a global
// limit of 5 never hold more than 5.
func TestCharonConcurrentReserves(t *testing.T) {
	s, _, c := charonServer(t)
	var granted atomic.Int64
	var wg sync.WaitGroup
	domains := []string{"acme", "initech", "globex", "umbrella", "hooli"}
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := c.OpenSession(t.Context(), &v1.OpenSessionRequest{})
			if err != nil {
				t.Error(err)
				return
			}
			r, err := c.Reserve(t.Context(), &v1.ReserveRequest{SessionId: resp.GetSessionId(), Resource: "cookbook/sandboxes", Domain: domains[i%len(domains)]})
			if err != nil {
				t.Error(err)
				return
			}
			granted.Add(r.GetGranted())
		}()
	}
	wg.Wait()
	if g, h := granted.Load(), globalHolds(s.Copies().Snapshot()); g != 5 || h != 5 {
		t.Fatalf("200 concurrent reserves: %d granted, %d held; want exactly the global limit, 5", g, h)
	}
}

// The buckets page shows the copy log: holds per resource, domain, group
// and session (ids cut short), in HTML and JSON.
func TestBucketsPageShowsHolds(t *testing.T) {
	s, _, c := charonServer(t)
	a := open(t, c)
	if _, err := c.Reserve(t.Context(), &v1.ReserveRequest{SessionId: a, Resource: "cookbook/sandboxes", Domain: "acme", Copies: 3}); err != nil {
		t.Fatal(err)
	}
	p, err := s.BucketsPage(t.Context(), url.Values{"prefix": {"cookbook/"}})
	if err != nil {
		t.Fatal(err)
	}
	cp := p.Copies
	if len(cp.Resources) != 1 || cp.Resources[0].GlobalHolds != 3 || len(cp.Resources[0].Domains) != 1 || cp.Resources[0].Groups[0].Holds != 3 {
		t.Fatalf("copies on the page: %+v", cp.Resources)
	}
	if len(cp.Sessions) != 1 || cp.Sessions[0].ID != a[:idShown]+"…" || cp.Sessions[0].Holds[0].Copies != 3 {
		t.Fatalf("sessions on the page: %+v (the id must be cut to %d digits)", cp.Sessions, idShown)
	}
	if p, _ := s.BucketsPage(t.Context(), url.Values{"prefix": {"other"}}); len(p.Copies.Resources)+len(p.Copies.Sessions) != 0 {
		t.Errorf("prefix other still shows %+v", p.Copies)
	}
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/debug/status/buckets")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`id="session-holds"`, "cookbook/sandboxes", "trusted 3 / 4", a[:idShown] + "…"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if strings.Contains(string(body), a) {
		t.Error("the page shows a whole session id")
	}
}

// A server holds at most MaxSessions open sessions: the next OpenSession
// is ResourceExhausted, naming the cap and the flag, and counted; a
// session that ends — closed, its keep-alive stream broken, its ttl
// passed — frees its slot.
func TestCharonMaxSessions(t *testing.T) {
	clock := testutil.NewClock(time.Unix(1_700_000_000, 0))
	s := New(Options{ID: "charon", Now: clock.Now, Copies: sandboxes, MaxSessions: 3})
	addr, _ := startEndpoint(t, s, s.Handler(), nil)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c := v1.NewLimitsClient(conn)
	ctx := t.Context()
	metric := func(name string) float64 {
		t.Helper()
		_, mfs := series(t, s.opts.Registry, name)
		for _, mf := range mfs {
			if mf.GetName() == name {
				m := mf.GetMetric()[0]
				return m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
		t.Fatalf("no metric %s", name)
		return 0
	}
	refused := 0
	full := func(when string) {
		t.Helper()
		_, err := c.OpenSession(ctx, &v1.OpenSessionRequest{Ttl: durationpb.New(5 * time.Second)})
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("%s: a 4th session: %v, want ResourceExhausted", when, err)
		}
		if msg := status.Convert(err).Message(); !strings.Contains(msg, "maximum of 3 open sessions") || !strings.Contains(msg, "--max-sessions") {
			t.Errorf("%s: the refusal %q does not name the cap and the flag", when, msg)
		}
		refused++
		if got := metric("sluice_copies_sessions_refused_total"); got != float64(refused) {
			t.Errorf("%s: sluice_copies_sessions_refused_total = %v, want %d", when, got, refused)
		}
	}
	if got := metric("sluice_copies_sessions_max"); got != 3 {
		t.Errorf("sluice_copies_sessions_max = %v, want 3", got)
	}

	ids := []string{open(t, c), open(t, c), open(t, c)}
	full("3 open")

	// Closed: its slot opens one more.
	if _, err := c.CloseSession(ctx, &v1.CloseSessionRequest{SessionId: ids[0]}); err != nil {
		t.Fatal(err)
	}
	ids[0] = open(t, c)
	full("one closed, one opened")

	// The keep-alive stream broken.
	sctx, cancel := context.WithCancel(ctx)
	stream, err := c.KeepAlive(sctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&v1.KeepAliveRequest{SessionId: ids[1]}); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	cancel()
	testutil.Eventually(t, 10*time.Second, "the broken stream's session to end", func() bool { return s.Copies().Stats().Sessions == 2 })
	ids[1] = open(t, c)
	full("a stream broken, one opened")

	// The ttl passed (5 s): Run's expiry ends all three.
	clock.Advance(6 * time.Second)
	s.expireSessions(t.Context())
	open(t, c)
	open(t, c)
	open(t, c)
	full("3 expired, 3 opened")
}

// MaxSessions 0 is DefaultMaxSessions; negative, no cap.
func TestMaxSessionsOption(t *testing.T) {
	for _, tc := range []struct {
		name      string
		opt, want int
	}{
		{"zero: the default", 0, DefaultMaxSessions},
		{"set", 7, 7},
		{"negative: none", -1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := (&Server{opts: Options{MaxSessions: tc.opt}}).maxSessions(); got != tc.want {
				t.Errorf("MaxSessions %d: cap %d, want %d", tc.opt, got, tc.want)
			}
		})
	}
}
