package main

import (
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	qs "github.com/sluice-rl/sluice/api/quotaservice"
	v1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/internal/testutil/redistest"
)

const limitsConfig = testConfig + `
limits:
  resources:
    api:
      domains:
        small: {size: 1, fill_rate: %s, wait_timeout: 0s}
`

// metricsPage returns the /metrics page of the server at addr ("" when it
// cannot be read).
func metricsPage(addr string) string {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// limitsConfigAt is limitsConfig with api/small's fill rate.
func limitsConfigAt(rate string) string { return strings.Replace(limitsConfig, "%s", rate, 1) }

// `sluice server --config` serves the file's limits section over gRPC and
// follows its changes: a new fill rate applies without a restart; a bad
// file keeps the last good limits.
func TestServerLimitsReload(t *testing.T) {
	addr, _, path := startServerWith(t, limitsConfigAt("0.001"))
	conn := testutil.Dial(t, addr)
	c := v1.NewLimitsClient(conn)
	allow := func() v1.AllowResponse_Status {
		t.Helper()
		resp, err := c.Allow(t.Context(), &v1.AllowRequest{Resource: "api", Domain: "small"})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetStatus()
	}
	if got := allow(); got != v1.AllowResponse_OK {
		t.Fatalf("first token: %v", got)
	}
	if got := allow(); got != v1.AllowResponse_REJECTED_TIMEOUT {
		t.Fatalf("second token at 0.001/s: %v", got)
	}
	if err := os.WriteFile(path, []byte(limitsConfigAt("1000")), 0o644); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "the new fill rate to apply", func() bool { return allow() == v1.AllowResponse_OK })
	if err := os.WriteFile(path, []byte(limitsConfigAt("0")), 0o644); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "the bad file to be read and refused", func() bool {
		return strings.Contains(metricsPage(addr), `sluice_server_config_reloads_total{result="failed"} 1`)
	})
	if got := allow(); got != v1.AllowResponse_OK {
		t.Fatalf("after a bad file: %v; the last good limits (1000/s) should still serve", got)
	}
}

// --quotaservice-config serves Square's configuration format as it is;
// limits given twice are refused at start.
func TestServerQuotaServiceConfig(t *testing.T) {
	qpath := filepath.Join(t.TempDir(), "quota.yaml")
	if err := os.WriteFile(qpath, []byte("namespaces:\n  logins:\n    dynamic_bucket_template: {size: 1, fill_rate: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	addr, _, _ := startServerWith(t, testConfig, "--quotaservice-config", qpath)
	conn := testutil.Dial(t, addr)
	c := qs.NewQuotaServiceClient(conn)
	for i, want := range []qs.AllowResponse_Status{qs.AllowResponse_OK, qs.AllowResponse_REJECTED_TIMEOUT} {
		resp, err := c.Allow(t.Context(), &qs.AllowRequest{Namespace: "logins", BucketName: "ann", MaxWaitTimeOverride: true})
		if err != nil || resp.GetStatus() != want {
			t.Fatalf("login %d: %v, %v; want %v", i+1, resp, err, want)
		}
	}
	path := filepath.Join(t.TempDir(), "both.yaml")
	if err := os.WriteFile(path, []byte(limitsConfigAt("1")), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(binary, "server", "--config", path, "--quotaservice-config", qpath, "--listen", "127.0.0.1:0").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "limits configured twice") {
		t.Fatalf("limits from both files: %v\n%s", err, out)
	}
}

// `sluice server --config examples/charon.yaml` serves its resources
// (docs/charon.md): burst tiers through Allow, sandboxes through sessions.
func TestServerCharonExample(t *testing.T) {
	data, err := os.ReadFile("../../examples/charon.yaml")
	if err != nil {
		t.Fatal(err)
	}
	addr, _, _ := startServerWith(t, string(data))
	conn := testutil.Dial(t, addr)
	c := v1.NewLimitsClient(conn)
	ctx := t.Context()
	r, err := c.Allow(ctx, &v1.AllowRequest{Resource: "cookbook/hard", Domain: "acme", Tokens: 5, MinTokens: 1})
	if err != nil || r.GetGranted() != 2 || !r.GetHardLimited() || r.GetHardLimit() != 2 {
		t.Fatalf("cookbook/hard ×5: %v, %v; want 2, hard-limited", r, err)
	}
	if r, err := c.Allow(ctx, &v1.AllowRequest{Resource: "open/anything", Domain: "acme", Tokens: 100}); err != nil || r.GetGranted() != 100 || !r.GetUnlimited() {
		t.Fatalf("open/anything: %v, %v; want everything, unlimited", r, err)
	}
	sess, err := c.OpenSession(ctx, &v1.OpenSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Reserve(ctx, &v1.ReserveRequest{SessionId: sess.GetSessionId(), Resource: "cookbook/sandboxes", Domain: "acme", Copies: 5, MinCopies: 1})
	if err != nil || res.GetGranted() != 4 || len(res.GetGroups()) != 1 || res.GetGroups()[0].GetName() != "trusted" {
		t.Fatalf("sandboxes for acme ×5: %v, %v; want 4 (its limit), in trusted", res, err)
	}
}

// Three `sluice server --redis` processes share one Redis: 200 concurrent
// requests spread over them on a bucket of 10 (refilling 1 token every
// 1000 s) grant exactly 10, as one server would; two more share a burst
// tier's access log.
func TestServersShareRedis(t *testing.T) {
	rs := redistest.StartT(t)
	cfg := testConfig + `
limits:
  resources:
    shared:
      domains:
        small: {size: 10, fill_rate: 0.001, wait_timeout: 0s, max_tokens_per_request: 1}
`
	var clients []v1.LimitsClient
	for range 3 {
		addr, _, _ := startServerWith(t, cfg, "--redis", "redis://"+rs.Addr+"/0")
		conn := testutil.Dial(t, addr)
		clients = append(clients, v1.NewLimitsClient(conn))
	}
	var granted, answered atomic.Int64
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := clients[i%3].Allow(t.Context(), &v1.AllowRequest{Resource: "shared", Domain: "small"})
			if err != nil {
				t.Error(err)
				return
			}
			answered.Add(1)
			granted.Add(r.GetGranted())
		}()
	}
	wg.Wait()
	if answered.Load() != 200 || granted.Load() != 10 {
		t.Fatalf("%d answers, %d tokens granted over 3 servers; want 200 answers and exactly the bucket's 10", answered.Load(), granted.Load())
	}

	// Burst tiers live in Redis too: two servers with Charon's resources
	// share a domain's access log (cookbook/batch: 5000 hits per 300 s
	// window, so the second server sees the first one's hits whatever the
	// machine's speed).
	charon, err := os.ReadFile("../../examples/charon.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var tiers []v1.LimitsClient
	for range 2 {
		addr, _, _ := startServerWith(t, string(charon), "--redis", "redis://"+rs.Addr+"/0")
		conn := testutil.Dial(t, addr)
		tiers = append(tiers, v1.NewLimitsClient(conn))
	}
	for i, want := range []int64{4000, 1000, 0} {
		r, err := tiers[i%2].Allow(t.Context(), &v1.AllowRequest{Resource: "cookbook/batch", Domain: "acme", Tokens: 4000, MinTokens: 1})
		if err != nil || r.GetGranted() != want {
			t.Fatalf("cookbook/batch ×4000 on server %d: %v, %v; want %d of the tier's 5000", i%2, r, err, want)
		}
	}
}
