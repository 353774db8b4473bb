package upstreamhttp_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/limits/limitsyaml"
	"github.com/sluice-rl/sluice/limits/rls"
	"github.com/sluice-rl/sluice/server/envoyrls"
	"github.com/sluice-rl/sluice/server/envoyrls/upstreamhttp"
)

// service is Envoy's rate limit service on rules (envoyproxy/ratelimit's
// YAML), counters in memory.
func service(t testing.TB, rules string) *envoyrls.Service {
	t.Helper()
	ds, err := limitsyaml.ParseEnvoyRateLimit("rules.yaml", []byte(rules))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := rls.NewConfig(ds...)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := envoyrls.New(envoyrls.Options{Store: rls.NewMemoryStore(), Logger: testutil.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	svc.SetConfig(cfg)
	return svc
}

const rules = `domain: api
descriptors:
  - key: client
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: path
    value: /login
    shadow_mode: true
    descriptors:
      - key: user
        rate_limit: {unit: second, requests_per_unit: 5}
  - key: open
    rate_limit: {unlimited: true}
`

// do serves one request on h and returns the status and body.
func do(t testing.TB, h http.Handler, method, body string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, "/", strings.NewReader(body)))
	b, _ := io.ReadAll(rec.Result().Body)
	return rec.Code, string(b)
}

// TestJSON: upstream's /json: 200, then 429 over the limit, with the
// response in protobuf's JSON; 400 for a body that is not a request or
// one the service refuses; 405 for GET; 413 beyond MaxJSONBody.
func TestJSON(t *testing.T) {
	h := upstreamhttp.JSON(service(t, rules))
	req := `{"domain": "api", "descriptors": [{"entries": [{"key": "client", "value": "a"}]}]}`
	for i, want := range []int{200, 429} {
		code, body := do(t, h, "POST", req)
		if code != want || !strings.Contains(body, `"overallCode"`) {
			t.Fatalf("request %d: %d %s, want %d", i+1, code, body, want)
		}
	}
	for _, tc := range []struct {
		method, body string
		want         int
	}{
		{"POST", `{"domain": 7}`, 400},
		{"POST", `not json`, 400},
		{"POST", `{"domain": ""}`, 400},
		{"GET", "", 405},
		{"POST", `{"domain": "` + strings.Repeat("x", upstreamhttp.MaxJSONBody) + `"}`, 413},
	} {
		if code, body := do(t, h, tc.method, tc.body); code != tc.want {
			t.Errorf("%s %.40q: %d %s, want %d", tc.method, tc.body, code, body, tc.want)
		}
	}
}

// TestHealthcheck: 200 "OK" while ready, 500 with the reason otherwise.
func TestHealthcheck(t *testing.T) {
	ready, why := true, ""
	h := upstreamhttp.Healthcheck(func() (bool, string) { return ready, why })
	if code, body := do(t, h, "GET", ""); code != 200 || body != "OK" {
		t.Fatalf("ready: %d %q", code, body)
	}
	ready, why = false, "draining"
	if code, body := do(t, h, "GET", ""); code != 500 || !strings.Contains(body, "draining") {
		t.Fatalf("not ready: %d %q", code, body)
	}
}

// TestRLConfig: the rules as upstream's /rlconfig prints them.
func TestRLConfig(t *testing.T) {
	svc := service(t, rules)
	_, body := do(t, upstreamhttp.RLConfig(svc.Config), "GET", "")
	want := "api.client: unit=HOUR requests_per_unit=1, shadow_mode: false\n" +
		"api.path_/login.user: unit=SECOND requests_per_unit=5, shadow_mode: false\n" +
		"api.open: unit=UNKNOWN requests_per_unit=0, shadow_mode: false\n"
	if body != want {
		t.Fatalf("/rlconfig:\n%s\nwant\n%s", body, want)
	}
	if _, body := do(t, upstreamhttp.RLConfig(func() *rls.Config { return nil }), "GET", ""); body != "" {
		t.Fatalf("no rules: %q", body)
	}
}

// FuzzJSON: whatever a client posts, /json answers one of its statuses
// and never panics.
func FuzzJSON(f *testing.F) {
	for _, s := range []string{`{"domain": "api", "descriptors": [{"entries": [{"key": "client", "value": "a"}]}]}`, `{}`, `[`, `{"hitsAddend": 4294967296}`,
		`{"domain": "api", "descriptors": [{"entries": [{"key": "path", "value": "/login"}, {"key": "user", "value": "u"}], "hitsAddend": 9}]}`} {
		f.Add(s)
	}
	h := upstreamhttp.JSON(service(f, rules))
	f.Fuzz(func(t *testing.T, body string) {
		switch code, _ := do(t, h, "POST", body); code {
		case 200, 400, 413, 429, 500:
		default:
			t.Fatalf("%q: status %d", body, code)
		}
	})
}
