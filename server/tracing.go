package server

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/trace"
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

// tracer owns the server's TracerProvider (Config.Runtime.Tracing; nil:
// off) and what ends it, and makes the instrumentation of the port's two
// sides and of the gRPC clients on a request's path from it. The zero
// value is tracing off. Set once in New and only read after: safe for
// concurrent use.
type tracer struct {
	provider trace.TracerProvider
	// end flushes and shuts down the provider New built, or releases
	// one Config.Runtime.Tracing.Provider gave (nil: nothing to end).
	end func()
}

// openTracer builds the TracerProvider of t (off: the zero tracer),
// before the stores that use it.
func openTracer(ctx context.Context, t Tracing, log *slog.Logger) (tracer, error) {
	o := telemetry.Options{Exporter: t.Exporter, Protocol: t.Protocol, Endpoint: t.Endpoint, Sampler: t.Sampler, SamplerArg: t.SamplerArg}
	if t.Provider != nil {
		if !o.Off() {
			return tracer{}, fieldErr("Runtime.Tracing.Exporter", "%q set with Runtime.Tracing.Provider; give one or the other", t.Exporter)
		}
		return tracer{provider: t.Provider, end: tracing.Hold()}, nil
	}
	tp, err := telemetry.New(ctx, o)
	if oe := new(telemetry.OptionError); errors.As(err, &oe) {
		return tracer{}, oe.Under("Runtime.Tracing")
	} else if err != nil {
		return tracer{}, err
	}
	if tp == nil {
		return tracer{}, nil
	}
	release := tracing.Hold()
	end := func() {
		release()
		// Export what is left (the batch processor's queue).
		sctx, cancel := context.WithTimeout(context.Background(), tracingFlush)
		defer cancel()
		if err := tp.Shutdown(sctx); err != nil {
			log.Warn("tracing: exporting the last spans failed", "err", err)
		}
	}
	log.Info("tracing on", "exporter", t.Exporter, "protocol", t.Protocol, "endpoint", t.Endpoint, "sampler", t.Sampler)
	return tracer{provider: tp, end: end}, nil
}

// tracingFlush bounds the export of the last spans when the server stops.
const tracingFlush = 5 * time.Second

// on reports whether tracing is on.
func (t tracer) on() bool { return t.provider != nil }

// close ends the provider: the last spans of one New built exported.
func (t tracer) close() {
	if t.end != nil {
		t.end()
	}
}

// http wraps a service's Connect handler (as mux.Handle takes it) in its
// server spans when tracing is on.
func (t tracer) http(path string, h http.Handler) (string, http.Handler) {
	if t.provider == nil {
		return path, h
	}
	return path, telemetry.HTTP(t.provider, h)
}

// grpcServer is the option of grpc-go's server that makes its server
// spans, none when tracing is off.
func (t tracer) grpcServer() []grpc.ServerOption {
	if t.provider == nil {
		return nil
	}
	return []grpc.ServerOption{grpc.StatsHandler(telemetry.GRPCServer(t.provider))}
}

// grpcClient are the dial options of the gRPC clients on a request's path
// (etcd's; the forwarding of sessions to their homes): their calls become
// children of the request's span, none when tracing is off.
func (t tracer) grpcClient() []grpc.DialOption {
	if t.provider == nil {
		return nil
	}
	return []grpc.DialOption{grpc.WithStatsHandler(telemetry.GRPCClient(t.provider))}
}
