package xdstest_test

import (
	"context"
	"slices"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"go.uber.org/goleak"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/internal/testutil/xdstest"
	"github.com/sluice-rl/sluice/limits/rlsxds"
)

// TestControlPlane: a client of the aggregated discovery service receives
// the version set for its node, and the control plane records its ACK,
// its NACK's error detail, its stream's header and its node; a Restart
// serves on the same address, with the version set meanwhile.
func TestControlPlane(t *testing.T) {
	defer goleak.VerifyNone(t)
	if resource.RateLimitConfigType != rlsxds.TypeURL {
		t.Fatalf("the control plane serves %s, rlsxds subscribes to %s", resource.RateLimitConfigType, rlsxds.TypeURL)
	}
	cp := xdstest.Start(t, nil)
	defer cp.Stop()
	addr := cp.Addr()
	rc := func(n uint32) *rlsconfv3.RateLimitConfig {
		return &rlsconfv3.RateLimitConfig{Name: "edge", Domain: "edge", Descriptors: []*rlsconfv3.RateLimitDescriptor{{
			Key: "remote_address", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_SECOND, RequestsPerUnit: n}}}}
	}
	cp.Set(t, "n", "v1", rc(1))

	zone, err := structpb.NewStruct(map[string]any{"zone": "eu-1"})
	if err != nil {
		t.Fatal(err)
	}
	node := &corev3.Node{Id: "n", Metadata: zone}
	subscribe := func() (discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient, func()) {
		t.Helper()
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials())) // a client of its own: a new connection
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(t.Context(), "X-Tenant", "blue"), 10*time.Second) // a Recv waits no longer
		closeAll := func() {
			cancel()
			_ = conn.Close()
		}
		st, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
		if err != nil {
			closeAll()
			t.Fatal(err)
		}
		if err := st.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: resource.RateLimitConfigType}); err != nil {
			closeAll()
			t.Fatal(err)
		}
		return st, closeAll
	}
	recv := func(st discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient, version string) *discovery.DiscoveryResponse {
		t.Helper()
		resp, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetVersionInfo() != version || len(resp.GetResources()) != 1 || resp.GetTypeUrl() != resource.RateLimitConfigType {
			t.Fatalf("received version %q, %d resources of %s; want %s, 1 of %s", resp.GetVersionInfo(), len(resp.GetResources()), resp.GetTypeUrl(),
				version, resource.RateLimitConfigType)
		}
		return resp
	}

	st, unsubscribe := subscribe()
	defer unsubscribe()
	resp := recv(st, "v1")
	if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: resource.RateLimitConfigType, VersionInfo: "v1", ResponseNonce: resp.GetNonce()}); err != nil {
		t.Fatal(err)
	}
	cp.Set(t, "n", "v2", rc(2))
	resp = recv(st, "v2")
	if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: resource.RateLimitConfigType, VersionInfo: "v1", ResponseNonce: resp.GetNonce(),
		ErrorDetail: &statuspb.Status{Message: "v2 is bad"}}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the NACK received", func() bool { return len(cp.Nacks()) > 0 })

	cp.Stop()
	for i := 0; ; i++ { // go-control-plane's cache sends the rejected version again
		if _, err := st.Recv(); err != nil {
			break
		}
		if i == 100 {
			t.Fatal("the stream outlived Stop")
		}
	}
	cp.Stop() // again: nothing
	if got := cp.Acks(); !slices.Equal(got, []string{"v1"}) {
		t.Errorf("Acks %q, want [v1]", got)
	}
	if got := cp.Nacks(); !slices.Equal(got, []string{"v2 is bad"}) {
		t.Errorf("Nacks %q", got)
	}
	if got := cp.Headers("x-tenant"); !slices.Equal(got, []string{"blue"}) {
		t.Errorf("Headers(x-tenant) %q, want [blue]", got)
	}
	if got := cp.Headers("x-other"); !slices.Equal(got, []string{""}) {
		t.Errorf("Headers(x-other) %q, want one empty", got)
	}
	if ids, zones := cp.NodeIDs(), cp.NodeMetadata("zone"); !slices.Equal(ids, []string{"n", "n", "n"}) || !slices.Equal(zones, []string{"eu-1", "eu-1", "eu-1"}) {
		t.Errorf("node ids %q, zones %q; want n and eu-1, three requests", ids, zones)
	}

	cp.Set(t, "n", "v3", rc(3))
	cp.Restart(t)
	if cp.Addr() != addr {
		t.Errorf("restarted at %s, was at %s", cp.Addr(), addr)
	}
	st2, unsubscribe2 := subscribe()
	defer unsubscribe2()
	recv(st2, "v3")
	if got := cp.Headers("X-Tenant"); !slices.Equal(got, []string{"blue", "blue"}) {
		t.Errorf("Headers after the restart %q, want the records kept and the new stream's", got)
	}
}
