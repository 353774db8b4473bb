package adminhttp_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-rl/sluice/admin"
	"github.com/sluice-rl/sluice/admin/adminclient"
	"github.com/sluice-rl/sluice/admin/adminhttp"
	"github.com/sluice-rl/sluice/internal/testutil/admintest"
	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/server"
)

const resetDoc = `# the reset API's tests
limits:
  resources:
    api:
      domains:
        small: {size: 2, fill_rate: 0.001, max_tokens_per_request: 2}
    tenants:
      algorithm: burst_tiers
      tiers: [{limit: 1, window: 1h, active: 1h}]
envoy_ratelimit:
  - domain: edge
    descriptors:
      - key: route
        rate_limit: {unit: hour, requests_per_unit: 1}
`

// startResetServer runs a server (server.New and Run, in this process)
// over resetDoc with admin options a, its log in lines.
func startResetServer(t *testing.T, a server.Admin) (*server.Server, string, *admintest.AuditLog) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(resetDoc), 0o644); err != nil {
		t.Fatal(err)
	}
	lines := &admintest.AuditLog{}
	s, err := server.New(context.Background(), server.Config{ID: "reset-test", Listen: server.Listen{Address: "127.0.0.1:0"},
		Repository: server.Repository{Path: path}, Admin: a, Runtime: server.Runtime{Logger: slog.New(slog.NewJSONHandler(lines, nil))}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return s, "http://" + s.Addr(), lines
}

// POST /admin/v1/reset restores a drained bucket (a limits bucket, the
// same as a quota service bucket, a burst-tier domain, an Envoy rule's
// counter): a write, refused without credentials (and with a bad token)
// with nothing reset, audited with the user, the way they
// authenticated and what was reset.
func TestResetAPI(t *testing.T) {
	tokens := admintest.TokenFile(t, "alice "+admintest.Token+"\n")
	s, base, lines := startResetServer(t, server.Admin{TokenFile: tokens})
	ctx := context.Background()
	eng := s.Limits().Engine()
	allow := func(resource, domain string) limits.Status {
		return eng.Allow(ctx, time.Now(), limits.Request{Resource: resource, Domain: domain, HasMaxWait: true}).Status
	}
	drainSmall := func() {
		t.Helper()
		for allow("api", "small") == limits.StatusOK {
		}
	}
	drainSmall()
	body := `{"limits": {"resource": "api", "domain": "small"}}`
	json := map[string]string{"Content-Type": "application/json"}
	var eb adminhttp.ErrorBody
	if code := call(t, nil, http.MethodPost, base+adminhttp.ResetPath, body, json, &eb); code != http.StatusUnauthorized || eb.Code != "unauthorized" {
		t.Fatalf("no credentials: %d %+v", code, eb)
	}
	bad := map[string]string{"Content-Type": "application/json", "Authorization": "Bearer 0123456789abcdef-mallory"}
	if code := call(t, nil, http.MethodPost, base+adminhttp.ResetPath, body, bad, &eb); code != http.StatusUnauthorized {
		t.Fatalf("a bad token: %d %+v", code, eb)
	}
	if got := allow("api", "small"); got != limits.StatusTimeout {
		t.Fatalf("after refused resets: %v, want TIMEOUT (nothing reset)", got)
	}
	if got := lines.Lines(t, "counters reset"); len(got) != 0 {
		t.Fatalf("refused resets audited: %v", got)
	}

	auth := map[string]string{"Content-Type": "application/json", "Authorization": "Bearer " + admintest.Token}
	var rb adminhttp.ResetBody
	if code := call(t, nil, http.MethodPost, base+adminhttp.ResetPath, body, auth, &rb); code != http.StatusOK || rb.Reset != 1 {
		t.Fatalf("reset: %d %+v", code, rb)
	}
	if got := allow("api", "small"); got != limits.StatusOK {
		t.Fatalf("after the reset: %v", got)
	}
	audit := lines.Lines(t, "counters reset")
	if len(audit) != 1 {
		t.Fatalf("%d audit lines, want 1", len(audit))
	}
	for k, want := range map[string]any{"level": "INFO", "user": "alice", "auth": "token", "api": "limits", "resource": "api", "domain": "small", "counters": 1.0} {
		if audit[0][k] != want {
			t.Errorf("audit line %v: %s = %v, want %v", audit[0], k, audit[0][k], want)
		}
	}
	if _, err := time.Parse(time.RFC3339Nano, audit[0]["time"].(string)); err != nil {
		t.Errorf("audit line's time: %v", err)
	}

	// The client: the quota service's bucket (the same one), a burst-tier
	// domain and an Envoy rule's counter.
	c := adminclient.New(base, adminclient.WithToken(admintest.Token))
	drainSmall()
	if n, err := c.Reset(ctx, adminhttp.ResetRequest{Quota: &adminhttp.QuotaReset{Namespace: "api", Bucket: "small"}}); err != nil || n != 1 {
		t.Fatalf("quota reset: %d, %v", n, err)
	}
	if got := allow("api", "small"); got != limits.StatusOK {
		t.Fatalf("after the quota reset: %v", got)
	}
	if allow("tenants", "acme") != limits.StatusOK || allow("tenants", "acme") != limits.StatusTimeout {
		t.Fatal("tenants/acme: want one hit granted, then refused by its tier")
	}
	if n, err := c.Reset(ctx, adminhttp.ResetRequest{Limits: &adminhttp.LimitsReset{Resource: "tenants", Domain: "acme"}}); err != nil || n != 1 {
		t.Fatalf("burst-tier reset: %d, %v", n, err)
	}
	if got := allow("tenants", "acme"); got != limits.StatusOK {
		t.Fatalf("tenants/acme after the reset: %v", got)
	}
	envoy := func() rlsv3.RateLimitResponse_Code {
		t.Helper()
		resp, err := s.Envoy().ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "route", Value: "/login"}}}}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.OverallCode
	}
	if envoy() != rlsv3.RateLimitResponse_OK || envoy() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatal("route /login: want one granted, then over its limit")
	}
	er := adminhttp.ResetRequest{Envoy: &adminhttp.EnvoyReset{Domain: "edge", Descriptor: []adminhttp.EnvoyEntry{{Key: "route", Value: "/login"}}}}
	if n, err := c.Reset(ctx, er); err != nil || n != 1 {
		t.Fatalf("envoy reset: %d, %v", n, err)
	}
	if got := envoy(); got != rlsv3.RateLimitResponse_OK {
		t.Fatalf("route /login after the reset: %v", got)
	}
	er.Envoy.Descriptor[0].Value = "/other"
	if n, err := c.Reset(ctx, er); err != nil || n != 0 {
		t.Fatalf("a reset of a full counter: %d, %v; want 0 (no error)", n, err)
	}
	audit = lines.Lines(t, "counters reset")
	if len(audit) != 5 || audit[1]["api"] != "quota" || audit[1]["namespace"] != "api" || audit[1]["bucket"] != "small" ||
		audit[3]["api"] != "envoy" || audit[3]["domain"] != "edge" || audit[3]["descriptor"] != "route=/login" || audit[3]["counters"] != 1.0 ||
		audit[4]["descriptor"] != "route=/other" || audit[4]["counters"] != 0.0 {
		t.Errorf("audit lines: %v", audit)
	}

	// Through the client, a 404 wraps admin.ErrNotFound, a 400 is an
	// HTTPError naming the field.
	if _, err := c.Reset(ctx, adminhttp.ResetRequest{Limits: &adminhttp.LimitsReset{Resource: "nope", Domain: "x"}}); !errors.Is(err, admin.ErrNotFound) || !strings.Contains(err.Error(), "limits.resource") {
		t.Errorf("an unknown resource: %v", err)
	}
	var he *adminclient.HTTPError
	if _, err := c.Reset(ctx, adminhttp.ResetRequest{Limits: &adminhttp.LimitsReset{Resource: "api"}}); !errors.As(err, &he) || he.Status != 400 || he.Body.Error != "limits.domain: empty" {
		t.Errorf("an empty domain: %v", err)
	}
}

// A reset's bad input answers 400 naming the field, and one naming
// nothing that exists 404 (code not_found); neither resets or audits
// anything.
func TestResetAPIErrors(t *testing.T) {
	_, base, lines := startResetServer(t, server.Admin{Insecure: true})
	for _, tc := range []struct {
		name, method, body string
		status             int
		code, error        string // the ErrorBody's code and the start of its error
	}{
		{"no body", "POST", ``, 400, "bad_request", "body: "},
		{"nothing", "POST", `{}`, 400, "bad_request", "body: want exactly one of envoy, limits and quota; got 0"},
		{"two", "POST", `{"limits": {"resource": "api", "domain": "small"}, "quota": {"namespace": "api", "bucket": "small"}}`, 400, "bad_request", "body: want exactly one"},
		{"an unknown field", "POST", `{"limits": {"resource": "api", "domain": "small", "tokens": 1}}`, 400, "bad_request", "body: "},
		{"two values", "POST", `{"limits": {"resource": "api", "domain": "small"}} {}`, 400, "bad_request", "body: more than one JSON value"},
		{"empty resource", "POST", `{"limits": {"domain": "small"}}`, 400, "bad_request", "limits.resource: empty"},
		{"a bad domain", "POST", `{"limits": {"resource": "api", "domain": "a b"}}`, 400, "bad_request", "limits.domain: "},
		{"empty bucket", "POST", `{"quota": {"namespace": "api", "bucket": ""}}`, 400, "bad_request", "quota.bucket: empty"},
		{"no descriptor", "POST", `{"envoy": {"domain": "edge"}}`, 400, "bad_request", "envoy.descriptor: "},
		{"an empty key", "POST", `{"envoy": {"domain": "edge", "descriptor": [{"key": "route", "value": "a"}, {"value": "b"}]}}`, 400, "bad_request", "envoy.descriptor[1].key: empty"},
		{"an unknown resource", "POST", `{"limits": {"resource": "nope", "domain": "x"}}`, 404, "not_found", `limits.resource: "nope" is not configured`},
		{"an unknown namespace", "POST", `{"quota": {"namespace": "nope", "bucket": "x"}}`, 404, "not_found", `quota.namespace: "nope" is not configured`},
		{"no bucket for the domain", "POST", `{"limits": {"resource": "api", "domain": "other"}}`, 404, "not_found", `limits.domain: resource "api" has no bucket for "other"`},
		{"no such rule", "POST", `{"envoy": {"domain": "edge", "descriptor": [{"key": "colour", "value": "red"}]}}`, 404, "not_found", `envoy.descriptor: descriptor "colour=red" of domain "edge": no rule with a limit`},
		{"no such domain", "POST", `{"envoy": {"domain": "nope", "descriptor": [{"key": "route", "value": "a"}]}}`, 404, "not_found", "envoy.descriptor: "},
		{"GET", "GET", ``, 405, "method_not_allowed", "method not allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var eb adminhttp.ErrorBody
			code := call(t, nil, tc.method, base+adminhttp.ResetPath, tc.body, map[string]string{"Content-Type": "application/json"}, &eb)
			if code != tc.status || eb.Code != tc.code || !strings.HasPrefix(eb.Error, tc.error) {
				t.Fatalf("%d %+v; want %d %s %q…", code, eb, tc.status, tc.code, tc.error)
			}
		})
	}
	var eb adminhttp.ErrorBody
	if code := call(t, nil, "POST", base+adminhttp.ResetPath, `{"limits": {"resource": "api", "domain": "small"}}`, map[string]string{"Content-Type": "application/yaml"}, &eb); code != 400 || !strings.HasPrefix(eb.Error, "Content-Type: ") {
		t.Errorf("a YAML body: %d %+v", code, eb)
	}
	if got := lines.Lines(t, "counters reset"); len(got) != 0 {
		t.Errorf("refused resets audited: %v", got)
	}
}

// With no way of authenticating writers configured, a reset is refused
// exactly as a change of the configuration is: 403 and the same message.
func TestResetAPIWritesDisabled(t *testing.T) {
	s, base, lines := startResetServer(t, server.Admin{})
	eng := s.Limits().Engine()
	for eng.Allow(context.Background(), time.Now(), limits.Request{Resource: "api", Domain: "small", HasMaxWait: true}).Status == limits.StatusOK {
	}
	var reset, put adminhttp.ErrorBody
	code := call(t, nil, "POST", base+adminhttp.ResetPath, `{"limits": {"resource": "api", "domain": "small"}}`, map[string]string{"Content-Type": "application/json", "X-Forwarded-User": "eve"}, &reset)
	putCode := call(t, nil, "PUT", base+adminhttp.Prefix+"config", resetDoc, map[string]string{"Content-Type": "application/yaml"}, &put)
	if code != http.StatusForbidden || putCode != http.StatusForbidden || reset.Error != put.Error || reset.Code != put.Code || !strings.Contains(reset.Error, "the admin write path is disabled") {
		t.Fatalf("reset: %d %+v; a configuration write: %d %+v; want the same 403", code, reset, putCode, put)
	}
	if d := eng.Allow(context.Background(), time.Now(), limits.Request{Resource: "api", Domain: "small", HasMaxWait: true}); d.Status != limits.StatusTimeout {
		t.Fatalf("after a refused reset: %v", d.Status)
	}
	if got := lines.Lines(t, "counters reset"); len(got) != 0 {
		t.Errorf("a refused reset audited: %v", got)
	}
}
