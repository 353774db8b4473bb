package server

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/internal/testutil/rlqsproxy"
	"github.com/sluice-rl/sluice/server/internal/rpc"
	"github.com/sluice-rl/sluice/server/rlqs"
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
	s, _ := startServer(t, Config{Document: Document{Fixed: parseDoorman(t, rlqsDoc)}, Runtime: Runtime{Logger: testutil.Logger()},
		Leases: Leases{RLQS: rlqs.Options{Unconfigured: rlqs.DenyAll, UnconfiguredTTL: 4 * time.Second}}})
	conn := testutil.Dial(t, s.Addr())
	bucket := map[string]string{"name": "api"}
	var ps []*rlqsproxy.Proxy
	for range 2 {
		p, err := rlqsproxy.New(context.Background(), conn, rlqsproxy.Options{Domain: "web", ReportInterval: 200 * time.Millisecond})
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

	// Connect's protocol over HTTP/2 without TLS: a bucket no template
	// matches is answered DENY_ALL (Leases.RLQS.Unconfigured).
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

	_, err = New(t.Context(), Config{Listen: Listen{Address: "127.0.0.1:0"}, Leases: Leases{RLQS: rlqs.Options{Unconfigured: "MAYBE"}}})
	if fe, ok := errors.AsType[*FieldError](err); !ok || fe.Field != "Leases.RLQS.Unconfigured" {
		t.Errorf("New with a bad RLQS answer: %v, want a FieldError naming Leases.RLQS.Unconfigured", err)
	}
}
