package server

import (
	"context"
	"errors"

	"connectrpc.com/connect"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/sluice-rl/sluice/api/doorman"
)

// GRPC returns the Capacity service for google.golang.org/grpc's own
// server (grpc.Server.RegisterService with pb.Capacity_ServiceDesc): the
// same handlers as Handler's, mastership redirects and drain included,
// behind grpc-go's transport, which batches its frame writes.
func (s *Server) GRPC() pb.CapacityServer { return grpcCapacity{s: s} }

type grpcCapacity struct {
	pb.UnimplementedCapacityServer
	s *Server
}

func (g grpcCapacity) Discovery(ctx context.Context, req *pb.DiscoveryRequest) (*pb.DiscoveryResponse, error) {
	return unwrap(g.s.Discovery(ctx, connect.NewRequest(req)))
}

func (g grpcCapacity) GetCapacity(ctx context.Context, req *pb.GetCapacityRequest) (*pb.GetCapacityResponse, error) {
	return unwrap(g.s.GetCapacity(ctx, connect.NewRequest(req)))
}

func (g grpcCapacity) GetServerCapacity(ctx context.Context, req *pb.GetServerCapacityRequest) (*pb.GetServerCapacityResponse, error) {
	return unwrap(g.s.GetServerCapacity(ctx, connect.NewRequest(req)))
}

func (g grpcCapacity) ReleaseCapacity(ctx context.Context, req *pb.ReleaseCapacityRequest) (*pb.ReleaseCapacityResponse, error) {
	return unwrap(g.s.ReleaseCapacity(ctx, connect.NewRequest(req)))
}

// unwrap returns a Connect handler's answer to grpc-go: the message, or
// the error as a gRPC status with the same code (Connect's codes are
// gRPC's) and message.
func unwrap[T any](resp *connect.Response[T], err error) (*T, error) {
	if err != nil {
		if ce := new(connect.Error); errors.As(err, &ce) {
			return nil, status.Error(codes.Code(ce.Code()), ce.Message())
		}
		return nil, err
	}
	return resp.Msg, nil
}
