package server

import (
	"context"
	"errors"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-rl/sluice/server/internal/promreg"
	"github.com/sluice-rl/sluice/server/internal/telemetry"
)

// rpcMetrics count every RPC of every service, on both transports, by
// method and code. Labels are bounded: the methods of the services
// registered, and the gRPC codes.
type rpcMetrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	// traced: tracing is on, and the RPCs served by Connect record their
	// code on their server span (otelgrpc does it for grpc-go's).
	traced bool
}

func newRPCMetrics(reg prometheus.Registerer) (*rpcMetrics, error) {
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
	if err := promreg.Register(reg, m.requests, m.latency); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *rpcMetrics) interceptor() connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			start := time.Now()
			resp, err := next(ctx, req)
			m.observe(req.Spec().Procedure, err, start)
			if m.traced {
				telemetry.SetRPCStatus(ctx, codes.Code(codeOf(err)), err)
			}
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
		code = codeOf(err).String()
	}
	m.requests.WithLabelValues(method, code).Inc()
	m.latency.WithLabelValues(method).Observe(time.Since(start).Seconds())
}

// codeOf is err's code, a Connect error's or a gRPC status's (0, OK, for
// nil; Unknown for any other error).
func codeOf(err error) connect.Code {
	if err == nil {
		return 0
	}
	if ce := new(connect.Error); errors.As(err, &ce) {
		return ce.Code()
	}
	if st, ok := status.FromError(err); ok {
		return connect.Code(st.Code())
	}
	return connect.CodeUnknown
}
