package rpc

import (
	"context"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	v1 "github.com/sluice-rl/sluice/api/sluice/v1"
)

// allower answers every Allow with resp, err.
type allower struct {
	resp *v1.AllowResponse
	err  error
}

func (a allower) Allow(context.Context, *v1.AllowRequest) (*v1.AllowResponse, error) {
	return a.resp, a.err
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
