package main

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	qs "github.com/sluice-rl/sluice/api/quotaservice"
	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/limits/limitsyaml"
)

// qsFileDoc is a quota service deployment's own file.
const qsFileDoc = `# the payments team's limits
global_default_bucket: {size: 100, fill_rate: 50}
namespaces:
  payments: # card payments
    buckets:
      charge: {size: 10, fill_rate: 5} # per second, per merchant
`

// docs/admin.md, "The quota service's admin API": on a server started with only
// --quotaservice-config, quotaservice-cli's REST calls add, show, update
// and remove namespaces and buckets in that file, in Square's format
// (comments kept, versions, history, a stale version's 409); each change
// is served at once (read-your-writes), and survives a restart. The
// server does not warn that its limits are off (NO_ALGORITHM).
func TestQuotaServiceFileAdmin(t *testing.T) {
	path := filepath.Join(t.TempDir(), "quotaservice.yaml")
	if err := os.WriteFile(path, []byte(qsFileDoc), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"server", "--quotaservice-config", path, "--admin-insecure"}
	p := startAdminProc(t, "qs", args...)
	do := func(method, url, body, version string) (int, string, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), method, "http://"+p.addr+url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Forwarded-User", "qs-admin")
		if version != "" {
			req.Header.Set("Version", version)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.TrimSpace(string(b)), resp.Header.Get("Version")
	}
	mustDo := func(method, url, body, version string) string {
		t.Helper()
		code, b, _ := do(method, url, body, version)
		if code != 200 {
			t.Fatalf("%s %s: %d %s", method, url, code, b)
		}
		return b
	}
	c := qs.NewQuotaServiceClient(testutil.Dial(t, p.addr))
	allow := func(ns, bucket string) qs.AllowResponse_Status {
		t.Helper()
		r, err := c.Allow(t.Context(), &qs.AllowRequest{Namespace: ns, BucketName: bucket, TokensRequested: 1, MaxWaitTimeOverride: true})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetStatus()
	}
	testutil.Eventually(t, 30*time.Second, "the server answers /api", func() bool { code, _, _ := do("GET", "/api", "", ""); return code == 200 })

	// show; add a namespace; add a bucket; update it; remove the first.
	if b := mustDo("GET", "/api/payments/charge", "", ""); !strings.Contains(b, `"size":10`) {
		t.Fatalf("show payments/charge: %s", b)
	}
	mustDo("POST", "/api/search", `{"dynamic_bucket_template": {"size": 2, "fill_rate": 1}, "max_dynamic_buckets": 10}`, "1")
	if got := allow("search", "alice"); got != qs.AllowResponse_OK {
		t.Fatalf("Allow on the namespace just added: %v", got)
	}
	mustDo("POST", "/api/payments/refund", `{"size": 1, "fill_rate": 1, "wait_timeout_millis": 250}`, "2")
	if got := allow("payments", "refund"); got != qs.AllowResponse_OK {
		t.Fatalf("Allow on the bucket just added: %v", got)
	}
	if got := allow("payments", "refund"); got != qs.AllowResponse_REJECTED_TIMEOUT {
		t.Fatalf("second Allow on a bucket of 1 token, no wait: %v", got)
	}
	mustDo("PUT", "/api/payments/refund", `{"size": 500, "fill_rate": 100}`, "3")
	if got := allow("payments", "refund"); got != qs.AllowResponse_OK {
		t.Fatalf("Allow on the bucket just enlarged: %v", got)
	}
	if code, b, v := do("DELETE", "/api/payments/charge", "", "3"); code != http.StatusConflict || v != "4" {
		t.Fatalf("a stale remove: %d %s, Version %q; want 409 at version 4", code, b, v)
	}
	mustDo("DELETE", "/api/payments/charge", "", "4")
	// The bucket is gone: its namespace has no default, so the global
	// default answers (quotaservice-design.md, "Buckets"): 100 tokens,
	// where charge had 10.
	for i := range 20 {
		if got := allow("payments", "charge"); got != qs.AllowResponse_OK {
			t.Fatalf("Allow %d on the bucket just removed (the global default's): %v", i, got)
		}
	}
	// An /admin/v1 change the format cannot say is refused, naming why.
	if code, b, _ := do("PUT", "/admin/v1/limits/resources/search/template", `{"size": 2, "fill_rate": 0.5}`, ""); code != 400 || !strings.Contains(b, "cannot say") {
		t.Fatalf("a fractional fill rate: %d %s", code, b)
	}

	// The file: Square's format, comments kept, the version and user of
	// the last change; the quota service's parser reads it.
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	file := string(data)
	for _, want := range []string{"# the payments team's limits", "# card payments", "namespaces:", "dynamic_bucket_template:", "refund: {size: 500, fill_rate: 100}", "version: 5", "user: qs-admin"} {
		if !strings.Contains(file, want) {
			t.Errorf("the file lacks %q:\n%s", want, file)
		}
	}
	if strings.Contains(file, "charge") || strings.Contains(file, "limits:") {
		t.Errorf("the file still has the removed bucket, or is in Sluice's format:\n%s", file)
	}
	if _, err := limitsyaml.ParseQuotaService(data); err != nil {
		t.Fatalf("the file does not read as the quota service's: %v\n%s", err, file)
	}
	if b := mustDo("GET", "/api/configs", "", ""); strings.Count(b, `"version"`) != 5 {
		t.Errorf("history: want 5 versions: %s", b)
	}
	t.Logf("the file after the changes:\n%s", file)
	lines := p.logged()
	if len(lines) == 0 {
		t.Fatal("no log lines captured")
	}
	for _, l := range lines {
		if strings.Contains(l, "NO_ALGORITHM") {
			t.Errorf("a server with only --quotaservice-config warns: %s", l)
		}
	}

	// A restart serves the changes, from the file.
	p.stop(t)
	p = startAdminProc(t, "qs2", args...)
	c = qs.NewQuotaServiceClient(testutil.Dial(t, p.addr))
	testutil.Eventually(t, 30*time.Second, "the restarted server answers", func() bool { code, _, _ := do("GET", "/api", "", ""); return code == 200 })
	if got := allow("search", "bob"); got != qs.AllowResponse_OK {
		t.Errorf("after the restart, Allow on the added namespace: %v", got)
	}
	if b := mustDo("GET", "/api/payments/refund", "", ""); !strings.Contains(b, `"size":500`) {
		t.Errorf("after the restart, the updated bucket: %s", b)
	}
	if code, _, v := do("GET", "/api/payments/charge", "", ""); code != 404 || v != "5" {
		t.Errorf("after the restart, the removed bucket: %d at version %q", code, v)
	}
}
