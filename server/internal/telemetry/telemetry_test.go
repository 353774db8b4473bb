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

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
)

// TestSampler: each OTEL_TRACES_SAMPLER name gives its sampler; an unknown
// name or a bad ratio is an error naming its field.
func TestSampler(t *testing.T) {
	for _, tc := range []struct{ name, arg, want, field string }{
		{"", "", "ParentBased{root:AlwaysOnSampler", ""},
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
			if oe := new(OptionError); !errors.As(err, &oe) || oe.Field != tc.field {
				t.Errorf("%q %q: %v, want an error naming %s", tc.name, tc.arg, err, tc.field)
			}
			continue
		}
		if err != nil || !strings.HasPrefix(s.Description(), tc.want) {
			t.Errorf("%q %q: %v %v, want %s", tc.name, tc.arg, s, err, tc.want)
		}
	}
}

// TestHTTPExporter: with http/protobuf, spans go to the endpoint's
// /v1/traces as OTLP protobuf, with the service named sluice.
func TestHTTPExporter(t *testing.T) {
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
	if tp, err := New(ctx, Options{Exporter: "none"}); tp != nil || err != nil {
		t.Fatalf("none: %v %v", tp, err)
	}
	tp, err := New(ctx, Options{Exporter: "otlp", Protocol: "http/protobuf", Endpoint: srv.URL})
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
