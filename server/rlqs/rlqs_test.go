package rlqs_test

import (
	"context"
	"fmt"
	"math"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluice-rl/sluice/api/doorman/doormanconnect"
	"github.com/sluice-rl/sluice/internal/hooks"
	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/internal/testutil/rlqsproxy"
	"github.com/sluice-rl/sluice/resources"
	"github.com/sluice-rl/sluice/server/capacity"
	"github.com/sluice-rl/sluice/server/rlqs"
	"github.com/sluice-rl/sluice/server/rlqs/state"
)

func TestMain(m *testing.M) {
	testutil.QuietLogs()
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreCurrent()); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// templates are the tests' resources: short leases, so that renewals,
// abandons and expiries happen within seconds.
const templates = `
resources:
  - identifier_glob: "web/*"
    capacity: 1000
    algorithm: {kind: FAIR_SHARE, lease_length: 2, refresh_interval: 1, learning_mode_duration: 0}
  - identifier_glob: "static/*"
    capacity: 30
    algorithm: {kind: STATIC, lease_length: 2, refresh_interval: 1, learning_mode_duration: 0}
`

// report is the emulated proxies' reporting interval.
const report = 200 * time.Millisecond

// generous bounds an outcome's wait (never a timing claim).
const generous = 20 * time.Second

type fixture struct {
	c    *capacity.Service
	s    *rlqs.Service
	conn *grpc.ClientConn
	reg  *prometheus.Registry
}

// serve serves the RLQS service over a root capacity service with doc's
// templates on a loopback port.
func serve(t *testing.T, doc string, opts rlqs.Options) *fixture {
	t.Helper()
	repo, err := resources.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	c := capacity.New(capacity.Options{ID: "root", Config: repo, Logger: testutil.Logger()})
	run(t, c)
	return serveOver(t, c, opts)
}

// run sweeps c's leases until the test ends.
func run(t *testing.T, c *capacity.Service) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Run(ctx, 100*time.Millisecond)
	}()
	t.Cleanup(func() { cancel(); <-done })
}

func serveOver(t *testing.T, c *capacity.Service, opts rlqs.Options) *fixture {
	t.Helper()
	reg := prometheus.NewRegistry()
	opts.Registry, opts.Logger = reg, testutil.Logger()
	s, err := rlqs.New(c, opts)
	if err != nil {
		t.Fatal(err)
	}
	conn := testutil.ServeGRPC(t, func(gs *grpc.Server) { rlqspb.RegisterRateLimitQuotaServiceServer(gs, s) })
	return &fixture{c: c, s: s, conn: conn, reg: reg}
}

func (f *fixture) proxy(t *testing.T, domain string) *rlqsproxy.Proxy {
	t.Helper()
	p, err := rlqsproxy.New(context.Background(), f.conn, rlqsproxy.Options{Domain: domain, ReportInterval: report,
		NoAssignment: typev3.RateLimitStrategy_DENY_ALL, Expired: typev3.RateLimitStrategy_DENY_ALL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// rate is a demand that tests move.
type rate struct {
	mu sync.Mutex
	v  float64
}

func (r *rate) set(v float64) { r.mu.Lock(); r.v = v; r.mu.Unlock() }
func (r *rate) get() float64  { r.mu.Lock(); defer r.mu.Unlock(); return r.v }

// drive offers each proxy's bucket its demand until the test ends.
func drive(t *testing.T, ps []*rlqsproxy.Proxy, bucket map[string]string, demands []*rate) {
	ctx, cancel := context.WithCancel(context.Background())
	var dones []<-chan struct{}
	for i, p := range ps {
		dones = append(dones, p.Drive(ctx, bucket, demands[i].get))
	}
	t.Cleanup(func() {
		cancel()
		for _, d := range dones {
			<-d
		}
	})
}

// assigned returns p's assigned rate for bucket (NaN: none).
func assigned(p *rlqsproxy.Proxy, bucket map[string]string) float64 {
	a, ok := p.Assignment(bucket)
	if !ok {
		return math.NaN()
	}
	return a.Rate
}

// fairShares: the small stream is assigned its demand (within the
// rounding and the noise of its measured demand: up to 25 % more under a
// loaded machine, see state.Hysteresis), and the others equal shares of
// the rest, all of it used and never more.
func fairShares(small, demand float64, big []float64, capacity float64) bool {
	sum := small
	for _, x := range big {
		sum += x
		if !near(x, big[0]) {
			return false
		}
	}
	return small >= 0.95*demand && small <= 1.25*demand && sum >= 0.97*capacity && sum <= capacity
}

// near: within 6 % (a stream may hold up to state.Hysteresis more than its
// demand while its demand falls, and is assigned up to twice
// state.RateMargin less than its lease).
func near(got, want float64) bool { return math.Abs(got-want) <= 0.06*want+0.01 }

func rates(n int, v ...float64) []*rate {
	out := make([]*rate, n)
	for i := range out {
		out[i] = &rate{v: v[i%len(v)]}
	}
	return out
}

// TestFairShares: three proxies wanting 100, 600 and 600 of a capacity
// of 1000 are assigned its max-min fair shares, 100, 450 and 450; the admitted
// requests never exceed the capacity plus the bursts of the token buckets
// they were sent; the assignments are token buckets whose time to live is
// the lease's remaining length, holding one second's worth of their rate,
// a quarter of a second's (state.LimitedBurst) for the two streams
// wanting more than their share.
func TestFairShares(t *testing.T) {
	f := serve(t, templates, rlqs.Options{})
	bucket := map[string]string{"name": "api"}
	ps := []*rlqsproxy.Proxy{f.proxy(t, "web"), f.proxy(t, "web"), f.proxy(t, "web")}
	drive(t, ps, bucket, rates(3, 100, 600, 600))
	// Until its first assignment a proxy denies every request (its
	// no_assignment_behavior), which comes with the first report that
	// measures demand (state.MinWindow): the capacity is counted from it.
	testutil.Eventually(t, generous, "a first assignment", func() bool {
		for _, p := range ps {
			if _, ok := p.Assignment(bucket); ok {
				return true
			}
		}
		return false
	})
	start := time.Now()
	testutil.Eventually(t, generous, "max-min fair shares 100, 450, 450", func() bool {
		small, a, b := assigned(ps[0], bucket), assigned(ps[1], bucket), assigned(ps[2], bucket)
		return fairShares(small, 100, []float64{a, b}, 1000)
	})
	for i, p := range ps {
		a, _ := p.Assignment(bucket)
		if ttl := time.Until(a.Expires); ttl <= 0 || ttl > 2*time.Second+report {
			t.Errorf("proxy %d: time to live %v, want within the lease length (2 s)", i, ttl)
		}
		burst := time.Second
		if i > 0 {
			burst = state.LimitedBurst
		}
		if want := math.Ceil(a.Rate * burst.Seconds()); float64(a.MaxTokens) < want || float64(a.MaxTokens) > want+1 {
			t.Errorf("proxy %d: max_tokens %d at rate %v, want %v's worth", i, a.MaxTokens, a.Rate, burst)
		}
	}
	whole := stats(ps)
	checkBound(t, ps, 1000, time.Since(start), whole)
	checkUsed(t, 1000, time.Since(start), whole)
	// At the fair shares, over a window: what the proxies admit is within
	// the capacity, plus what their buckets held at its start (≤ max_tokens
	// each), plus the bursts of the buckets sent meanwhile (a new token
	// bucket starts full); the assignments stay put, so there are few.
	time.Sleep(time.Second) // settling: the small stream's wants take the noise's top
	window, held := checkWindow(t, ps, bucket, 1000, 1500*time.Millisecond)
	if window.Bursts > 2*held {
		t.Errorf("%d tokens of bursts in 1.5 s at steady shares, want at most %d: assignments churn", window.Bursts, 2*held)
	}
	for _, m := range []struct {
		name string
		min  float64
	}{{"sluice_rlqs_streams", 3}, {"sluice_rlqs_buckets", 3}, {"sluice_rlqs_reports_total", 3}, {"sluice_rlqs_assignments_total", 3}} {
		if v, _ := testutil.MetricValue(t, f.reg, m.name, "domain", "web"); v < m.min {
			t.Errorf("%s{domain=web} %v, want at least %v", m.name, v, m.min)
		}
	}
	st, err := f.c.Status("web/name=api")
	if err != nil {
		t.Fatal(err)
	}
	if st.Clients != 3 || st.SumHas > 1000 {
		t.Errorf("resource: %d clients holding %v, want 3 holding ≤ 1000", st.Clients, st.SumHas)
	}
}

// stats returns the proxies' counts, summed.
func stats(ps []*rlqsproxy.Proxy) rlqsproxy.Stats {
	var sum rlqsproxy.Stats
	for _, p := range ps {
		st := p.Stats()
		sum.Allowed += st.Allowed
		sum.Denied += st.Denied
		sum.Bursts += st.Bursts
		sum.Assignments += st.Assignments
		sum.Abandons += st.Abandons
	}
	return sum
}

func sub(a, b rlqsproxy.Stats) rlqsproxy.Stats {
	return rlqsproxy.Stats{Allowed: a.Allowed - b.Allowed, Denied: a.Denied - b.Denied, Bursts: a.Bursts - b.Bursts,
		Assignments: a.Assignments - b.Assignments, Abandons: a.Abandons - b.Abandons}
}

// checkBound: what the proxies admitted (st) over elapsed is at most the
// capacity × elapsed, plus the bursts of the token buckets they were sent
// (each starts full), plus held (the tokens their buckets held at the
// start).
func checkBound(t *testing.T, ps []*rlqsproxy.Proxy, capacity float64, elapsed time.Duration, st rlqsproxy.Stats, held ...int64) {
	t.Helper()
	var h int64
	for _, x := range held {
		h += x
	}
	bound := capacity*elapsed.Seconds() + float64(st.Bursts+h)
	t.Logf("admitted %d in %v: bound %.0f (capacity × time %.0f + bursts %d + held %d)", st.Allowed, elapsed.Round(time.Millisecond), bound, capacity*elapsed.Seconds(), st.Bursts, h)
	if float64(st.Allowed) > bound {
		t.Errorf("admitted %d > bound %.0f", st.Allowed, bound)
	}
}

// checkUsed: the proxies, each assigned its share, admitted (st) at
// least half the capacity over elapsed.
func checkUsed(t *testing.T, capacity float64, elapsed time.Duration, st rlqsproxy.Stats) {
	t.Helper()
	if st.Allowed < int64(0.5*capacity*elapsed.Seconds()) {
		t.Errorf("admitted %d in %v: not even half the capacity used", st.Allowed, elapsed)
	}
}

// checkWindow: over window after the proxies reached their shares, what
// they admit (st) is within the bound (their buckets holding at most
// held, Σ max_tokens, at its start) and uses at least half the capacity.
func checkWindow(t *testing.T, ps []*rlqsproxy.Proxy, bucket map[string]string, capacity float64, window time.Duration) (st rlqsproxy.Stats, held int64) {
	t.Helper()
	before, at := stats(ps), time.Now()
	for _, p := range ps {
		a, _ := p.Assignment(bucket)
		held += int64(a.MaxTokens)
	}
	time.Sleep(window)
	st, elapsed := sub(stats(ps), before), time.Since(at)
	checkBound(t, ps, capacity, elapsed, st, held)
	checkUsed(t, capacity, elapsed, st)
	return st, held
}

// TestProxyLeaves: when one of two proxies sharing a capacity leaves, its
// stream's leases are released and the other is pushed its full demand
// at once, without waiting for a report; and when a proxy's demand drops,
// the other grows.
func TestProxyLeaves(t *testing.T) {
	f := serve(t, templates, rlqs.Options{})
	bucket := map[string]string{"name": "api"}
	a, b := f.proxy(t, "web"), f.proxy(t, "web")
	demand := rates(2, 800)
	drive(t, []*rlqsproxy.Proxy{a, b}, bucket, demand)
	testutil.Eventually(t, generous, "500 each", func() bool { return near(assigned(a, bucket), 500) && near(assigned(b, bucket), 500) })

	demand[0].set(200)
	took := testutil.Eventually(t, generous, "b grows to 800 when a wants 200", func() bool {
		return fairShares(assigned(a, bucket), 200, []float64{assigned(b, bucket)}, 1000)
	})
	t.Logf("a's demand 800 → 200: b assigned 800 after %v (report interval %v)", took, report)

	demand[0].set(800)
	testutil.Eventually(t, generous, "500 each again", func() bool { return near(assigned(a, bucket), 500) && near(assigned(b, bucket), 500) })
	pushedBefore, _ := testutil.MetricValue(t, f.reg, "sluice_rlqs_assignments_pushed_total", "domain", "web")
	a.Close()
	took = testutil.Eventually(t, generous, "b gets 800 once a left", func() bool { return assigned(b, bucket) >= 0.95*800 })
	t.Logf("a left: b assigned 800 after %v", took)
	if pushed, _ := testutil.MetricValue(t, f.reg, "sluice_rlqs_assignments_pushed_total", "domain", "web"); pushed <= pushedBefore {
		t.Errorf("sluice_rlqs_assignments_pushed_total %v, want more than %v: a's share should have been pushed to b", pushed, pushedBefore)
	}
	testutil.Eventually(t, generous, "a's stream counted out", func() bool {
		v, _ := testutil.MetricValue(t, f.reg, "sluice_rlqs_streams", "domain", "web")
		return v == 1
	})
}

// TestPriorityBands: the pair priority=N puts a bucket's stream in band
// N of the same resource: the higher band is served first.
func TestPriorityBands(t *testing.T) {
	f := serve(t, templates, rlqs.Options{})
	hi := map[string]string{"name": "api", rlqs.PriorityKey: "10"}
	lo := map[string]string{"name": "api", rlqs.PriorityKey: "1"}
	a, b := f.proxy(t, "web"), f.proxy(t, "web")
	ctx, cancel := context.WithCancel(context.Background())
	da := a.Drive(ctx, hi, func() float64 { return 700 })
	db := b.Drive(ctx, lo, func() float64 { return 700 })
	t.Cleanup(func() { cancel(); <-da; <-db })
	ok := false
	deadline := time.Now().Add(generous)
	for !ok && time.Now().Before(deadline) {
		ok = fairShares(assigned(a, hi), 700, []float64{assigned(b, lo)}, 1000)
		time.Sleep(20 * time.Millisecond)
	}
	if !ok {
		t.Fatalf("assigned %v to the high band, %v to the low, want 700 and 300", assigned(a, hi), assigned(b, lo))
	}
	if _, err := f.c.Status("web/name=api"); err != nil {
		t.Errorf("the priority pair should be left out of the resource id: %v", err)
	}
}

// TestAbandon: a bucket that counts no request for its lease length is
// abandoned, and its lease released.
func TestAbandon(t *testing.T) {
	f := serve(t, templates, rlqs.Options{})
	bucket := map[string]string{"name": "once"}
	p := f.proxy(t, "web")
	p.Allow(bucket)
	testutil.Eventually(t, generous, "an assignment", func() bool { _, ok := p.Assignment(bucket); return ok })
	testutil.Eventually(t, generous, "the bucket abandoned", func() bool { return !p.Tracked(bucket) })
	if n := p.Stats().Abandons; n != 1 {
		t.Errorf("%d abandons, want 1", n)
	}
	testutil.Eventually(t, generous, "its lease released", func() bool {
		st, err := f.c.Status("web/name=once")
		return err != nil || st.Clients == 0
	})
	if v, _ := testutil.MetricValue(t, f.reg, "sluice_rlqs_abandons_total", "domain", "web"); v != 1 {
		t.Errorf("sluice_rlqs_abandons_total %v, want 1", v)
	}
}

// TestExpiry: when the server stops answering, the proxy's assignment
// runs out after its time to live, and the proxy falls back to its
// expired_assignment_behavior.
func TestExpiry(t *testing.T) {
	repo, err := resources.Parse([]byte(templates))
	if err != nil {
		t.Fatal(err)
	}
	c := capacity.New(capacity.Options{ID: "root", Config: repo, Logger: testutil.Logger()})
	run(t, c)
	s, err := rlqs.New(c, rlqs.Options{Logger: testutil.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	lis, gs := listen(t, s)
	p, err := rlqsproxy.New(context.Background(), testutil.Dial(t, lis), rlqsproxy.Options{Domain: "web", ReportInterval: report,
		NoAssignment: typev3.RateLimitStrategy_DENY_ALL, Expired: typev3.RateLimitStrategy_DENY_ALL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	bucket := map[string]string{"name": "api"}
	drive(t, []*rlqsproxy.Proxy{p}, bucket, rates(1, 500))
	testutil.Eventually(t, generous, "an assignment", func() bool { return near(assigned(p, bucket), 500) })
	a, _ := p.Assignment(bucket)
	gs.Stop() // the server is gone: nothing renews the assignment
	if err := p.Wait(context.Background()); err == nil {
		t.Fatal("the stream did not end with the server")
	}
	testutil.Eventually(t, generous, "the assignment expired", func() bool { _, ok := p.Assignment(bucket); return !ok })
	if now := time.Now(); now.Before(a.Expires) {
		t.Errorf("expired at %v, before its time to live's end %v", now, a.Expires)
	}
	before := p.Stats().Allowed
	time.Sleep(3 * report)
	if after := p.Stats().Allowed; after != before {
		t.Errorf("%d requests allowed after the assignment expired (expired_assignment_behavior DENY_ALL)", after-before)
	}
}

func listen(t *testing.T, s *rlqs.Service) (string, *grpc.Server) {
	t.Helper()
	gs := grpc.NewServer()
	rlqspb.RegisterRateLimitQuotaServiceServer(gs, s)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return lis.Addr().String(), gs
}

// TestUnconfigured: a bucket no template matches gets the configured
// blanket rule, counted.
func TestUnconfigured(t *testing.T) {
	for _, tt := range []struct {
		name   string
		answer typev3.RateLimitStrategy_BlanketRule
		want   float64
	}{
		{"default ALLOW_ALL", 0, math.Inf(1)},
		{"DENY_ALL", typev3.RateLimitStrategy_DENY_ALL, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := serve(t, templates, rlqs.Options{Unconfigured: tt.answer, UnconfiguredTTL: 10 * time.Second})
			p := f.proxy(t, "other")
			bucket := map[string]string{"name": "x"}
			p.Allow(bucket)
			testutil.Eventually(t, generous, "an answer", func() bool { _, ok := p.Assignment(bucket); return ok })
			a, _ := p.Assignment(bucket)
			if a.Rate != tt.want {
				t.Errorf("rate %v, want %v", a.Rate, tt.want)
			}
			if ttl := time.Until(a.Expires); ttl < 8*time.Second || ttl > 10*time.Second {
				t.Errorf("time to live %v, want about 10 s", ttl)
			}
			if v, _ := testutil.MetricValue(t, f.reg, "sluice_rlqs_unconfigured_buckets_total", "domain", "other"); v != 1 {
				t.Errorf("sluice_rlqs_unconfigured_buckets_total %v, want 1", v)
			}
			if _, err := f.c.Status("other/name=x"); err == nil {
				t.Error("an unconfigured bucket should lease nothing")
			}
		})
	}
}

// TestStatic: a STATIC template assigns each stream its capacity; the
// token buckets hold Options.Burst's worth of their rate.
func TestStatic(t *testing.T) {
	f := serve(t, templates, rlqs.Options{Burst: 100 * time.Millisecond})
	bucket := map[string]string{"name": "s"}
	a, b := f.proxy(t, "static"), f.proxy(t, "static")
	drive(t, []*rlqsproxy.Proxy{a, b}, bucket, rates(2, 50))
	testutil.Eventually(t, generous, "30 each", func() bool { return near(assigned(a, bucket), 30) && near(assigned(b, bucket), 30) })
	if x, _ := a.Assignment(bucket); x.MaxTokens != uint32(math.Ceil(x.Rate*0.1)) {
		t.Errorf("max_tokens %d at rate %v, want a tenth of a second's worth", x.MaxTokens, x.Rate)
	}
}

func usage(pairs map[string]string, elapsed *durationpb.Duration, allowed, denied uint64) *rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage {
	u := &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{TimeElapsed: elapsed, NumRequestsAllowed: allowed, NumRequestsDenied: denied}
	if pairs != nil {
		u.BucketId = &rlqspb.BucketId{Bucket: pairs}
	}
	return u
}

// TestWatch: a report without time_elapsed, or with 0 (Envoy's filter
// sends one the moment a bucket sees its first request, and whole seconds
// after), subscribes the bucket and keeps the stream; the bucket's first
// assignment answers the first report that measures its demand, over the
// time between its reports by the server's clock.
func TestWatch(t *testing.T) {
	f := serve(t, templates, rlqs.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), generous)
	defer cancel()
	st, err := rlqspb.NewRateLimitQuotaServiceClient(f.conn).StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b := map[string]string{"name": "watched"}
	one := func(m *rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage) *rlqspb.RateLimitQuotaUsageReports {
		return &rlqspb.RateLimitQuotaUsageReports{Domain: "web", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{m}}
	}
	type received struct {
		m   *rlqspb.RateLimitQuotaResponse
		at  time.Time
		err error
	}
	got := make(chan received, 1)
	go func() {
		m, err := st.Recv()
		got <- received{m, time.Now(), err}
	}()
	for _, m := range []*rlqspb.RateLimitQuotaUsageReports{one(usage(b, nil, 1, 0)), one(usage(b, durationpb.New(0), 2, 0))} {
		if err := st.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	// More than state.MinWindow by the server's clock, whenever it read
	// the watch.
	time.Sleep(1500 * time.Millisecond)
	measured := time.Now()
	// 100 more requests (the report says 0 s, as Envoy's whole seconds
	// may: the window is timed by the server's clock).
	if err := st.Send(one(usage(b, durationpb.New(0), 100, 0))); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("the stream ended: %v", r.err)
	}
	if r.at.Before(measured) {
		t.Fatalf("an answer to the watch before any report measured demand: %v", r.m)
	}
	if len(r.m.GetBucketAction()) != 1 {
		t.Fatalf("answer %v, want one bucket's action", r.m)
	}
	tb := r.m.GetBucketAction()[0].GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket()
	// 103 requests over the 1.5 s or so since the watch (the window
	// starts at the bucket's first report): the template's capacity is
	// shared with nobody, so the lease is the demand.
	if rate := rlqs.FillRate(tb); !(rate >= 20 && rate <= 103) {
		t.Fatalf("assigned %v, want about the measured 100 a second", r.m)
	}
}

// TestBadInput: a message that is not valid ends its stream, and only
// it, with InvalidArgument naming the field; nothing is leased for it.
func TestBadInput(t *testing.T) {
	f := serve(t, templates, rlqs.Options{})
	ok := map[string]string{"name": "bad"}
	sec := durationpb.New(time.Second)
	good := &rlqspb.RateLimitQuotaUsageReports{Domain: "web", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(ok, sec, 1, 0)}}
	other := f.proxy(t, "web")
	otherBucket := map[string]string{"name": "other"}
	drive(t, []*rlqsproxy.Proxy{other}, otherBucket, rates(1, 10))
	for _, tt := range []struct {
		name  string
		msgs  []*rlqspb.RateLimitQuotaUsageReports
		field string
	}{
		{"no domain", []*rlqspb.RateLimitQuotaUsageReports{{BucketQuotaUsages: good.BucketQuotaUsages}}, "domain"},
		{"domain changed", []*rlqspb.RateLimitQuotaUsageReports{good, {Domain: "static", BucketQuotaUsages: good.BucketQuotaUsages}}, "domain"},
		{"no bucket_id", []*rlqspb.RateLimitQuotaUsageReports{{Domain: "web", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(nil, sec, 1, 0)}}}, "bucket_quota_usages[0].bucket_id"},
		{"empty bucket_id", []*rlqspb.RateLimitQuotaUsageReports{{Domain: "web", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(map[string]string{}, sec, 1, 0)}}}, "bucket_quota_usages[0].bucket_id"},
		{"bad priority", []*rlqspb.RateLimitQuotaUsageReports{{Domain: "web", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(map[string]string{"name": "bad", "priority": "high"}, sec, 1, 0)}}}, "bucket_quota_usages[0].bucket_id.bucket[priority]"},
		{"negative time_elapsed", []*rlqspb.RateLimitQuotaUsageReports{{Domain: "web", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(ok, durationpb.New(-time.Second), 1, 0)}}}, "bucket_quota_usages[0].time_elapsed"},
		{"counts overflow", []*rlqspb.RateLimitQuotaUsageReports{{Domain: "web", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(ok, sec, math.MaxUint64, 1)}}}, "bucket_quota_usages[0].num_requests_allowed"},
		{"two bands of a resource", []*rlqspb.RateLimitQuotaUsageReports{{Domain: "web", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(map[string]string{"name": "bad", "priority": "1"}, sec, 1, 0), usage(map[string]string{"name": "bad", "priority": "2"}, sec, 1, 0)}}}, "bucket_quota_usages[1].bucket_id"},
		{"second usage bad", []*rlqspb.RateLimitQuotaUsageReports{{Domain: "web", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(ok, sec, 1, 0), usage(nil, sec, 1, 0)}}}, "bucket_quota_usages[1].bucket_id"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), generous)
			defer cancel()
			st, err := rlqspb.NewRateLimitQuotaServiceClient(f.conn).StreamRateLimitQuotas(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range tt.msgs {
				if err := st.Send(m); err != nil {
					break
				}
			}
			var end error
			for end == nil {
				_, end = st.Recv()
			}
			if status.Code(end) != codes.InvalidArgument || !strings.Contains(status.Convert(end).Message(), tt.field+":") {
				t.Fatalf("stream ended with %v, want InvalidArgument naming %s", end, tt.field)
			}
			testutil.Eventually(t, generous, "nothing leased for it", func() bool {
				st, err := f.c.Status("web/name=bad")
				return err != nil || st.Clients == 0
			})
		})
	}
	if err := other.Err(); err != nil {
		t.Errorf("another stream ended: %v", err)
	}
	testutil.Eventually(t, generous, "another stream's assignment", func() bool { _, ok := other.Assignment(otherBucket); return ok })
	if v, _ := testutil.MetricValue(t, f.reg, "sluice_rlqs_bad_reports_total", "domain", "web"); v < 1 {
		t.Errorf("sluice_rlqs_bad_reports_total{domain=web} %v, want ≥ 1", v)
	}
}

// TestResourceID: the mapping of buckets to resources.
func TestResourceID(t *testing.T) {
	for _, tt := range []struct {
		domain string
		pairs  map[string]string
		want   string
	}{
		{"web", map[string]string{"b": "2", "a": "1"}, "web/a=1,b=2"},
		{"web", map[string]string{"name": "api", "priority": "3"}, "web/name=api"},
		{"web", map[string]string{"path": "/v1/x", "q": "a=b,c%"}, "web/path=%2Fv1%2Fx,q=a%3Db%2Cc%25"},
	} {
		if got := rlqs.ResourceID(tt.domain, tt.pairs); got != tt.want {
			t.Errorf("ResourceID(%q, %v) = %q, want %q", tt.domain, tt.pairs, got, tt.want)
		}
	}
}

// TestOptions: New refuses bad options, naming the field.
func TestOptions(t *testing.T) {
	for _, tt := range []struct {
		opts  rlqs.Options
		field string
	}{
		{rlqs.Options{Unconfigured: typev3.RateLimitStrategy_BlanketRule(7)}, "Unconfigured"},
		{rlqs.Options{UnconfiguredTTL: time.Second}, "UnconfiguredTTL"},
		{rlqs.Options{Smoothing: 1.5}, "Smoothing"},
		{rlqs.Options{Smoothing: math.NaN()}, "Smoothing"},
		{rlqs.Options{Burst: time.Microsecond}, "Burst"},
		{rlqs.Options{Burst: time.Hour}, "Burst"},
	} {
		err := tt.opts.Check()
		if err == nil || err.Field != tt.field {
			t.Errorf("Check(%+v) = %v, want an error naming %s", tt.opts, err, tt.field)
		}
	}
}

// TestTree: a tree of two servers serves RLQS at both levels: streams on
// the intermediate lease through it, the intermediate leasing from the
// root for all of them, beside a stream on the root; the capacity is
// shared max-min fairly across the tree (the intermediate stands for its
// two streams), and never exceeded.
func TestTree(t *testing.T) {
	repo, err := resources.Parse([]byte(templates))
	if err != nil {
		t.Fatal(err)
	}
	// The intermediate is a client of the root, which decides its
	// requests at most every MinRequestInterval (Doorman's 5 s), and it
	// asks at most as often: every 200 ms here.
	root := capacity.New(capacity.Options{ID: "root", Config: repo, Logger: testutil.Logger(), Hooks: &hooks.Server{MinRequestInterval: 200 * time.Millisecond}})
	run(t, root)
	mid := capacity.New(capacity.Options{ID: "mid", Parent: []string{"root"}, Logger: testutil.Logger(), Hooks: &hooks.Server{
		MinRequestInterval: 200 * time.Millisecond,
		ParentDial:         func(string) doormanconnect.CapacityClient { return capacity.InProcessClient(root) },
	}})
	run(t, mid)
	atRoot, atMid := serveOver(t, root, rlqs.Options{}), serveOver(t, mid, rlqs.Options{})
	bucket := map[string]string{"name": "api"}
	ps := []*rlqsproxy.Proxy{atRoot.proxy(t, "web"), atMid.proxy(t, "web"), atMid.proxy(t, "web")}
	start := time.Now()
	drive(t, ps, bucket, rates(3, 600))
	testutil.Eventually(t, generous, "a third each across the tree", func() bool {
		xs := []float64{assigned(ps[0], bucket), assigned(ps[1], bucket), assigned(ps[2], bucket)}
		sum := xs[0] + xs[1] + xs[2]
		return near(xs[1], xs[0]) && near(xs[2], xs[0]) && sum >= 970 && sum <= 1000
	})
	// Over the whole run (the first second without an assignment: the
	// proxies deny until their first), the bound; at the shares, the
	// capacity used too.
	checkBound(t, ps, 1000, time.Since(start), stats(ps))
	checkWindow(t, ps, bucket, 1000, 1500*time.Millisecond)
	st, err := root.Status("web/name=api")
	if err != nil {
		t.Fatal(err)
	}
	if st.Clients != 2 || st.SumHas > 1000 {
		t.Errorf("root: %d requesters holding %v, want 2 (the intermediate and a stream) holding ≤ 1000", st.Clients, st.SumHas)
	}
	// A bucket no template of the root matches is unconfigured at the
	// intermediate too (its parent's lease names no algorithm): the
	// blanket answer, and its lease released.
	other := map[string]string{"name": "x"}
	p := atMid.proxy(t, "other")
	p.Allow(other)
	testutil.Eventually(t, generous, "ALLOW_ALL for an unconfigured bucket at the intermediate", func() bool {
		return math.IsInf(assigned(p, other), 1)
	})
	testutil.Eventually(t, generous, "no lease of it at the intermediate", func() bool {
		st, err := mid.Status("other/name=x")
		return err != nil || st.Clients == 0
	})
}
