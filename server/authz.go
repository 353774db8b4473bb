package server

import (
	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/health/grpc_health_v1"
	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	reflectionv1alpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
	"google.golang.org/protobuf/proto"

	pb "github.com/sluice-rl/sluice/api/doorman"
	qs "github.com/sluice-rl/sluice/api/quotaservice"
	v1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/internal/identity"
	"github.com/sluice-rl/sluice/server/internal/authz"
)

// authzRules is how every RPC the server serves is authorized with client
// identities on (docs/identity.md, "What each RPC checks"): the client id
// a request claims, the resources the policy must grant and the session
// the caller must own — or why the method is exempt. A method not named
// here is refused; TestAuthzRulesCoverEveryMethod fails on one.
var authzRules = authz.Table{
	// Doorman's capacity service: a client leases under its own client id
	// (a server: its server id) the resources the policy grants it.
	pb.Capacity_Discovery_FullMethodName: {Exempt: "names the master to anyone, as a load balancer would (doorman-wire.md)"},
	pb.Capacity_GetCapacity_FullMethodName: {
		Client: func(m proto.Message) (string, string) { return "client_id", m.(*pb.GetCapacityRequest).GetClientId() },
		API:    identity.Lease,
		Resources: func(m proto.Message) []string {
			return resourceIDs(m.(*pb.GetCapacityRequest).GetResource())
		},
	},
	pb.Capacity_GetServerCapacity_FullMethodName: {
		Client: func(m proto.Message) (string, string) {
			return "server_id", m.(*pb.GetServerCapacityRequest).GetServerId()
		},
		API: identity.Lease,
		Resources: func(m proto.Message) []string {
			return resourceIDs(m.(*pb.GetServerCapacityRequest).GetResource())
		},
	},
	pb.Capacity_ReleaseCapacity_FullMethodName: {
		Client: func(m proto.Message) (string, string) {
			return "client_id", m.(*pb.ReleaseCapacityRequest).GetClientId()
		},
		API:       identity.Lease,
		Resources: func(m proto.Message) []string { return nonEmpty(m.(*pb.ReleaseCapacityRequest).GetResourceId()) },
	},
	// Pushed leases: a holder watches its own leases.
	v1.Leases_Watch_FullMethodName: {
		Client: func(m proto.Message) (string, string) { return "holder_id", m.(*v1.WatchRequest).GetHolderId() },
		API:    identity.Lease,
	},
	// Server-side limits: the resource (the quota service: the namespace).
	v1.Limits_Allow_FullMethodName: {
		API:       identity.Allow,
		Resources: func(m proto.Message) []string { return []string{m.(*v1.AllowRequest).GetResource()} },
	},
	qs.QuotaService_Allow_FullMethodName: {
		API:       identity.Allow,
		Resources: func(m proto.Message) []string { return []string{m.(*qs.AllowRequest).GetNamespace()} },
	},
	// Copy-limited sessions (Charon): a session belongs to the identity
	// that opened it; requests for it may be forwarded by a fleet server
	// to its home. A Seize names its session and a transfer id: the
	// transfer id is the capability (whoever holds it may seize the
	// copies into a session of its own), so the session is checked, not
	// the copies' resource.
	v1.Limits_OpenSession_FullMethodName: {API: identity.Reserve, Forwarded: true},
	v1.Limits_CloseSession_FullMethodName: {API: identity.Reserve, Forwarded: true,
		Session: func(m proto.Message) string { return m.(*v1.CloseSessionRequest).GetSessionId() }},
	v1.Limits_KeepAlive_FullMethodName: {API: identity.Reserve, Forwarded: true,
		Session: func(m proto.Message) string { return m.(*v1.KeepAliveRequest).GetSessionId() }},
	v1.Limits_Reserve_FullMethodName: {API: identity.Reserve, Forwarded: true,
		Resources: func(m proto.Message) []string { return []string{m.(*v1.ReserveRequest).GetResource()} },
		Session:   func(m proto.Message) string { return m.(*v1.ReserveRequest).GetSessionId() }},
	v1.Limits_Release_FullMethodName: {API: identity.Reserve, Forwarded: true,
		Session: func(m proto.Message) string { return m.(*v1.ReleaseRequest).GetSessionId() }},
	v1.Limits_Transfer_FullMethodName: {API: identity.Reserve, Forwarded: true,
		Session: func(m proto.Message) string { return m.(*v1.TransferRequest).GetSessionId() }},
	v1.Limits_Seize_FullMethodName: {API: identity.Reserve, Forwarded: true,
		Session: func(m proto.Message) string { return m.(*v1.SeizeRequest).GetSessionId() }},
	// Envoy's rate limit service: the domain.
	rlsv3.RateLimitService_ShouldRateLimit_FullMethodName: {
		API:       identity.RateLimit,
		Resources: func(m proto.Message) []string { return []string{m.(*rlsv3.RateLimitRequest).GetDomain()} },
	},
	// RLQS: a stream leases its buckets as the caller's client
	// ("IDENTITY/rlqs/N"); the service checks each bucket's resource
	// against the lease grants when it first asks for it (package rlqs),
	// as the resource is the bucket's mapping, not a field.
	rlqsv3.RateLimitQuotaService_StreamRateLimitQuotas_FullMethodName: {API: identity.Lease},
	// Probes and tools.
	grpc_health_v1.Health_Check_FullMethodName: {Exempt: "health checks (Envoy's, Kubernetes') carry no client certificate"},
	grpc_health_v1.Health_List_FullMethodName:  {Exempt: "health checks (Envoy's, Kubernetes') carry no client certificate"},
	grpc_health_v1.Health_Watch_FullMethodName: {Exempt: "health checks (Envoy's, Kubernetes') carry no client certificate"},
	reflectionv1.ServerReflection_ServerReflectionInfo_FullMethodName: {
		Exempt: "describes the public .proto files (grpcurl, ghz), no data"},
	reflectionv1alpha.ServerReflection_ServerReflectionInfo_FullMethodName: {
		Exempt: "describes the public .proto files (grpcurl, ghz), no data"},
}

// resourceIDs returns the resource ids of a request's resources.
func resourceIDs[R interface{ GetResourceId() string }](rs []R) []string {
	ids := make([]string, len(rs))
	for i, r := range rs {
		ids[i] = r.GetResourceId()
	}
	return ids
}

// nonEmpty returns ids without its empty strings (Doorman's Go client
// sends empty resource ids in ReleaseCapacity; the service skips them).
func nonEmpty(ids []string) []string {
	out := ids[:0:0]
	for _, id := range ids {
		if id != "" {
			out = append(out, id)
		}
	}
	return out
}

// newAuthz returns the server's authorization interceptor over
// authzRules, with s.auth (nil: identities off) and the sessions'
// owners.
func (s *Server) newAuthz() *authz.Interceptor {
	return authz.New(authz.Options{Authorizer: s.auth, Rules: authzRules, Owner: s.sessions.Owner})
}
