package rpc

import (
	"context"
	"slices"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	v1 "github.com/sluice-rl/sluice/api/sluice/v1"
)

// allower answers every Allow with resp, err; its configuration names
// the resources in rate.
type allower struct {
	resp *v1.AllowResponse
	err  error
	rate []string
}

func (a allower) Allow(context.Context, *v1.AllowRequest) (*v1.AllowResponse, error) {
	return a.resp, a.err
}

func (a allower) RateLimited(r string) bool { return slices.Contains(a.rate, r) }

// copySessions is a Sessions whose configuration names the resources in
// names and whose Reserve grants what it is asked; its other RPCs are
// not called here.
type copySessions struct {
	Sessions
	names []string
}

func (c copySessions) CopyLimited(r string) bool { return slices.Contains(c.names, r) }

func (c copySessions) Reserve(_ context.Context, req *v1.ReserveRequest) (*v1.ReserveResponse, error) {
	return &v1.ReserveResponse{Granted: req.GetCopies()}, nil
}

// TestLimitsKinds: a resource is of one kind. Allow on a copy-limited
// resource and Reserve on a rate-limited one are FailedPrecondition,
// naming the resource and the RPC to use, through Connect too; each kind
// is served by its own part.
func TestLimitsKinds(t *testing.T) {
	ctx := context.Background()
	l := NewLimits(allower{resp: &v1.AllowResponse{Granted: 1}, rate: []string{"api"}}, copySessions{names: []string{"sandboxes"}})
	_, err := l.Allow(ctx, &v1.AllowRequest{Resource: "sandboxes", Domain: "acme"})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), `"sandboxes" is copy-limited`) || !strings.Contains(err.Error(), "Reserve") {
		t.Errorf("Allow on a copy-limited resource: %v, want FailedPrecondition naming it and Reserve", err)
	}
	_, err = LimitsConnect{L: l}.Reserve(ctx, connect.NewRequest(&v1.ReserveRequest{Resource: "api", Domain: "acme", Copies: 1}))
	if connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), `"api" is rate-limited`) || !strings.Contains(err.Error(), "Allow") {
		t.Errorf("Reserve on a rate-limited resource through Connect: %v, want FailedPrecondition naming it and Allow", err)
	}
	if r, err := l.Allow(ctx, &v1.AllowRequest{Resource: "api"}); err != nil || r.GetGranted() != 1 {
		t.Errorf("Allow on a rate-limited resource: %v %v", r, err)
	}
	if r, err := l.Reserve(ctx, &v1.ReserveRequest{Resource: "sandboxes", Copies: 2}); err != nil || r.GetGranted() != 2 {
		t.Errorf("Reserve on a copy-limited resource: %v %v", r, err)
	}
}

// TestLimitsParts: sluice.v1.Limits answers Allow from its Allower, through
// Connect too, and a part it was not given with Unimplemented.
func TestLimitsParts(t *testing.T) {
	ctx := context.Background()
	l := NewLimits(allower{resp: &v1.AllowResponse{Granted: 3}}, nil)
	resp, err := LimitsConnect{L: l}.Allow(ctx, connect.NewRequest(&v1.AllowRequest{Resource: "r"}))
	if err != nil || resp.Msg.GetGranted() != 3 {
		t.Fatalf("Allow through Connect: %v %v", resp, err)
	}
	if _, err := l.Reserve(ctx, &v1.ReserveRequest{}); status.Code(err) != codes.Unimplemented {
		t.Fatalf("Reserve without sessions: %v, want Unimplemented", err)
	}
	if _, err := (LimitsConnect{L: l}).Seize(ctx, connect.NewRequest(&v1.SeizeRequest{})); connect.CodeOf(err) != connect.CodeUnimplemented {
		t.Fatalf("Seize without sessions through Connect: %v, want Unimplemented", err)
	}
	if _, err := NewLimits(nil, nil).Allow(ctx, &v1.AllowRequest{}); status.Code(err) != codes.Unimplemented {
		t.Fatalf("Allow without an Allower: %v, want Unimplemented", err)
	}
	denied := NewLimits(allower{err: status.Error(codes.Unavailable, "limits store: down")}, nil)
	if _, err := (LimitsConnect{L: denied}).Allow(ctx, connect.NewRequest(&v1.AllowRequest{})); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("a failed Allow through Connect: %v, want Unavailable", err)
	}
}
