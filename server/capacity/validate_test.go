package capacity

import (
	"context"
	"math"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/sluice-rl/sluice/api/doorman"
	"github.com/sluice-rl/sluice/lease"
)

func TestValidateGetCapacity(t *testing.T) {
	ok := func(id string, w float64) *pb.ResourceRequest {
		return &pb.ResourceRequest{ResourceId: proto.String(id), Priority: proto.Int64(0), Wants: proto.Float64(w)}
	}
	long := strings.Repeat("x", MaxIDLength+1)
	many := make([]*pb.ResourceRequest, MaxResourcesPerRequest+1)
	for i := range many {
		many[i] = ok(strings.Repeat("r", 1+i%7)+string(rune('a'+i%26)), 1)
	}
	tests := []struct {
		name  string
		req   *pb.GetCapacityRequest
		field string // "" = valid
	}{
		{"valid", &pb.GetCapacityRequest{ClientId: proto.String("c"), Resource: []*pb.ResourceRequest{ok("a", 1), ok("b", 0)}}, ""},
		{"empty client", &pb.GetCapacityRequest{ClientId: proto.String("")}, "client_id: must not be empty"},
		{"long client", &pb.GetCapacityRequest{ClientId: proto.String(long)}, "client_id"},
		{"empty resource", &pb.GetCapacityRequest{ClientId: proto.String("c"), Resource: []*pb.ResourceRequest{ok("", 1)}}, "resource[0].resource_id"},
		{"NaN", &pb.GetCapacityRequest{ClientId: proto.String("c"), Resource: []*pb.ResourceRequest{ok("a", math.NaN())}}, "resource[0].wants: NaN"},
		{"+Inf", &pb.GetCapacityRequest{ClientId: proto.String("c"), Resource: []*pb.ResourceRequest{ok("a", math.Inf(1))}}, "resource[0].wants"},
		{"-Inf", &pb.GetCapacityRequest{ClientId: proto.String("c"), Resource: []*pb.ResourceRequest{ok("a", math.Inf(-1))}}, "resource[0].wants"},
		{"negative", &pb.GetCapacityRequest{ClientId: proto.String("c"), Resource: []*pb.ResourceRequest{ok("a", 1), ok("b", -2)}}, "resource[1].wants"},
		{"duplicate", &pb.GetCapacityRequest{ClientId: proto.String("c"), Resource: []*pb.ResourceRequest{ok("a", 1), ok("a", 2)}}, "resource[1].resource_id: \"a\" appears more than once"},
		{"bad has", &pb.GetCapacityRequest{ClientId: proto.String("c"), Resource: []*pb.ResourceRequest{{ResourceId: proto.String("a"), Priority: proto.Int64(0), Wants: proto.Float64(1), Has: &pb.Lease{ExpiryTime: proto.Int64(0), RefreshInterval: proto.Int64(0), Capacity: proto.Float64(math.NaN())}}}}, "resource[0].has.capacity"},
		{"oversize", &pb.GetCapacityRequest{ClientId: proto.String("c"), Resource: many}, "at most"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateGetCapacity(tt.req)
			if tt.field == "" {
				if err != nil {
					t.Fatalf("valid request rejected: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.field) {
				t.Fatalf("got %v, want an error naming %q", err, tt.field)
			}
		})
	}
}

func TestValidateServerAndRelease(t *testing.T) {
	band := func(n int64, w float64) *pb.PriorityBandAggregate {
		return &pb.PriorityBandAggregate{Priority: proto.Int64(0), NumClients: proto.Int64(n), Wants: proto.Float64(w)}
	}
	req := func(bands ...*pb.PriorityBandAggregate) *pb.GetServerCapacityRequest {
		return &pb.GetServerCapacityRequest{ServerId: proto.String("s"), Resource: []*pb.ServerCapacityResourceRequest{{ResourceId: proto.String("r"), Wants: bands}}}
	}
	if err := ValidateGetServerCapacity(req(band(3, 10))); err != nil {
		t.Fatal(err)
	}
	curve := func(b *pb.PriorityBandAggregate, gs ...float64) *pb.PriorityBandAggregate {
		for i := 0; i+1 < len(gs); i += 2 {
			b.Groups = append(b.Groups, &pb.ClientGroup{Wants: proto.Float64(gs[i]), NumClients: proto.Float64(gs[i+1])})
		}
		return b
	}
	if err := ValidateGetServerCapacity(req(curve(band(3, 10), 1, 1, 9, 2))); err != nil {
		t.Fatalf("a curve that sums to its band: %v", err)
	}
	many := band(lease.MaxGroups+1, float64(lease.MaxGroups+1))
	for range lease.MaxGroups + 1 {
		many = curve(many, 1, 1)
	}
	for name, tt := range map[string]struct {
		r     *pb.GetServerCapacityRequest
		field string
	}{
		"num_clients 0":  {req(band(0, 10)), "resource[0].wants[0].num_clients"},
		"num_clients -1": {req(band(3, 1), band(-1, 10)), "resource[0].wants[1].num_clients"},
		"NaN band":       {req(band(1, math.NaN())), "resource[0].wants[0].wants"},
		"NaN group":      {req(curve(band(3, 10), math.NaN(), 1, 9, 2)), "resource[0].wants[0].groups[0].wants"},
		"group of 0.5":   {req(curve(band(3, 10), 1, 2.5, 9, 0.5)), "resource[0].wants[0].groups[1].num_clients"},
		"group of Inf":   {req(curve(band(3, 10), 1, math.Inf(1))), "resource[0].wants[0].groups[0].num_clients"},
		"wants differ":   {req(curve(band(3, 10), 1, 1, 8, 2)), "resource[0].wants[0].groups: wants"},
		"clients differ": {req(curve(band(3, 10), 1, 1, 9, 1)), "resource[0].wants[0].groups: num_clients"},
		"too many":       {req(many), "resource[0].wants[0].groups: 33 groups"},
		"empty server":   {&pb.GetServerCapacityRequest{ServerId: proto.String("")}, "server_id"},
	} {
		if err := ValidateGetServerCapacity(tt.r); err == nil || !strings.Contains(err.Error(), tt.field) {
			t.Errorf("%s: got %v, want an error naming %q", name, err, tt.field)
		}
	}
	// Empty resource ids are skipped by the handler (Doorman's own client
	// sends them), an empty client id is not.
	if err := ValidateReleaseCapacity(&pb.ReleaseCapacityRequest{ClientId: proto.String("c"), ResourceId: []string{"a", ""}}); err != nil {
		t.Errorf("empty release id: %v, want accepted", err)
	}
	if err := ValidateReleaseCapacity(&pb.ReleaseCapacityRequest{ClientId: proto.String(""), ResourceId: []string{"a"}}); err == nil || !strings.Contains(err.Error(), "client_id") {
		t.Errorf("empty client id: %v, want an error naming client_id", err)
	}
	if err := ValidateReleaseCapacity(&pb.ReleaseCapacityRequest{ClientId: proto.String("c"), ResourceId: []string{"", strings.Repeat("x", MaxIDLength+1)}}); err == nil || !strings.Contains(err.Error(), "resource_id[1]") {
		t.Errorf("oversize release id: %v, want an error naming resource_id[1]", err)
	}
}

// FuzzGetCapacity feeds arbitrary bytes to the RPC edge as a wire-format
// GetCapacityRequest and a GetServerCapacityRequest: the server must answer
// every one (a lease or an InvalidArgument), never panic, and never hand
// out more than a sharing resource's capacity.
func FuzzGetCapacity(f *testing.F) {
	seed := &pb.GetCapacityRequest{ClientId: proto.String("c"), Resource: []*pb.ResourceRequest{
		{ResourceId: proto.String("fair"), Priority: proto.Int64(1), Wants: proto.Float64(10)},
	}}
	b, _ := proto.Marshal(seed)
	f.Add(b)
	sseed := &pb.GetServerCapacityRequest{ServerId: proto.String("s"), Resource: []*pb.ServerCapacityResourceRequest{
		{ResourceId: proto.String("fair"), Wants: []*pb.PriorityBandAggregate{{Priority: proto.Int64(0), NumClients: proto.Int64(2), Wants: proto.Float64(5)}}},
	}}
	b, _ = proto.Marshal(sseed)
	f.Add(b)
	f.Add([]byte{0x0a, 0x00, 0x12, 0x02, 0x0a, 0x00})
	s := newTestServer(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		var req pb.GetCapacityRequest
		if err := (proto.UnmarshalOptions{AllowPartial: true}).Unmarshal(data, &req); err == nil {
			resp, err := s.GetCapacity(context.Background(), &req)
			if err != nil {
				if status.Code(err) != codes.InvalidArgument {
					t.Fatalf("GetCapacity: %v", err)
				}
			} else if err := proto.CheckInitialized(resp); err != nil {
				t.Fatalf("response lacks a required field: %v", err)
			}
		}
		var sreq pb.GetServerCapacityRequest
		if err := (proto.UnmarshalOptions{AllowPartial: true}).Unmarshal(data, &sreq); err == nil {
			resp, err := s.GetServerCapacity(context.Background(), &sreq)
			if err != nil {
				if status.Code(err) != codes.InvalidArgument {
					t.Fatalf("GetServerCapacity: %v", err)
				}
			} else if err := proto.CheckInitialized(resp); err != nil {
				t.Fatalf("response lacks a required field: %v", err)
			}
		}
		if st, err := s.Status("fair"); err == nil && st.SumHas > st.Capacity+1e-9 {
			t.Fatalf("Σ has %v > capacity %v", st.SumHas, st.Capacity)
		}
	})
}
