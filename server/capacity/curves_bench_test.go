package capacity

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/sluice-rl/sluice/api/doorman"
	"github.com/sluice-rl/sluice/lease"
)

// BenchmarkGetServerCapacityCurves measures a root's GetServerCapacity with
// 1 000 intermediates refreshing in turn, each standing for 100 clients in
// one band, with no demand curve (Doorman's request) and with one of
// lease.MaxGroups groups (the most an intermediate sends): the time per
// request and the request's size on the wire (wire-bytes).
func BenchmarkGetServerCapacityCurves(b *testing.B) {
	const servers = 1000
	for _, groups := range []int{0, lease.MaxGroups} {
		b.Run(fmt.Sprintf("intermediates=%d/groups=%d", servers, groups), func(b *testing.B) {
			s := newTestServer(b)
			s.minRequest = 0
			ctx := context.Background()
			reqs := make([]*pb.GetServerCapacityRequest, servers)
			for i := range reqs {
				band := &pb.PriorityBandAggregate{Priority: proto.Int64(0), NumClients: proto.Int64(100)}
				var wants float64
				for g := range groups {
					// 100 clients in groups wanting 1, 2, … per client.
					n := 100.0 / float64(groups)
					w := n * float64(1+(g+i)%40)
					band.Groups = append(band.Groups, &pb.ClientGroup{Wants: proto.Float64(w), NumClients: proto.Float64(n)})
					wants += w
				}
				if groups == 0 {
					wants = float64(100 * (1 + i%40))
				}
				band.Wants = proto.Float64(wants)
				reqs[i] = &pb.GetServerCapacityRequest{ServerId: proto.String(fmt.Sprintf("intermediate-%d", i)),
					Resource: []*pb.ServerCapacityResourceRequest{{ResourceId: proto.String("fair"), Wants: []*pb.PriorityBandAggregate{band}}}}
				if _, err := s.GetServerCapacity(ctx, reqs[i]); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				if _, err := s.GetServerCapacity(ctx, reqs[i%servers]); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(proto.Size(reqs[0])), "wire-bytes")
		})
	}
}
