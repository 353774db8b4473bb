// Package grpcconnect serves RPC handlers written in grpc-go's shape
// (func(ctx, *Req) (*Resp, error), gRPC status errors) through Connect,
// with the same codes and messages: Unary and Error for any handler, and
// Capacity, doorman.Capacity over a grpc-go shaped server, both a Connect
// handler and, the interfaces being alike, an in-process client. It links
// no service and no other protocol, so that the server's adapters
// (server/internal/rpc), the capacity service's in-process client and
// the simulator share it.
//
// Example:
//
//	mux.Handle(doormanconnect.NewCapacityHandler(grpcconnect.Capacity{S: svc}))
package grpcconnect

import (
	"context"
	"errors"

	"connectrpc.com/connect"
	"google.golang.org/grpc/status"

	pb "github.com/sluice-rl/sluice/api/doorman"
	"github.com/sluice-rl/sluice/api/doorman/doormanconnect"
)

// Unary wraps a grpc-go shaped answer for Connect: the response, or the
// error as Error turns it.
func Unary[T any](resp *T, err error) (*connect.Response[T], error) {
	if err != nil {
		return nil, Error(err)
	}
	return connect.NewResponse(resp), nil
}

// Error turns a gRPC status error into a Connect error with the same code
// and message (Connect's codes are gRPC's); nil and other errors pass
// unchanged.
func Error(err error) error {
	if err == nil {
		return nil
	}
	if st, ok := status.FromError(err); ok {
		return connect.NewError(connect.Code(st.Code()), errors.New(st.Message()))
	}
	return err
}

// Capacity is doorman.Capacity for Connect over a grpc-go shaped server:
// a handler (doormanconnect.NewCapacityHandler) and, the interfaces being
// alike, an in-process client whose calls run S's handlers on the
// caller's goroutine. Safe for concurrent use as S is.
type Capacity struct{ S pb.CapacityServer }

var (
	_ doormanconnect.CapacityHandler = Capacity{}
	_ doormanconnect.CapacityClient  = Capacity{}
)

// Discovery implements doormanconnect.CapacityHandler.
func (c Capacity) Discovery(ctx context.Context, req *connect.Request[pb.DiscoveryRequest]) (*connect.Response[pb.DiscoveryResponse], error) {
	return Unary(c.S.Discovery(ctx, req.Msg))
}

// GetCapacity implements doormanconnect.CapacityHandler.
func (c Capacity) GetCapacity(ctx context.Context, req *connect.Request[pb.GetCapacityRequest]) (*connect.Response[pb.GetCapacityResponse], error) {
	return Unary(c.S.GetCapacity(ctx, req.Msg))
}

// GetServerCapacity implements doormanconnect.CapacityHandler.
func (c Capacity) GetServerCapacity(ctx context.Context, req *connect.Request[pb.GetServerCapacityRequest]) (*connect.Response[pb.GetServerCapacityResponse], error) {
	return Unary(c.S.GetServerCapacity(ctx, req.Msg))
}

// ReleaseCapacity implements doormanconnect.CapacityHandler.
func (c Capacity) ReleaseCapacity(ctx context.Context, req *connect.Request[pb.ReleaseCapacityRequest]) (*connect.Response[pb.ReleaseCapacityResponse], error) {
	return Unary(c.S.ReleaseCapacity(ctx, req.Msg))
}
