package tracing

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestAnnotate: Annotate sets Sluice's attributes on a recording span only
// while a server of the process traces (Hold), and never on a context
// without a recording span.
func TestAnnotate(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	ctx, span := tp.Tracer("t").Start(context.Background(), "request")
	Annotate(ctx, "before", "", "OK", false) // nobody traces: skipped
	release := Hold()
	if !Active() {
		t.Fatal("Active false while held")
	}
	Annotate(ctx, "api", "acme", "OK", true)
	Annotate(context.Background(), "nowhere", "x", "OK", false) // no span: no-op
	span.End()
	release()
	release() // once only
	if Active() {
		t.Fatal("Active after release")
	}
	got := map[string]string{}
	for _, kv := range rec.Ended()[0].Attributes() {
		got[string(kv.Key)] = kv.Value.String()
	}
	want := map[string]string{"sluice.resource": "api", "sluice.domain": "acme", "sluice.decision": "OK", "sluice.degraded": "true"}
	if len(got) != len(want) {
		t.Fatalf("attributes %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
}

// TestChildOnly: ChildOnly's tracer starts no span (and records nothing)
// under a context with no span, and a child under one with a span.
func TestChildOnly(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	tr := ChildOnly(tp).Tracer("etcd")
	bg, none := tr.Start(context.Background(), "keepalive")
	if none.IsRecording() || none.SpanContext().IsValid() || bg != context.Background() {
		t.Fatal("a span without a parent")
	}
	none.End()
	ctx, parent := tp.Tracer("t").Start(context.Background(), "request")
	_, child := tr.Start(ctx, "Range")
	child.End()
	parent.End()
	ended := rec.Ended()
	if len(ended) != 2 || ended[0].Name() != "Range" || ended[0].Parent().SpanID() != parent.SpanContext().SpanID() {
		t.Fatalf("spans %v, want Range under request", ended)
	}
}
