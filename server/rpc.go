package server

import (
	"context"
	"errors"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/sluice-rl/sluice/server/internal/promreg"
)

// rpcMetrics count every RPC of every service, on both transports, by
// method and code. Labels are bounded: the methods of the services
// registered, and the gRPC codes.
type rpcMetrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
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
