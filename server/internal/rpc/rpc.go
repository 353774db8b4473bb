// Package rpc is the one place where the services' RPC handlers, written
// once in grpc-go's shape (func(ctx, *Req) (*Resp, error), gRPC status
// errors), meet Connect: adapters that serve them to Connect's handlers
// (gRPC-Web, JSON, and gRPC on a connection net/http took) with the same
// codes and messages, and sluice.v1.Limits composed of its two services
// (Allow from the limits service, the copy-limited RPCs from the sessions
// service). It imports no service, so that the services' own tests can use
// it too.
package rpc

import (
	"context"
	"net/http"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	qs "github.com/sluice-rl/sluice/api/quotaservice"
	"github.com/sluice-rl/sluice/api/quotaservice/quotaserviceconnect"
	v1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/api/sluice/v1/sluicev1connect"
	"github.com/sluice-rl/sluice/internal/grpcconnect"
)

// Allower is sluice.v1.Limits/Allow (limitsvc.Service); RateLimited
// reports whether its configuration names a resource.
type Allower interface {
	Allow(context.Context, *v1.AllowRequest) (*v1.AllowResponse, error)
	RateLimited(resource string) bool
}

// Sessions is sluice.v1.Limits' copy-limited RPCs (sessions.Service);
// KeepAliveStream is KeepAlive over any stream (Connect's).
// CopyLimited reports whether its configuration names a resource.
type Sessions interface {
	CopyLimited(resource string) bool
	OpenSession(context.Context, *v1.OpenSessionRequest) (*v1.OpenSessionResponse, error)
	CloseSession(context.Context, *v1.CloseSessionRequest) (*v1.CloseSessionResponse, error)
	KeepAlive(grpc.BidiStreamingServer[v1.KeepAliveRequest, v1.KeepAliveResponse]) error
	KeepAliveStream(ctx context.Context, recv func() (*v1.KeepAliveRequest, error), send func(*v1.KeepAliveResponse) error) error
	Reserve(context.Context, *v1.ReserveRequest) (*v1.ReserveResponse, error)
	Release(context.Context, *v1.ReleaseRequest) (*v1.ReleaseResponse, error)
	Transfer(context.Context, *v1.TransferRequest) (*v1.TransferResponse, error)
	Seize(context.Context, *v1.SeizeRequest) (*v1.SeizeResponse, error)
}

// Limits is sluice.v1.Limits for grpc-go: Allow from an Allower, the
// copy-limited RPCs from Sessions. A nil part answers Unimplemented. Each
// resource is of one kind: Allow on a copy-limited resource, or Reserve
// on a rate-limited one, is FailedPrecondition (charon-paper.md keeps rate
// limits and copies apart).
type Limits struct {
	v1.UnimplementedLimitsServer
	allow    Allower
	sessions Sessions
}

// NewLimits returns sluice.v1.Limits over a and s (either may be nil).
func NewLimits(a Allower, s Sessions) *Limits { return &Limits{allow: a, sessions: s} }

var errNoSessions = status.Error(codes.Unimplemented, "copy-limited resources are not served here")

// Allow implements v1.LimitsServer.
func (l *Limits) Allow(ctx context.Context, req *v1.AllowRequest) (*v1.AllowResponse, error) {
	if l.allow == nil {
		return l.UnimplementedLimitsServer.Allow(ctx, req)
	}
	if l.sessions != nil && l.sessions.CopyLimited(req.GetResource()) {
		return nil, status.Errorf(codes.FailedPrecondition, "resource: %q is copy-limited, not rate-limited: hold its copies in a session (Reserve)", req.GetResource())
	}
	return l.allow.Allow(ctx, req)
}

// OpenSession implements v1.LimitsServer.
func (l *Limits) OpenSession(ctx context.Context, req *v1.OpenSessionRequest) (*v1.OpenSessionResponse, error) {
	if l.sessions == nil {
		return nil, errNoSessions
	}
	return l.sessions.OpenSession(ctx, req)
}

// CloseSession implements v1.LimitsServer.
func (l *Limits) CloseSession(ctx context.Context, req *v1.CloseSessionRequest) (*v1.CloseSessionResponse, error) {
	if l.sessions == nil {
		return nil, errNoSessions
	}
	return l.sessions.CloseSession(ctx, req)
}

// KeepAlive implements v1.LimitsServer.
func (l *Limits) KeepAlive(stream grpc.BidiStreamingServer[v1.KeepAliveRequest, v1.KeepAliveResponse]) error {
	if l.sessions == nil {
		return errNoSessions
	}
	return l.sessions.KeepAlive(stream)
}

// Reserve implements v1.LimitsServer.
func (l *Limits) Reserve(ctx context.Context, req *v1.ReserveRequest) (*v1.ReserveResponse, error) {
	if l.sessions == nil {
		return nil, errNoSessions
	}
	if l.allow != nil && l.allow.RateLimited(req.GetResource()) {
		return nil, status.Errorf(codes.FailedPrecondition, "resource: %q is rate-limited, not copy-limited: ask for its tokens with Allow", req.GetResource())
	}
	return l.sessions.Reserve(ctx, req)
}

// Release implements v1.LimitsServer.
func (l *Limits) Release(ctx context.Context, req *v1.ReleaseRequest) (*v1.ReleaseResponse, error) {
	if l.sessions == nil {
		return nil, errNoSessions
	}
	return l.sessions.Release(ctx, req)
}

// Transfer implements v1.LimitsServer.
func (l *Limits) Transfer(ctx context.Context, req *v1.TransferRequest) (*v1.TransferResponse, error) {
	if l.sessions == nil {
		return nil, errNoSessions
	}
	return l.sessions.Transfer(ctx, req)
}

// Seize implements v1.LimitsServer.
func (l *Limits) Seize(ctx context.Context, req *v1.SeizeRequest) (*v1.SeizeResponse, error) {
	if l.sessions == nil {
		return nil, errNoSessions
	}
	return l.sessions.Seize(ctx, req)
}

// LimitsConnect is sluice.v1.Limits for Connect.
type LimitsConnect struct {
	sluicev1connect.UnimplementedLimitsHandler
	L *Limits
}

// Allow implements sluicev1connect.LimitsHandler.
func (c LimitsConnect) Allow(ctx context.Context, req *connect.Request[v1.AllowRequest]) (*connect.Response[v1.AllowResponse], error) {
	return grpcconnect.Unary(c.L.Allow(ctx, req.Msg))
}

// OpenSession implements sluicev1connect.LimitsHandler.
func (c LimitsConnect) OpenSession(ctx context.Context, req *connect.Request[v1.OpenSessionRequest]) (*connect.Response[v1.OpenSessionResponse], error) {
	return grpcconnect.Unary(c.L.OpenSession(ctx, req.Msg))
}

// CloseSession implements sluicev1connect.LimitsHandler.
func (c LimitsConnect) CloseSession(ctx context.Context, req *connect.Request[v1.CloseSessionRequest]) (*connect.Response[v1.CloseSessionResponse], error) {
	return grpcconnect.Unary(c.L.CloseSession(ctx, req.Msg))
}

// KeepAlive implements sluicev1connect.LimitsHandler.
func (c LimitsConnect) KeepAlive(ctx context.Context, stream *connect.BidiStream[v1.KeepAliveRequest, v1.KeepAliveResponse]) error {
	if c.L.sessions == nil {
		return grpcconnect.Error(errNoSessions)
	}
	return grpcconnect.Error(c.L.sessions.KeepAliveStream(ctx, stream.Receive, stream.Send))
}

// Reserve implements sluicev1connect.LimitsHandler.
func (c LimitsConnect) Reserve(ctx context.Context, req *connect.Request[v1.ReserveRequest]) (*connect.Response[v1.ReserveResponse], error) {
	return grpcconnect.Unary(c.L.Reserve(ctx, req.Msg))
}

// Release implements sluicev1connect.LimitsHandler.
func (c LimitsConnect) Release(ctx context.Context, req *connect.Request[v1.ReleaseRequest]) (*connect.Response[v1.ReleaseResponse], error) {
	return grpcconnect.Unary(c.L.Release(ctx, req.Msg))
}

// Transfer implements sluicev1connect.LimitsHandler.
func (c LimitsConnect) Transfer(ctx context.Context, req *connect.Request[v1.TransferRequest]) (*connect.Response[v1.TransferResponse], error) {
	return grpcconnect.Unary(c.L.Transfer(ctx, req.Msg))
}

// Seize implements sluicev1connect.LimitsHandler.
func (c LimitsConnect) Seize(ctx context.Context, req *connect.Request[v1.SeizeRequest]) (*connect.Response[v1.SeizeResponse], error) {
	return grpcconnect.Unary(c.L.Seize(ctx, req.Msg))
}

// QuotaService is quotaservice.QuotaService for Connect.
type QuotaService struct{ S qs.QuotaServiceServer }

var _ quotaserviceconnect.QuotaServiceHandler = QuotaService{}

// Allow implements quotaserviceconnect.QuotaServiceHandler.
func (c QuotaService) Allow(ctx context.Context, req *connect.Request[qs.AllowRequest]) (*connect.Response[qs.AllowResponse], error) {
	return grpcconnect.Unary(c.S.Allow(ctx, req.Msg))
}

// RateLimitService is envoy.service.ratelimit.v3.RateLimitService
// (envoyrls.Service) in grpc-go's shape.
type RateLimitService interface {
	ShouldRateLimit(context.Context, *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error)
}

// RateLimitServiceProcedure is ShouldRateLimit's full method name.
const RateLimitServiceProcedure = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

// NewRateLimitServiceHandler serves s's ShouldRateLimit to Connect
// (JSON, gRPC-Web, and gRPC on a connection net/http took): go-control-plane
// has no Connect code, so the one procedure is made here. It returns the
// path to mount it at and the handler.
func NewRateLimitServiceHandler(s RateLimitService, opts ...connect.HandlerOption) (string, http.Handler) {
	h := connect.NewUnaryHandler(RateLimitServiceProcedure,
		func(ctx context.Context, req *connect.Request[rlsv3.RateLimitRequest]) (*connect.Response[rlsv3.RateLimitResponse], error) {
			return grpcconnect.Unary(s.ShouldRateLimit(ctx, req.Msg))
		}, opts...)
	return RateLimitServiceProcedure, h
}

// RateLimitQuotaService is
// envoy.service.rate_limit_quota.v3.RateLimitQuotaService's one bidi
// stream on any transport (rlqs.Service).
type RateLimitQuotaService interface {
	Stream(ctx context.Context, peer string, recv func() (*rlqsv3.RateLimitQuotaUsageReports, error), send func(*rlqsv3.RateLimitQuotaResponse) error) error
}

// RateLimitQuotaServiceProcedure is StreamRateLimitQuotas' full method
// name.
const RateLimitQuotaServiceProcedure = "/envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas"

// NewRateLimitQuotaServiceHandler serves s's StreamRateLimitQuotas to
// Connect (gRPC on a connection net/http took, and Connect's own
// protocol over HTTP/2; bidi streams need HTTP/2), as
// NewRateLimitServiceHandler does ShouldRateLimit. It returns the path to
// mount it at and the handler.
func NewRateLimitQuotaServiceHandler(s RateLimitQuotaService, opts ...connect.HandlerOption) (string, http.Handler) {
	h := connect.NewBidiStreamHandler(RateLimitQuotaServiceProcedure,
		func(ctx context.Context, st *connect.BidiStream[rlqsv3.RateLimitQuotaUsageReports, rlqsv3.RateLimitQuotaResponse]) error {
			return grpcconnect.Error(s.Stream(ctx, st.Peer().Addr, st.Receive, st.Send))
		}, opts...)
	return RateLimitQuotaServiceProcedure, h
}

// Watcher is sluice.v1.Leases/Watch on any transport (leases.Service).
type Watcher interface {
	Stream(ctx context.Context, req *v1.WatchRequest, send func(*v1.WatchResponse) error) error
}

// Leases is sluice.v1.Leases for Connect.
type Leases struct {
	sluicev1connect.UnimplementedLeasesHandler
	W Watcher
}

// Watch implements sluicev1connect.LeasesHandler.
func (c Leases) Watch(ctx context.Context, req *connect.Request[v1.WatchRequest], stream *connect.ServerStream[v1.WatchResponse]) error {
	return grpcconnect.Error(c.W.Stream(ctx, req.Msg, stream.Send))
}
