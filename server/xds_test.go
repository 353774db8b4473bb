package server

import (
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"

	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/internal/testutil/xdstest"
	"github.com/sluice-rl/sluice/limits/rls"
	"github.com/sluice-rl/sluice/resources"
)

const xdsTestNode = "envoy-ratelimit"

// xdsEdge is the rules of a version: domain edge, remote_address limited
// to n a minute (no unit when bad: a version the server must refuse).
func xdsEdge(n uint32, bad bool) *rlsconfv3.RateLimitConfig {
	unit := rlsconfv3.RateLimitUnit_MINUTE
	if bad {
		unit = rlsconfv3.RateLimitUnit_UNKNOWN
	}
	return &rlsconfv3.RateLimitConfig{Name: "default/eg/http", Domain: "edge", Descriptors: []*rlsconfv3.RateLimitDescriptor{{
		Key: "remote_address", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: unit, RequestsPerUnit: n}}}}
}

// TestEnvoyRulesOverXds: a server whose Envoy rules come from an xDS
// control plane (over mTLS, as Envoy Gateway serves them) is not ready,
// and limits nothing, before the first version; then ShouldRateLimit
// decides by the rules served; a bad version is refused (NACK, counted)
// and the rules in force stay; a new version is served; and a reload of
// the resource repository leaves the rules from xDS alone.
func TestEnvoyRulesOverXds(t *testing.T) {
	certs := testutil.MakeCerts(t)
	cp := xdstest.StartMTLS(t, certs.ServerCert, certs.ServerKey, certs.CA)
	doc := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(doc, []byte("resources: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, _ := startServer(t, Config{Repository: Repository{Path: doc, EnvoyRateLimitXDS: EnvoyRateLimitXDS{
		ServerURL: cp.Addr(), NodeID: xdsTestNode, NodeMetadata: map[string]string{"cluster": "test"},
		TLS: TLS{CAFile: certs.CA, CertFile: certs.ClientCert, KeyFile: certs.ClientKey}, ServerName: "localhost",
		RetryInterval: 100 * time.Millisecond}}})
	c := rlsv3.NewRateLimitServiceClient(testutil.Dial(t, s.Addr()))
	decide := func() *rlsv3.RateLimitResponse_DescriptorStatus {
		t.Helper()
		resp, err := c.ShouldRateLimit(t.Context(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
			Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "192.0.2.9"}}}}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.Statuses[0]
	}

	// No version yet: not ready, and saying why.
	time.Sleep(300 * time.Millisecond)
	if ok, why := s.Ready(); ok || !strings.Contains(why, "xDS control plane at "+cp.Addr()) {
		t.Fatalf("Ready before the first version: %v %q", ok, why)
	}
	if code, _ := httpGet(t, "http://"+s.Addr()+"/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz before the first version: %d", code)
	}
	if st := decide(); st.Code != rlsv3.RateLimitResponse_OK || st.CurrentLimit != nil {
		t.Fatalf("limited before any rule: %v", st)
	}

	cp.Set(t, xdsTestNode, "1", xdsEdge(2, false))
	testutil.Eventually(t, 10*time.Second, "ready with version 1", func() bool { ok, _ := s.Ready(); return ok })
	if v, _ := testutil.MetricValue(t, s.Registry(), "sluice_envoy_xds_connected"); v != 1 {
		t.Errorf("sluice_envoy_xds_connected = %v with the rules received", v)
	}
	if ids, md := cp.NodeIDs(), cp.NodeMetadata("cluster"); len(ids) == 0 || ids[0] != xdsTestNode || md[0] != "test" {
		t.Errorf("the control plane saw node ids %q with metadata cluster %q, want %s and test", ids, md, xdsTestNode)
	}
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		if st := decide(); st.Code != want || st.GetCurrentLimit().GetRequestsPerUnit() != 2 {
			t.Fatalf("request %d: %v, want %v under a limit of 2 a minute", i+1, st, want)
		}
	}

	cp.Set(t, xdsTestNode, "2", xdsEdge(3, true))
	testutil.Eventually(t, 10*time.Second, "version 2 refused", func() bool { return len(cp.Nacks()) > 0 })
	if nack := cp.Nacks()[0]; !strings.Contains(nack, `RateLimitConfig "default/eg/http": descriptors[0].rate_limit.unit: missing`) {
		t.Errorf("NACK %q", nack)
	}
	if n, _ := testutil.MetricValue(t, s.Registry(), "sluice_server_config_reloads_total", "result", "failed"); n < 1 {
		t.Errorf("the refused version was not counted: %v", n)
	}
	if st := decide(); st.GetCurrentLimit().GetRequestsPerUnit() != 2 {
		t.Fatalf("after the refused version: %v, want the limit of 2 still", st)
	}

	cp.Set(t, xdsTestNode, "3", xdsEdge(5, false))
	testutil.Eventually(t, 10*time.Second, "version 3 served", func() bool { return decide().GetCurrentLimit().GetRequestsPerUnit() == 5 })

	okBefore, _ := testutil.MetricValue(t, s.Registry(), "sluice_server_config_reloads_total", "result", "ok")
	if err := os.WriteFile(doc, []byte("resources: []\n# changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s.Reload()
	testutil.Eventually(t, 10*time.Second, "the document reloaded", func() bool {
		n, _ := testutil.MetricValue(t, s.Registry(), "sluice_server_config_reloads_total", "result", "ok")
		return n > okBefore
	})
	if st := decide(); st.GetCurrentLimit().GetRequestsPerUnit() != 5 {
		t.Errorf("after the document's reload: %v, want the limit of 5 from xDS", st)
	}
}

// TestEnvoyRulesOverXdsForceStart: with ForceStart, a server whose
// control plane is not there is ready (and limits nothing).
func TestEnvoyRulesOverXdsForceStart(t *testing.T) {
	port, err := testutil.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	s, _ := startServer(t, Config{Repository: Repository{EnvoyRateLimitXDS: EnvoyRateLimitXDS{
		ServerURL: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), RetryInterval: 100 * time.Millisecond, ForceStart: true}}})
	testutil.Eventually(t, 10*time.Second, "ready", func() bool { ok, _ := s.Ready(); return ok })
	c := rlsv3.NewRateLimitServiceClient(testutil.Dial(t, s.Addr()))
	resp, err := c.ShouldRateLimit(t.Context(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "192.0.2.9"}}}}})
	if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Errorf("without rules: %v, %v; want OK", resp, err)
	}
}

// TestEnvoyRulesOverXdsRefused: New refuses the control plane with
// another source of Envoy's rules, and fields that make no sense,
// naming the fields.
func TestEnvoyRulesOverXdsRefused(t *testing.T) {
	certs := testutil.MakeCerts(t)
	x := EnvoyRateLimitXDS{ServerURL: "127.0.0.1:1"}
	section, err := rls.NewConfig(&rls.Domain{Name: "edge"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		repo Repository
		want string
	}{
		{"with the files", Repository{EnvoyRateLimitPath: "../limits/limitsyaml/testdata/envoy", EnvoyRateLimitXDS: x},
			"Repository.EnvoyRateLimitXDS: envoy rate limit rules configured twice: by Repository.EnvoyRateLimitXDS (127.0.0.1:1) and by Repository.EnvoyRateLimitPath"},
		{"with a section", Repository{Fixed: resources.Compose(nil, nil, nil, section), EnvoyRateLimitXDS: x},
			"Repository.EnvoyRateLimitXDS: envoy rate limit rules configured twice: in the envoy_ratelimit section of Repository.Fixed"},
		{"no server", Repository{EnvoyRateLimitXDS: EnvoyRateLimitXDS{NodeID: "n"}}, "Repository.EnvoyRateLimitXDS.ServerURL: empty"},
		{"server name without TLS", Repository{EnvoyRateLimitXDS: EnvoyRateLimitXDS{ServerURL: "127.0.0.1:1", ServerName: "cp"}},
			"Repository.EnvoyRateLimitXDS.ServerName: set without Repository.EnvoyRateLimitXDS.TLS"},
		{"a missing file", Repository{EnvoyRateLimitXDS: EnvoyRateLimitXDS{ServerURL: "127.0.0.1:1", TLS: TLS{CAFile: certs.CA + ".missing"}}},
			"Repository.EnvoyRateLimitXDS.TLS: "},
		{"negative retry", Repository{EnvoyRateLimitXDS: EnvoyRateLimitXDS{ServerURL: "127.0.0.1:1", RetryInterval: -time.Second}},
			"Repository.EnvoyRateLimitXDS.RetryInterval: "},
		{"reserved header", Repository{EnvoyRateLimitXDS: EnvoyRateLimitXDS{ServerURL: "127.0.0.1:1", Headers: map[string]string{"grpc-status": "0"}}},
			"Repository.EnvoyRateLimitXDS.Headers: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(t.Context(), Config{Repository: tc.repo, Listen: Listen{Address: "127.0.0.1:0"}})
			if err == nil {
				s.close()
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q\nlacks %q", err, tc.want)
			}
		})
	}
}
