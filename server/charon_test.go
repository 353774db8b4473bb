package server

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	v1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/internal/testutil/fixture"
	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/limits/copies"
	"github.com/sluice-rl/sluice/resources"
)

// charonServer runs a server of fixture.Sandboxes and a rate-limited resource
// "api" at a fake clock (no session expires); it returns it and a client
// of it.
func charonServer(t *testing.T) (*Server, v1.LimitsClient) {
	t.Helper()
	clock := testutil.NewClock(time.Unix(1_700_000_000, 0))
	rate := &limits.Config{Resources: map[string]*limits.Resource{"api": {Default: &limits.Bucket{Size: 10, FillRate: 1, MaxTokensPerRequest: 10}}}}
	s, _ := startServer(t, Config{ID: "charon", Runtime: Runtime{Now: clock.Now}, Repository: Repository{Fixed: resources.Compose(nil, rate, fixture.Sandboxes(), nil)}})
	return s, v1.NewLimitsClient(testutil.Dial(t, s.Addr()))
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

// Reserve, Release, Transfer and Seize over real gRPC on cookbook/sandboxes
// of examples/charon.yaml (fixture.Sandboxes), with each error class of the
// paper, the limits and sessions services each refusing the other's kind of
// resource. (The sessions service's own tests are in server/sessions.)
func TestCharonHolds(t *testing.T) {
	s, c := charonServer(t)
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
	// Allow on a resource no configuration names answers as the quota
	// service design says a request without a bucket does: the status
	// REJECTED_NO_BUCKET, not an error (docs/charon.md, "Errors").
	if r, err := c.Allow(ctx, &v1.AllowRequest{Resource: "nope", Domain: "acme"}); err != nil || r.GetStatus() != v1.AllowResponse_REJECTED_NO_BUCKET {
		t.Errorf("Allow on an unknown resource: %v, %v; want REJECTED_NO_BUCKET", r.GetStatus(), err)
	}
	// Closing b releases what it holds: acme's 2 and globex's 1.
	if _, err := c.CloseSession(ctx, &v1.CloseSessionRequest{SessionId: b}); err != nil {
		t.Fatal(err)
	}
	if snap := s.Sessions().Snapshot(); globalHolds(snap) != 0 {
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
