package server

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	pb "github.com/sluice-rl/sluice/api/doorman"
	qs "github.com/sluice-rl/sluice/api/quotaservice"
	v1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/internal/testutil/etcdtest"
	"github.com/sluice-rl/sluice/internal/testutil/otlptest"
	"github.com/sluice-rl/sluice/internal/testutil/redistest"
	"github.com/sluice-rl/sluice/resources"
)

// tracingDoc is a document with a resource of each kind: a Doorman
// template, a token bucket (Allow, the quota service), a copy-limited
// resource and Envoy's rules.
const tracingDoc = `
resources:
  - identifier_glob: fair
    capacity: 100
    algorithm: {kind: FAIR_SHARE, lease_length: 60, refresh_interval: 10, learning_mode_duration: 0}
limits:
  resources:
    api: {default: {size: 100, fill_rate: 10}}
    sandboxes: {algorithm: copies, domain_limit: 3, global_limit: 5}
envoy_ratelimit:
  - domain: edge
    descriptors:
      - key: remote_address
        rate_limit: {unit: second, requests_per_unit: 100}
`

// TestTracing: two servers of a fleet on a real Redis and an embedded
// etcd, exporting OTLP over gRPC to a receiver in the test. A request
// with a caller's traceparent to each API — sluice.v1.Limits/Allow, the
// quota service's Allow, Envoy's ShouldRateLimit, Doorman's GetCapacity
// over gRPC (grpc-go's transport), a copies Reserve forwarded from one
// server to the session's home, and Allow as JSON over HTTP — yields, in
// the caller's trace, the server span as a child of the caller's span with
// OpenTelemetry's rpc.* attributes and Sluice's own, and under it the
// store's child spans: each Redis call with the round trip that carried
// it (linked both ways), the etcd read finding the session's home, and
// the home server's own server span under the forwarding call's.
func TestTracing(t *testing.T) {
	recv := otlptest.Start(t)
	etcd := etcdtest.StartEtcd(t)
	rsrv := redistest.StartT(t)
	doc, err := resources.Parse([]byte(tracingDoc))
	if err != nil {
		t.Fatal(err)
	}
	tracing := Tracing{Exporter: "otlp", Endpoint: recv.Endpoint, Protocol: "grpc"}
	start := func(id string) (*Server, func() error, v1.LimitsClient) {
		s, stop := startServer(t, Config{ID: id, Runtime: Runtime{Tracing: tracing}, Repository: Repository{Fixed: doc},
			Etcd: Etcd{Endpoints: []string{etcd.Endpoint}}, Store: Store{Redis: "redis://" + rsrv.Addr + "/0"},
			Sessions: Sessions{Fleet: Fleet{Prefix: "/" + t.Name()}}})
		lc := v1.NewLimitsClient(testutil.Dial(t, s.Addr()))
		testutil.Eventually(t, 30*time.Second, s.Addr()+" to join the fleet", func() bool { ok, _ := s.Ready(); return ok })
		return s, stop, lc
	}
	_, stopA, ca := start("a")
	b, stopB, cb := start("b")
	testutil.Learnt(t, ca, "sandboxes")
	ctx := t.Context()
	conn := testutil.Dial(t, b.Addr())

	callers := map[string]otlptest.Caller{}
	for i, api := range []string{"allow", "quota", "envoy", "doorman", "reserve", "json"} {
		callers[api] = otlptest.NewCaller(i + 1)
	}
	if r, err := cb.Allow(callers["allow"].Context(ctx), &v1.AllowRequest{Resource: "api", Domain: "acme"}); err != nil || r.GetStatus() != v1.AllowResponse_OK {
		t.Fatalf("Allow: %v %v", r, err)
	}
	if r, err := qs.NewQuotaServiceClient(conn).Allow(callers["quota"].Context(ctx), &qs.AllowRequest{Namespace: "api", BucketName: "initech"}); err != nil || r.GetStatus() != qs.AllowResponse_OK {
		t.Fatalf("quota service Allow: %v %v", r, err)
	}
	if r, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(callers["envoy"].Context(ctx), &rlsv3.RateLimitRequest{Domain: "edge",
		Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.0.0.1"}}}}}); err != nil || r.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("ShouldRateLimit: %v %v", r, err)
	}
	if r, err := pb.NewCapacityClient(conn).GetCapacity(callers["doorman"].Context(ctx), capacityRequest("c1", "fair", 10)); err != nil || len(r.GetResponse()) != 1 {
		t.Fatalf("GetCapacity: %v %v", r, err)
	}
	// A health check (load balancers send one every few seconds) makes
	// no span, even in a trace.
	callers["health"] = otlptest.NewCaller(9)
	// (gRPC health follows readiness within a beat: ask until it says
	// SERVING.)
	testutil.Eventually(t, 30*time.Second, "gRPC health SERVING", func() bool {
		r, err := healthpb.NewHealthClient(conn).Check(callers["health"].Context(ctx), &healthpb.HealthCheckRequest{})
		return err == nil && r.GetStatus() == healthpb.HealthCheckResponse_SERVING
	})
	session := open(t, ca) // homed on a, reserved through b
	if r, err := cb.Reserve(callers["reserve"].Context(ctx), &v1.ReserveRequest{SessionId: session, Resource: "sandboxes", Domain: "globex", Copies: 2}); err != nil || r.GetGranted() != 2 {
		t.Fatalf("Reserve: %v %v", r, err)
	}
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+b.Addr()+"/sluice.v1.Limits/Allow", strings.NewReader(`{"resource":"api","domain":"hooli"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", callers["json"].Header())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"status":"OK"`) {
		t.Fatalf("JSON Allow: %s %s", resp.Status, body)
	}

	// Stopping flushes the batch span processors' queues.
	for _, stop := range []func() error{stopB, stopA} {
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	}

	// server checks the server span of api's trace: a child of the
	// caller's span, named name, with attributes want; it returns the
	// trace's spans and the server span.
	server := func(api, name string, want map[string]string) ([]*tracepb.Span, *tracepb.Span) {
		t.Helper()
		c := callers[api]
		spans := recv.Trace(c.TraceID)
		s := otlptest.Find(spans, name, tracepb.Span_SPAN_KIND_SERVER, c.SpanID)
		if s == nil {
			t.Fatalf("%s: no server span %s, child of the caller's %x, in the trace: %v", api, name, c.SpanID, otlptest.Names(spans))
		}
		got := otlptest.Attrs(s.GetAttributes())
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s: %s = %q, want %q (attributes %v)", api, k, got[k], v, got)
			}
		}
		return spans, s
	}
	// redisChild checks that a Redis call named name is a child of parent,
	// carried by a round trip that links it and that it links.
	redisChild := func(api string, spans []*tracepb.Span, parent *tracepb.Span, name string) {
		t.Helper()
		call := otlptest.Find(spans, name, tracepb.Span_SPAN_KIND_CLIENT, nil)
		if call == nil {
			t.Fatalf("%s: no Redis span %s: %v", api, name, otlptest.Names(spans))
		}
		if !bytes.Equal(call.GetParentSpanId(), parent.GetSpanId()) {
			t.Errorf("%s: %s's parent %x, want the server span %x", api, name, call.GetParentSpanId(), parent.GetSpanId())
		}
		if a := otlptest.Attrs(call.GetAttributes()); a["db.system.name"] != "redis" || a["db.operation.name"] != "EVALSHA" || a["db.query.summary"] != name || a["server.address"] == "" {
			t.Errorf("%s: %s's attributes %v", api, name, a)
		}
		trip := otlptest.Find(spans, "BATCH EVALSHA", tracepb.Span_SPAN_KIND_CLIENT, nil)
		if trip == nil {
			t.Fatalf("%s: no round trip span: %v", api, otlptest.Names(spans))
		}
		if !bytes.Equal(trip.GetParentSpanId(), call.GetSpanId()) || !slices.ContainsFunc(trip.GetLinks(), func(l *tracepb.Span_Link) bool { return bytes.Equal(l.GetSpanId(), call.GetSpanId()) }) {
			t.Errorf("%s: the round trip (parent %x, links %v) is not the child of, and linking, the call %x", api, trip.GetParentSpanId(), trip.GetLinks(), call.GetSpanId())
		}
		if a := otlptest.Attrs(trip.GetAttributes()); a["db.operation.batch.size"] == "" || a["db.system.name"] != "redis" {
			t.Errorf("%s: the round trip's attributes %v", api, a)
		}
		if !slices.ContainsFunc(call.GetLinks(), func(l *tracepb.Span_Link) bool { return bytes.Equal(l.GetSpanId(), trip.GetSpanId()) }) {
			t.Errorf("%s: the call does not link its round trip: %v", api, call.GetLinks())
		}
	}

	spans, s := server("allow", "sluice.v1.Limits/Allow", map[string]string{"rpc.system.name": "grpc", "rpc.method": "sluice.v1.Limits/Allow",
		"rpc.response.status_code": "OK", "sluice.resource": "api", "sluice.domain": "acme", "sluice.decision": "OK", "sluice.degraded": "false"})
	redisChild("allow", spans, s, "EVALSHA take")

	spans, s = server("quota", "quotaservice.QuotaService/Allow", map[string]string{"rpc.system.name": "grpc",
		"sluice.resource": "api", "sluice.domain": "initech", "sluice.decision": "OK"})
	redisChild("quota", spans, s, "EVALSHA take")

	spans, s = server("envoy", "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", map[string]string{"rpc.system.name": "grpc",
		"sluice.resource": "remote_address", "sluice.domain": "edge", "sluice.decision": "OK", "sluice.degraded": "false"})
	redisChild("envoy", spans, s, "EVALSHA rls")

	server("doorman", "doorman.Capacity/GetCapacity", map[string]string{"rpc.system.name": "grpc", "sluice.resource": "fair", "sluice.decision": "granted"})

	// The Reserve: b's server span, b's read of the session's home in
	// etcd and its forwarding call under it; a's server span under the
	// forwarding call, with a's Redis call (the copy log) under it.
	spans, s = server("reserve", "sluice.v1.Limits/Reserve", map[string]string{"rpc.system.name": "grpc"})
	etcdGet := otlptest.Find(spans, "etcdserverpb.KV/Range", tracepb.Span_SPAN_KIND_CLIENT, nil)
	if etcdGet == nil || !bytes.Equal(etcdGet.GetParentSpanId(), s.GetSpanId()) {
		t.Errorf("reserve: no etcd read under b's server span %x: %v", s.GetSpanId(), otlptest.Names(spans))
	}
	fwd := otlptest.Find(spans, "sluice.v1.Limits/Reserve", tracepb.Span_SPAN_KIND_CLIENT, nil)
	if fwd == nil || !bytes.Equal(fwd.GetParentSpanId(), s.GetSpanId()) {
		t.Fatalf("reserve: no forwarding call under b's server span: %v", otlptest.Names(spans))
	}
	var home *tracepb.Span
	for _, x := range spans {
		if x.GetKind() == tracepb.Span_SPAN_KIND_SERVER && bytes.Equal(x.GetParentSpanId(), fwd.GetSpanId()) {
			home = x
		}
	}
	if home == nil {
		t.Fatalf("reserve: no server span of the home under the forwarding call: %v", otlptest.Names(spans))
	}
	if a := otlptest.Attrs(home.GetAttributes()); a["sluice.resource"] != "sandboxes" || a["sluice.domain"] != "globex" || a["sluice.decision"] != "OK" || a["sluice.degraded"] != "false" {
		t.Errorf("reserve: the home's attributes %v", a)
	}
	redisChild("reserve", spans, home, "EVALSHA copies_reserve")

	spans, s = server("json", "sluice.v1.Limits/Allow", map[string]string{"rpc.system.name": "connectrpc", "rpc.method": "sluice.v1.Limits/Allow",
		"rpc.response.status_code": "OK", "http.request.method": "POST", "sluice.resource": "api", "sluice.domain": "hooli", "sluice.decision": "OK"})
	redisChild("json", spans, s, "EVALSHA take")

	if spans := recv.Trace(callers["health"].TraceID); len(spans) != 0 {
		t.Errorf("a health check made spans: %v", otlptest.Names(spans))
	}

	// The exporter's resource names the service.
	all, res := recv.Spans()
	if len(res) == 0 || res[0]["service.name"] != "sluice" {
		t.Errorf("resource: %v, want service.name sluice", res)
	}
	// No trace of the servers' own background work (etcd's keep-alives
	// and watches, the store's sweeps): every span is in a caller's trace,
	// or a root server span of the test's own untraced requests.
	for _, x := range all {
		traced := false
		for _, c := range callers {
			traced = traced || bytes.Equal(x.GetTraceId(), c.TraceID)
		}
		if !traced && len(x.GetParentSpanId()) == 0 && x.GetKind() != tracepb.Span_SPAN_KIND_SERVER {
			t.Errorf("a root span of the server's own: %s %s %v", x.GetKind(), x.GetName(), otlptest.Attrs(x.GetAttributes()))
		}
	}
}

// TestTracingConfigErrors: a bad tracing configuration is an error naming
// the field.
func TestTracingConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		tracing Tracing
		field   string
	}{
		{Tracing{Exporter: "zipkin"}, "Runtime.Tracing.Exporter"},
		{Tracing{Exporter: "otlp", Protocol: "http/json"}, "Runtime.Tracing.Protocol"},
		{Tracing{Exporter: "otlp", Endpoint: "localhost:4317"}, "Runtime.Tracing.Endpoint"},
		{Tracing{Exporter: "otlp", Sampler: "sometimes"}, "Runtime.Tracing.Sampler"},
		{Tracing{Exporter: "otlp", Sampler: "traceidratio", SamplerArg: "2"}, "Runtime.Tracing.SamplerArg"},
		{Tracing{Exporter: "otlp", SamplerArg: "0.5"}, "Runtime.Tracing.SamplerArg"}, // without its Sampler
		{Tracing{Exporter: "otlp", Provider: sdktrace.NewTracerProvider()}, "Runtime.Tracing.Exporter"},
	} {
		_, err := New(t.Context(), Config{Listen: Listen{Address: "127.0.0.1:0"}, Runtime: Runtime{Tracing: tc.tracing}})
		if fe := new(FieldError); !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%+v: %v, want an error naming %s", tc.tracing, err, tc.field)
		}
	}
}

// TestTracingProvider: a program's own TracerProvider
// (Runtime.Tracing.Provider) gets the server spans of the RPCs served by
// Connect — a JSON request and a gRPC one over net/http — continuing the
// caller's traceparent, with the RPC's code; the server does not shut it
// down.
func TestTracingProvider(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	doc, err := resources.Parse([]byte(tracingDoc))
	if err != nil {
		t.Fatal(err)
	}
	s, stop := startServer(t, Config{Runtime: Runtime{Tracing: Tracing{Provider: tp}}, Repository: Repository{Fixed: doc}})
	caller := otlptest.NewCaller(1)
	req, _ := http.NewRequest("POST", "http://"+s.Addr()+"/sluice.v1.Limits/Allow", strings.NewReader(`{"resource":"nope"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", caller.Header())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("Allow of no resource: %s, want 400 (invalid_argument)", resp.Status)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	ended := rec.Ended()
	if len(ended) != 1 {
		t.Fatalf("%d spans, want the one server span", len(ended))
	}
	sp := ended[0]
	got := map[string]string{}
	for _, kv := range sp.Attributes() {
		got[string(kv.Key)] = kv.Value.String()
	}
	if sp.Name() != "sluice.v1.Limits/Allow" || sp.Parent().TraceID() != [16]byte(caller.TraceID) || sp.Parent().SpanID() != [8]byte(caller.SpanID) ||
		got["rpc.system.name"] != "connectrpc" || got["rpc.response.status_code"] != "INVALID_ARGUMENT" || got["sluice.decision"] != "INVALID_REQUEST" {
		t.Errorf("span %s under %v: %v", sp.Name(), sp.Parent(), got)
	}
	// The provider is the program's: still open after the server stopped.
	_, after := tp.Tracer("t").Start(t.Context(), "after")
	after.End()
	if n := len(rec.Ended()); n != 2 {
		t.Errorf("the program's provider took %d spans after the server stopped, want it open", n-1)
	}
}
