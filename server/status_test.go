package server

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	pb "github.com/sluice-rl/sluice/api/doorman"
	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/limits/limitsyaml"
	"github.com/sluice-rl/sluice/limits/rls"
	"github.com/sluice-rl/sluice/resources"
	"github.com/sluice-rl/sluice/server/status"
)

func get(t *testing.T, h http.Handler, url string, header ...string) (int, string, http.Header) {
	t.Helper()
	req := httptest.NewRequest("GET", url, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	body, _ := io.ReadAll(rec.Result().Body)
	return rec.Code, string(body), rec.Result().Header
}

// newDoormanServer assembles a server with fixture.Doorman (not run: the
// tests call its services and handler).
func newDoormanServer(t *testing.T) *Server {
	t.Helper()
	return assemble(t, Config{ID: "test", Listen: Listen{Advertise: "127.0.0.1:1"}, Repository: Repository{Fixed: doormanRepo(t)}})
}

// getCap asks s's capacity service for wants of resource for client.
func getCap(t *testing.T, s *Server, client, resource string, wants float64) *pb.GetCapacityResponse {
	t.Helper()
	resp, err := s.Capacity().GetCapacity(context.Background(), capacityRequest(client, resource, wants))
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestStatusPages(t *testing.T) {
	s := newDoormanServer(t)
	getCap(t, s, "alice", "fair", 30)
	getCap(t, s, "bob", "fair", 90)
	getCap(t, s, "carol", "fixed/a", 3)
	getCap(t, s, "dave", "other", 7)
	s.Capacity().Sweep()
	h := s.Handler()

	code, _, hdr := get(t, h, "/")
	if code != http.StatusFound || hdr.Get("Location") != "/debug/status" {
		t.Fatalf("/ → %d %q", code, hdr.Get("Location"))
	}
	code, body, _ := get(t, h, "/debug/status?sort=sum_wants&desc=1", "Accept", "application/json")
	if code != 200 {
		t.Fatalf("status %d: %s", code, body)
	}
	var st status.ServerStatus
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range st.Resources {
		ids = append(ids, r.ID)
	}
	if got := strings.Join(ids, ","); got != "fair,other,fixed/a" || !st.IsMaster || st.Config == nil || len(st.Config.Templates) != 2 {
		t.Fatalf("resources sorted by Σ wants desc: %s; %+v", got, st)
	}
	if st.Resources[1].Capacity != nil {
		t.Fatalf("unmatched resource capacity %v, want null (unlimited)", *st.Resources[1].Capacity)
	}
	// Filter by prefix and by regex.
	_, body, _ = get(t, h, "/debug/status?format=json&prefix=f&regex=a$")
	st = status.ServerStatus{}
	_ = json.Unmarshal([]byte(body), &st)
	if len(st.Resources) != 1 || st.Resources[0].ID != "fixed/a" || st.Total != 3 {
		t.Fatalf("filtered: %+v", st.Resources)
	}
	if code, body, _ := get(t, h, "/debug/status?regex=("); code != 400 || !strings.Contains(body, "regex") {
		t.Fatalf("bad regex: %d %s", code, body)
	}
	// HTML.
	code, body, _ = get(t, h, "/debug/status?sort=id")
	if code != 200 || !strings.Contains(body, `<a href="/debug/status/resource?id=fair">fair</a>`) || !strings.Contains(body, "<b>master</b>") {
		t.Fatalf("HTML status page: %d\n%s", code, body)
	}
	// A resource page, leases sorted by has.
	_, body, _ = get(t, h, "/debug/status/resource?id=fair&sort=has&desc=1&format=json")
	var rp status.ResourcePage
	if err := json.Unmarshal([]byte(body), &rp); err != nil {
		t.Fatal(err)
	}
	if len(rp.Leases) != 2 || rp.Leases[0].Client != "bob" || rp.Leases[0].Has != 70 || rp.Resource.SumWants != 120 || len(rp.History) != 1 {
		t.Fatalf("resource page: %+v", rp)
	}
	code, body, _ = get(t, h, "/debug/status/resource?id=fair")
	if code != 200 || !strings.Contains(body, `id="chart"`) || !strings.Contains(body, "alice") {
		t.Fatalf("HTML resource page: %d\n%s", code, body)
	}
	if code, _, _ := get(t, h, "/debug/status/resource?id=nope"); code != 404 {
		t.Fatalf("unknown resource: %d", code)
	}
	if code, body, _ := get(t, h, "/debug/status/static/chart.js"); code != 200 || !strings.Contains(body, "polyline") {
		t.Fatalf("chart.js: %d", code)
	}
}

// TestHealthAndReadiness: /healthz and /readyz on the endpoint (the
// capacity service's own readiness, a configuration required and not
// loaded included, is capacity's TestReady).
func TestHealthAndReadiness(t *testing.T) {
	s := newDoormanServer(t)
	h := s.Handler()
	if code, _, _ := get(t, h, "/healthz"); code != 200 {
		t.Fatalf("healthz %d", code)
	}
	if code, _, _ := get(t, h, "/readyz"); code != 200 {
		t.Fatalf("readyz: %d", code)
	}
	s.Capacity().SetMastership(false, "")
	if code, body, _ := get(t, h, "/readyz"); code != 503 || !strings.Contains(body, "mastership") {
		t.Fatalf("readyz with mastership unknown: %d %s", code, body)
	}
	s.Capacity().SetMastership(false, "b:1")
	if code, _, _ := get(t, h, "/readyz"); code != 200 {
		t.Fatalf("readyz as a standby that knows its master: %d", code)
	}
	s.draining.Store(true) // what Run does when its context ends
	if code, body, _ := get(t, h, "/readyz"); code != 503 || !strings.Contains(body, "draining") {
		t.Fatalf("readyz draining: %d %s", code, body)
	}
}

// safe_capacity -1 (no limit) goes to clients as -1 and shows as "no
// limit" on the status page.
func TestSafeCapacityNoLimit(t *testing.T) {
	repo, err := resources.Parse([]byte(`
resources:
  - identifier_glob: open
    capacity: 10
    safe_capacity: -1
    algorithm: {kind: FAIR_SHARE, lease_length: 60, refresh_interval: 5, learning_mode_duration: 0}
`))
	if err != nil {
		t.Fatal(err)
	}
	s := assemble(t, Config{Listen: Listen{Advertise: "127.0.0.1:1"}, Repository: Repository{Fixed: repo}})
	if got := getCap(t, s, "a", "open", 5).GetResponse()[0].GetSafeCapacity(); got != -1 {
		t.Fatalf("safe capacity on the wire %v, want -1", got)
	}
	for _, url := range []string{"/debug/status", "/debug/status/resource?id=open"} {
		if code, body, _ := get(t, s.Handler(), url); code != 200 || !strings.Contains(body, "no limit") {
			t.Errorf("%s: %d, no \"no limit\" in the page", url, code)
		}
	}
}

// TestStatusEnvoyRules: the status page lists Envoy's rate limit rules in
// force, in JSON and in HTML.
func TestStatusEnvoyRules(t *testing.T) {
	s, _ := startServer(t, Config{Repository: Repository{EnvoyRateLimitPath: "../limits/limitsyaml/testdata/envoy", Fixed: doormanRepo(t)}})
	h := s.Handler()
	code, body, _ := get(t, h, "/debug/status?format=json")
	var st struct {
		EnvoyRules []struct{ Domain, Rule, Limit, Algorithm string } `json:"envoy_rules"`
	}
	if err := json.Unmarshal([]byte(body), &st); code != 200 || err != nil {
		t.Fatalf("%d %v", code, err)
	}
	found := false
	for _, r := range st.EnvoyRules {
		if r.Domain == "edge_proxy_per_ip" && r.Rule == "remote_address_50.0.0.5" && r.Limit == "0/second" && r.Algorithm == "token_bucket" {
			found = true
		}
	}
	if len(st.EnvoyRules) < 10 || !found {
		t.Fatalf("envoy rules %+v", st.EnvoyRules)
	}
	if _, body, _ := get(t, h, "/debug/status"); !strings.Contains(body, `id="envoy-rules"`) || !strings.Contains(body, "remote_address_50.0.0.5") {
		t.Fatal("the HTML status page lacks the rules")
	}
}

// TestStatusBucketsEnvoyCounters: the buckets page shows the counters of
// Envoy's rate limit service with the prefix, in JSON and in HTML.
func TestStatusBucketsEnvoyCounters(t *testing.T) {
	domains, err := limitsyaml.ParseEnvoyRateLimit("edge.yaml", []byte("domain: edge\ndescriptors: [{key: ip, rate_limit: {unit: minute, requests_per_unit: 10}}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	rules, err := rls.NewConfig(domains...)
	if err != nil {
		t.Fatal(err)
	}
	clock := testutil.NewClock(time.Unix(1_700_000_000, 0))
	s := assemble(t, Config{ID: "envoy", Runtime: Runtime{Now: clock.Now}, Repository: Repository{Fixed: resources.Compose(nil, nil, nil, rules)}})
	for _, ip := range []string{"10.0.0.1", "10.0.0.1", "10.0.0.1", "192.168.0.1"} {
		req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "ip", Value: ip}}}}}
		if _, err := s.Envoy().ShouldRateLimit(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
	h := s.Handler()
	code, body, _ := get(t, h, "/debug/status/buckets?prefix=edge/10.&format=json")
	var p status.BucketsPage
	if err := json.Unmarshal([]byte(body), &p); code != 200 || err != nil {
		t.Fatalf("%d %v: %s", code, err, body)
	}
	if p.Envoy == nil || p.Envoy.Total != 2 || p.Envoy.Matched != 1 || len(p.Envoy.Rows) != 1 || p.Envoy.Rows[0].Key != "edge/10.0.0.1" || p.Envoy.Rows[0].Remaining != 7 {
		t.Fatalf("envoy counters: %+v", p.Envoy)
	}
	_, html, _ := get(t, h, "/debug/status/buckets?prefix=edge/")
	for _, want := range []string{`id="envoy-counters"`, `<td class="id">edge/10.0.0.1</td>`, `<td class="id">edge/192.168.0.1</td>`, `<td class="n remaining">9</td>`, `2 of 2 counters`} {
		if !strings.Contains(html, want) {
			t.Errorf("the page has no %s", want)
		}
	}
}
