package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/internal/testutil/etcdtest"
	"github.com/sluice-rl/sluice/internal/testutil/rlqsproxy"
	"github.com/sluice-rl/sluice/server/internal/rpc"
	"github.com/sluice-rl/sluice/server/status"
)

// rlqsDoc is a document with one template for Envoy's RLQS buckets of
// domain web.
const rlqsDoc = `
resources:
  - identifier_glob: "web/*"
    capacity: 100
    algorithm: {kind: FAIR_SHARE, lease_length: 10, refresh_interval: 5, learning_mode_duration: 0}
`

// TestRLQSOnThePort: Envoy's Rate Limit Quota Service is served on the
// one port, over grpc-go (as Envoy's gRPC client speaks it) and over
// Connect's own protocol: two emulated proxies sharing a bucket are
// assigned their fair shares; an unmatched bucket gets the configured
// DENY_ALL; the options are validated naming their Config field.
func TestRLQSOnThePort(t *testing.T) {
	s, _ := startServer(t, Config{Repository: Repository{Fixed: parseDoorman(t, rlqsDoc)}, Runtime: Runtime{Logger: testutil.Logger()},
		RLQS: RLQS{Unconfigured: typev3.RateLimitStrategy_DENY_ALL, UnconfiguredTTL: 4 * time.Second}})
	conn := testutil.Dial(t, s.Addr())
	bucket := map[string]string{"name": "api"}
	var ps []*rlqsproxy.Proxy
	for range 2 {
		p, err := rlqsproxy.New(context.Background(), conn, rlqsproxy.Options{Domain: "web", ReportInterval: 200 * time.Millisecond,
			NoAssignment: typev3.RateLimitStrategy_DENY_ALL, Expired: typev3.RateLimitStrategy_DENY_ALL})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		ps = append(ps, p)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d0 := ps[0].Drive(ctx, bucket, func() float64 { return 30 })
	d1 := ps[1].Drive(ctx, bucket, func() float64 { return 30 })
	t.Cleanup(func() { cancel(); <-d0; <-d1 })
	testutil.Eventually(t, 30*time.Second, "both proxies assigned, within the capacity", func() bool {
		a0, ok0 := ps[0].Assignment(bucket)
		a1, ok1 := ps[1].Assignment(bucket)
		return ok0 && ok1 && a0.Rate > 0 && a1.Rate > 0 && a0.Rate+a1.Rate <= 100
	})

	// The status page lists the streams and their buckets.
	code, body := httpGet(t, "http://"+s.Addr()+"/debug/status/rlqs?format=json")
	var page status.RLQSPage
	if err := json.Unmarshal([]byte(body), &page); code != http.StatusOK || err != nil {
		t.Fatalf("/debug/status/rlqs: %d %v %s", code, err, body)
	}
	if page.Streams != 2 || page.Buckets != 2 || len(page.Rows) != 2 || page.Rows[0].Resource != "web/name=api" || !page.Rows[0].Sent {
		t.Errorf("/debug/status/rlqs: %+v, want the two streams' bucket web/name=api, assigned", page)
	}
	if code, body := httpGet(t, "http://"+s.Addr()+"/debug/status/rlqs"); code != http.StatusOK || !strings.Contains(body, "web/name=api") {
		t.Errorf("/debug/status/rlqs (HTML): %d, without the bucket:\n%s", code, body)
	}

	// Connect's protocol over HTTP/2 without TLS: a bucket no template
	// matches is answered DENY_ALL (RLQS.Unconfigured).
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	c := connect.NewClient[rlqsv3.RateLimitQuotaUsageReports, rlqsv3.RateLimitQuotaResponse](&http.Client{Transport: tr},
		"http://"+s.Addr()+rpc.RateLimitQuotaServiceProcedure)
	sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer scancel()
	st := c.CallBidiStream(sctx)
	if err := st.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: "other", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{
		BucketId: &rlqsv3.BucketId{Bucket: map[string]string{"name": "x"}}, TimeElapsed: durationpb.New(time.Second), NumRequestsAllowed: 1,
	}}}); err != nil {
		t.Fatal(err)
	}
	resp, err := st.Receive()
	if err != nil {
		t.Fatal(err)
	}
	qa := resp.GetBucketAction()[0].GetQuotaAssignmentAction()
	if qa.GetRateLimitStrategy().GetBlanketRule().String() != "DENY_ALL" || qa.GetAssignmentTimeToLive().AsDuration() != 4*time.Second {
		t.Errorf("unmatched bucket: %v, want DENY_ALL for 4s", qa)
	}
	_ = st.CloseRequest()
	_ = st.CloseResponse()

	_, err = New(t.Context(), Config{Listen: Listen{Address: "127.0.0.1:0"}, RLQS: RLQS{Unconfigured: typev3.RateLimitStrategy_BlanketRule(7)}})
	if fe, ok := errors.AsType[*FieldError](err); !ok || fe.Field != "RLQS.Unconfigured" {
		t.Errorf("New with a bad RLQS answer: %v, want a FieldError naming RLQS.Unconfigured", err)
	}
}

// rlqsFailoverDoc: leases of 4 s, refreshed every 2 s; learning mode as
// long as a lease (the default: shorter would let a new master grant
// while its predecessor's leases run, and this test fails then).
const rlqsFailoverDoc = `
resources:
  - identifier_glob: "web/*"
    capacity: 100
    algorithm: {kind: FAIR_SHARE, lease_length: 4, refresh_interval: 2}
`

// TestRLQSFailover: a root node of two tasks elected in etcd. Two Envoys
// stream to the master; it stops; they reconnect to the new master, and a
// third Envoy arrives there. While the new master learns, it assigns
// nothing: the first two keep the assignments they had until their time
// to live, the third gets none, so the sum assigned stays within the
// capacity; once it has learnt, the three share the capacity.
func TestRLQSFailover(t *testing.T) {
	etcd := etcdtest.StartEtcd(t)
	repo := parseDoorman(t, rlqsFailoverDoc)
	task := func() (*Server, func() error) {
		return startServer(t, Config{Election: Election{Kind: "etcd", Key: "/" + t.Name()}, Etcd: Etcd{Endpoints: []string{etcd.Endpoint}},
			Repository: Repository{Fixed: repo}, Runtime: Runtime{Logger: testutil.Logger()}})
	}
	a, stopA := task()
	b, stopB := task()
	var master, other *Server
	stopMaster := stopA
	testutil.Eventually(t, 30*time.Second, "a master", func() bool {
		ma, _ := a.Capacity().IsMaster()
		mb, _ := b.Capacity().IsMaster()
		switch {
		case ma && !mb:
			master, other = a, b
		case mb && !ma:
			master, other, stopMaster = b, a, stopB
		default:
			return false
		}
		return true
	})
	conns := []*grpc.ClientConn{testutil.Dial(t, master.Addr()), testutil.Dial(t, other.Addr())}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bucket := map[string]string{"name": "api"}
	var ps []*rlqsproxy.Proxy
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	envoy := func(conn *grpc.ClientConn) *rlqsproxy.Proxy {
		p, err := rlqsproxy.New(ctx, conn, rlqsproxy.Options{Domain: "web", ReportInterval: 500 * time.Millisecond,
			NoAssignment: typev3.RateLimitStrategy_DENY_ALL, Expired: typev3.RateLimitStrategy_DENY_ALL})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		done := p.Drive(ctx, bucket, func() float64 { return 80 })
		wg.Add(1)
		go func() { // Envoy reconnects when its stream ends, to either task
			defer wg.Done()
			defer func() { <-done }()
			for i := 0; ctx.Err() == nil; i++ {
				if p.Wait(ctx) != nil && ctx.Err() == nil {
					time.Sleep(100 * time.Millisecond)
					_ = p.Connect(ctx, conns[i%2])
				}
			}
		}()
		ps = append(ps, p)
		return p
	}
	p0, p1 := envoy(conns[0]), envoy(conns[0])
	sum := func(ps ...*rlqsproxy.Proxy) (float64, int) {
		var s float64
		var n int
		for _, p := range ps {
			if a, ok := p.Assignment(bucket); ok {
				s += a.Rate
				n++
			}
		}
		return s, n
	}
	testutil.Eventually(t, 30*time.Second, "both Envoys assigned by the first master", func() bool { _, n := sum(p0, p1); return n == 2 })
	if s, _ := sum(p0, p1); s > 100 {
		t.Fatalf("assigned %v of 100", s)
	}

	start := time.Now()
	if err := stopMaster(); err != nil {
		t.Fatalf("the master's Run: %v", err)
	}
	t.Logf("the master stopped in %v", time.Since(start))
	testutil.Eventually(t, 30*time.Second, "the other task master", func() bool { m, _ := other.Capacity().IsMaster(); return m })
	p2 := envoy(conns[1])
	// Until the new master has learnt, the sum assigned stays within the
	// capacity (the old assignments run out; the new Envoy gets none).
	deadline := time.Now().Add(60 * time.Second)
	for {
		s, n := sum(p0, p1, p2)
		if s > 100 {
			t.Fatalf("assigned %v of 100 to %d Envoys during the failover", s, n)
		}
		if _, ok := p2.Assignment(bucket); ok {
			t.Logf("the new Envoy assigned %v after the master's stop", time.Since(start))
			break // the new master assigns
		}
		if time.Now().After(deadline) {
			t.Fatal("the new master assigned the new Envoy nothing within 60 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	testutil.Eventually(t, 60*time.Second, "the three Envoys sharing the capacity at the new master", func() bool {
		s, n := sum(p0, p1, p2)
		return n == 3 && s <= 100 && s >= 90
	})
	t.Logf("the three sharing %v after the master's stop", time.Since(start))
	if st, err := other.Capacity().Status("web/name=api"); err != nil || st.Clients != 3 || st.SumHas > 100 {
		t.Errorf("the new master's resource: %+v %v, want 3 streams holding ≤ 100", st, err)
	}
}
