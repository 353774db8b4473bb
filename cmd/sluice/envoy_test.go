package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/internal/testutil/redistest"
)

// envoyRules is a directory of envoyproxy/ratelimit's files, as its
// config/ directory holds them.
func envoyRules(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"api.yaml": `domain: api
descriptors:
  - key: client
    rate_limit: {unit: hour, requests_per_unit: 10}
`,
		"mongo.yaml": `domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit: {unit: second, requests_per_unit: 500}
`,
	}
	for name, y := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(y), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func rlsClient(t *testing.T, addr string) rlsv3.RateLimitServiceClient {
	t.Helper()
	conn := testutil.Dial(t, addr)
	return rlsv3.NewRateLimitServiceClient(conn)
}

func clientRequest(client string, more ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "api", Descriptors: append([]*ratelimitv3.RateLimitDescriptor{{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "client", Value: client}}}}, more...)}
}

// TestEnvoyServersShareRedis: three sluice server processes reading one
// directory of envoyproxy/ratelimit's files, on one redis-server and on a
// 3-master Redis Cluster: 60 concurrent ShouldRateLimit on one descriptor
// limited to 10 an hour, spread over the servers, grant exactly 10, with
// no error (no CROSSSLOT: a request's descriptors share the domain's
// slot).
//
// The secured cluster runs TLS with client certificates and a password on
// every node (and on its bus): the servers reach it by a cluster URL
// (rediss://, the password from a file) and share it under a key prefix
// of their own, which every key they wrote carries; another fleet under
// another prefix counts apart.
func TestEnvoyServersShareRedis(t *testing.T) {
	rs := redistest.StartT(t)
	cl := redistest.StartClusterT(t, 3)
	certs := testutil.MakeCerts(t)
	secured := redistest.StartClusterSecureT(t, 3, 0, redistest.Security{Password: "s3cret",
		TLSCert: certs.RedisCert, TLSKey: certs.RedisKey, TLSCA: certs.CA, TLSAuthClients: true})
	pw := filepath.Join(t.TempDir(), "redis-password")
	if err := os.WriteFile(pw, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a := secured.Addrs()
	clusterURL := "rediss://" + a[0] + "?addr=" + a[1] + "&addr=" + a[2]
	dir := envoyRules(t)
	for _, mode := range []struct {
		name   string
		flags  []string
		prefix string // the keys' prefix to check on the secured cluster
	}{
		{"redis", []string{"--redis", "redis://" + rs.Addr + "/0"}, ""},
		{"cluster", []string{"--redis-cluster", cl.Addrs()[0]}, ""},
		{"TLS and password cluster", []string{"--redis-cluster", clusterURL, "--redis-password-file", pw, "--redis-tls-ca", certs.CA,
			"--redis-tls-cert", certs.ClientCert, "--redis-tls-key", certs.ClientKey, "--redis-key-prefix", "fleet-a:"}, "fleet-a:"},
	} {
		t.Run(mode.name, func(t *testing.T) {
			var clients []rlsv3.RateLimitServiceClient
			for range 3 {
				addr, _, _ := startServerWith(t, testConfig, append([]string{"--envoy-ratelimit-config", dir}, mode.flags...)...)
				clients = append(clients, rlsClient(t, addr))
			}
			var ok, over atomic.Int64
			var wg sync.WaitGroup
			for i := range 60 {
				wg.Go(func() {
					// Each request carries a second descriptor on another
					// counter of the domain: one script, one slot.
					other := &ratelimitv3.RateLimitDescriptor{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "client", Value: "other-" + mode.name}}}
					resp, err := clients[i%3].ShouldRateLimit(t.Context(), clientRequest("hot-"+mode.name, other))
					if err != nil {
						t.Error(err)
						return
					}
					switch resp.Statuses[0].Code {
					case rlsv3.RateLimitResponse_OK:
						ok.Add(1)
					case rlsv3.RateLimitResponse_OVER_LIMIT:
						over.Add(1)
					}
				})
			}
			wg.Wait()
			if ok.Load() != 10 || over.Load() != 50 {
				t.Fatalf("%d OK, %d OVER_LIMIT over 3 servers; want exactly the limit's 10 and 50", ok.Load(), over.Load())
			}
			// The refused requests charged nothing: "other" was taken
			// only by the 10 granted ones.
			req := clientRequest("other-" + mode.name)
			req.Descriptors[0].HitsAddend = wrapperspb.UInt64(0) // check only
			resp, err := clients[0].ShouldRateLimit(t.Context(), req)
			if err != nil || resp.Statuses[0].Code != rlsv3.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != 0 {
				t.Fatalf("other: %v %v; want OK with 0 left (10 taken by the 10 granted)", resp, err)
			}
			if mode.prefix == "" {
				return
			}
			// Another fleet on the same cluster, under its own prefix,
			// has its own counters: the descriptor all but exhausted
			// above is whole for it.
			flags := append([]string{"--envoy-ratelimit-config", dir}, mode.flags[:len(mode.flags)-1]...)
			addr, _, _ := startServerWith(t, testConfig, append(flags, "fleet-b:")...)
			resp, err = rlsClient(t, addr).ShouldRateLimit(t.Context(), clientRequest("hot-"+mode.name))
			if err != nil || resp.Statuses[0].Code != rlsv3.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != 9 {
				t.Fatalf("another fleet's first request: %v %v; want OK with 9 left", resp, err)
			}
			c := secured.Client()
			defer c.Close()
			keys := clusterKeys(t, c)
			if !slices.ContainsFunc(keys, func(k string) bool { return strings.HasPrefix(k, mode.prefix) }) {
				t.Fatalf("no key with the prefix %q on the secured cluster: %q", mode.prefix, keys)
			}
			for _, k := range keys {
				if !strings.HasPrefix(k, mode.prefix) && !strings.HasPrefix(k, "fleet-b:") {
					t.Errorf("key %q without a fleet's prefix", k)
				}
			}
		})
	}
}

// clusterKeys returns every key of every master of c (KEYS: a test's
// few).
func clusterKeys(t *testing.T, c *redis.ClusterClient) []string {
	t.Helper()
	var mu sync.Mutex
	var keys []string
	err := c.ForEachMaster(t.Context(), func(ctx context.Context, m *redis.Client) error {
		ks, err := m.Keys(ctx, "*").Result()
		mu.Lock()
		keys = append(keys, ks...)
		mu.Unlock()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// TestEnvoyConfigReload: a new file in the directory adds its domain
// (SIGHUP, or the watcher); a bad one is refused and the last good rules
// keep serving.
func TestEnvoyConfigReload(t *testing.T) {
	dir := envoyRules(t)
	addr, cmd, _ := startServerWith(t, testConfig, "--envoy-ratelimit-config", dir)
	c := rlsClient(t, addr)
	limited := func(domain string) bool {
		resp, err := c.ShouldRateLimit(t.Context(), &rlsv3.RateLimitRequest{Domain: domain,
			Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.Statuses[0].CurrentLimit != nil
	}
	if limited("late") {
		t.Fatal("domain late limited before its file exists")
	}
	if err := os.WriteFile(filepath.Join(dir, "late.yaml"), []byte("domain: late\ndescriptors: [{key: k, rate_limit: {unit: minute, requests_per_unit: 5}}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Process.Signal(syscall.SIGHUP)
	testutil.Eventually(t, 30*time.Second, "domain late loaded", func() bool { return limited("late") })
	// A second file defining api: refused (a domain defined twice), the
	// rules in force stay.
	if err := os.WriteFile(filepath.Join(dir, "twice.yaml"), []byte("domain: api\ndescriptors: [{key: k}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Process.Signal(syscall.SIGHUP)
	testutil.Eventually(t, 30*time.Second, "the bad directory to be read and refused", func() bool {
		return strings.Contains(metricsPage(addr), `sluice_server_config_reloads_total{result="failed"}`)
	})
	if !limited("late") {
		t.Fatal("a bad directory replaced the rules in force")
	}
}
