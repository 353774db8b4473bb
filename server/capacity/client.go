package capacity

import (
	"context"
	"errors"

	"connectrpc.com/connect"
	"google.golang.org/grpc/status"

	pb "github.com/sluice-rl/sluice/api/doorman"
	"github.com/sluice-rl/sluice/api/doorman/doormanconnect"
)

// InProcessClient returns s as an in-process Connect client of
// doorman.Capacity: every call runs s's handler directly, on the caller's
// goroutine, and answers with the codes and messages a network client
// would see (a gRPC status error becomes a *connect.Error with the same
// code and message). It is safe for concurrent use as s is. The simulator
// (on virtual time) and the tests use it; it lives here rather than in
// package server so that they need not link the composition root.
func InProcessClient(s *Service) doormanconnect.CapacityClient { return inProcess{s} }

// inProcess is doormanconnect.CapacityClient over a Service; the same
// conversion as package server's Connect adapter (server/internal/rpc),
// which links Envoy's types that this package does not need.
type inProcess struct{ s *Service }

var _ doormanconnect.CapacityClient = inProcess{}

func (c inProcess) Discovery(ctx context.Context, req *connect.Request[pb.DiscoveryRequest]) (*connect.Response[pb.DiscoveryResponse], error) {
	return unary(c.s.Discovery(ctx, req.Msg))
}

func (c inProcess) GetCapacity(ctx context.Context, req *connect.Request[pb.GetCapacityRequest]) (*connect.Response[pb.GetCapacityResponse], error) {
	return unary(c.s.GetCapacity(ctx, req.Msg))
}

func (c inProcess) GetServerCapacity(ctx context.Context, req *connect.Request[pb.GetServerCapacityRequest]) (*connect.Response[pb.GetServerCapacityResponse], error) {
	return unary(c.s.GetServerCapacity(ctx, req.Msg))
}

func (c inProcess) ReleaseCapacity(ctx context.Context, req *connect.Request[pb.ReleaseCapacityRequest]) (*connect.Response[pb.ReleaseCapacityResponse], error) {
	return unary(c.s.ReleaseCapacity(ctx, req.Msg))
}

// unary wraps a grpc-go shaped answer for Connect: a gRPC status error
// becomes a Connect error with the same code and message (Connect's codes
// are gRPC's); other errors pass unchanged.
func unary[T any](resp *T, err error) (*connect.Response[T], error) {
	if err != nil {
		if st, ok := status.FromError(err); ok {
			return nil, connect.NewError(connect.Code(st.Code()), errors.New(st.Message()))
		}
		return nil, err
	}
	return connect.NewResponse(resp), nil
}
