package envoyrls_test

import (
	"context"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/limits/rls"
	"github.com/sluice-rl/sluice/resources"
	"github.com/sluice-rl/sluice/server/envoyrls"
)

// tiersConfig is Sluice's own configuration: a burst-tier resource of the
// limits section, and Envoy rules of which one is decided by its tiers.
const tiersConfig = `
limits:
  resources:
    api/tenants:                 # tier 1: 2 per 10 s for 20 s; tier 2: 4 per 10 s for 10 s, then 30 s of cooldown
      algorithm: burst_tiers
      tiers:
        - {limit: 2, window: 10s, active: 20s}
        - {limit: 4, window: 10s, active: 10s, cooldown: 30s}
    api/capped:
      algorithm: burst_tiers
      hard_limit: 3
      tiers: [{limit: 100, window: 1m, active: 1h}]
envoy_ratelimit:
  - domain: api
    descriptors:
      - key: tenant
        rate_limit: {burst_tiers: api/tenants}
      - key: capped
        rate_limit: {burst_tiers: api/capped, name: capped}
      - key: route
        rate_limit: {unit: minute, requests_per_unit: 100}
      - key: closed
        rate_limit: {unit: minute, requests_per_unit: 1}
`

// startTiers is the service over tiersConfig, with its limits engine.
func startTiers(t *testing.T, opts envoyrls.Options) (*rig, *limits.Engine) {
	t.Helper()
	repo, err := resources.Parse([]byte(tiersConfig))
	if err != nil {
		t.Fatal(err)
	}
	eng, err := limits.New(repo.Limits(), limits.Options{})
	if err != nil {
		t.Fatal(err)
	}
	opts.Tiers = eng
	r := start(t, opts)
	r.svc.SetConfig(repo.EnvoyRateLimit())
	return r, eng
}

// A rule with burst_tiers is decided by Charon's tiers: a tenant bursts
// from tier 1 (2 a window) into tier 2 (4 more), then is refused until a
// window frees; another tenant has tiers of its own.
func TestBurstTiers(t *testing.T) {
	r, _ := startTiers(t, envoyrls.Options{Headers: envoyrls.Headers{Draft: true}})
	granted := 0
	var last *rlsv3.RateLimitResponse
	for range 10 {
		last = r.ask(t, "api", desc("tenant", "acme"))
		if last.OverallCode == rlsv3.RateLimitResponse_OK {
			granted++
		}
	}
	if granted != 6 {
		t.Fatalf("acme: %d granted at one instant, want 6 (tier 1's 2, then tier 2's 4)", granted)
	}
	st := last.Statuses[0]
	if st.Code != rlsv3.RateLimitResponse_OVER_LIMIT || st.LimitRemaining != 0 || st.DurationUntilReset.AsDuration().Round(time.Millisecond) != 10*time.Second || st.CurrentLimit != nil {
		t.Fatalf("acme refused: %v, want OVER_LIMIT, 0 left, 10 s until tier 2's window frees, no current limit (no hard limit)", st)
	}
	if got, want := headersOf(last), `RateLimit-Policy: "tenant";q=4;w=10|RateLimit: "tenant";r=0;t=11|Retry-After: 11`; got != want {
		t.Fatalf("headers %q, want %q", got, want)
	}
	if resp := r.ask(t, "api", desc("tenant", "globex")); resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("globex: %v: a tenant's tiers are its own", resp)
	}
	// (The window ends just after 10 s; the answers round up.)
	r.clock.Advance(st.DurationUntilReset.AsDuration())
	if resp := r.ask(t, "api", desc("tenant", "acme")); resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("acme once its window freed: %v", resp)
	}

	// A hard limit is the current limit, per second.
	for i := range 4 {
		resp := r.ask(t, "api", desc("capped", "x"))
		cl := resp.Statuses[0].CurrentLimit
		if want := i < 3; (resp.OverallCode == rlsv3.RateLimitResponse_OK) != want || cl.GetRequestsPerUnit() != 3 || cl.GetUnit() != rlsv3.RateLimitResponse_RateLimit_SECOND || cl.GetName() != "capped" {
			t.Fatalf("capped %d: %v", i, resp)
		}
	}
}

// A request is decided together: when its token bucket descriptor is
// over, its burst tiers take nothing; when its tiers refuse, its token
// buckets are given back what they were charged.
func TestBurstTiersAtomic(t *testing.T) {
	r, _ := startTiers(t, envoyrls.Options{})
	r.ask(t, "api", desc("closed", "c")) // closed is now empty
	for range 5 {
		if resp := r.ask(t, "api", desc("tenant", "t1"), desc("closed", "c")); codesOf(resp) != "OK OVER_LIMIT" {
			t.Fatalf("%v", resp)
		}
	}
	granted := 0
	for range 10 {
		if r.ask(t, "api", desc("tenant", "t1")).OverallCode == rlsv3.RateLimitResponse_OK {
			granted++
		}
	}
	if granted != 6 {
		t.Fatalf("t1: %d granted after 5 refused requests, want 6 (they took nothing)", granted)
	}
	// t1 is now refused by its tiers: route is charged and given back.
	for range 5 {
		resp := r.ask(t, "api", desc("route", "r"), desc("tenant", "t1"))
		if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || resp.Statuses[1].Code != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("%v", resp)
		}
	}
	if resp := r.ask(t, "api", desc("route", "r")); resp.Statuses[0].LimitRemaining != 99 {
		t.Fatalf("route alone: %v, want 99 left (the refused requests were given back)", resp.Statuses[0])
	}
}

// A refund (is_negative_hits) of a burst-tier descriptor is refused, and
// takes nothing from the others.
func TestBurstTiersNoRefund(t *testing.T) {
	r, _ := startTiers(t, envoyrls.Options{})
	d := desc("tenant", "acme")
	d.IsNegativeHits = true
	_, err := r.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("route", "r"), d}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "descriptors[1].is_negative_hits") {
		t.Fatalf("%v, want InvalidArgument naming descriptors[1].is_negative_hits", err)
	}
	if resp := r.ask(t, "api", desc("route", "r")); resp.Statuses[0].LimitRemaining != 99 {
		t.Fatalf("route: %v, want 99 left", resp.Statuses[0])
	}
}

// With no limits engine, a burst-tier rule fails as a store error does:
// closed by default, open on request.
func TestBurstTiersNoEngine(t *testing.T) {
	repo, err := resources.Parse([]byte(tiersConfig))
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []limits.OnStoreError{limits.FailClosed, limits.FailOpen} {
		r := start(t, envoyrls.Options{OnStoreError: mode})
		r.svc.SetConfig(repo.EnvoyRateLimit())
		resp, err := r.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "api", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("route", "r"), desc("tenant", "t")}})
		switch mode {
		case limits.FailClosed:
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("closed: %v, %v", resp, err)
			}
		default:
			if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
				t.Fatalf("open: %v, %v", resp, err)
			}
		}
		// Either way route was given back.
		if resp := r.ask(t, "api", desc("route", "r")); resp.Statuses[0].LimitRemaining != 99 {
			t.Fatalf("%v: route %v, want 99 left", mode, resp.Statuses[0])
		}
	}
}

func TestTierDomain(t *testing.T) {
	for _, c := range []struct {
		entries []rls.Entry
		want    string
	}{
		{[]rls.Entry{{Key: "tenant", Value: "acme"}}, "acme"},
		{[]rls.Entry{{Key: "tenant", Value: "acme"}, {Key: "plan", Value: "free"}}, "acme/free"},
		{[]rls.Entry{{Key: "path", Value: "/api/v1"}}, "/api/v1"},
		{[]rls.Entry{{Key: "a", Value: "x/y"}, {Key: "b", Value: "z"}}, "h:"}, // x/y/z could be x, y/z
		{[]rls.Entry{{Key: "a", Value: "x"}, {Key: "b", Value: "y/z"}}, "h:"},
		{[]rls.Entry{{Key: "ua", Value: "curl 8"}}, "h:"},
		{[]rls.Entry{{Key: "k", Value: strings.Repeat("v", limits.MaxNameLen+1)}}, "h:"},
	} {
		got := envoyrls.TierDomain(rls.Bucket("d", c.entries))
		if c.want == "h:" {
			if !strings.HasPrefix(got, "h:") || len(got) != 34 {
				t.Errorf("%v: %q, want h: and 32 hex digits", c.entries, got)
			}
			continue
		}
		if got != c.want {
			t.Errorf("%v: %q, want %q", c.entries, got, c.want)
		}
	}
	a := envoyrls.TierDomain(rls.Bucket("d", []rls.Entry{{Key: "a", Value: "x/y"}, {Key: "b", Value: "z"}}))
	b := envoyrls.TierDomain(rls.Bucket("d", []rls.Entry{{Key: "a", Value: "x"}, {Key: "b", Value: "y/z"}}))
	if a == b {
		t.Fatalf("two counters share domain %q", a)
	}
}

// headersOf returns a response's headers as "K: V|K: V".
func headersOf(resp *rlsv3.RateLimitResponse) string {
	var s []string
	for _, h := range resp.ResponseHeadersToAdd {
		s = append(s, h.Key+": "+h.Value)
	}
	return strings.Join(s, "|")
}
