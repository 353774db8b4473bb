package server

import (
	"context"
	"errors"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	pb "github.com/sluice-rl/sluice/api/doorman"
	"github.com/sluice-rl/sluice/api/doorman/doormanconnect"
	qs "github.com/sluice-rl/sluice/api/quotaservice"
	v1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/api/sluice/v1/sluicev1connect"
	"github.com/sluice-rl/sluice/server/capacity"
	"github.com/sluice-rl/sluice/server/limitsvc"
	"github.com/sluice-rl/sluice/server/sessions"
)

// The RPC handlers are written once, in grpc-go's shape (func(ctx, *Req)
// (*Resp, error)), by the service packages; grpc-go serves them as they
// are, and the adapters below serve them to Connect (gRPC-Web, JSON, and
// gRPC on a connection that began otherwise), with the same codes and
// messages.

// limitsAPI is sluice.v1.Limits: Allow from the limits service, the
// copy-limited RPCs from the sessions service.
type limitsAPI struct {
	v1.UnimplementedLimitsServer
	limits   *limitsvc.Service
	sessions *sessions.Service
}

func (a limitsAPI) Allow(ctx context.Context, req *v1.AllowRequest) (*v1.AllowResponse, error) {
	return a.limits.Allow(ctx, req)
}

func (a limitsAPI) OpenSession(ctx context.Context, req *v1.OpenSessionRequest) (*v1.OpenSessionResponse, error) {
	return a.sessions.OpenSession(ctx, req)
}

func (a limitsAPI) CloseSession(ctx context.Context, req *v1.CloseSessionRequest) (*v1.CloseSessionResponse, error) {
	return a.sessions.CloseSession(ctx, req)
}

func (a limitsAPI) KeepAlive(stream grpc.BidiStreamingServer[v1.KeepAliveRequest, v1.KeepAliveResponse]) error {
	return a.sessions.KeepAlive(stream)
}

func (a limitsAPI) Reserve(ctx context.Context, req *v1.ReserveRequest) (*v1.ReserveResponse, error) {
	return a.sessions.Reserve(ctx, req)
}

func (a limitsAPI) Release(ctx context.Context, req *v1.ReleaseRequest) (*v1.ReleaseResponse, error) {
	return a.sessions.Release(ctx, req)
}

func (a limitsAPI) Transfer(ctx context.Context, req *v1.TransferRequest) (*v1.TransferResponse, error) {
	return a.sessions.Transfer(ctx, req)
}

func (a limitsAPI) Seize(ctx context.Context, req *v1.SeizeRequest) (*v1.SeizeResponse, error) {
	return a.sessions.Seize(ctx, req)
}

// capacityConnect is the capacity service for Connect.
type capacityConnect struct{ s *capacity.Service }

func (c capacityConnect) Discovery(ctx context.Context, req *connect.Request[pb.DiscoveryRequest]) (*connect.Response[pb.DiscoveryResponse], error) {
	return connectUnary(c.s.Discovery(ctx, req.Msg))
}

func (c capacityConnect) GetCapacity(ctx context.Context, req *connect.Request[pb.GetCapacityRequest]) (*connect.Response[pb.GetCapacityResponse], error) {
	return connectUnary(c.s.GetCapacity(ctx, req.Msg))
}

func (c capacityConnect) GetServerCapacity(ctx context.Context, req *connect.Request[pb.GetServerCapacityRequest]) (*connect.Response[pb.GetServerCapacityResponse], error) {
	return connectUnary(c.s.GetServerCapacity(ctx, req.Msg))
}

func (c capacityConnect) ReleaseCapacity(ctx context.Context, req *connect.Request[pb.ReleaseCapacityRequest]) (*connect.Response[pb.ReleaseCapacityResponse], error) {
	return connectUnary(c.s.ReleaseCapacity(ctx, req.Msg))
}

// CapacityClient returns the capacity service s as an in-process Connect
// client: every call runs s's handler directly, with the codes and
// messages a network client would see (the tests and in-process callers
// use it; the simulator has its own, on virtual time).
func CapacityClient(s *capacity.Service) doormanconnect.CapacityClient { return capacityConnect{s} }

// limitsConnect is sluice.v1.Limits for Connect.
type limitsConnect struct {
	sluicev1connect.UnimplementedLimitsHandler
	api limitsAPI
}

func (c limitsConnect) Allow(ctx context.Context, req *connect.Request[v1.AllowRequest]) (*connect.Response[v1.AllowResponse], error) {
	return connectUnary(c.api.Allow(ctx, req.Msg))
}

func (c limitsConnect) OpenSession(ctx context.Context, req *connect.Request[v1.OpenSessionRequest]) (*connect.Response[v1.OpenSessionResponse], error) {
	return connectUnary(c.api.OpenSession(ctx, req.Msg))
}

func (c limitsConnect) CloseSession(ctx context.Context, req *connect.Request[v1.CloseSessionRequest]) (*connect.Response[v1.CloseSessionResponse], error) {
	return connectUnary(c.api.CloseSession(ctx, req.Msg))
}

func (c limitsConnect) KeepAlive(ctx context.Context, stream *connect.BidiStream[v1.KeepAliveRequest, v1.KeepAliveResponse]) error {
	return connectError(c.api.sessions.KeepAliveStream(ctx, stream.Receive, stream.Send))
}

func (c limitsConnect) Reserve(ctx context.Context, req *connect.Request[v1.ReserveRequest]) (*connect.Response[v1.ReserveResponse], error) {
	return connectUnary(c.api.Reserve(ctx, req.Msg))
}

func (c limitsConnect) Release(ctx context.Context, req *connect.Request[v1.ReleaseRequest]) (*connect.Response[v1.ReleaseResponse], error) {
	return connectUnary(c.api.Release(ctx, req.Msg))
}

func (c limitsConnect) Transfer(ctx context.Context, req *connect.Request[v1.TransferRequest]) (*connect.Response[v1.TransferResponse], error) {
	return connectUnary(c.api.Transfer(ctx, req.Msg))
}

func (c limitsConnect) Seize(ctx context.Context, req *connect.Request[v1.SeizeRequest]) (*connect.Response[v1.SeizeResponse], error) {
	return connectUnary(c.api.Seize(ctx, req.Msg))
}

// quotaConnect is quotaservice.QuotaService for Connect.
type quotaConnect struct{ api limitsvc.QuotaService }

func (c quotaConnect) Allow(ctx context.Context, req *connect.Request[qs.AllowRequest]) (*connect.Response[qs.AllowResponse], error) {
	return connectUnary(c.api.Allow(ctx, req.Msg))
}

// connectUnary wraps a grpc-go style answer for Connect.
func connectUnary[T any](resp *T, err error) (*connect.Response[T], error) {
	if err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(resp), nil
}

// connectError turns a gRPC status error into a Connect error with the
// same code and message (Connect's codes are gRPC's).
func connectError(err error) error {
	if st, ok := status.FromError(err); ok {
		return connect.NewError(connect.Code(st.Code()), errors.New(st.Message()))
	}
	return err
}

// rpcMetrics count every RPC of every service, on both transports, by
// method and code. Labels are bounded: the methods of the services
// registered, and the gRPC codes.
type rpcMetrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
}

func newRPCMetrics(reg prometheus.Registerer) *rpcMetrics {
	m := &rpcMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_server_requests_total",
			Help: "RPCs handled, by method and gRPC status code.",
		}, []string{"method", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_server_request_duration_seconds",
			Help:    "RPC handling latency in seconds, by method.",
			Buckets: prometheus.ExponentialBuckets(0.00001, 4, 10),
		}, []string{"method"}),
	}
	reg.MustRegister(m.requests, m.latency)
	return m
}

func (m *rpcMetrics) interceptor() connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			start := time.Now()
			resp, err := next(ctx, req)
			m.observe(req.Spec().Procedure, err, start)
			return resp, err
		}
	}
}

// grpcInterceptor is interceptor for grpc-go's server: the same series,
// with the same method and code labels.
func (m *rpcMetrics) grpcInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := handler(ctx, req)
	m.observe(info.FullMethod, err, start)
	return resp, err
}

// observe counts one RPC of method ("/doorman.Capacity/GetCapacity") that
// started at start and ended with err, labelled with Connect's name of its
// code ("ok", "invalid_argument", …).
func (m *rpcMetrics) observe(method string, err error, start time.Time) {
	code := "ok"
	if err != nil {
		code = connect.CodeUnknown.String()
		if ce := new(connect.Error); errors.As(err, &ce) {
			code = ce.Code().String()
		} else if st, ok := status.FromError(err); ok {
			code = connect.Code(st.Code()).String()
		}
	}
	m.requests.WithLabelValues(method, code).Inc()
	m.latency.WithLabelValues(method).Observe(time.Since(start).Seconds())
}
