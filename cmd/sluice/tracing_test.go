package main

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"syscall"
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
// the service name they give, continuing a gRPC caller's traceparent,
// sampled as OTEL_TRACES_SAMPLER says (read by the SDK itself: under
// parentbased_always_off a request without a traceparent makes no
// span); a bad --otel-traces-sampler, as SLUICE_OTEL_TRACES_SAMPLER, is
// refused naming the flag, as is its ratio without it.
func TestServerTracingFromEnv(t *testing.T) {
	recv := otlptest.Start(t)
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", recv.Endpoint)
	t.Setenv("OTEL_SERVICE_NAME", "sluice-edge")
	t.Setenv("OTEL_TRACES_SAMPLER", "parentbased_always_off")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50") // ms: export soon
	addr, srv, _ := startServerWith(t, "limits:\n  resources:\n    api: {default: {size: 10, fill_rate: 1}}\n")
	c := v1.NewLimitsClient(testutil.Dial(t, addr))
	if _, err := c.Allow(t.Context(), &v1.AllowRequest{Resource: "api", Domain: "untraced"}); err != nil {
		t.Fatal(err)
	}
	caller := otlptest.NewCaller(1)
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
	// Stopping flushes every span the server kept: the untraced request's
	// would be among them.
	_ = srv.Process.Signal(syscall.SIGTERM)
	_ = srv.Wait()
	spans, res := recv.Spans()
	for _, s := range spans {
		if !bytes.Equal(s.GetTraceId(), caller.TraceID) {
			t.Errorf("span %s of trace %x, want only the caller's (OTEL_TRACES_SAMPLER=parentbased_always_off)", s.GetName(), s.GetTraceId())
		}
	}
	if res[0]["service.name"] != "sluice-edge" {
		t.Errorf("resource %v, want service.name from OTEL_SERVICE_NAME", res[0])
	}

	for _, tc := range []struct{ env, flag, want string }{
		{"SLUICE_OTEL_TRACES_SAMPLER=sometimes", "", "--otel-traces-sampler: \"sometimes\""},
		{"", "--otel-traces-sampler-arg=0.5", "--otel-traces-sampler-arg: \"0.5\" without --otel-traces-sampler"},
	} {
		bad := exec.Command(binary, "server", "--listen", "127.0.0.1:0")
		if tc.flag != "" {
			bad.Args = append(bad.Args, tc.flag)
		}
		bad.Env = append(os.Environ(), tc.env)
		if out, err := bad.CombinedOutput(); err == nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("%s %s: %v %s, want an error saying %s", tc.env, tc.flag, err, out, tc.want)
		}
	}
}

// TestOtelFlagsFromEnv: an --otel-* flag on the command line wins over
// SLUICE_OTEL_*, which wins over the standard OTEL_* variable (the
// signal's own before the generic one) for the exporter and its
// protocol; the sampler's variables are left to the SDK (its flags stay
// empty unless given); OTEL_SDK_DISABLED=true turns traces off unless a
// flag says otherwise; with nothing set, tracing is off.
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
		"OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG", "OTEL_SDK_DISABLED", "SLUICE_OTEL_TRACES_SAMPLER",
		"SLUICE_OTEL_EXPORTER_OTLP_PROTOCOL"} {
		t.Setenv(v, "")
		os.Unsetenv(v)
	}
	if got := parse(); got.Exporter != "none" || got.Protocol != "grpc" || got.Sampler != "" || got.SamplerArg != "" {
		t.Fatalf("defaults: %+v, want off", got)
	}
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_TRACES_SAMPLER", "traceidratio")
	t.Setenv("OTEL_TRACES_SAMPLER_ARG", "0.1")
	if got := parse(); got.Exporter != "otlp" || got.Protocol != "http/protobuf" || got.Sampler != "" || got.SamplerArg != "" {
		t.Fatalf("from OTEL_*: %+v, want the sampler left to the SDK", got)
	}
	t.Setenv("SLUICE_OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	t.Setenv("SLUICE_OTEL_TRACES_SAMPLER", "always_on")
	if got := parse("--otel-traces-sampler-arg", "0.5"); got.Protocol != "grpc" || got.Sampler != "always_on" || got.SamplerArg != "0.5" {
		t.Fatalf("SLUICE_OTEL_* and a flag over OTEL_*: %+v", got)
	}
	if got := parse("--otel-exporter-otlp-protocol", "http/protobuf"); got.Protocol != "http/protobuf" {
		t.Fatalf("a flag over SLUICE_OTEL_*: %+v", got)
	}
	t.Setenv("OTEL_SDK_DISABLED", "true")
	if got := parse(); got.Exporter != "none" {
		t.Fatalf("OTEL_SDK_DISABLED=true: exporter %q, want none", got.Exporter)
	}
	if got := parse("--otel-traces-exporter", "otlp"); got.Exporter != "otlp" {
		t.Fatalf("a flag over OTEL_SDK_DISABLED: exporter %q", got.Exporter)
	}
}
