package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	v1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/internal/testutil/redistest"
)

// sentinelConfig: a roomy bucket per user for the load, and a bucket of
// 20 that does not refill during the test, to check that the servers
// share one master after the failover.
const sentinelConfig = testConfig + `
limits:
  resources:
    users:
      template: {size: 1000000, fill_rate: 100000, wait_timeout: 0s}
    exact:
      template: {size: 20, fill_rate: 0.001, wait_timeout: 0s}
`

// sentinelURL is go-redis's failover URL of s's master, with the
// master's password.
func sentinelURL(s *redistest.Sentinel, password string) string {
	addrs := s.SentinelAddrs()
	u := "redis://" + addrs[0] + "/0?master_name=" + s.Name()
	for _, a := range addrs[1:] {
		u += "&addr=" + a
	}
	return u + "&password=" + password
}

// TestSentinelFailover: two `sluice server --redis-sentinel` processes
// under load while Sentinel fails the master over (SENTINEL FAILOVER):
// the servers follow the new master without a restart, every answer
// meanwhile is OK or Unavailable (never another error), both decide on
// Redis again within a generous bound, and afterwards they share the new
// master exactly (40 requests on a bucket of 20 grant 20).
func TestSentinelFailover(t *testing.T) {
	t.Parallel() // its own Redis and processes, mostly waiting
	sent := redistest.StartSentinelT(t, redistest.Security{Password: "s3cret"})
	cfg := writeConfig(t, sentinelConfig)
	var clients []v1.LimitsClient
	for i := range 2 {
		p := startProc(t, fmt.Sprint("s", i), "server", "--config", cfg, "--redis-sentinel", sentinelURL(sent, "s3cret"))
		clients = append(clients, v1.NewLimitsClient(testutil.Dial(t, p.addr)))
	}

	ctx, stop := context.WithCancel(t.Context())
	var ok, unavailable atomic.Int64
	var lastErr atomic.Pointer[time.Time]
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			c := clients[i%2]
			for ctx.Err() == nil {
				rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				r, err := c.Allow(rctx, &v1.AllowRequest{Resource: "users", Domain: fmt.Sprint("u", i)})
				cancel()
				switch {
				case ctx.Err() != nil:
				case err == nil && r.GetStatus() == v1.AllowResponse_OK && !r.GetDegraded():
					ok.Add(1)
				case status.Code(err) == codes.Unavailable:
					unavailable.Add(1)
					now := time.Now()
					lastErr.Store(&now)
					time.Sleep(10 * time.Millisecond)
				default:
					t.Errorf("Allow during the failover: %v %v", r, err)
				}
			}
		})
	}
	testutil.Eventually(t, 30*time.Second, "decisions under load", func() bool { return ok.Load() > 100 })
	start := time.Now()
	old, err := sent.MasterAddr(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	nm, err := sent.Failover(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	promoted := time.Since(start)
	// Both servers decide on Redis again: 200 more OKs after the new
	// master is known, and no Unavailable for a second.
	testutil.Eventually(t, 60*time.Second, "decisions again on the new master", func() bool {
		le := lastErr.Load()
		return le == nil || time.Since(*le) > time.Second
	})
	before := ok.Load()
	testutil.Eventually(t, 30*time.Second, "decisions go on", func() bool { return ok.Load() > before+200 })
	stop()
	wg.Wait()
	last := "none"
	if le := lastErr.Load(); le != nil {
		last = le.Sub(start).Round(time.Millisecond).String() + " after the failover began"
	}
	t.Logf("failover %s → %s: promoted in %v; last Unavailable: %s; %d OK, %d Unavailable",
		old, nm, promoted.Round(time.Millisecond), last, ok.Load(), unavailable.Load())

	// One master for both: a bucket of 20 grants 20 of 40, across them.
	var granted atomic.Int64
	for i := range 40 {
		wg.Go(func() {
			r, err := clients[i%2].Allow(t.Context(), &v1.AllowRequest{Resource: "exact", Domain: "after"})
			if err != nil {
				t.Errorf("Allow after the failover: %v", err)
				return
			}
			if r.GetStatus() == v1.AllowResponse_OK {
				granted.Add(1)
			}
		})
	}
	wg.Wait()
	if granted.Load() != 20 {
		t.Fatalf("%d of 40 granted on a bucket of 20 after the failover, want 20: the servers do not share the new master", granted.Load())
	}
	c := sent.Client()
	defer c.Close()
	keys, err := c.Keys(t.Context(), "sluice:{rexact}*").Result()
	if err != nil || len(keys) != 1 || !strings.Contains(keys[0], "after") {
		t.Fatalf("the new master's keys of exact: %q %v", keys, err)
	}
}
