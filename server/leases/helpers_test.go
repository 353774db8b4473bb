package leases_test

import (
	"google.golang.org/protobuf/proto"

	pb "github.com/sluice-rl/sluice/api/doorman"
)

func capacityRequest(client string, wants float64) *pb.GetCapacityRequest {
	return &pb.GetCapacityRequest{ClientId: proto.String(client), Resource: []*pb.ResourceRequest{{
		ResourceId: proto.String("r"), Priority: proto.Int64(0), Wants: proto.Float64(wants),
	}}}
}

func releaseRequest(client string) *pb.ReleaseCapacityRequest {
	return &pb.ReleaseCapacityRequest{ClientId: proto.String(client), ResourceId: []string{"r"}}
}
