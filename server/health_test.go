package server

import (
	"context"
	"slices"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"

	"github.com/sluice-rl/sluice/internal/testutil"
)

// TestHealthFollowsReadiness: grpc.health.v1.Health/Check answers, for the
// server ("") and for each of its services, SERVING while /readyz would
// answer 200, and NOT_SERVING while it would not (here: mastership
// unknown), over real gRPC on the one port.
func TestHealthFollowsReadiness(t *testing.T) {
	s, _ := startServer(t, Config{Repository: Repository{Fixed: doormanRepo(t)}, Runtime: Runtime{Logger: testutil.Logger()}})
	hc := healthpb.NewHealthClient(testutil.Dial(t, s.Addr()))
	status := func(service string) healthpb.HealthCheckResponse_ServingStatus {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		if err != nil {
			t.Fatalf("Check(%q): %v", service, err)
		}
		return resp.GetStatus()
	}
	services := []string{"", "doorman.Capacity", "sluice.v1.Limits", "quotaservice.QuotaService", "envoy.service.ratelimit.v3.RateLimitService",
		"envoy.service.rate_limit_quota.v3.RateLimitQuotaService"}
	for _, svc := range services {
		testutil.Eventually(t, 30*time.Second, "SERVING: "+svc, func() bool { return status(svc) == healthpb.HealthCheckResponse_SERVING })
	}
	s.Capacity().SetMastership(false, "") // readiness: mastership unknown
	for _, svc := range services {
		testutil.Eventually(t, 30*time.Second, "NOT_SERVING: "+svc, func() bool { return status(svc) == healthpb.HealthCheckResponse_NOT_SERVING })
	}
	s.Capacity().SetMastership(false, "10.0.0.9:15000") // a standby that knows its master is ready
	testutil.Eventually(t, 30*time.Second, "SERVING again", func() bool { return status("") == healthpb.HealthCheckResponse_SERVING })
	// RLQS streams must reach the master: a standby does not serve them.
	if st := status("envoy.service.rate_limit_quota.v3.RateLimitQuotaService"); st != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("RLQS on a standby: %v, want NOT_SERVING", st)
	}
}

// TestReflection: gRPC server reflection lists every service on the port,
// so that grpcurl and ghz need no proto files.
func TestReflection(t *testing.T) {
	s, _ := startServer(t, Config{Runtime: Runtime{Logger: testutil.Logger()}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := reflectionpb.NewServerReflectionClient(testutil.Dial(t, s.Addr())).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, svc := range resp.GetListServicesResponse().GetService() {
		names = append(names, svc.GetName())
	}
	for _, want := range []string{"doorman.Capacity", "sluice.v1.Limits", "quotaservice.QuotaService", "envoy.service.ratelimit.v3.RateLimitService",
		"envoy.service.rate_limit_quota.v3.RateLimitQuotaService", "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection"} {
		if !slices.Contains(names, want) {
			t.Errorf("reflection lists %v, without %s", names, want)
		}
	}
	// A service's file descriptor, as grpcurl asks for it.
	for _, symbol := range []string{"quotaservice.QuotaService", "envoy.service.ratelimit.v3.RateLimitService", "envoy.service.rate_limit_quota.v3.RateLimitQuotaService"} {
		if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: symbol}}); err != nil {
			t.Fatal(err)
		}
		if resp, err := stream.Recv(); err != nil || len(resp.GetFileDescriptorResponse().GetFileDescriptorProto()) == 0 {
			t.Fatalf("file containing %s: %v %v", symbol, resp, err)
		}
	}
	_ = stream.CloseSend()
}
