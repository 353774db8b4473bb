package main

import (
	"bufio"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/internal/testutil/redistest"
)

// upstreamRules is envoyproxy/ratelimit's runtime layout: RUNTIME_ROOT,
// then RUNTIME_SUBDIRECTORY "ratelimit", then its config/ directory.
func upstreamRules(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	rules := `domain: api
descriptors:
  - key: client
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: path
    value: /login
    rate_limit: {unit: second, requests_per_unit: 100}
`
	if err := os.WriteFile(filepath.Join(dir, "api.yaml"), []byte(rules), 0o644); err != nil {
		t.Fatal(err)
	}
	// A dot file, as Kubernetes' ConfigMap volumes hold: never read.
	if err := os.WriteFile(filepath.Join(dir, ".hidden.yaml"), []byte("not: [rules"), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

// ratelimitProc is a `ratelimit` process (the sluice binary under
// envoyproxy/ratelimit's name) and its three addresses, four with
// USE_PROMETHEUS.
type ratelimitProc struct {
	cmd               *exec.Cmd
	grpc, http, debug string
	prometheus        string // PROMETHEUS_ADDR's, with USE_PROMETHEUS
	stderr            *testutil.LogBuffer
}

// startRatelimit runs the sluice binary as /bin/ratelimit would be run:
// under the name ratelimit, no arguments, configured by env alone (on
// free loopback ports unless env says otherwise), and waits for its three
// listeners (four with USE_PROMETHEUS: give PROMETHEUS_ADDR too).
func startRatelimit(t *testing.T, env map[string]string) *ratelimitProc {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "ratelimit")
	if err := os.Symlink(binary, bin); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Env = ratelimitEnv(env)
	p := &ratelimitProc{cmd: cmd, stderr: new(testutil.LogBuffer)}
	cmd.Stderr = io.MultiWriter(p.stderr, os.Stderr)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	r := bufio.NewReader(stdout)
	n := 3
	if prom, _ := strconv.ParseBool(env["USE_PROMETHEUS"]); prom {
		n = 4
	}
	var addrs []string
	for range n {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("ratelimit: reading its addresses: %v\n%s", err, p.stderr.String())
		}
		addrs = append(addrs, strings.TrimSpace(strings.TrimPrefix(line, "listening on ")))
	}
	go func() { _, _ = io.Copy(io.Discard, r) }()
	p.grpc, p.http, p.debug = addrs[0], addrs[1], addrs[2]
	if n == 4 {
		p.prometheus = addrs[3]
	}
	return p
}

// ratelimitEnv is this process's environment without SLUICE_* and
// envoyproxy/ratelimit's variables, plus loopback listeners on free
// ports, then env.
func ratelimitEnv(env map[string]string) []string {
	base := map[string]string{"HOST": "127.0.0.1", "PORT": "0", "GRPC_HOST": "127.0.0.1", "GRPC_PORT": "0",
		"DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": "0", "LOG_LEVEL": testutil.ChildLogLevel(), "USE_STATSD": "false"}
	for k, v := range env {
		base[k] = v
	}
	var out []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "SLUICE_") || strings.HasPrefix(k, "REDIS_") {
			continue
		}
		out = append(out, kv)
	}
	for k, v := range base {
		out = append(out, k+"="+v)
	}
	return out
}

// httpDo sends a request to p and returns the status and body.
func httpDo(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestEnvoyRatelimit: the binary under envoyproxy/ratelimit's name,
// configured by its environment alone, on Redis single, cluster and
// sentinel as REDIS_TYPE says: /healthcheck, /json (429 over the limit),
// gRPC ShouldRateLimit on GRPC_PORT sharing the same counters, /rlconfig
// as upstream prints the rules, Sluice's /metrics on the debug port; in
// memory, with USE_PROMETHEUS, upstream's statistics on PROMETHEUS_ADDR's
// /metrics as upstream's default mapping names them.
func TestEnvoyRatelimit(t *testing.T) {
	t.Parallel() // its own Redis and processes, mostly waiting
	root := upstreamRules(t)
	single := redistest.StartT(t)
	cl := redistest.StartClusterT(t, 3)
	sent := redistest.StartSentinelT(t, redistest.Security{Password: "s3cret"})
	sa := sent.SentinelAddrs()
	for _, tc := range []struct {
		name string
		env  map[string]string
	}{
		{"single", map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": single.Addr}},
		{"cluster", map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_TYPE": "cluster", "REDIS_URL": strings.Join(cl.Addrs(), ",")}},
		{"sentinel", map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_TYPE": "SENTINEL", "REDIS_AUTH": "s3cret",
			"REDIS_URL": sent.Name() + "," + strings.Join(sa, ",")}},
		{"memory", map[string]string{"BACKEND_TYPE": "memory", "USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": "127.0.0.1:0",
			"STATS_FLUSH_INTERVAL": "50ms"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_IGNOREDOTFILES": "true",
				"RUNTIME_WATCH_ROOT": "false", "CACHE_KEY_PREFIX": tc.name + ":"}
			for k, v := range tc.env {
				env[k] = v
			}
			p := startRatelimit(t, env)
			if code, body := httpDo(t, "GET", "http://"+p.http+"/healthcheck", ""); code != 200 || body != "OK" {
				t.Fatalf("/healthcheck: %d %q", code, body)
			}
			req := `{"domain": "api", "descriptors": [{"entries": [{"key": "client", "value": "` + tc.name + `"}]}]}`
			for i, want := range []int{200, 200, 429} {
				code, body := httpDo(t, "POST", "http://"+p.http+"/json", req)
				if code != want || !strings.Contains(body, `"overallCode"`) {
					t.Fatalf("/json #%d: %d %s, want %d", i+1, code, body, want)
				}
			}
			if code, body := httpDo(t, "POST", "http://"+p.http+"/json", `{"domain": 7}`); code != 400 {
				t.Fatalf("/json with a bad body: %d %s, want 400", code, body)
			}
			// gRPC on GRPC_PORT: the same counters (the client is over).
			resp, err := rlsClient(t, p.grpc).ShouldRateLimit(t.Context(), &rlsv3.RateLimitRequest{Domain: "api",
				Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "client", Value: tc.name}}}}})
			if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("gRPC ShouldRateLimit: %v %v, want OVER_LIMIT", resp, err)
			}
			if h, err := healthpb.NewHealthClient(testutil.Dial(t, p.grpc)).Check(t.Context(), &healthpb.HealthCheckRequest{Service: "ratelimit"}); err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				t.Fatalf("gRPC health of ratelimit (upstream's service name): %v %v", h, err)
			}
			want := "api.client: unit=HOUR requests_per_unit=2, shadow_mode: false\napi.path_/login: unit=SECOND requests_per_unit=100, shadow_mode: false\n"
			if code, body := httpDo(t, "GET", "http://"+p.debug+"/rlconfig", ""); code != 200 || body != want {
				t.Fatalf("/rlconfig: %d\n%s\nwant\n%s", code, body, want)
			}
			if code, body := httpDo(t, "GET", "http://"+p.debug+"/metrics", ""); code != 200 || !strings.Contains(body, `sluice_envoy_ratelimit_hits_total{domain="api",result="over_limit",rule="client"} 2`) {
				t.Fatalf("/metrics on the debug port: %d, no over_limit hits of the rule", code)
			}
			if p.prometheus == "" {
				return
			}
			// Three /json and one gRPC request of the rule client (2 an
			// hour): 2 within (the second near), 2 over.
			series := []string{
				`ratelimit_service_rate_limit_total_hits{domain="api",key1="client"} 4`,
				`ratelimit_service_rate_limit_within_limit{domain="api",key1="client"} 2`,
				`ratelimit_service_rate_limit_near_limit{domain="api",key1="client"} 1`,
				`ratelimit_service_rate_limit_over_limit{domain="api",key1="client"} 2`,
				`ratelimit_service_config_load_success 1`,
			}
			var body string
			defer func() {
				if t.Failed() {
					t.Logf("the last scrape of PROMETHEUS_ADDR:\n%s", body)
				}
			}()
			testutil.Eventually(t, 10*time.Second, "upstream's series on PROMETHEUS_ADDR", func() bool {
				var code int
				code, body = httpDo(t, "GET", "http://"+p.prometheus+"/metrics", "")
				lines := strings.Split(body, "\n")
				return code == 200 && !slices.ContainsFunc(series, func(w string) bool { return !slices.Contains(lines, w) })
			})
			if !strings.Contains(body, `ratelimit_service_total_requests{grpc_method="ShouldRateLimit"} `) || !strings.Contains(body, "go_goroutines ") {
				t.Fatalf("PROMETHEUS_ADDR's /metrics: no total_requests or Go collector:\n%s", body)
			}
		})
	}
}

// TestEnvoyRatelimitRefuses: a value Sluice cannot honour stops the start,
// naming the variable; one it reads but does not honour is named once in
// the log.
func TestEnvoyRatelimitRefuses(t *testing.T) {
	t.Parallel() // its own Redis and processes, mostly waiting
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"BACKEND_TYPE": "memcache"}, "BACKEND_TYPE: memcache is not supported"},
		{map[string]string{"REDIS_PERSECOND": "true"}, "REDIS_PERSECOND: a second Redis"},
		{map[string]string{"GRPC_UDS": "/tmp/rl.sock"}, "GRPC_UDS: a Unix socket"},
		{map[string]string{"REDIS_TYPE": "ring"}, `REDIS_TYPE: "ring", want single, cluster or sentinel`},
		{map[string]string{"NEAR_LIMIT_RATIO": "lots"}, "NEAR_LIMIT_RATIO"},
		{map[string]string{"CONFIG_TYPE": "CONSUL"}, `CONFIG_TYPE: "CONSUL", want FILE or GRPC_XDS_SOTW`},
		{map[string]string{"USE_PROMETHEUS": "true", "USE_STATSD": "true"}, "USE_PROMETHEUS: set with USE_STATSD"},
		{map[string]string{"BACKEND_TYPE": "memory", "USE_PROMETHEUS": "true", "PROMETHEUS_MAPPER_YAML": "/nonexistent/conf.yaml"},
			"PROMETHEUS_MAPPER_YAML: /nonexistent/conf.yaml: open /nonexistent/conf.yaml: no such file"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			cmd := exec.Command(binary, "envoy-ratelimit")
			cmd.Env = ratelimitEnv(tc.env)
			out, err := cmd.CombinedOutput()
			if err == nil || !strings.Contains(string(out), tc.want) {
				t.Fatalf("envoy-ratelimit: %v, want an exit naming %q:\n%s", err, tc.want, out)
			}
		})
	}
	t.Run("not honoured, named once", func(t *testing.T) {
		p := startRatelimit(t, map[string]string{"BACKEND_TYPE": "memory", "RUNTIME_ROOT": upstreamRules(t), "RUNTIME_SUBDIRECTORY": "ratelimit",
			"LOG_LEVEL": "warn", "REDIS_PIPELINE_WINDOW": "150us", "EXPIRATION_JITTER_MAX_SECONDS": "60"})
		testutil.Eventually(t, 10*time.Second, "the notes logged", func() bool {
			return strings.Contains(p.stderr.String(), "REDIS_PIPELINE_WINDOW: not honoured") && strings.Contains(p.stderr.String(), "EXPIRATION_JITTER_MAX_SECONDS: not honoured")
		})
		if n := strings.Count(p.stderr.String(), "REDIS_PIPELINE_WINDOW"); n != 1 {
			t.Fatalf("REDIS_PIPELINE_WINDOW named %d times:\n%s", n, p.stderr.String())
		}
	})
}

// TestUpstreamCalendarMonths: envoyproxy/ratelimit's
// USE_CALENDAR_MONTH_RATE_LIMIT becomes --envoy-calendar-months (months
// counted as calendar months in UTC), off unless set.
func TestUpstreamCalendarMonths(t *testing.T) {
	for _, v := range []string{"true", "false"} {
		t.Setenv("USE_CALENDAR_MONTH_RATE_LIMIT", v)
		e, err := readUpstreamEnv()
		if err != nil {
			t.Fatal(err)
		}
		set, _, _, err := e.settings(func(name string) bool { return name == "USE_CALENDAR_MONTH_RATE_LIMIT" })
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		for _, s := range set {
			if s.flag == "envoy-calendar-months" {
				got = s.value
			}
		}
		if got != v {
			t.Errorf("USE_CALENDAR_MONTH_RATE_LIMIT=%s: --envoy-calendar-months %q", v, got)
		}
	}
}
