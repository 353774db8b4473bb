package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	v1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/internal/testutil/etcdtest"
	"github.com/sluice-rl/sluice/internal/testutil/redistest"
)

// prefixConfig adds a burst-tier resource to fleetConfig, so that every
// kind of key has a request writing it.
const prefixConfig = fleetConfig + `    tiers:
      algorithm: burst_tiers
      tiers:
        - {limit: 3, window: 2s, active: 6s, cooldown: 0s}
`

// securedRedis starts a redis-server as managed services run it: an ACL
// user with a password, the default user off, TLS only, client
// certificates required; it returns the server, the certificates and
// the URL of the user (without its password) and a file with the
// password.
func securedRedis(t *testing.T) (*redistest.Server, *testutil.Certs, string, string) {
	t.Helper()
	certs := testutil.MakeCerts(t)
	srv := redistest.StartSecureT(t, redistest.Security{
		Users: []string{"sluice on >s3cret ~* &* +@all"}, DisableDefault: true, User: "sluice", UserPassword: "s3cret",
		TLSCert: certs.RedisCert, TLSKey: certs.RedisKey, TLSCA: certs.CA, TLSAuthClients: true})
	pw := filepath.Join(t.TempDir(), "redis-password")
	if err := os.WriteFile(pw, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return srv, certs, "rediss://sluice@" + srv.Addr + "/0", pw
}

// TestRedisSecuredKeyPrefix: `sluice server` on a Redis with an ACL user
// (password from a file), the default user disabled, TLS with a private
// CA and a client certificate; a fleet on etcd; --redis-key-prefix. A
// request on every path (a token bucket, burst tiers, Envoy's counters, a
// copy-limited resource's hold and its fleet's learning) writes keys, and
// every key in Redis starts with the prefix.
func TestRedisSecuredKeyPrefix(t *testing.T) {
	t.Parallel() // its own Redis and processes, mostly waiting
	srv, certs, url, pw := securedRedis(t)
	etcd := etcdtest.StartEtcd(t)
	cfg := writeConfig(t, prefixConfig)
	s := startFleetServer(t, "s", cfg, etcd.Endpoint, "--redis", url, "--redis-password-file", pw,
		"--redis-tls-ca", certs.CA, "--redis-tls-cert", certs.ClientCert, "--redis-tls-key", certs.ClientKey,
		"--redis-key-prefix", "tenant-x:", "--envoy-ratelimit-config", envoyRules(t))
	testutil.Learnt(t, s.c, "sandbox")
	for _, res := range []string{"api", "tiers"} {
		if r, err := s.c.Allow(t.Context(), &v1.AllowRequest{Resource: res, Domain: "small"}); err != nil || r.GetStatus() != v1.AllowResponse_OK || r.GetDegraded() {
			t.Fatalf("Allow %s: %v %v", res, r, err)
		}
	}
	if r := s.reserve(t, s.open(t), "sandbox", "acme", 1); r.GetGranted() != 1 {
		t.Fatalf("reserve: %v", r)
	}
	resp, err := rlsClient(t, s.addr).ShouldRateLimit(t.Context(), &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "client", Value: "c"}}}}})
	if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("ShouldRateLimit: %v %v", resp, err)
	}

	c := srv.Client()
	defer c.Close()
	keys, err := c.Keys(t.Context(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, k := range keys {
		rest, ok := strings.CutPrefix(k, "tenant-x:")
		if !ok {
			t.Errorf("key %q without the prefix", k)
			continue
		}
		seen[rest[:2]] = true
	}
	// {r: buckets and tiers; {e: Envoy's counters; {c: a resource's
	// counts and learning marker; {s: the fleet's epochs.
	for _, kind := range []string{"{r", "{e", "{c", "{s"} {
		if !seen[kind] {
			t.Errorf("no %s… key: %q", kind, keys)
		}
	}
	t.Logf("%d keys, all under tenant-x:: %q", len(keys), keys)
}

// TestRedisRefusedAtStart: `sluice server` exits non-zero, naming the
// flag and Redis's refusal, when Redis refuses its password or its TLS
// handshake (a missing client certificate); it does so well before a
// generous deadline (its first PING is bounded by 5 s).
func TestRedisRefusedAtStart(t *testing.T) {
	t.Parallel() // its own Redis and processes, mostly waiting
	_, certs, url, pw := securedRedis(t)
	wrong := filepath.Join(t.TempDir(), "wrong")
	if err := os.WriteFile(wrong, []byte("nope"), 0o600); err != nil {
		t.Fatal(err)
	}
	tlsFlags := []string{"--redis-tls-ca", certs.CA, "--redis-tls-cert", certs.ClientCert, "--redis-tls-key", certs.ClientKey}
	for _, tc := range []struct {
		name  string
		flags []string
		want  string
	}{
		{"wrong password", append([]string{"--redis", url, "--redis-password-file", wrong}, tlsFlags...), "--redis-password-file: limits/redis: Redis refused the connection: WRONGPASS"},
		{"no client certificate", []string{"--redis", url, "--redis-password-file", pw, "--redis-tls-ca", certs.CA}, "--redis-tls-ca, --redis-tls-cert, --redis-tls-key: limits/redis: Redis refused the connection"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(binary, append([]string{"server", "--listen", "127.0.0.1:0", "--config", writeConfig(t, prefixConfig)}, tc.flags...)...)
			done := make(chan error, 1)
			var out testutil.LogBuffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(out.String(), tc.want) {
					t.Fatalf("sluice server: %v, want an exit naming %q:\n%s", err, tc.want, out.String())
				}
			case <-time.After(60 * time.Second):
				_ = cmd.Process.Kill()
				t.Fatalf("sluice server still running after 60 s:\n%s", out.String())
			}
		})
	}
}
