package server

import (
	"context"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	pb "github.com/sluice-rl/sluice/api/doorman"
	qs "github.com/sluice-rl/sluice/api/quotaservice"
	v1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/internal/refresh"
)

// upstreamHealthName is the gRPC health service envoyproxy/ratelimit
// reports (its src/server/health.go: "ratelimit"), so that a probe
// written for it asks Sluice the same.
const upstreamHealthName = "ratelimit"

// readinessEvery is how often the health service's statuses follow
// Ready (a change of mastership or configuration shows within it;
// draining shows at once).
const readinessEvery = 250 * time.Millisecond

// healthFollower is the standard grpc.health.v1.Health on the port, its
// statuses following the server's readiness: what /readyz answers, for
// gRPC health checks (Envoy's cluster health checks, Kubernetes' grpc
// probes). It owns the health server; the readiness and mastership it
// follows are the server's (ready: Server.Ready) and the capacity
// service's (isMaster). Its fields are set in New and only read after;
// the health server is safe for concurrent use, and follow runs on one
// goroutine (Run's).
type healthFollower struct {
	server   *health.Server
	ready    func() (bool, string)
	isMaster func() (bool, string)
}

// register registers the health service with grpc-go's server.
func (h *healthFollower) register(gs *grpc.Server) { healthpb.RegisterHealthServer(gs, h.server) }

// follow sets the health service's status of the server ("") and of each
// of its services to SERVING while ready, else NOT_SERVING, every
// readinessEvery until ctx ends. Envoy's RLQS service is SERVING only
// while ready on the node's master, where its streams must go.
func (h *healthFollower) follow(ctx context.Context) {
	last, lastRLQS := healthpb.HealthCheckResponse_UNKNOWN, healthpb.HealthCheckResponse_UNKNOWN
	refresh.Run(ctx, nil, func(context.Context) time.Duration {
		st, rlqsSt := healthpb.HealthCheckResponse_NOT_SERVING, healthpb.HealthCheckResponse_NOT_SERVING
		if ok, _ := h.ready(); ok {
			st = healthpb.HealthCheckResponse_SERVING
			// RLQS streams stay on the task they reach, which must be its
			// node's master (a standby ends them): Envoy's health checks
			// of the service send them there.
			if master, _ := h.isMaster(); master {
				rlqsSt = st
			}
		}
		if st != last {
			for _, name := range []string{"", pb.Capacity_ServiceDesc.ServiceName, v1.Limits_ServiceDesc.ServiceName, qs.QuotaService_ServiceDesc.ServiceName,
				rlsv3.RateLimitService_ServiceDesc.ServiceName, v1.Leases_ServiceDesc.ServiceName, upstreamHealthName} {
				h.server.SetServingStatus(name, st)
			}
			last = st
		}
		if rlqsSt != lastRLQS {
			h.server.SetServingStatus(rlqsv3.RateLimitQuotaService_ServiceDesc.ServiceName, rlqsSt)
			lastRLQS = rlqsSt
		}
		return readinessEvery
	})
}

// shutdown sets every status NOT_SERVING at once, and for good (the
// drain).
func (h *healthFollower) shutdown() { h.server.Shutdown() }
