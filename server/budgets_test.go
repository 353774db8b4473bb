package server

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	qs "github.com/sluice-rl/sluice/api/quotaservice"
	v1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/internal/testutil/redistest"
	"github.com/sluice-rl/sluice/limits/limitsyaml"
	redisstore "github.com/sluice-rl/sluice/limits/redis"
	"github.com/sluice-rl/sluice/resources"
)

// budgetSection is docs/quotaservice.md's recipe, small: a monthly
// budget per tenant (25 tokens a calendar month) behind ten a second.
const budgetSection = `
resources:
  llm_tokens:
    template:
      size: 10
      fill_rate: 10
      wait_timeout: 0s
      budgets:
        - {limit: 25, unit: month, calendar: UTC}
`

// TestBudgetsAllow: a real server on loopback, its clock half a minute
// before a month ends: sluice.v1.Limits/Allow over gRPC grants the
// month's budget (the last of it partially), then refuses with
// retry_after the month's end; the quota service's Allow refuses too;
// in the next month both grant again.
func TestBudgetsAllow(t *testing.T) {
	cfg, err := limitsyaml.ParseSection([]byte(budgetSection))
	if err != nil {
		t.Fatal(err)
	}
	clock := testutil.NewClock(time.Date(2024, 1, 31, 23, 59, 30, 0, time.UTC))
	s, _ := startServer(t, Config{ID: "budgets", Runtime: Runtime{Now: clock.Now}, Repository: Repository{Fixed: resources.Compose(nil, cfg, nil, nil)}})
	conn := testutil.Dial(t, s.Addr())
	limitsAPI, quota := v1.NewLimitsClient(conn), qs.NewQuotaServiceClient(conn)
	ctx := t.Context()

	for i, want := range []int64{10, 10} {
		resp, err := limitsAPI.Allow(ctx, &v1.AllowRequest{Resource: "llm_tokens", Domain: "acme", Tokens: 10})
		if err != nil || resp.GetStatus() != v1.AllowResponse_OK || resp.GetGranted() != want {
			t.Fatalf("request %d: %v %v, want %d granted", i, resp, err, want)
		}
		clock.Advance(time.Second) // the token bucket refills
	}
	// 10 wanted, at least 1: the 5 left of the month's 25.
	resp, err := limitsAPI.Allow(ctx, &v1.AllowRequest{Resource: "llm_tokens", Domain: "acme", Tokens: 10, MinTokens: 1})
	if err != nil || resp.GetStatus() != v1.AllowResponse_OK || resp.GetGranted() != 5 || resp.GetRemaining() != 0 {
		t.Fatalf("the month's last 5: %v %v", resp, err)
	}
	clock.Advance(time.Second)
	// 23:59:33: the budget refuses until midnight, though the bucket
	// holds 10.
	resp, err = limitsAPI.Allow(ctx, &v1.AllowRequest{Resource: "llm_tokens", Domain: "acme"})
	if err != nil || resp.GetStatus() != v1.AllowResponse_REJECTED_TIMEOUT || resp.GetRetryAfter().AsDuration() != 27*time.Second {
		t.Fatalf("the budget spent: %v %v, want REJECTED_TIMEOUT retry after 27s", resp, err)
	}
	qresp, err := quota.Allow(ctx, &qs.AllowRequest{Namespace: "llm_tokens", BucketName: "acme", TokensRequested: 1})
	if err != nil || qresp.GetStatus() != qs.AllowResponse_REJECTED_TIMEOUT {
		t.Fatalf("quota service, the budget spent: %v %v", qresp, err)
	}
	// Another tenant has a budget of its own.
	qresp, err = quota.Allow(ctx, &qs.AllowRequest{Namespace: "llm_tokens", BucketName: "globex", TokensRequested: 10})
	if err != nil || qresp.GetStatus() != qs.AllowResponse_OK || qresp.GetTokensGranted() != 10 {
		t.Fatalf("quota service, another tenant: %v %v", qresp, err)
	}
	clock.Advance(27 * time.Second) // February
	qresp, err = quota.Allow(ctx, &qs.AllowRequest{Namespace: "llm_tokens", BucketName: "acme", TokensRequested: 10})
	if err != nil || qresp.GetStatus() != qs.AllowResponse_OK || qresp.GetTokensGranted() != 10 {
		t.Fatalf("quota service, the next month: %v %v", qresp, err)
	}
}

// TestBudgetsSharedRedis: two servers on one real Redis (the
// composition root's shared store: buckets and budgets) share each
// tenant's budget: of 12 requests alternating between them, exactly the
// budget's 5 are granted.
func TestBudgetsSharedRedis(t *testing.T) {
	srv := redistest.StartT(t)
	cfg, err := limitsyaml.ParseSection([]byte(`
resources:
  r:
    template:
      size: 100
      fill_rate: 100
      budgets: [{limit: 5, unit: day}]
`))
	if err != nil {
		t.Fatal(err)
	}
	var servers []*Server
	for _, id := range []string{"a", "b"} {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
		st := redisstore.New(c, redisstore.Options{Prefix: "t:" + t.Name() + ":"})
		sh := sharedOn(st, c)
		sh.Copies = nil // no fleet: no etcd
		s := assemble(t, Config{ID: id, Repository: Repository{Fixed: resources.Compose(nil, cfg, nil, nil)}, Store: Store{Shared: sh}})
		t.Cleanup(func() { _ = s.shared.Close() })
		servers = append(servers, s)
	}
	granted := 0
	for i := range 12 {
		resp, err := servers[i%2].Limits().Allow(t.Context(), &v1.AllowRequest{Resource: "r", Domain: "tenant"})
		if err != nil {
			t.Fatal(err)
		}
		switch resp.GetStatus() {
		case v1.AllowResponse_OK:
			granted++
		case v1.AllowResponse_REJECTED_TIMEOUT:
		default:
			t.Fatalf("request %d: %v", i, resp)
		}
	}
	if granted != 5 {
		t.Fatalf("%d granted across two servers, want the budget's 5", granted)
	}
}
