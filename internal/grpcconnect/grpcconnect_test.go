package grpcconnect

import (
	"errors"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/sluice-rl/sluice/api/doorman"
)

// TestErrorKeepsCodeAndMessage: a gRPC status becomes a Connect error with
// the same code and message; nil stays nil (a stream that ended well is no
// error); another error passes unchanged.
func TestErrorKeepsCodeAndMessage(t *testing.T) {
	err := Error(status.Error(codes.InvalidArgument, "tokens: negative"))
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeInvalidArgument || ce.Message() != "tokens: negative" {
		t.Fatalf("Error(InvalidArgument) = %v", err)
	}
	if err := Error(nil); err != nil {
		t.Fatalf("Error(nil) = %v, want nil", err)
	}
	plain := errors.New("plain")
	if err := Error(plain); err != plain {
		t.Fatalf("Error(plain) = %v", err)
	}
}

// TestUnary: an answer is wrapped as it is; an error as Error turns it.
func TestUnary(t *testing.T) {
	resp := &pb.DiscoveryResponse{}
	if r, err := Unary(resp, nil); err != nil || r.Msg != resp {
		t.Fatalf("Unary(resp) = %v, %v", r, err)
	}
	plain := errors.New("plain")
	if _, err := Unary[pb.DiscoveryResponse](nil, plain); err != plain {
		t.Fatalf("Unary(plain) = %v, want it unchanged", err)
	}
	if _, err := Unary[pb.DiscoveryResponse](nil, status.Error(codes.Unavailable, "x")); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("Unary(Unavailable) = %v", err)
	}
}
