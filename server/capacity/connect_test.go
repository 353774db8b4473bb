package capacity

import (
	"context"
	"errors"
	"net/http"

	"connectrpc.com/connect"
	"google.golang.org/grpc/status"

	pb "github.com/sluice-rl/sluice/api/doorman"
	"github.com/sluice-rl/sluice/api/doorman/doormanconnect"
)

// connectService is a Service for Connect, in the tests: both a handler
// (served by handler) and an in-process client (a parent to dial). It is
// package server's adapter, which these tests cannot import (server imports
// capacity).
type connectService struct{ s *Service }

var (
	_ doormanconnect.CapacityHandler = connectService{}
	_ doormanconnect.CapacityClient  = connectService{}
)

func (c connectService) Discovery(ctx context.Context, req *connect.Request[pb.DiscoveryRequest]) (*connect.Response[pb.DiscoveryResponse], error) {
	return connectUnary(c.s.Discovery(ctx, req.Msg))
}

func (c connectService) GetCapacity(ctx context.Context, req *connect.Request[pb.GetCapacityRequest]) (*connect.Response[pb.GetCapacityResponse], error) {
	return connectUnary(c.s.GetCapacity(ctx, req.Msg))
}

func (c connectService) GetServerCapacity(ctx context.Context, req *connect.Request[pb.GetServerCapacityRequest]) (*connect.Response[pb.GetServerCapacityResponse], error) {
	return connectUnary(c.s.GetServerCapacity(ctx, req.Msg))
}

func (c connectService) ReleaseCapacity(ctx context.Context, req *connect.Request[pb.ReleaseCapacityRequest]) (*connect.Response[pb.ReleaseCapacityResponse], error) {
	return connectUnary(c.s.ReleaseCapacity(ctx, req.Msg))
}

// connectUnary wraps a grpc-go style answer for Connect, a gRPC status
// error becoming a Connect error with the same code and message.
func connectUnary[T any](resp *T, err error) (*connect.Response[T], error) {
	if err != nil {
		if st, ok := status.FromError(err); ok {
			return nil, connect.NewError(connect.Code(st.Code()), errors.New(st.Message()))
		}
		return nil, err
	}
	return connect.NewResponse(resp), nil
}

// handler serves s's RPCs over Connect (gRPC, gRPC-Web and JSON).
func handler(s *Service) http.Handler {
	mux := http.NewServeMux()
	mux.Handle(doormanconnect.NewCapacityHandler(connectService{s}))
	return mux
}
