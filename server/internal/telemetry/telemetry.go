// Package telemetry builds the server's OpenTelemetry TracerProvider
// (the SDK with an OTLP exporter, a sampler and the process's resource)
// and instruments the one port with OpenTelemetry's own instrumentation:
// otelgrpc's stats handler for grpc-go, otelhttp around the Connect
// handlers (gRPC, gRPC-Web and JSON over net/http), each continuing the
// caller's W3C traceparent. Sluice's own attributes are package
// internal/tracing's.
//
// The settings are server.Tracing's, defined there once; what they leave
// empty, the SDK and the OTLP exporter read from the environment
// themselves (New).
//
// Source: docs/tracing.md; the OpenTelemetry
// specification's "Environment Variable Specification" (the names and
// values of OTEL_TRACES_EXPORTER, OTEL_EXPORTER_OTLP_*,
// OTEL_TRACES_SAMPLER); the SDK's own reading of them, in
// go.opentelemetry.io/otel/sdk/trace (sampler_env.go) and the OTLP
// exporters' package documentation.
package telemetry

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc/filters"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	noopmetric "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	grpccodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/stats"

	"github.com/sluice-rl/sluice/internal/names"
	"github.com/sluice-rl/sluice/internal/tracing"
)

// New returns the SDK's TracerProvider exporting over OTLP: a batch span
// processor (its OTEL_BSP_* variables apply) over the exporter of
// protocol, "grpc" (also when empty) or "http/protobuf", sending to
// endpoint, the collector's base URL (http://host:port; https for TLS;
// with http/protobuf, /v1/traces is appended to its path); sampler; and
// a resource naming the service "sluice" (OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES override it). The caller shuts it down (which
// flushes the spans not yet exported).
//
// What is empty or nil is the SDK's to find in the environment, as its
// packages document: endpoint "", the exporter's
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, then OTEL_EXPORTER_OTLP_ENDPOINT,
// else localhost:4317 (gRPC) or localhost:4318 (HTTP); sampler nil,
// NewTracerProvider's OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG,
// else parentbased_always_on. The exporter also reads its other
// variables (headers, timeout, certificates, compression) itself.
//
// The parameters are server.Tracing's fields of the same names (the one
// definition of the settings), and errors are *FieldError naming them:
// "Protocol", "Endpoint", or "Exporter" when the exporter cannot be
// made. No connection is made yet (the exporter connects when it first
// exports, and keeps retrying).
func New(ctx context.Context, protocol, endpoint string, sampler sdktrace.Sampler) (*sdktrace.TracerProvider, error) {
	var u *url.URL
	if endpoint != "" {
		var err error
		if u, err = url.Parse(endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fieldErr("Endpoint", "%q, want a URL http://host:port or https://host:port", endpoint)
		}
	}
	var exp sdktrace.SpanExporter
	var err error
	switch protocol {
	case "", "grpc":
		var opts []otlptracegrpc.Option
		if u != nil {
			opts = append(opts, otlptracegrpc.WithEndpointURL(u.String()))
		}
		exp, err = otlptracegrpc.New(ctx, opts...)
	case "http/protobuf":
		// Protobuf whatever OTEL_EXPORTER_OTLP_PROTOCOL says, which the
		// HTTP exporter reads too (http/json: JSON): protocol decides.
		opts := []otlptracehttp.Option{otlptracehttp.WithEncoding(otlptracehttp.EncodingProtobuf)}
		if u != nil {
			t := *u
			t.Path = strings.TrimSuffix(t.Path, "/") + "/v1/traces"
			opts = append(opts, otlptracehttp.WithEndpointURL(t.String()))
		}
		exp, err = otlptracehttp.New(ctx, opts...)
	default:
		return nil, fieldErr("Protocol", "%q, want grpc or http/protobuf", protocol)
	}
	if err != nil {
		return nil, fieldErr("Exporter", "%v", err)
	}
	// Later detectors win: the variables override the default name.
	res, err := resource.New(ctx, resource.WithAttributes(semconv.ServiceName("sluice")),
		resource.WithTelemetrySDK(), resource.WithHost(), resource.WithProcessPID(), resource.WithFromEnv())
	if err != nil && res == nil { // a partial resource comes with an error worth no refusal
		_ = exp.Shutdown(ctx)
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithBatcher(exp), sdktrace.WithResource(res)}
	if sampler != nil { // else the SDK's, from its variables
		opts = append(opts, sdktrace.WithSampler(sampler))
	}
	return sdktrace.NewTracerProvider(opts...), nil
}

// FieldError is a parameter of New or Sampler they refuse, by its name
// ("Protocol", "SamplerArg", …: server.Tracing's fields), and why.
type FieldError = names.FieldError

func fieldErr(field, format string, args ...any) error {
	return names.FieldErr(field, format, args...)
}

// Sampler returns the sampler a front end's explicit name and arg stand
// for, in the words of OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG
// (the flags and Config fields that override those variables), or nil
// when name is empty: then New leaves the sampler to the SDK, which
// reads the variables itself (an arg without a name is the caller's to
// refuse). The SDK exports no parser of these names, so the explicit
// ones are parsed here, as it parses the variables, but strictly: an
// unknown name or a ratio outside 0 to 1 is an error (the SDK warns
// about a bad variable and goes on with its default). The ratio of the
// two ratio samplers is 1 when arg is empty; the others ignore it.
// Errors are *FieldError naming Sampler or SamplerArg.
func Sampler(name, arg string) (sdktrace.Sampler, error) {
	ratio := func() (float64, error) {
		if arg == "" {
			return 1, nil
		}
		r, err := strconv.ParseFloat(arg, 64)
		if err != nil || !(r >= 0 && r <= 1) {
			return 0, fieldErr("SamplerArg", "%q, want a ratio from 0 to 1", arg)
		}
		return r, nil
	}
	switch name {
	case "":
		return nil, nil
	case "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), nil
	case "always_on":
		return sdktrace.AlwaysSample(), nil
	case "always_off":
		return sdktrace.NeverSample(), nil
	case "traceidratio", "parentbased_traceidratio":
		r, err := ratio()
		if err != nil {
			return nil, err
		}
		if name == "traceidratio" {
			return sdktrace.TraceIDRatioBased(r), nil
		}
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(r)), nil
	}
	return nil, fieldErr("Sampler", "%q, want always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio", name)
}

// Propagator is the propagation the port continues and etcd's client
// passes on: W3C Trace Context (traceparent, tracestate) and W3C Baggage.
func Propagator() propagation.TextMapPropagator {
	return propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
}

// GRPCServer returns the stats handler of grpc-go's server: a server span
// per RPC named after its method ("doorman.Capacity/GetCapacity"), with
// rpc.system.name, rpc.method and the status code, continuing the
// caller's traceparent (otelgrpc; metrics off: Sluice's are
// Prometheus'). Health checks (grpc.health.v1, which load balancers and
// Kubernetes send every few seconds) and server reflection make none.
func GRPCServer(tp trace.TracerProvider) stats.Handler {
	return otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(tp), otelgrpc.WithPropagators(Propagator()),
		otelgrpc.WithMeterProvider(noopmetric.NewMeterProvider()),
		otelgrpc.WithFilter(filters.None(filters.HealthCheck(), filters.ServicePrefix("grpc.reflection."))))
}

// GRPCClient returns the stats handler of a gRPC client whose calls are
// children of the request's span when they have one, and untraced
// otherwise (tracing.ChildOnly): etcd's client.
func GRPCClient(tp trace.TracerProvider) stats.Handler {
	return otelgrpc.NewClientHandler(otelgrpc.WithTracerProvider(tracing.ChildOnly(tp)), otelgrpc.WithPropagators(Propagator()),
		otelgrpc.WithMeterProvider(noopmetric.NewMeterProvider()))
}

// HTTP wraps a service's Connect handler (net/http's side of the port:
// gRPC, gRPC-Web and JSON) with otelhttp: a server span per RPC named
// after its procedure ("sluice.v1.Limits/Allow"), with otelhttp's http.*
// attributes and, as otelgrpc's, rpc.system.name (grpc for gRPC's content
// types, else connectrpc: Connect's JSON and gRPC-Web) and rpc.method,
// continuing the caller's traceparent. The RPC's status code is the
// interceptor's to add (SetRPCStatus).
func HTTP(tp trace.TracerProvider, h http.Handler) http.Handler {
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s := trace.SpanFromContext(r.Context()); s.IsRecording() {
			system := semconv.RPCSystemNameConnectrpc
			if ct := r.Header.Get("Content-Type"); ct == "application/grpc" || strings.HasPrefix(ct, "application/grpc+") {
				system = semconv.RPCSystemNameGRPC
			}
			s.SetAttributes(system, semconv.RPCMethod(strings.TrimPrefix(r.URL.Path, "/")))
		}
		h.ServeHTTP(w, r)
	})
	return otelhttp.NewHandler(inner, "rpc", otelhttp.WithTracerProvider(tp), otelhttp.WithPropagators(Propagator()),
		otelhttp.WithMeterProvider(noopmetric.NewMeterProvider()),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return strings.TrimPrefix(r.URL.Path, "/") }))
}

// SetRPCStatus records the outcome of an RPC served by Connect on ctx's
// span, if it records (otelgrpc does it for grpc-go's), as otelgrpc does:
// rpc.response.status_code is the code's canonical name ("OK",
// "UNAVAILABLE", …), and the span's status is Error, with err's message,
// for the codes that mean the server failed (UNKNOWN, DEADLINE_EXCEEDED,
// UNIMPLEMENTED, INTERNAL, UNAVAILABLE, DATA_LOSS).
func SetRPCStatus(ctx context.Context, code grpccodes.Code, err error) {
	s := tracing.Span(ctx)
	if s == nil {
		return
	}
	s.SetAttributes(semconv.RPCResponseStatusCode(canonical(code)))
	switch code {
	case grpccodes.Unknown, grpccodes.DeadlineExceeded, grpccodes.Unimplemented, grpccodes.Internal, grpccodes.Unavailable, grpccodes.DataLoss:
		if err != nil {
			s.SetStatus(otelcodes.Error, err.Error())
		}
	}
}

// canonical is a gRPC code's name as the gRPC specification writes it
// (DEADLINE_EXCEEDED, CANCELLED; grpc-go's String says
// DeadlineExceeded, Canceled).
func canonical(c grpccodes.Code) string {
	if int(c) < len(codeNames) {
		return codeNames[c]
	}
	return "CODE(" + strconv.Itoa(int(c)) + ")"
}

// codeNames are the gRPC codes' names, by code (doc/statuscodes.md of
// gRPC).
var codeNames = [...]string{"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
	"ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
	"UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"}
