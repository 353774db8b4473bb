package server

import (
	"context"
	"errors"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the server's Prometheus metrics. Labels are bounded: RPC
// method (four values) and status code (the gRPC codes).
type metrics struct {
	requests  *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	unmatched prometheus.Counter
	reloads   *prometheus.CounterVec
}

func newMetrics(reg *prometheus.Registry, s *Server) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_server_requests_total",
			Help: "RPCs handled, by method and gRPC status code.",
		}, []string{"method", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_server_request_duration_seconds",
			Help:    "RPC handling latency in seconds, by method.",
			Buckets: prometheus.ExponentialBuckets(0.00001, 4, 10),
		}, []string{"method"}),
		unmatched: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_server_unmatched_resource_requests_total",
			Help: "Requests for resources that match no template (granted what they ask).",
		}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_server_config_reloads_total",
			Help: "Configuration reloads, by result (ok, failed).",
		}, []string{"result"}),
	}
	master := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sluice_server_is_master",
		Help: "1 if this server is the master of its node, else 0.",
	}, func() float64 {
		if ok, _ := s.IsMaster(); ok {
			return 1
		}
		return 0
	})
	reg.MustRegister(m.requests, m.latency, m.unmatched, m.reloads, master)
	return m
}

// ConfigReloaded records the outcome of a configuration reload (err nil:
// ok) in the sluice_server_config_reloads_total metric.
func (s *Server) ConfigReloaded(err error) {
	if err != nil {
		s.metrics.reloads.WithLabelValues("failed").Inc()
		return
	}
	s.metrics.reloads.WithLabelValues("ok").Inc()
}

func (m *metrics) interceptor() connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			start := time.Now()
			resp, err := next(ctx, req)
			method := req.Spec().Procedure
			code := "ok"
			var ce *connect.Error
			if errors.As(err, &ce) {
				code = ce.Code().String()
			} else if err != nil {
				code = connect.CodeUnknown.String()
			}
			m.requests.WithLabelValues(method, code).Inc()
			m.latency.WithLabelValues(method).Observe(time.Since(start).Seconds())
			return resp, err
		}
	}
}
