package main

import (
	"bufio"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/internal/testutil/redistest"
	"github.com/sluice-rl/sluice/internal/testutil/xdstest"
	"github.com/sluice-rl/sluice/internal/tlsutil"
)

// envoyGatewayEnv reads one of Envoy Gateway's rendered environments
// (testdata/envoy-gateway: VAR=value lines, # comments).
func envoyGatewayEnv(t *testing.T, name string) map[string]string {
	t.Helper()
	data, err := os.ReadFile("testdata/envoy-gateway/" + name)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for line := range strings.Lines(string(data)) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: %q is not VAR=value", name, line)
		}
		env[k] = v
	}
	return env
}

// statsdSink is a statsd server on TCP (envoyproxy/ratelimit's default
// protocol, and Envoy Gateway's statsd_exporter's port): the lines it
// received.
func statsdSink(t *testing.T) (addr string, lines *testutil.LogBuffer) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	lines = new(testutil.LogBuffer)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					_, _ = lines.Write([]byte(sc.Text() + "\n"))
				}
			}()
		}
	}()
	return ln.Addr().String(), lines
}

// egRule is the RateLimitConfig Envoy Gateway's control plane serves for
// a BackendTrafficPolicy on route first-route of listener first-listener
// whose one rule limits requests with header x-user-id: one to n a minute
// (no unit when bad: a version Sluice must refuse): the domain is the
// listener, then a level for the route, one for the policy's rule and
// one for its match, as envoyproxy/gateway's translator writes them
// (internal/xds/translator/testdata/out/ratelimit-config/value-match.yaml).
func egRule(n uint32, bad bool) *rlsconfv3.RateLimitConfig {
	unit := rlsconfv3.RateLimitUnit_MINUTE
	if bad {
		unit = rlsconfv3.RateLimitUnit_UNKNOWN
	}
	level := func(kv string, below ...*rlsconfv3.RateLimitDescriptor) *rlsconfv3.RateLimitDescriptor {
		return &rlsconfv3.RateLimitDescriptor{Key: kv, Value: kv, Descriptors: below}
	}
	match := level("rule-0-match-0")
	match.RateLimit = &rlsconfv3.RateLimitPolicy{Unit: unit, RequestsPerUnit: n}
	return &rlsconfv3.RateLimitConfig{Name: "first-listener", Domain: "first-listener",
		Descriptors: []*rlsconfv3.RateLimitDescriptor{level("first-route", level(egPolicyRule, match))}}
}

// egPolicyRule is the level Envoy Gateway names after the policy's rule.
const egPolicyRule = "test-namespace/test-policy-1/rule/0"

// egRuleKey is egRule's limit as /rlconfig and the statistics name it.
const egRuleKey = "first-listener.first-route_first-route." + egPolicyRule + "_" + egPolicyRule + ".rule-0-match-0_rule-0-match-0"

// egRequest is what Envoy's rate limit filter sends for a request that
// matches egRule's match (x-user-id: one), or not (matched false: the
// match's level is absent).
func egRequest(matched bool) *rlsv3.RateLimitRequest {
	e := []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "first-route", Value: "first-route"}, {Key: egPolicyRule, Value: egPolicyRule}}
	if matched {
		e = append(e, &ratelimitv3.RateLimitDescriptor_Entry{Key: "rule-0-match-0", Value: "rule-0-match-0"})
	}
	return &rlsv3.RateLimitRequest{Domain: "first-listener", Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: e}}}
}

// TestEnvoyGatewayEnvironment: the environment Envoy Gateway renders for
// its rate limit Deployment (testdata/envoy-gateway/default.env: its own
// control plane over xDS, mTLS both ways, statsd on TCP port 9125, Redis
// on tcp), its paths and addresses pointed at the test's, runs the sluice
// binary under the name ratelimit unchanged: the rules served over xDS
// decide gRPC ShouldRateLimit over mTLS; a bad version is NACKed while the
// last good rules keep deciding; a new version applies; the control plane
// restarted and serving again is followed; statsd receives upstream's
// names; /healthcheck, /json and /rlconfig answer.
func TestEnvoyGatewayEnvironment(t *testing.T) {
	t.Parallel() // its own Redis and processes, mostly waiting
	certs := testutil.MakeCerts(t)
	// mTLS, as Envoy Gateway's control plane.
	cp := xdstest.StartMTLS(t, certs.RedisCert, certs.RedisKey, certs.CA)
	const node = "envoy-ratelimit" // CONFIG_GRPC_XDS_NODE_ID
	cp.Set(t, node, "1", egRule(2, false))
	rs := redistest.StartT(t)
	statsd, lines := statsdSink(t)
	statsdHost, statsdPort, _ := net.SplitHostPort(statsd)

	env := envoyGatewayEnv(t, "default.env")
	// Envoy Gateway's paths and addresses, pointed at the test's: one
	// certificate for serving and for the control plane, as its Secret.
	repl := map[string]string{"/certs/tls.crt": certs.RedisCert, "/certs/tls.key": certs.RedisKey, "/certs/ca.crt": certs.CA,
		"envoy-gateway:18001": cp.Addr(), "redis.redis.svc:6379": rs.Addr, "9125": statsdPort}
	for k, v := range env {
		if r, ok := repl[v]; ok {
			env[k] = r
		}
	}
	env["STATSD_HOST"] = statsdHost       // Envoy Gateway's sidecar: localhost
	env["STATS_FLUSH_INTERVAL"] = "200ms" // (10 s by default)
	p := startRatelimit(t, env)

	// gRPC over mTLS, as Envoy's rate limit filter asks.
	ctls, err := tlsutil.Client(certs.CA, certs.ClientCert, certs.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(p.grpc, grpc.WithTransportCredentials(credentials.NewTLS(ctls)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rls := rlsv3.NewRateLimitServiceClient(conn)
	ask := func(matched bool) rlsv3.RateLimitResponse_Code {
		t.Helper()
		resp, err := rls.ShouldRateLimit(t.Context(), egRequest(matched))
		if err != nil {
			t.Fatalf("ShouldRateLimit: %v", err)
		}
		return resp.GetOverallCode()
	}
	rlconfig := func() string {
		_, body := httpDo(t, "GET", "http://"+p.debug+"/rlconfig", "")
		return body
	}
	testutil.Eventually(t, 30*time.Second, "the rules of version 1", func() bool {
		return strings.Contains(rlconfig(), egRuleKey+": unit=MINUTE requests_per_unit=2,")
	})
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		if got := ask(true); got != want {
			t.Fatalf("request %d: %v, want %v", i+1, got, want)
		}
	}

	// A bad version: NACKed, the last good rules keep deciding.
	cp.Set(t, node, "2", egRule(50, true))
	testutil.Eventually(t, 30*time.Second, "a NACK of version 2", func() bool { return len(cp.Nacks()) > 0 })
	if !strings.Contains(cp.Nacks()[0], "unit") {
		t.Fatalf("NACK %q: want the field at fault", cp.Nacks()[0])
	}
	if got := ask(true); got != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("after the NACK: %v, want the old rules' OVER_LIMIT", got)
	}
	if got := ask(false); got != rlsv3.RateLimitResponse_OK {
		t.Fatalf("a request the match does not select: %v, want OK", got)
	}
	// A good version applies; then the control plane restarts.
	cp.Set(t, node, "3", egRule(5, false))
	testutil.Eventually(t, 30*time.Second, "the rules of version 3", func() bool { return strings.Contains(rlconfig(), "requests_per_unit=5,") })
	cp.Restart(t)
	cp.Set(t, node, "4", egRule(7, false))
	testutil.Eventually(t, 30*time.Second, "the rules of version 4, after the restart", func() bool {
		return strings.Contains(rlconfig(), "requests_per_unit=7,")
	})

	testutil.Eventually(t, 30*time.Second, "upstream's statistics on statsd", func() bool {
		s := lines.String()
		return strings.Contains(s, "ratelimit.service.rate_limit."+egRuleKey+".total_hits:") &&
			strings.Contains(s, "ratelimit.service.rate_limit."+egRuleKey+".over_limit:") &&
			strings.Contains(s, "ratelimit.service.config_load_success:") && strings.Contains(s, "ratelimit.service.config_load_error:") &&
			strings.Contains(s, "ratelimit_server.ShouldRateLimit.total_requests:")
	})
	if code, body := httpDo(t, "GET", "http://"+p.http+"/healthcheck", ""); code != 200 || body != "OK" {
		t.Fatalf("/healthcheck: %d %q", code, body)
	}
	if code, body := httpDo(t, "POST", "http://"+p.http+"/json",
		`{"domain": "first-listener", "descriptors": [{"entries": [{"key": "first-route", "value": "first-route"}]}]}`); code != 200 {
		t.Fatalf("/json: %d %s", code, body)
	}
}

// TestEnvoyGatewayRedisTLS: Envoy Gateway's environment for a TLS Redis
// with a password (testdata/envoy-gateway/redis-tls.env) becomes these
// flags of sluice server.
func TestEnvoyGatewayRedisTLS(t *testing.T) {
	env := envoyGatewayEnv(t, "redis-tls.env")
	for k, v := range env {
		t.Setenv(k, v)
	}
	e, err := readUpstreamEnv()
	if err != nil {
		t.Fatal(err)
	}
	set, _, _, err := e.settings(func(name string) bool { _, ok := env[name]; return ok })
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, s := range set {
		got[s.flag] = s.value
	}
	for flag, want := range map[string]string{
		"redis": "rediss://:redis_auth_password@redis.redis.svc:6379/0?pool_size=10", "redis-tls-cert": "/certs/tls.crt",
		"redis-tls-key": "/certs/tls.key", "envoy-ratelimit-xds": "envoy-gateway:18001", "envoy-ratelimit-xds-node-id": "envoy-ratelimit",
		"envoy-statsd": "localhost:8125", "envoy-statsd-protocol": "tcp", "listen": "0.0.0.0:8081", "log-level": "info",
	} {
		if got[flag] != want {
			t.Errorf("--%s %q, want %q", flag, got[flag], want)
		}
	}
	if _, ok := got["redis-tls-ca"]; ok {
		t.Errorf("--redis-tls-ca %q without REDIS_TLS_CACERT (the system's roots, as upstream)", got["redis-tls-ca"])
	}
}
