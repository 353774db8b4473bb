package telemetry

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
)

// TestSampler: each OTEL_TRACES_SAMPLER name gives its sampler, and no
// name none (the SDK's, from the variables); an unknown name or a bad
// ratio is an error naming its field.
func TestSampler(t *testing.T) {
	if s, err := Sampler("", ""); s != nil || err != nil {
		t.Errorf("none: %v %v, want nil (the SDK's)", s, err)
	}
	for _, tc := range []struct{ name, arg, want, field string }{
		{"parentbased_always_on", "", "ParentBased{root:AlwaysOnSampler", ""},
		{"parentbased_always_off", "", "ParentBased{root:AlwaysOffSampler", ""},
		{"always_on", "", "AlwaysOnSampler", ""},
		{"always_off", "", "AlwaysOffSampler", ""},
		{"traceidratio", "0.25", "TraceIDRatioBased{0.25}", ""},
		{"traceidratio", "", "TraceIDRatioBased{1}", ""}, // ratio 1
		{"parentbased_traceidratio", "0.5", "ParentBased{root:TraceIDRatioBased{0.5}", ""},
		{"traceidratio", "1.5", "", "SamplerArg"},
		{"parentbased_traceidratio", "half", "", "SamplerArg"},
		{"jaeger_remote", "", "", "Sampler"},
	} {
		s, err := Sampler(tc.name, tc.arg)
		if tc.field != "" {
			if oe := new(FieldError); !errors.As(err, &oe) || oe.Field != tc.field {
				t.Errorf("%q %q: %v, want an error naming %s", tc.name, tc.arg, err, tc.field)
			}
			continue
		}
		if err != nil || !strings.HasPrefix(s.Description(), tc.want) {
			t.Errorf("%q %q: %v %v, want %s", tc.name, tc.arg, s, err, tc.want)
		}
	}
}

// TestSamplerFromEnv: without a sampler of its own, New leaves it to the
// SDK, which reads OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG
// itself (else parentbased_always_on); an explicit sampler wins over
// them.
func TestSamplerFromEnv(t *testing.T) {
	for _, tc := range []struct {
		sampler, arg string
		explicit     sdktrace.Sampler
		sampled      bool
	}{
		{"", "", nil, true}, // parentbased_always_on, no parent
		{"always_off", "", nil, false},
		{"traceidratio", "0", nil, false},
		{"parentbased_traceidratio", "1", nil, true},
		{"always_off", "", sdktrace.AlwaysSample(), true},
	} {
		t.Setenv("OTEL_TRACES_SAMPLER", tc.sampler)
		t.Setenv("OTEL_TRACES_SAMPLER_ARG", tc.arg)
		tp, err := New(t.Context(), "grpc", "http://127.0.0.1:1", tc.explicit)
		if err != nil {
			t.Fatal(err)
		}
		_, span := tp.Tracer("t").Start(t.Context(), "request") // not ended: nothing to export
		if got := span.SpanContext().IsSampled(); got != tc.sampled {
			t.Errorf("OTEL_TRACES_SAMPLER=%q OTEL_TRACES_SAMPLER_ARG=%q, explicit %v: sampled %v, want %v",
				tc.sampler, tc.arg, tc.explicit, got, tc.sampled)
		}
		if err := tp.Shutdown(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
}

// TestHTTPExporter: with http/protobuf, spans go to the endpoint's
// /v1/traces as OTLP protobuf (whatever OTEL_EXPORTER_OTLP_PROTOCOL,
// which the HTTP exporter also reads, says), with the service named
// sluice.
func TestHTTPExporter(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json")
	var mu sync.Mutex
	var paths []string
	var names []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req collectortrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			t.Errorf("export: %v", err)
		}
		mu.Lock()
		paths = append(paths, r.URL.Path+" "+r.Header.Get("Content-Type"))
		for _, rs := range req.GetResourceSpans() {
			for _, kv := range rs.GetResource().GetAttributes() {
				if kv.GetKey() == "service.name" {
					names = append(names, kv.GetValue().GetStringValue())
				}
			}
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(nil)
	}))
	defer srv.Close()
	ctx := context.Background()
	tp, err := New(ctx, "http/protobuf", srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, span := tp.Tracer("t").Start(ctx, "request")
	span.End()
	if err := tp.Shutdown(ctx); err != nil { // flushes
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(paths) != 1 || paths[0] != "/v1/traces application/x-protobuf" || len(names) != 1 || names[0] != "sluice" {
		t.Fatalf("exports %v, services %v; want one to /v1/traces of service sluice", paths, names)
	}
}

// TestCanonical: the gRPC codes' names are the specification's.
func TestCanonical(t *testing.T) {
	for code, want := range map[uint32]string{0: "OK", 1: "CANCELLED", 4: "DEADLINE_EXCEEDED", 14: "UNAVAILABLE", 16: "UNAUTHENTICATED", 99: "CODE(99)"} {
		if got := canonical(grpcCode(code)); got != want {
			t.Errorf("%d: %s, want %s", code, got, want)
		}
	}
}

func grpcCode(c uint32) codes.Code { return codes.Code(c) }
