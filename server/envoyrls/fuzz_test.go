package envoyrls_test

import (
	"context"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-rl/sluice/limits/rls"
	"github.com/sluice-rl/sluice/server/envoyrls"
)

// FuzzShouldRateLimit sends the handler any RateLimitRequest the wire
// can carry: it answers one status per descriptor, or InvalidArgument
// (and then makes no counter); it never panics.
func FuzzShouldRateLimit(f *testing.F) {
	seed := func(req *rlsv3.RateLimitRequest) {
		b, err := proto.Marshal(req)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	seed(&rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("remote_address", "10.0.0.1")}})
	seed(&rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 7, Descriptors: []*ratelimitv3.RateLimitDescriptor{
		desc("key", "value", "subkey", "x"), desc("user", "u", "x", "y"), {Entries: desc("tenant", "acme-1").Entries,
			HitsAddend: wrapperspb.UInt64(1 << 63), IsNegativeHits: true,
			Limit: &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: typev3.RateLimitUnit_YEAR, UnitMultiplier: wrapperspb.UInt32(3)}}}})
	seed(&rlsv3.RateLimitRequest{Domain: "", Descriptors: []*ratelimitv3.RateLimitDescriptor{{}}})
	seed(&rlsv3.RateLimitRequest{Domain: "shapes", HitsAddend: 3, Descriptors: []*ratelimitv3.RateLimitDescriptor{
		desc("user", "u"), desc("tenant", "t"), desc("bucket", "b"), {Entries: desc("window", "w").Entries, IsNegativeHits: true}}})
	cfg := rulesOf(f, examples, shapes)
	f.Fuzz(func(t *testing.T, b []byte) {
		var req rlsv3.RateLimitRequest
		if proto.Unmarshal(b, &req) != nil {
			return
		}
		store := rls.NewMemoryStore()
		svc, _ := envoyrls.New(envoyrls.Options{Store: store, Headers: envoyrls.Headers{Draft: true, XRateLimit: true}, CalendarMonths: len(b)%2 == 0})
		svc.SetConfig(cfg)
		resp, err := svc.ShouldRateLimit(context.Background(), &req)
		switch {
		case err != nil && status.Code(err) != codes.InvalidArgument:
			t.Fatalf("error %v", err)
		case err != nil && store.Len() != 0:
			t.Fatalf("an invalid request made %d counters", store.Len())
		case err == nil && len(resp.Statuses) != len(req.Descriptors):
			t.Fatalf("%d statuses for %d descriptors", len(resp.Statuses), len(req.Descriptors))
		}
	})
}
