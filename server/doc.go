// Package server is Sluice's server: one port serving every API, and the
// composition root that assembles them from a Config.
//
// On the port (gRPC on grpc-go's own transport; gRPC-Web, Connect and
// JSON over HTTP, POST /<service>/<Method>, on net/http; endpoint.go):
//
//   - leases: Doorman's capacity service doorman.Capacity (package
//     server/capacity: leases, mastership, an intermediate's parent
//     link), and sluice.v1.Leases, the leases pushed to their holders'
//     Watch streams (server/leases); Config.Leases, Parent, Election,
//     Etcd;
//   - limits: sluice.v1.Limits/Allow and, wire-compatible with Square's
//     quota service, quotaservice.QuotaService/Allow, over one limits
//     engine (server/limitsvc); their buckets in Config.Store;
//   - Charon's sessions: the copy-limited RPCs of sluice.v1.Limits
//     (OpenSession, KeepAlive, Reserve, Release, Transfer, Seize,
//     CloseSession) and the fleet sharing them (server/sessions);
//     Config.Sessions;
//   - Envoy's rate limit service,
//     envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit over
//     envoyproxy/ratelimit's rules (server/envoyrls), its statistics
//     also under upstream's names on statsd or Prometheus
//     (server/envoyrls/upstreamstats); Config.Envoy, Repository's
//     EnvoyRateLimit* fields, Runtime.Statsd;
//   - RLQS, Envoy's Rate Limit Quota Service
//     envoy.service.rate_limit_quota.v3.RateLimitQuotaService, its
//     buckets leased as resources of the capacity service (server/rlqs);
//     Config.RLQS;
//   - gRPC health (grpc.health.v1, following Ready; readiness.go) and
//     server reflection.
//
// Across them: client identities (Config.Listen.Identity: each client's
// identity from its certificate, and every RPC authorized by one table,
// authz.go); OpenTelemetry tracing (Config.Runtime.Tracing, tracing.go);
// the admin API at /admin/v1/ and Square's /api over the resource
// repository (Config.Admin, admin.go); the status site /debug/status over
// read-only views the services export (server/status); Prometheus
// metrics at /metrics (Config.Runtime.Registry); /healthz and /readyz
// (Ready); Go's profiler at /debug/pprof/ (Config.Listen.Pprof).
//
// New assembles the services, the stores, the configuration sources
// (sources.go), the election (elector.go), the fleet and the endpoint
// from a Config and returns every
// error (a field at fault as a *FieldError naming it, "RLQS.Burst: …");
// Run serves until its context ends, then drains.
// `sluice server` is flag parsing around these two calls. Config holds
// only what a user chooses: what New sets itself (each service's clock,
// logger, registry, store, authorizer) is not a field of it, and each
// service's Options are built in New from the user's groups
// (EnvoyRateLimit, RLQS, Statsd) and the server's own parts.
//
// Source: doorman-design.md, "Server operation"; doorman-wire.md;
// quotaservice-wire.md; charon-paper.md; Envoy's rls.proto and rlqs.proto.
package server
