package server

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
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
// before the stores that use it: the exporter is Sluice's to choose (the
// SDK reads no OTEL_TRACES_EXPORTER), the rest telemetry.New's, which
// leaves what t leaves empty to the SDK's own variables.
func openTracer(ctx context.Context, t Tracing, log *slog.Logger) (tracer, error) {
	off := t.Exporter == "" || t.Exporter == "none"
	switch {
	case t.Provider != nil && !off:
		return tracer{}, fieldErr("Runtime.Tracing.Exporter", "%q set with Runtime.Tracing.Provider; give one or the other", t.Exporter)
	case t.Provider != nil:
		return tracer{provider: t.Provider, end: tracing.Hold()}, nil
	case off:
		return tracer{}, nil
	case t.Exporter != "otlp":
		return tracer{}, fieldErr("Runtime.Tracing.Exporter", "%q, want otlp or none", t.Exporter)
	}
	if t.Sampler == "" && t.SamplerArg != "" { // the SDK reads its ratio with its name: one alone overrides nothing
		return tracer{}, fieldErr("Runtime.Tracing.SamplerArg", "%q without Runtime.Tracing.Sampler: give the sampler it is the ratio of", t.SamplerArg)
	}
	sampler, err := telemetry.Sampler(t.Sampler, t.SamplerArg)
	var tp *sdktrace.TracerProvider
	if err == nil {
		tp, err = telemetry.New(ctx, t.Protocol, t.Endpoint, sampler)
	}
	if fe := new(telemetry.FieldError); errors.As(err, &fe) {
		return tracer{}, fe.Under("Runtime.Tracing")
	} else if err != nil {
		return tracer{}, err
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
	log.Info("tracing on", "exporter", t.Exporter, "protocol", cmp.Or(t.Protocol, "grpc"),
		"endpoint", cmp.Or(t.Endpoint, "OTEL_EXPORTER_OTLP_*, else localhost"),
		"sampler", cmp.Or(t.Sampler, "OTEL_TRACES_SAMPLER, else parentbased_always_on"))
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
