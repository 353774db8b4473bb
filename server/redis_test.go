package server

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	qs "github.com/sluice-rl/sluice/api/quotaservice"
	v1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/internal/testutil/redistest"
	"github.com/sluice-rl/sluice/limits/limitsyaml"
	redisstore "github.com/sluice-rl/sluice/limits/redis"
	"github.com/sluice-rl/sluice/resources"
	sitestatus "github.com/sluice-rl/sluice/server/status"
)

// TestRedisDown: a server on a real Redis shows it up on the status page
// and in the metrics (Shared's Health and Metrics: the collector of
// `sluice server --redis` is cmd/sluice's); with the Redis stopped, a resource configured
// on_store_error: open answers OK with degraded set (quota service: a
// plain OK) and one that fails closed Unavailable, fast once the breaker
// is open; the status page and the metrics say down and count the
// degraded answers by resource.
func TestRedisDown(t *testing.T) {
	srv, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			srv.Stop()
		}
	}()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	defer c.Close()
	cfg, err := limitsyaml.ParseSection([]byte(`
resources:
  open: {default: {size: 100, fill_rate: 1, max_tokens_per_request: 5}, on_store_error: open}
  closed: {default: {size: 100, fill_rate: 1}}
`))
	if err != nil {
		t.Fatal(err)
	}
	st := redisstore.New(c, redisstore.Options{Prefix: "t:" + t.Name() + ":", BreakerFailures: 1, BreakerProbe: time.Hour})
	t.Cleanup(func() { _ = st.Close() })
	sh := sharedOn(st, nil)
	sh.Copies = nil // no fleet: no etcd
	s := assemble(t, Config{ID: "redis", Repository: Repository{Fixed: resources.Compose(nil, cfg, nil, nil)}, Store: Store{Shared: sh}})
	h := s.Handler()
	api := s.Limits()
	for _, res := range []string{"open", "closed"} {
		if resp, err := api.Allow(t.Context(), &v1.AllowRequest{Resource: res, Domain: "d"}); err != nil || resp.GetStatus() != v1.AllowResponse_OK || resp.GetDegraded() {
			t.Fatalf("%s, Redis up: %v %v", res, resp, err)
		}
	}
	redisSection := func() sitestatus.RedisStatus {
		t.Helper()
		code, body, _ := get(t, h, "/debug/status?format=json")
		var st sitestatus.ServerStatus
		if err := json.Unmarshal([]byte(body), &st); code != 200 || err != nil || st.Redis == nil {
			t.Fatalf("status page: %d %v\n%s", code, err, body)
		}
		return *st.Redis
	}
	if rs := redisSection(); rs.State != "up" || rs.Calls != 2 || rs.Scripts < 2 || rs.RoundTrips < 1 || rs.RoundTripsPerCall <= 0 || rs.Timeout != 0.2 {
		t.Fatalf("Redis up: %+v", rs)
	}
	if _, body, _ := get(t, h, "/debug/status"); !strings.Contains(body, `<td id="redis-state">up</td>`) {
		t.Fatalf("HTML status page, Redis up:\n%s", body)
	}
	// Shared.Metrics (redisShared's sluice_redis_up) is served at
	// /metrics, collected at each scrape.
	if _, body, _ := get(t, h, "/metrics"); !strings.Contains(body, "sluice_redis_up 1") || !strings.Contains(body, "sluice_redis_round_trip_seconds_count") {
		t.Fatalf("metrics, Redis up:\n%s", grepLines(body, "sluice_redis"))
	}
	if h := st.Health(); h.Latency.Count < 1 {
		t.Fatalf("Redis up: no round trip timed: %+v", h)
	}

	srv.Stop()
	stopped = true
	if _, err := api.Allow(t.Context(), &v1.AllowRequest{Resource: "closed", Domain: "d"}); status.Code(err) != codes.Unavailable {
		t.Fatalf("closed, Redis down: %v, want Unavailable", err)
	}
	start := time.Now()
	for range 20 {
		resp, err := api.Allow(t.Context(), &v1.AllowRequest{Resource: "open", Domain: "d", Tokens: 4})
		if err != nil || resp.GetStatus() != v1.AllowResponse_OK || !resp.GetDegraded() || resp.GetGranted() != 4 {
			t.Fatalf("open, Redis down: %v %v, want 4 granted, degraded", resp, err)
		}
		if _, err := api.Allow(t.Context(), &v1.AllowRequest{Resource: "closed", Domain: "d"}); status.Code(err) != codes.Unavailable {
			t.Fatalf("closed, Redis down: %v, want Unavailable", err)
		}
	}
	if resp, _ := s.Limits().QuotaService().Allow(t.Context(), &qs.AllowRequest{Namespace: "open", BucketName: "d"}); resp.GetStatus() != qs.AllowResponse_OK || resp.GetTokensGranted() != 1 {
		t.Fatalf("quota service, open, Redis down: %v", resp)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("41 answers with the breaker open took %v", took)
	}
	rs := redisSection()
	if rs.State != "down" || rs.Breaker != "open" || rs.LastError == "" || rs.LastErrorAt == nil || rs.Failures != 1 || rs.Refused != 41 || rs.Calls != 3 {
		t.Fatalf("Redis down: %+v", rs)
	}
	if _, body, _ := get(t, h, "/debug/status"); !strings.Contains(body, `<td id="redis-state">down (circuit breaker open`) {
		t.Fatalf("HTML status page, Redis down:\n%s", body)
	}
	_, body, _ := get(t, h, "/metrics")
	for _, want := range []string{"sluice_redis_up 0", "sluice_redis_breaker_state 2", "sluice_redis_refused_total 41", "sluice_redis_calls_total 3",
		`sluice_limits_events_total{event="degraded",resource="open"} 21`, `sluice_limits_events_total{event="server_error",resource="closed"} 21`} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics, Redis down: no %q in\n%s", want, grepLines(body, "sluice_redis", "degraded", "server_error"))
		}
	}
}

// grepLines returns the lines of s containing any of subs.
func grepLines(s string, subs ...string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		for _, sub := range subs {
			if strings.Contains(l, sub) {
				out = append(out, l)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}

// sharedOn is the shared store on st as Config.Store.Redis opens it
// (redisShared); closing it closes st and then c, if any.
func sharedOn(st *redisstore.Store, c redis.UniversalClient) *Shared {
	sh := redisShared(st)
	sh.Close = func() error {
		_ = st.Close()
		if c != nil {
			return c.Close()
		}
		return nil
	}
	return &sh
}

// TestRedisAwayAtStart: a Redis that does not answer at start is
// transient: the server starts with limits configured, is not ready
// (/readyz and the status page name Redis) and decides by each
// resource's on_store_error, until Redis answers; then it is ready and
// decides on Redis.
func TestRedisAwayAtStart(t *testing.T) {
	srv := redistest.StartT(t)
	srv.Stop()
	cfg, err := limitsyaml.ParseSection([]byte(`
resources:
  open: {default: {size: 100, fill_rate: 1}, on_store_error: open}
  closed: {default: {size: 100, fill_rate: 1}}
`))
	if err != nil {
		t.Fatal(err)
	}
	s := assemble(t, Config{ID: "away", Repository: Repository{Fixed: resources.Compose(nil, cfg, nil, nil)},
		Store: Store{Redis: "redis://" + srv.Addr + "/0", KeyPrefix: "t:" + t.Name() + ":"}})
	t.Cleanup(func() { _ = s.shared.Close() })
	h := s.Handler()
	if code, body, _ := get(t, h, "/readyz"); code != 503 || !strings.Contains(body, "Redis has not answered") {
		t.Fatalf("/readyz with Redis away: %d %q", code, body)
	}
	if _, body, _ := get(t, h, "/debug/status"); !strings.Contains(body, "not answered since the server started") {
		t.Fatalf("status page with Redis away:\n%s", grepLines(body, "redis"))
	}
	api := s.Limits()
	if resp, err := api.Allow(t.Context(), &v1.AllowRequest{Resource: "open", Domain: "d"}); err != nil || resp.GetStatus() != v1.AllowResponse_OK || !resp.GetDegraded() {
		t.Fatalf("open, Redis away: %v %v, want OK degraded", resp, err)
	}
	if _, err := api.Allow(t.Context(), &v1.AllowRequest{Resource: "closed", Domain: "d"}); status.Code(err) != codes.Unavailable {
		t.Fatalf("closed, Redis away: %v, want Unavailable", err)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "ready once Redis answers", func() bool { ok, _ := s.Ready(); return ok })
	testutil.Eventually(t, 20*time.Second, "a decision on Redis", func() bool {
		resp, err := api.Allow(t.Context(), &v1.AllowRequest{Resource: "closed", Domain: "d"})
		return err == nil && resp.GetStatus() == v1.AllowResponse_OK && !resp.GetDegraded()
	})
}

// TestRedisRefusedAtStart: a Redis that refuses the credentials at start
// is a configuration error naming the field and Redis's refusal.
func TestRedisRefusedAtStart(t *testing.T) {
	srv := redistest.StartT(t)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer admin.Close()
	if err := admin.ConfigSet(t.Context(), "requirepass", "s3cret").Err(); err != nil {
		t.Fatal(err)
	}
	pw := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pw, []byte("wrong\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		store Store
		want  string
	}{
		{"no password", Store{Redis: "redis://" + srv.Addr}, "Store.Redis: limits/redis: Redis refused the connection: NOAUTH"},
		{"wrong password file", Store{Redis: "redis://:s3cret@" + srv.Addr, PasswordFile: pw}, "Store.PasswordFile: limits/redis: Redis refused the connection: WRONGPASS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(t.Context(), Config{Store: tc.store})
			if err == nil || s != nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v %v, want %q", s, err, tc.want)
			}
		})
	}
}

// TestRedisRefusedAfterStart: a password rotated on Redis before the
// server's file is a refusal the status page shows (naming Redis's
// error), /metrics counts (sluice_redis_auth_failures_total), and that
// ends once the file has the new password, without a restart.
func TestRedisRefusedAfterStart(t *testing.T) {
	srv := redistest.StartT(t)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer admin.Close()
	rotate := func(password string) {
		t.Helper()
		if err := admin.ConfigSet(t.Context(), "requirepass", password).Err(); err != nil {
			t.Fatal(err)
		}
		if err := admin.Do(t.Context(), "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes").Err(); err != nil {
			t.Fatal(err)
		}
	}
	rotate("one")
	pw := filepath.Join(t.TempDir(), "pw")
	write := func(password string) {
		t.Helper()
		if err := os.WriteFile(pw, []byte(password), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("one")
	cfg, err := limitsyaml.ParseSection([]byte("resources:\n  r: {default: {size: 100, fill_rate: 1}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	s := assemble(t, Config{ID: "refused", Repository: Repository{Fixed: resources.Compose(nil, cfg, nil, nil)},
		Store: Store{Redis: "redis://" + srv.Addr + "/0", PasswordFile: pw, KeyPrefix: "t:" + t.Name() + ":"}})
	t.Cleanup(func() { _ = s.shared.Close() })
	h := s.Handler()
	allow := func() error {
		_, err := s.Limits().Allow(t.Context(), &v1.AllowRequest{Resource: "r", Domain: "d"})
		return err
	}
	if err := allow(); err != nil {
		t.Fatal(err)
	}
	rotate("two")
	testutil.Eventually(t, 20*time.Second, "the refusal on the status page", func() bool {
		_ = allow()
		_, body, _ := get(t, h, "/debug/status")
		return strings.Contains(body, `id="redis-refusal"`) && strings.Contains(body, "WRONGPASS")
	})
	if _, body, _ := get(t, h, "/metrics"); strings.Contains(body, "sluice_redis_auth_failures_total 0") || !strings.Contains(body, "sluice_redis_auth_failures_total") {
		t.Fatalf("metrics while refused:\n%s", grepLines(body, "sluice_redis_auth"))
	}
	if ok, why := s.Ready(); !ok {
		t.Fatalf("not ready while refused (%s): a refusal after start is shown, the server stays ready", why)
	}
	write("two")
	testutil.Eventually(t, 20*time.Second, "decisions once the file has the new password", func() bool { return allow() == nil })
	if _, body, _ := get(t, h, "/debug/status"); strings.Contains(body, `id="redis-refusal"`) {
		t.Fatal("the refusal still shown after the file caught up")
	}
}
