package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	v1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/internal/testutil/otlptest"
	"github.com/sluice-rl/sluice/server"
)

// TestServerTracingFromEnv: `sluice server` configured by the standard
// OpenTelemetry variables alone exports its spans to the collector they
// name (OTEL_EXPORTER_OTLP_ENDPOINT read by the exporter itself), under
// the service name they give, continuing a gRPC caller's traceparent; a
// bad OTEL_TRACES_SAMPLER is refused naming the variable.
func TestServerTracingFromEnv(t *testing.T) {
	recv := otlptest.Start(t)
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", recv.Endpoint)
	t.Setenv("OTEL_SERVICE_NAME", "sluice-edge")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50") // ms: export soon
	addr, _, _ := startServerWith(t, "limits:\n  resources:\n    api: {default: {size: 10, fill_rate: 1}}\n")
	caller := otlptest.NewCaller(1)
	c := v1.NewLimitsClient(testutil.Dial(t, addr))
	if r, err := c.Allow(caller.Context(t.Context()), &v1.AllowRequest{Resource: "api", Domain: "d"}); err != nil || r.GetStatus() != v1.AllowResponse_OK {
		t.Fatalf("Allow: %v %v", r, err)
	}
	var span *tracepb.Span
	testutil.Eventually(t, 30*time.Second, "the server span at the receiver", func() bool {
		span = otlptest.Find(recv.Trace(caller.TraceID), "sluice.v1.Limits/Allow", tracepb.Span_SPAN_KIND_SERVER, caller.SpanID)
		return span != nil
	})
	if a := otlptest.Attrs(span.GetAttributes()); a["sluice.resource"] != "api" || a["sluice.decision"] != "OK" {
		t.Errorf("attributes %v", a)
	}
	if _, res := recv.Spans(); res[0]["service.name"] != "sluice-edge" {
		t.Errorf("resource %v, want service.name from OTEL_SERVICE_NAME", res[0])
	}

	bad := exec.Command(binary, "server", "--listen", "127.0.0.1:0")
	bad.Env = append(os.Environ(), "OTEL_TRACES_SAMPLER=sometimes")
	if out, err := bad.CombinedOutput(); err == nil || !strings.Contains(string(out), "--otel-traces-sampler") || !strings.Contains(string(out), "sometimes") {
		t.Fatalf("bad OTEL_TRACES_SAMPLER: %v %s", err, out)
	}
}

// TestOtelFlagsFromEnv: an --otel-* flag on the command line wins over
// SLUICE_OTEL_*, which wins over the standard OTEL_* variable (the
// signal's own before the generic one); OTEL_SDK_DISABLED=true turns
// traces off unless a flag says otherwise; with nothing set, tracing is
// off.
func TestOtelFlagsFromEnv(t *testing.T) {
	parse := func(args ...string) server.Tracing {
		t.Helper()
		var sf serverFlags
		cmd := &cobra.Command{}
		sf.register(cmd.Flags())
		if err := cmd.Flags().Parse(args); err != nil {
			t.Fatal(err)
		}
		if err := flagsFromEnv(cmd); err != nil {
			t.Fatal(err)
		}
		if err := otelFromEnv(cmd); err != nil {
			t.Fatal(err)
		}
		return sf.cfg.Runtime.Tracing
	}
	for _, v := range []string{"OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
		"OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG", "OTEL_SDK_DISABLED", "SLUICE_OTEL_TRACES_SAMPLER"} {
		t.Setenv(v, "")
		os.Unsetenv(v)
	}
	if got := parse(); got.Exporter != "none" || got.Protocol != "grpc" || got.Sampler != "parentbased_always_on" {
		t.Fatalf("defaults: %+v, want off", got)
	}
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_TRACES_SAMPLER", "traceidratio")
	t.Setenv("OTEL_TRACES_SAMPLER_ARG", "0.1")
	if got := parse(); got.Exporter != "otlp" || got.Protocol != "http/protobuf" || got.Sampler != "traceidratio" || got.SamplerArg != "0.1" {
		t.Fatalf("from OTEL_*: %+v", got)
	}
	t.Setenv("SLUICE_OTEL_TRACES_SAMPLER", "always_on")
	if got := parse("--otel-traces-sampler-arg", "0.5"); got.Sampler != "always_on" || got.SamplerArg != "0.5" {
		t.Fatalf("SLUICE_OTEL_* and a flag over OTEL_*: %+v", got)
	}
	t.Setenv("OTEL_SDK_DISABLED", "true")
	if got := parse(); got.Exporter != "none" {
		t.Fatalf("OTEL_SDK_DISABLED=true: exporter %q, want none", got.Exporter)
	}
	if got := parse("--otel-traces-exporter", "otlp"); got.Exporter != "otlp" {
		t.Fatalf("a flag over OTEL_SDK_DISABLED: exporter %q", got.Exporter)
	}
}
