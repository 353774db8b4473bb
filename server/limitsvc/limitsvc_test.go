package limitsvc

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	qs "github.com/sluice-rl/sluice/api/quotaservice"
	v1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/internal/testutil/fixture"
	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/limits/limitsyaml"
	"github.com/sluice-rl/sluice/resources"
)

// newService returns the service with fixture.QuotaService's limits.
func newService(tb testing.TB, opts Options) *Service {
	tb.Helper()
	cfg, err := limitsyaml.ParseQuotaService([]byte(fixture.QuotaService))
	if err != nil {
		tb.Fatal(err)
	}
	opts.Config = cfg
	s, err := New(opts)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// No namespace configured and no global default: REJECTED_NO_BUCKET.
func TestQuotaServiceNoBucket(t *testing.T) {
	s, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := s.QuotaService().Allow(t.Context(), &qs.AllowRequest{Namespace: "a", BucketName: "b"})
	if err != nil || resp.GetStatus() != qs.AllowResponse_REJECTED_NO_BUCKET {
		t.Fatalf("%v, %v; want REJECTED_NO_BUCKET", resp, err)
	}
}

// SetConfig replaces the configuration; an invalid one is refused and the
// old one keeps answering.
func TestSetConfig(t *testing.T) {
	s := newService(t, Options{})
	bad := &limits.Config{Resources: map[string]*limits.Resource{"x": {Default: &limits.Bucket{Size: 1}}}}
	if err := s.SetConfig(bad); err == nil {
		t.Fatal("a bucket without a fill rate was accepted")
	}
	if resp, _ := s.Allow(t.Context(), &v1.AllowRequest{Resource: "api", Domain: "small"}); resp.GetStatus() != v1.AllowResponse_OK {
		t.Fatalf("after a refused configuration: %v", resp)
	}
	if err := s.SetConfig(nil); err != nil {
		t.Fatal(err)
	}
	if resp, _ := s.Allow(t.Context(), &v1.AllowRequest{Resource: "api", Domain: "small"}); resp.GetStatus() != v1.AllowResponse_REJECTED_NO_BUCKET {
		t.Fatalf("with no limits: %v", resp)
	}
}

// An invalid configuration is New's error.
func TestNewInvalidConfig(t *testing.T) {
	bad := &limits.Config{Resources: map[string]*limits.Resource{"x": {Default: &limits.Bucket{Size: 1}}}}
	if s, err := New(Options{Config: bad}); err == nil {
		t.Fatalf("New with a bucket without a fill rate: %v, no error", s)
	}
}

// FuzzQuotaServiceAllow: any request to the compat handler gets a status,
// never a panic or an RPC error; an invalid one is REJECTED_INVALID_REQUEST
// and creates no bucket; a grant never exceeds the ask. The same request
// to sluice.v1.Limits is answered or refused with InvalidArgument.
func FuzzQuotaServiceAllow(f *testing.F) {
	for _, seed := range []struct {
		ns, bucket string
		tokens     int64
		ms         int64
		override   bool
	}{
		{"api", "small", 1, 0, false},
		{"logins", "ann", 0, 100, true},
		{"api", "small", -1, -5, true},
		{"", "", 0, 0, false},
		{"a b", "c\x00", 1 << 62, 1 << 62, true},
		{"elsewhere", "x/y/z", 5, 0, false},
	} {
		f.Add(seed.ns, seed.bucket, seed.tokens, seed.ms, seed.override)
	}
	cfg, err := limitsyaml.ParseQuotaService([]byte(fixture.QuotaService))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, ns, bucket string, tokens, ms int64, override bool) {
		s, err := New(Options{Config: cfg, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		req := &qs.AllowRequest{Namespace: ns, BucketName: bucket, TokensRequested: tokens, MaxWaitMillisOverride: ms, MaxWaitTimeOverride: override}
		resp, err := s.QuotaService().Allow(t.Context(), req)
		if err != nil {
			t.Fatalf("%v: RPC error %v", req, err)
		}
		want := max(tokens, 1)
		switch resp.GetStatus() {
		case qs.AllowResponse_OK:
			if resp.GetTokensGranted() != want || resp.GetWaitMillis() < 0 {
				t.Fatalf("%v: granted %d wait %d, asked %d", req, resp.GetTokensGranted(), resp.GetWaitMillis(), want)
			}
		case qs.AllowResponse_REJECTED_INVALID_REQUEST:
			if n, _ := s.Engine().EstimateLen(context.Background()); n != 0 {
				t.Fatalf("%v: invalid, yet %d buckets exist", req, n)
			}
		}
		r := &v1.AllowRequest{Resource: ns, Domain: bucket, Tokens: tokens}
		if override {
			r.MaxWait = durationpb.New(time.Duration(ms) * time.Millisecond)
		}
		if _, err := s.Allow(t.Context(), r); err != nil && status.Code(err) != codes.InvalidArgument {
			t.Fatalf("%v: %v; want an answer or InvalidArgument", r, err)
		}
	})
}

// Allow on a burst-tier resource answers with the paper's context:
// examples/charon.yaml's cookbook/tiers bursts into tier 2 on its fourth
// hit, and cookbook/hard's hard limit cuts a bulk request.
func TestAllowBurstTiers(t *testing.T) {
	repo, err := resources.Load("../../examples/charon.yaml")
	if err != nil {
		t.Fatal(err)
	}
	clock := testutil.NewClock(time.Unix(1_700_000_000, 0))
	s, err := New(Options{Now: clock.Now, Config: repo.Limits()})
	if err != nil {
		t.Fatal(err)
	}
	allow := func(resource string, tokens, lo int64) *v1.AllowResponse {
		t.Helper()
		resp, err := s.Allow(t.Context(), &v1.AllowRequest{Resource: resource, Domain: "acme", Tokens: tokens, MinTokens: lo})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	for i := 1; i <= 3; i++ {
		if r := allow("cookbook/tiers", 1, 0); r.GetStatus() != v1.AllowResponse_OK || r.GetTier() != 1 || r.GetTierLimit() != 3 || r.GetTierHits() != int64(i) {
			t.Fatalf("hit %d: %v", i, r)
		}
	}
	r := allow("cookbook/tiers", 1, 0)
	if r.GetStatus() != v1.AllowResponse_OK || r.GetTier() != 2 || r.GetTierLimit() != 4 || !r.GetBurst() || r.HardLimit != nil || r.GlobalLimit != nil {
		t.Fatalf("the fourth hit should burst into tier 2: %v", r)
	}
	r = allow("cookbook/hard", 5, 1)
	if r.GetGranted() != 2 || !r.GetHardLimited() || r.GetHardLimit() != 2 || r.GetGlobalLimit() != 3 || r.GetDomainHitsLastSecond() != 2 {
		t.Fatalf("5 hits against a hard limit of 2: %v", r)
	}
	if r := allow("muted/r", 3, 0); r.GetStatus() != v1.AllowResponse_OK || r.GetGranted() != 3 || !r.GetUnlimited() {
		t.Fatalf("a muted resource: %v", r)
	}
}
