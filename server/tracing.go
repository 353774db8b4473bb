package server

import (
	"context"
	"errors"
	"net/http"
	"time"

	"google.golang.org/grpc"

	"github.com/sluice-rl/sluice/internal/tracing"
	"github.com/sluice-rl/sluice/server/internal/telemetry"
)

// Tracing (Config.Runtime.Tracing): with a TracerProvider, the port's two
// sides get OpenTelemetry's instrumentation (otelgrpc's stats handler on
// grpc-go, otelhttp around each Connect handler), Redis's round trips and
// etcd's calls on a request's path become child spans, and the services
// add Sluice's attributes. Without one, none of it is installed: the
// services' tracing.Span is an atomic load.

// openTracing builds the TracerProvider of Config.Runtime.Tracing (nil:
// off), before the stores that use it.
func (s *Server) openTracing(ctx context.Context) error {
	t := s.cfg.Runtime.Tracing
	o := telemetry.Options{Exporter: t.Exporter, Protocol: t.Protocol, Endpoint: t.Endpoint, Sampler: t.Sampler, SamplerArg: t.SamplerArg}
	if t.Provider != nil {
		if !o.Off() {
			return fieldErr("Runtime.Tracing.Exporter", "%q set with Runtime.Tracing.Provider; give one or the other", t.Exporter)
		}
		s.tracer = t.Provider
		s.closeTracing = tracing.Hold()
		return nil
	}
	tp, err := telemetry.New(ctx, o)
	if oe := new(telemetry.OptionError); errors.As(err, &oe) {
		return oe.Under("Runtime.Tracing")
	} else if err != nil {
		return err
	}
	if tp == nil {
		return nil
	}
	s.tracer = tp
	release := tracing.Hold()
	s.closeTracing = func() {
		release()
		// Export what is left (the batch processor's queue).
		sctx, cancel := context.WithTimeout(context.Background(), tracingFlush)
		defer cancel()
		if err := tp.Shutdown(sctx); err != nil {
			s.log.Warn("tracing: exporting the last spans failed", "err", err)
		}
	}
	s.log.Info("tracing on", "exporter", t.Exporter, "protocol", t.Protocol, "endpoint", t.Endpoint, "sampler", t.Sampler)
	return nil
}

// tracingFlush bounds the export of the last spans when the server stops.
const tracingFlush = 5 * time.Second

// traced wraps a service's Connect handler (as mux.Handle takes it) in
// its server spans when tracing is on.
func (s *Server) traced(path string, h http.Handler) (string, http.Handler) {
	if s.tracer == nil {
		return path, h
	}
	return path, telemetry.HTTP(s.tracer, h)
}

// grpcTracing is the option of grpc-go's server that makes its server
// spans, none when tracing is off.
func (s *Server) grpcTracing() []grpc.ServerOption {
	if s.tracer == nil {
		return nil
	}
	return []grpc.ServerOption{grpc.StatsHandler(telemetry.GRPCServer(s.tracer))}
}

// grpcClientTracing are the dial options of the gRPC clients on a
// request's path (etcd's; the forwarding of sessions to their homes):
// their calls become children of the request's span, none when tracing
// is off.
func (s *Server) grpcClientTracing() []grpc.DialOption {
	if s.tracer == nil {
		return nil
	}
	return []grpc.DialOption{grpc.WithStatsHandler(telemetry.GRPCClient(s.tracer))}
}
