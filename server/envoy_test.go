package server

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-rl/sluice/internal/testutil"
)

// TestEnvoyRulesInSluiceConfig: Envoy's rate limit rules in the
// envoy_ratelimit section of --config, created and changed through the
// admin API like any other object, served by ShouldRateLimit once the
// server has applied the file; the section and --envoy-ratelimit-config
// together are refused.
func TestEnvoyRulesInSluiceConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte("resources: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, _ := startServer(t, Config{Admin: Admin{Insecure: true}, Repository: Repository{Path: path}})
	c := rlsv3.NewRateLimitServiceClient(testutil.Dial(t, s.Addr()))
	limit := func() uint32 {
		resp, err := c.ShouldRateLimit(t.Context(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
			Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.0.0.1"}}}}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.Statuses[0].GetCurrentLimit().GetRequestsPerUnit()
	}
	if limit() != 0 {
		t.Fatal("limited before any rule")
	}
	post := func(method, url, body string) {
		t.Helper()
		req, _ := http.NewRequest(method, "http://"+s.Addr()+"/admin/v1/"+url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/yaml")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			t.Fatalf("%s %s: %s", method, url, resp.Status)
		}
	}
	post("POST", "envoy_ratelimit", "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: second, requests_per_unit: 10}\n")
	testutil.Eventually(t, 30*time.Second, "the new domain served", func() bool { return limit() == 10 })
	post("PUT", "envoy_ratelimit/edge", "descriptors:\n  - key: remote_address\n    rate_limit: {unit: second, requests_per_unit: 20}\n")
	testutil.Eventually(t, 30*time.Second, "the changed domain served", func() bool { return limit() == 20 })
	if data, _ := os.ReadFile(path); !strings.Contains(string(data), "envoy_ratelimit:") {
		t.Fatalf("the file lacks the section:\n%s", data)
	}

	_, err := New(t.Context(), Config{Repository: Repository{Path: path, EnvoyRateLimitPath: "../limits/limitsyaml/testdata/envoy"}, Listen: Listen{Address: "127.0.0.1:0"}})
	if err == nil || !strings.Contains(err.Error(), "envoy rate limit rules configured twice") {
		t.Fatalf("both sources: %v", err)
	}
}
