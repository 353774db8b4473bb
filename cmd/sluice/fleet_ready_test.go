package main

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	v1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/internal/testutil/etcdtest"
	"github.com/sluice-rl/sluice/internal/testutil/redistest"
)

// TestFleetReadiness starts a new fleet of three `sluice server --redis`
// processes on a fresh Redis and etcd, and polls each, every few ms, for
// its readiness (/readyz and gRPC health) and, once all three are members
// of the fleet (traffic arriving at a fleet that is up: the first Reserves
// then find no record of the resource while other servers could hold
// copies), a Reserve of a copy-limited resource. It asserts what
// docs/charon.md ("Readiness") promises: no server says ready (on either
// probe, before and after the Reserve) while the Reserve fails
// (Unavailable while the copy log learns, or any other error), so each
// server's Reserve succeeds once it says ready; and every server gets
// there. It logs, per server, the time from its start until it said ready
// and until its first Reserve was granted (docs/charon.md, "Readiness",
// quotes the figures).
func TestFleetReadiness(t *testing.T) {
	rs := redistest.StartT(t)
	etcd := etcdtest.StartEtcd(t)
	cfg := writeConfig(t, fleetConfig)
	url := "redis://" + rs.Addr + "/0"
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	polls := make([]*readinessPoll, 3)
	var formed atomic.Bool // the three are members: the pollers reserve
	var wg sync.WaitGroup
	start := time.Now()
	for i := range polls {
		pstart := time.Now()
		p := startProc(t, fmt.Sprint("s", i), "server", "--config", cfg, "--etcd-endpoints", etcd.Endpoint,
			"--fleet-ttl", "2s", "--fleet-prefix", "/"+t.Name(), "--redis", url)
		conn := testutil.Dial(t, p.addr)
		polls[i] = &readinessPoll{name: p.name, addr: p.addr, start: pstart, formed: &formed,
			limits: v1.NewLimitsClient(conn), health: healthpb.NewHealthClient(conn)}
		wg.Go(func() { polls[i].run(ctx) })
	}
	ec := etcd.Client(t)
	testutil.Eventually(t, 30*time.Second, "three members of the fleet", func() bool {
		r, err := ec.Get(ctx, "/"+t.Name()+"/members/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		return err == nil && r.Count == 3
	})
	formed.Store(true)
	t.Logf("the fleet has its three members %v after the first server's start", time.Since(start).Round(time.Millisecond))
	wg.Wait()
	for _, p := range polls {
		t.Logf("%s: ready (/readyz) %v after its start, gRPC health SERVING %v, first Reserve granted %v; %d Reserves, %d refused Unavailable",
			p.name, p.ready.Round(time.Millisecond), p.serving.Round(time.Millisecond), p.reserved.Round(time.Millisecond), p.reserves, p.unavailable)
		if len(p.violations) > 0 {
			t.Errorf("%s: said ready around %d failed Reserves; the first: %s", p.name, len(p.violations), p.violations[0])
		}
		if p.reserved == 0 || p.ready == 0 || p.serving == 0 {
			t.Errorf("%s: within 60 s: ready after %v, SERVING after %v, a Reserve granted after %v (0: never)", p.name, p.ready, p.serving, p.reserved)
		}
	}
}

// readinessPoll polls one server of TestFleetReadiness.
type readinessPoll struct {
	name, addr string
	start      time.Time    // of the process
	formed     *atomic.Bool // set: reserve
	limits     v1.LimitsClient
	health     healthpb.HealthClient

	// ready, serving and reserved are the times from the start until
	// /readyz first answered 200, gRPC health SERVING and a Reserve was
	// granted (0: not yet).
	ready, serving, reserved time.Duration
	reserves, unavailable    int      // Reserves sent, and refused with Unavailable
	violations               []string // ready around a failed Reserve
}

// readiness is one look at a server's readiness.
type readiness struct{ http, grpc bool }

// afterReserved is how long a server is polled after its first granted
// Reserve.
const afterReserved = time.Second

// run polls until ctx ends, or afterReserved after the first granted
// Reserve: each poll looks at readiness and, once the fleet is formed,
// opens a session if it has none, reserves one copy of "pool" (releasing
// it), and looks at readiness again.
func (p *readinessPoll) run(ctx context.Context) {
	hc := &http.Client{Timeout: 2 * time.Second}
	look := func() readiness {
		var r readiness
		if resp, err := hc.Get("http://" + p.addr + "/readyz"); err == nil {
			r.http = resp.StatusCode == http.StatusOK
			_ = resp.Body.Close()
		}
		hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if h, err := p.health.Check(hctx, &healthpb.HealthCheckRequest{}); err == nil {
			r.grpc = h.GetStatus() == healthpb.HealthCheckResponse_SERVING
		}
		return r
	}
	session := ""
	for ctx.Err() == nil && (p.reserved == 0 || time.Since(p.start) < p.reserved+afterReserved) {
		before := look()
		reserving := p.formed.Load()
		var err error
		if reserving {
			err = p.reserve(ctx, &session)
		}
		after := look()
		at := time.Since(p.start)
		if before.http && p.ready == 0 {
			p.ready = at
		}
		if before.grpc && p.serving == 0 {
			p.serving = at
		}
		if reserving && err == nil && p.reserved == 0 {
			p.reserved = at
		}
		if status.Code(err) == codes.Unavailable {
			p.unavailable++
		}
		if err != nil && ctx.Err() == nil {
			if before.http && after.http {
				p.violations = append(p.violations, fmt.Sprintf("at %v: /readyz 200 before and after a failed Reserve: %v", at, err))
			}
			if before.grpc && after.grpc {
				p.violations = append(p.violations, fmt.Sprintf("at %v: gRPC health SERVING before and after a failed Reserve: %v", at, err))
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// reserve opens a session if *session is "", then reserves one copy of
// "pool" in it and releases it.
func (p *readinessPoll) reserve(ctx context.Context, session *string) error {
	if *session == "" {
		r, err := p.limits.OpenSession(ctx, &v1.OpenSessionRequest{})
		if err != nil {
			return err
		}
		*session = r.GetSessionId()
	}
	p.reserves++
	r, err := p.limits.Reserve(ctx, &v1.ReserveRequest{SessionId: *session, Resource: "pool", Domain: "ready", Copies: 1})
	if status.Code(err) == codes.NotFound { // the session was dropped (a fenced engine)
		*session = ""
	}
	if err != nil {
		return err
	}
	if r.GetGranted() != 1 {
		return fmt.Errorf("reserve of 1 copy of pool: %v, want granted", r)
	}
	_, err = p.limits.Release(ctx, &v1.ReleaseRequest{SessionId: *session, Resource: "pool", Domain: "ready", Copies: 1})
	return err
}
