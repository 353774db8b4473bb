package limits_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/client/limits"
	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/internal/testutil/etcdtest"
	"github.com/sluice-rl/sluice/internal/testutil/redistest"
	"github.com/sluice-rl/sluice/limits/copies"
	"github.com/sluice-rl/sluice/limits/limitsyaml"
	redisstore "github.com/sluice-rl/sluice/limits/redis"
	"github.com/sluice-rl/sluice/resources"
	"github.com/sluice-rl/sluice/server"
)

// startRedisServer runs the real server (package server, in process, on
// loopback) with its token buckets and its shared copy log on rs, a real
// redis-server: the rate-limited resource "open" and the copy-limited
// "open-copies" are configured on_store_error: open. The store's breaker
// opens at the first failure and probes hourly, so once Redis is gone
// every answer is degraded at once. It returns the server's address.
func startRedisServer(t *testing.T, rs *redistest.Server) string {
	t.Helper()
	rc := redis.NewClient(&redis.Options{Addr: rs.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rc.Close() })
	st := redisstore.New(rc, redisstore.Options{Prefix: "t:" + t.Name() + ":", BreakerFailures: 1, BreakerProbe: time.Hour})
	t.Cleanup(func() { _ = st.Close() })
	cfg, err := limitsyaml.ParseSection([]byte(`
resources:
  open: {default: {size: 1000, fill_rate: 1000, max_tokens_per_request: 100}, on_store_error: open}
`))
	if err != nil {
		t.Fatal(err)
	}
	// The copy log is shared through a fleet on a real etcd, as in
	// production: the membership gives the server its epoch.
	etcd := etcdtest.StartEtcd(t)
	ctx, cancel := context.WithCancel(context.Background())
	s, err := server.New(ctx, server.Config{ID: "limits-client-test", Etcd: server.Etcd{Endpoints: []string{etcd.Endpoint}}, Listen: server.Listen{Address: "127.0.0.1:0"}, Runtime: server.Runtime{Logger: quiet}, Repository: server.Repository{Fixed: resources.Compose(nil, cfg, &copies.Config{Resources: map[string]copies.Resource{"open-copies": {DomainLimit: 5, OnStoreError: copies.FailOpen}}}, nil)}, Store: server.Store{Shared: &server.Shared{Limits: st, Copies: redisstore.NewCopyLog(st)}}, Sessions: server.Sessions{Fleet: server.Fleet{TTL: time.Second, Prefix: "/" + t.Name()}}})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	testutil.Eventually(t, 30*time.Second, "the fleet unfences the server", func() bool { return !s.Sessions().Fenced() })
	return s.Addr()
}

// TestStoreDegraded: against the real server on a real Redis, every path
// that reads an Allow or Reserve answer — manual Allow and Reserve, the
// naive and smart modes' Acquire, Request, ReserveCopies' hold — says
// StoreDegraded exactly when the service granted while its store was down
// (the resources are on_store_error: open): not while Redis answers, and
// on every answer once it is stopped. Such grants are the service's
// (Source FromService or FromLocalBucket, not Degraded; the hold is held
// in the session), and are counted in
// sluice_quota_client_degraded_total{reason="store"} by call.
func TestStoreDegraded(t *testing.T) {
	rs := redistest.StartT(t)
	addr := startRedisServer(t, rs)
	// Generous timeouts: the naive and smart modes must get the service's
	// answer, not the fallback limiter's, on a loaded machine.
	naive, reg := newClient(t, addr, limits.WithTimeout(30*time.Second))
	smart, sreg := newClient(t, addr, limits.WithTimeout(30*time.Second), limits.WithSmart(limits.Smart{Batch: 4, TTL: time.Hour}))
	ctx := t.Context()

	type path struct {
		name string
		// grant makes one grant on the domain, and returns its Source and
		// whether it says StoreDegraded, and Degraded.
		grant func(domain string) (limits.Source, bool, bool, error)
		want  limits.Source
	}
	fromGrant := func(g limits.Grant, err error) (limits.Source, bool, bool, error) {
		return g.Source, g.StoreDegraded, g.Degraded(), err
	}
	paths := []path{
		{"manual Allow", func(d string) (limits.Source, bool, bool, error) {
			return fromGrant(naive.Allow(ctx, "open", d, 2))
		}, limits.FromService},
		{"manual Reserve", func(d string) (limits.Source, bool, bool, error) {
			return fromGrant(naive.Reserve(ctx, "open", d, 2))
		}, limits.FromService},
		{"naive Acquire", func(d string) (limits.Source, bool, bool, error) {
			return fromGrant(naive.Acquire(ctx, "open", d, 1))
		}, limits.FromService},
		{"smart Acquire", func(d string) (limits.Source, bool, bool, error) {
			return fromGrant(smart.Acquire(ctx, "open", d, 1))
		}, limits.FromLocalBucket},
		{"Request", func(d string) (limits.Source, bool, bool, error) {
			return fromGrant(naive.Request(ctx, "open", d, 3, 1, 0))
		}, limits.FromService},
		{"ReserveCopies", func(d string) (limits.Source, bool, bool, error) {
			h, err := naive.ReserveCopies(ctx, "open-copies", d, 2, 1, 0)
			if err != nil {
				return 0, false, false, err
			}
			if h.Copies() != 2 || h.Session() == "" {
				t.Errorf("ReserveCopies on %s: %d copies in session %q, want 2 held by the service", d, h.Copies(), h.Session())
			}
			defer func() {
				if err := h.Release(ctx, h.Copies()); err != nil {
					t.Errorf("releasing the hold on %s: %v", d, err)
				}
			}()
			return h.Source(), h.StoreDegraded(), h.Degraded(), nil
		}, limits.FromService},
	}
	check := func(phase, domain string, wantStore bool) {
		t.Helper()
		for _, p := range paths {
			src, store, degraded, err := p.grant(domain)
			if err != nil || src != p.want || store != wantStore || degraded {
				t.Errorf("%s, %s: source %v, StoreDegraded %v, Degraded %v, err %v; want source %v, StoreDegraded %v, not Degraded",
					phase, p.name, src, store, degraded, err, p.want, wantStore)
			}
		}
	}

	check("Redis up", "up", false)
	// The smart mode's second call takes a token of the same top-up.
	if g, err := smart.Acquire(ctx, "open", "up", 1); err != nil || g.Source != limits.FromLocalBucket || g.StoreDegraded {
		t.Errorf("Redis up, smart Acquire's local token: %+v %v", g, err)
	}
	for _, call := range []string{"manual", "decide", "topup", "request", "reserve"} {
		if got := metric(t, reg, "sluice_quota_client_degraded_total", "call", call, "reason", "store") +
			metric(t, sreg, "sluice_quota_client_degraded_total", "call", call, "reason", "store"); got != 0 {
			t.Errorf("Redis up: degraded_total{call=%q, reason=\"store\"} = %v, want 0", call, got)
		}
	}

	rs.Stop()
	check("Redis down", "down", true)
	if g, err := smart.Acquire(ctx, "open", "down", 1); err != nil || g.Source != limits.FromLocalBucket || !g.StoreDegraded {
		t.Errorf("Redis down, smart Acquire's local token: %+v %v, want StoreDegraded", g, err)
	}
	for call, want := range map[string]float64{"manual": 2, "decide": 1, "request": 1, "reserve": 1} {
		if got := metric(t, reg, "sluice_quota_client_degraded_total", "call", call, "reason", "store"); got != want {
			t.Errorf("Redis down: degraded_total{call=%q, reason=\"store\"} = %v, want %v", call, got, want)
		}
	}
	if got := metric(t, sreg, "sluice_quota_client_degraded_total", "call", "topup", "reason", "store"); got < 1 {
		t.Errorf("Redis down: degraded_total{call=\"topup\", reason=\"store\"} = %v, want ≥ 1", got)
	}
}
