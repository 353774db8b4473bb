package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-rl/sluice/admin/adminhttp"
	v1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/internal/testutil"
)

const resetCLIConfig = `# sluice admin reset's test
limits:
  resources:
    api:
      domains:
        small: {size: 2, fill_rate: 0.001, wait_timeout: 0s}
envoy_ratelimit:
  - domain: edge
    descriptors:
      - key: route
        rate_limit: {unit: hour, requests_per_unit: 1}
`

// sluice admin reset against a `sluice server` child process: a limits
// bucket drained by requests, then reset by the CLI (refused without a
// token, nothing reset), is full again for the next request; so is an
// Envoy rule's counter, and a quota service bucket (the same bucket);
// an unknown resource and flags naming nothing fail, saying why.
func TestAdminCLIReset(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("alice 0123456789abcdef-alice\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr, _, _ := startServerWith(t, resetCLIConfig, "--admin-token-file", tokens)
	srv := "http://" + addr
	conn := testutil.Dial(t, addr)
	lc := v1.NewLimitsClient(conn)
	allow := func() v1.AllowResponse_Status {
		t.Helper()
		resp, err := lc.Allow(t.Context(), &v1.AllowRequest{Resource: "api", Domain: "small"})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetStatus()
	}
	for i := range 2 {
		if got := allow(); got != v1.AllowResponse_OK {
			t.Fatalf("token %d: %v", i, got)
		}
	}
	if got := allow(); got == v1.AllowResponse_OK {
		t.Fatal("a drained bucket granted a token")
	}

	if _, errs, ok := runAdmin(t, srv, "reset", "--resource", "api", "--domain", "small"); ok || !strings.Contains(errs, "authentication required") {
		t.Fatalf("a reset without a token: ok %v, %q", ok, errs)
	}
	if got := allow(); got == v1.AllowResponse_OK {
		t.Fatal("a refused reset reset the bucket")
	}
	out := mustAdmin(t, srv, "--token-file", tokens, "reset", "--resource", "api", "--domain", "small")
	if out != `reset limits resource "api" domain "small": 1 counter`+"\n" {
		t.Errorf("reset: %q", out)
	}
	if got := allow(); got != v1.AllowResponse_OK {
		t.Fatalf("after the reset: %v, want OK", got)
	}

	// An Envoy rule's counter.
	rc := rlsv3.NewRateLimitServiceClient(conn)
	ask := func() rlsv3.RateLimitResponse_Code {
		t.Helper()
		resp, err := rc.ShouldRateLimit(t.Context(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "route", Value: "/login"}}}}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.OverallCode
	}
	if ask() != rlsv3.RateLimitResponse_OK || ask() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatal("route /login: want one granted, then over its limit")
	}
	out = mustAdmin(t, srv, "--token-file", tokens, "reset", "--envoy-domain", "edge", "--descriptor", "route=/login")
	if out != `reset envoy domain "edge" descriptor "route=/login": 1 counter`+"\n" {
		t.Errorf("envoy reset: %q", out)
	}
	if got := ask(); got != rlsv3.RateLimitResponse_OK {
		t.Fatalf("route /login after the reset: %v", got)
	}

	// The quota service's bucket is the limits bucket: --json.
	out = mustAdmin(t, srv, "--token-file", tokens, "--json", "reset", "--namespace", "api", "--bucket", "small")
	var rb adminhttp.ResetBody
	if err := json.Unmarshal([]byte(out), &rb); err != nil || rb.Reset != 1 {
		t.Errorf("quota reset --json: %q (%v)", out, err)
	}
	if got := mustAdmin(t, srv, "--token-file", tokens, "reset", "--envoy-domain", "edge", "--descriptor", "route=/other"); !strings.HasSuffix(got, ": 0 counters (full already)\n") {
		t.Errorf("a full counter: %q", got)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--resource", "nope", "--domain", "x"}, `limits.resource: "nope" is not configured`},
		{[]string{"--envoy-domain", "edge", "--descriptor", "colour=red"}, `envoy.descriptor: descriptor "colour=red" of domain "edge": no rule with a limit`},
		{[]string{"--resource", "api"}, "--resource and --domain go together"},
		{[]string{"--resource", "api", "--domain", "small", "--namespace", "api", "--bucket", "small"}, "name one thing to reset"},
		{nil, "name one thing to reset"},
		{[]string{"--envoy-domain", "edge", "--descriptor", "route"}, "want KEY=VALUE"},
	} {
		_, errs, ok := runAdmin(t, srv, append([]string{"--token-file", tokens, "reset"}, tc.args...)...)
		if ok || !strings.Contains(errs, tc.want) {
			t.Errorf("reset %q: ok %v, stderr %q; want %q", tc.args, ok, errs, tc.want)
		}
	}
}
