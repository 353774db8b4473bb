package capacity

import (
	"context"
	"errors"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	pb "github.com/sluice-rl/sluice/api/doorman"
	"github.com/sluice-rl/sluice/api/doorman/doormanconnect"
)

// TestInProcessClient: InProcessClient answers each RPC as the service's
// handler does, and turns its errors into Connect errors with the same
// code and message as the handler's gRPC status — what a network client
// sees.
func TestInProcessClient(t *testing.T) {
	ctx := context.Background()
	s := newTestServer(t)
	tests := []struct {
		name string
		call func(doormanconnect.CapacityClient) (proto.Message, error)
		code codes.Code // codes.OK: a success
	}{
		{"Discovery", func(c doormanconnect.CapacityClient) (proto.Message, error) {
			r, err := c.Discovery(ctx, connect.NewRequest(&pb.DiscoveryRequest{}))
			return msg(r), err
		}, codes.OK},
		{"GetCapacity", func(c doormanconnect.CapacityClient) (proto.Message, error) {
			r, err := c.GetCapacity(ctx, connect.NewRequest(&pb.GetCapacityRequest{
				ClientId: proto.String("a"),
				Resource: []*pb.ResourceRequest{{ResourceId: proto.String("fair"), Priority: proto.Int64(0), Wants: proto.Float64(30)}},
			}))
			return msg(r), err
		}, codes.OK},
		{"GetCapacity empty client", func(c doormanconnect.CapacityClient) (proto.Message, error) {
			r, err := c.GetCapacity(ctx, connect.NewRequest(&pb.GetCapacityRequest{ClientId: proto.String("")}))
			return msg(r), err
		}, codes.InvalidArgument},
		{"GetServerCapacity empty server", func(c doormanconnect.CapacityClient) (proto.Message, error) {
			r, err := c.GetServerCapacity(ctx, connect.NewRequest(&pb.GetServerCapacityRequest{ServerId: proto.String("")}))
			return msg(r), err
		}, codes.InvalidArgument},
		{"ReleaseCapacity", func(c doormanconnect.CapacityClient) (proto.Message, error) {
			r, err := c.ReleaseCapacity(ctx, connect.NewRequest(&pb.ReleaseCapacityRequest{ClientId: proto.String("a"), ResourceId: []string{"fair"}}))
			return msg(r), err
		}, codes.OK},
		{"ReleaseCapacity empty client", func(c doormanconnect.CapacityClient) (proto.Message, error) {
			r, err := c.ReleaseCapacity(ctx, connect.NewRequest(&pb.ReleaseCapacityRequest{ClientId: proto.String("")}))
			return msg(r), err
		}, codes.InvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.call(InProcessClient(s))
			if tt.code == codes.OK {
				if err != nil || got == nil {
					t.Fatalf("got %v, %v; want an answer", got, err)
				}
				return
			}
			var ce *connect.Error
			if !errors.As(err, &ce) || ce.Code() != connect.Code(tt.code) || ce.Message() == "" {
				t.Fatalf("got %v; want a *connect.Error with code %v", err, tt.code)
			}
		})
	}
	if got := getCap(t, s, "b", "fair", 30).GetResponse()[0].GetGets().GetCapacity(); got <= 0 {
		t.Fatalf("after the in-process calls the service grants %v, want a lease", got)
	}
}

// msg is r's message, nil without a response.
func msg[T any, P interface {
	*T
	proto.Message
}](r *connect.Response[T]) proto.Message {
	if r == nil {
		return nil
	}
	return P(r.Msg)
}
