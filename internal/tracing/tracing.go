// Package tracing is what Sluice's services and stores need of
// OpenTelemetry traces, and nothing of the SDK: Sluice's own span
// attributes (sluice.resource, sluice.domain, sluice.decision,
// sluice.degraded), set on a request's server span by Annotate; the gate
// that makes them free while no server of the process traces (Hold,
// Active); and ChildOnly, a TracerProvider that makes child spans only,
// for clients (etcd's) whose background calls must not start traces of
// their own.
//
// The SDK, its exporters and the instrumentation of the port live in
// server/internal/telemetry; docs/tracing.md says what a trace holds.
//
// Source: docs/tracing.md.
package tracing

import (
	"context"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
)

// ScopeName is the instrumentation scope of the spans Sluice makes itself
// (the stores' round trips).
const ScopeName = "github.com/sluice-rl/sluice"

// Sluice's own span attributes, set on a request's server span beside
// OpenTelemetry's semantic conventions (rpc.*, http.*, db.*).
const (
	// ResourceKey is the resource asked for: a limits resource, a quota
	// service namespace, a copy-limited resource, Doorman resource ids
	// (a string slice for GetCapacity's several), or, for Envoy, the
	// descriptors' rule keys.
	ResourceKey = attribute.Key("sluice.resource")
	// DomainKey is the domain (Charon's tenant), the quota service's
	// bucket name, or Envoy's domain.
	DomainKey = attribute.Key("sluice.domain")
	// DecisionKey is the answer, in the API's own words: the status
	// ("OK", "REJECTED_TIMEOUT", "OVER_LIMIT", …), or for Doorman
	// "granted" (the capacity is in the response) or "redirected" (not
	// the master).
	DecisionKey = attribute.Key("sluice.decision")
	// DegradedKey is true when the answer was given without the store
	// (its failure, and the resource configured to fail open).
	DegradedKey = attribute.Key("sluice.degraded")
)

// active counts the servers of this process that trace (Hold).
var active atomic.Int32

// Hold records that a server of this process traces, until release is
// called (once): Active reports true meanwhile. Safe for concurrent use.
func Hold() (release func()) {
	active.Add(1)
	var once atomic.Bool
	return func() {
		if once.CompareAndSwap(false, true) {
			active.Add(-1)
		}
	}
}

// Active reports whether a server of this process traces (an atomic
// load): while none does, the services skip even looking up the
// request's span.
func Active() bool { return active.Load() != 0 }

// Span returns ctx's span when it records (nil otherwise, and without
// looking while no server traces): the services set their attributes on
// it.
func Span(ctx context.Context) trace.Span {
	if !Active() {
		return nil
	}
	if s := trace.SpanFromContext(ctx); s.IsRecording() {
		return s
	}
	return nil
}

// Annotate sets Sluice's attributes on ctx's span, if it records: the
// resource, the domain (omitted when empty), the decision and whether it
// was degraded. Free while no server traces (Active).
func Annotate(ctx context.Context, resource, domain, decision string, degraded bool) {
	s := Span(ctx)
	if s == nil {
		return
	}
	attrs := make([]attribute.KeyValue, 0, 4)
	attrs = append(attrs, ResourceKey.String(resource))
	if domain != "" {
		attrs = append(attrs, DomainKey.String(domain))
	}
	attrs = append(attrs, DecisionKey.String(decision), DegradedKey.Bool(degraded))
	s.SetAttributes(attrs...)
}

// ChildOnly returns a TracerProvider whose tracers start a span only
// under a context that already holds a valid span (a request's), and
// otherwise return the context as is with a non-recording span: for
// clients whose background calls (etcd's keep-alives, watches and
// campaigns) must not start traces of their own, while their calls on a
// request's path become children of the request's span.
func ChildOnly(tp trace.TracerProvider) trace.TracerProvider { return childOnly{tp: tp} }

type childOnly struct {
	embedded.TracerProvider
	tp trace.TracerProvider
}

func (c childOnly) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	return childTracer{t: c.tp.Tracer(name, opts...)}
}

type childTracer struct {
	embedded.Tracer
	t trace.Tracer
}

func (c childTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx, trace.SpanFromContext(ctx)
	}
	return c.t.Start(ctx, name, opts...)
}
