package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	v1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/internal/testutil/redistest"
)

// keyspaceConfig is the limits of the keyspace test: a bucket per user,
// 10 tokens (size, or %d) refilled one in 1000 s, so that none fills (and
// expires) during the test.
const keyspaceConfig = `
limits:
  resources:
    users:
      template: {size: %d, fill_rate: 0.001, wait_timeout: 0s, max_tokens_per_request: 10}
`

// keyspaceRun is what one keyspace run measured.
type keyspaceRun struct {
	start, reload time.Duration   // to the first answer; SIGHUP to the new limits answering
	scrapes       []time.Duration // GET /metrics
	scans, keys   int64           // SCAN and KEYS Redis ran from the start to the last scrape
	bytesPerBkt   float64         // Redis's used_memory per bucket
}

// keyspace fills the Redis behind c with unrelated keys (n, in one or
// a few slots per master) and buckets real ones (a token bucket per
// user, created by a `sluice server` on redisFlags), then starts a
// `sluice server` on it afresh and measures its start, a SIGHUP that
// shrinks the template (checked on an existing bucket: the rescale
// reaches it on its next request), three scrapes, and the SCAN and KEYS
// Redis ran meanwhile (INFO commandstats, reset before the start).
func keyspace(t testing.TB, c redis.UniversalClient, redisFlags []string, n, buckets int) keyspaceRun {
	t.Helper()
	ctx := t.Context()
	populate(t, c, n)
	before := redistest.InfoSum(t, c, "memory", "used_memory:")

	// The buckets, made by a first server: user u0 takes 5 of its 10.
	addr, cmd, _ := startServerWith(t, testConfig+fmt.Sprintf(keyspaceConfig, 10), redisFlags...)
	lc := v1.NewLimitsClient(testutil.Dial(t, addr))
	allow := func(lc v1.LimitsClient, user string, tokens int64) *v1.AllowResponse {
		r, err := lc.Allow(ctx, &v1.AllowRequest{Resource: "users", Domain: user, Tokens: tokens})
		if err != nil {
			t.Fatalf("allow %s: %v", user, err)
		}
		return r
	}
	if r := allow(lc, "u0", 5); r.GetStatus() != v1.AllowResponse_OK {
		t.Fatalf("u0's first 5 tokens: %v", r)
	}
	var wg sync.WaitGroup
	const workers = 32
	for w := range workers {
		wg.Go(func() {
			for i := 1 + w; i < buckets; i += workers {
				allow(lc, "u"+strconv.Itoa(i), 1)
			}
		})
	}
	wg.Wait()
	var out keyspaceRun
	out.bytesPerBkt = float64(redistest.InfoSum(t, c, "memory", "used_memory:")-before) / float64(buckets)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	_ = cmd.Wait()

	// A new server on the full Redis.
	redistest.ForEachNode(t, c, func(ctx context.Context, c redis.UniversalClient) error { return c.ConfigResetStat(ctx).Err() })
	t0 := time.Now()
	addr, cmd, path := startServerWith(t, testConfig+fmt.Sprintf(keyspaceConfig, 10), redisFlags...)
	lc = v1.NewLimitsClient(testutil.Dial(t, addr))
	if r := allow(lc, "u1", 1); r.GetStatus() != v1.AllowResponse_OK {
		t.Fatalf("u1 after the restart: %v", r)
	}
	out.start = time.Since(t0)

	// Shrink the template to 4: u0, 5 of 10 left, has 2 of 4 left.
	if err := os.WriteFile(path, []byte(testConfig+fmt.Sprintf(keyspaceConfig, 4)), 0o644); err != nil {
		t.Fatal(err)
	}
	t0 = time.Now()
	_ = cmd.Process.Signal(syscall.SIGHUP)
	testutil.Eventually(t, 60*time.Second, "the shrunk template to answer", func() bool {
		return allow(lc, "u-new", 0).GetLimit() == 4
	})
	out.reload = time.Since(t0)
	if r := allow(lc, "u0", 3); r.GetStatus() != v1.AllowResponse_REJECTED_TIMEOUT || r.GetLimit() != 4 || r.GetRemaining() < 1.99 || r.GetRemaining() > 2.01 {
		t.Fatalf("u0 asks 3 after the shrink (5 of 10 left before, so 2 of 4): %v", r)
	}
	if r := allow(lc, "u0", 2); r.GetStatus() != v1.AllowResponse_OK {
		t.Fatalf("u0 asks 2 after the shrink: %v", r)
	}

	for range 3 {
		t0 := time.Now()
		page := metricsPage(addr)
		out.scrapes = append(out.scrapes, time.Since(t0))
		if !strings.Contains(page, "sluice_limits_buckets ") {
			t.Fatalf("/metrics has no sluice_limits_buckets:\n%.2000s", page)
		}
	}
	out.scans, out.keys = redistest.CommandCalls(t, c, "scan"), redistest.CommandCalls(t, c, "keys")
	return out
}

// populate adds n unrelated keys (16-byte strings) to the Redis behind
// c, a Lua loop of 100 000 SETs at a time; on a cluster, each master's
// share under a hash tag of one of its slots.
func populate(t testing.TB, c redis.UniversalClient, n int) {
	t.Helper()
	const fill = `local p, a, b = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
for i = a, b do redis.call('SET', p .. i, 'xxxxxxxxxxxxxxxx') end
return b - a + 1`
	one := func(c redis.UniversalClient, prefix string, n int) {
		for a := 0; a < n; a += 100000 {
			if err := c.Eval(t.Context(), fill, nil, prefix, a, min(a+100000, n)-1).Err(); err != nil {
				t.Fatalf("populate: %v", err)
			}
		}
	}
	cc, ok := c.(*redis.ClusterClient)
	if !ok {
		one(c, "other:", n)
		return
	}
	var masters []*redis.Client
	if err := cc.ForEachMaster(t.Context(), func(_ context.Context, m *redis.Client) error {
		masters = append(masters, m)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for i, m := range masters {
		for j := 0; ; j++ { // a hash tag in one of m's slots
			tag := fmt.Sprintf("{other%d}:", j)
			owner, err := cc.MasterForKey(t.Context(), tag)
			if err != nil {
				t.Fatal(err)
			}
			if owner.Options().Addr == m.Options().Addr {
				share := n / len(masters)
				if i == len(masters)-1 {
					share = n - share*(len(masters)-1)
				}
				one(m, tag, share)
				break
			}
		}
	}
}

// TestKeyspaceScale: with a million unrelated keys and some buckets in
// its Redis, `sluice server --redis` starts, a SIGHUP that shrinks the
// template reaches an existing bucket on its next request, /metrics
// answers, and Redis runs no SCAN and no KEYS during any of it: nothing
// on start, reload or scrape costs O(keys). (BenchmarkKeyspace is the
// same at ten million keys on a three-master cluster.)
func TestKeyspaceScale(t *testing.T) {
	rs := redistest.StartT(t)
	c := redis.NewClient(&redis.Options{Addr: rs.Addr})
	defer c.Close()
	r := keyspace(t, c, []string{"--redis", "redis://" + rs.Addr + "/0"}, 1_000_000, 500)
	if r.scans != 0 || r.keys != 0 {
		t.Fatalf("Redis ran %d SCAN and %d KEYS during the start, the reload and the scrapes; want none", r.scans, r.keys)
	}
	t.Logf("1 000 000 unrelated keys, 500 buckets: start %v, reload %v, scrapes %v", r.start, r.reload, r.scrapes)
}

// BenchmarkKeyspace is TestKeyspaceScale at scale, once (-benchtime 1x):
// SLUICE_KEYSPACE_KEYS unrelated keys (10 000 000 by default) and
// SLUICE_KEYSPACE_BUCKETS buckets (200 000) on a real three-master Redis
// Cluster (SLUICE_KEYSPACE_SINGLE=1: one redis-server). It reports the
// start (to the first answer), the reload, the slowest of three scrapes,
// Redis's memory per bucket, and the SCAN and KEYS Redis ran.
//
//	go test -run '^$' -bench Keyspace -benchtime 1x -timeout 30m ./cmd/sluice
func BenchmarkKeyspace(b *testing.B) {
	n, buckets := envInt("SLUICE_KEYSPACE_KEYS", 10_000_000), envInt("SLUICE_KEYSPACE_BUCKETS", 200_000)
	var c redis.UniversalClient
	var flags []string
	if os.Getenv("SLUICE_KEYSPACE_SINGLE") == "1" {
		rs := redistest.StartT(b)
		c = redis.NewClient(&redis.Options{Addr: rs.Addr})
		flags = []string{"--redis", "redis://" + rs.Addr + "/0"}
	} else {
		cl := redistest.StartClusterT(b, 3)
		c = cl.Client()
		flags = []string{"--redis-cluster", strings.Join(cl.Addrs(), ",")}
	}
	defer c.Close()
	for b.Loop() {
		r := keyspace(b, c, flags, n, buckets)
		b.ReportMetric(float64(r.start.Milliseconds()), "start-ms")
		b.ReportMetric(float64(r.reload.Microseconds())/1000, "reload-ms")
		b.ReportMetric(float64(slices.Max(r.scrapes).Microseconds())/1000, "scrape-ms")
		b.ReportMetric(r.bytesPerBkt, "redis-B/bucket")
		b.ReportMetric(float64(r.scans+r.keys), "scans+keys")
	}
}

// envInt returns the integer in environment variable name, or def.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}
