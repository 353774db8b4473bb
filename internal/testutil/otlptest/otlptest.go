// Package otlptest is an OTLP trace receiver for tests — the
// OpenTelemetry collector's gRPC TraceService on a loopback port, keeping
// every span exported to it — and the W3C traceparent of a test's
// caller, so that a test can send requests in traces of its own and find
// the spans a server made of them.
package otlptest

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// Receiver receives OTLP traces over gRPC at Endpoint. Safe for
// concurrent use.
type Receiver struct {
	collectortrace.UnimplementedTraceServiceServer
	// Endpoint is the receiver's URL (http://127.0.0.1:PORT), as
	// OTEL_EXPORTER_OTLP_ENDPOINT takes it.
	Endpoint string

	mu    sync.Mutex
	spans []*tracepb.Span
	res   []map[string]string
}

// Start starts a receiver on a kernel-picked loopback port, stopped at the
// end of the test.
func Start(t testing.TB) *Receiver {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &Receiver{Endpoint: "http://" + lis.Addr().String()}
	gs := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(gs, r)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return r
}

// Export implements the TraceService: it keeps the spans.
func (r *Receiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		res := Attrs(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				r.spans = append(r.spans, s)
				r.res = append(r.res, res)
			}
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// Spans returns every span received, and the attributes of each one's
// resource (service.name, …), in the order received.
func (r *Receiver) Spans() ([]*tracepb.Span, []map[string]string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*tracepb.Span(nil), r.spans...), append([]map[string]string(nil), r.res...)
}

// Trace returns the spans received of trace id.
func (r *Receiver) Trace(id []byte) []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*tracepb.Span
	for _, s := range r.spans {
		if bytes.Equal(s.GetTraceId(), id) {
			out = append(out, s)
		}
	}
	return out
}

// Attrs flattens OTLP attributes to strings: a slice is its values
// joined with ",".
func Attrs(kvs []*commonpb.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		m[kv.GetKey()] = value(kv.GetValue())
	}
	return m
}

func value(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_BoolValue:
		return fmt.Sprint(x.BoolValue)
	case *commonpb.AnyValue_IntValue:
		return fmt.Sprint(x.IntValue)
	case *commonpb.AnyValue_DoubleValue:
		return fmt.Sprint(x.DoubleValue)
	case *commonpb.AnyValue_ArrayValue:
		var parts []string
		for _, e := range x.ArrayValue.GetValues() {
			parts = append(parts, value(e))
		}
		return strings.Join(parts, ",")
	}
	return ""
}

// Find returns the span of spans named name of kind whose parent is
// parent (nil: any parent), or nil.
func Find(spans []*tracepb.Span, name string, kind tracepb.Span_SpanKind, parent []byte) *tracepb.Span {
	for _, s := range spans {
		if s.GetName() == name && s.GetKind() == kind && (parent == nil || bytes.Equal(s.GetParentSpanId(), parent)) {
			return s
		}
	}
	return nil
}

// Names lists spans as "KIND name", for failure messages.
func Names(spans []*tracepb.Span) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.GetKind().String()+" "+s.GetName())
	}
	return out
}

// Caller is a test's caller span: a trace id and a span id, sampled.
type Caller struct{ TraceID, SpanID []byte }

// NewCaller returns the caller n (1 to 255) of a test: ids distinct for
// distinct n, and valid (not zero).
func NewCaller(n int) Caller {
	c := Caller{TraceID: make([]byte, 16), SpanID: make([]byte, 8)}
	c.TraceID[0], c.TraceID[15], c.SpanID[0], c.SpanID[7] = 0x5a, byte(n), 0xc0, byte(n)
	return c
}

// Header is c's W3C traceparent header value (version 00, sampled).
func (c Caller) Header() string {
	return "00-" + hex.EncodeToString(c.TraceID) + "-" + hex.EncodeToString(c.SpanID) + "-01"
}

// Context returns ctx with c's traceparent in its outgoing gRPC metadata,
// as Envoy and gRPC clients send it.
func (c Caller) Context(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "traceparent", c.Header())
}
