package envoyrls_test

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/limits/limitsyaml"
	"github.com/sluice-rl/sluice/limits/rls"
	"github.com/sluice-rl/sluice/server/envoyrls"
)

// rig is the service on real gRPC over loopback, with a fake clock.
type rig struct {
	client rlsv3.RateLimitServiceClient
	clock  *testutil.Clock
	reg    *prometheus.Registry
	svc    *envoyrls.Service
}

func start(t *testing.T, opts envoyrls.Options, yamls ...string) *rig {
	t.Helper()
	r := &rig{clock: testutil.NewClock(time.Unix(1_800_000_000, 0)), reg: prometheus.NewRegistry()}
	if opts.Store == nil {
		opts.Store = rls.NewMemoryStore()
	}
	opts.Now, opts.Registry = r.clock.Now, r.reg
	if opts.Logger == nil {
		opts.Logger = testutil.Logger()
	}
	svc, err := envoyrls.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	svc.SetConfig(rulesOf(t, yamls...))
	r.svc = svc
	r.client = rlsv3.NewRateLimitServiceClient(testutil.ServeGRPC(t, func(gs *grpc.Server) { rlsv3.RegisterRateLimitServiceServer(gs, svc) }))
	return r
}

// rulesOf reads envoyproxy/ratelimit's YAML documents.
func rulesOf(tb testing.TB, yamls ...string) *rls.Config {
	tb.Helper()
	var domains []*rls.Domain
	for i, y := range yamls {
		ds, err := limitsyaml.ParseEnvoyRateLimit(fmt.Sprint("test", i), []byte(y))
		if err != nil {
			tb.Fatal(err)
		}
		domains = append(domains, ds...)
	}
	cfg, err := rls.NewConfig(domains...)
	if err != nil {
		tb.Fatal(err)
	}
	return cfg
}

// desc makes a descriptor of key, value pairs.
func desc(kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func (r *rig) ask(t *testing.T, domain string, ds ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	t.Helper()
	resp, err := r.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Statuses) != len(ds) {
		t.Fatalf("%d statuses for %d descriptors", len(resp.Statuses), len(ds))
	}
	return resp
}

// codes returns the statuses' codes, as one string ("OK OVER_LIMIT").
func codesOf(resp *rlsv3.RateLimitResponse) string {
	var s []string
	for _, st := range resp.Statuses {
		s = append(s, st.Code.String())
	}
	return strings.Join(s, " ")
}

// The rules of envoyproxy/ratelimit's README examples, written anew.
const examples = `
domain: mongo_cps                      # example 1: key and value
descriptors:
  - key: database
    value: users
    rate_limit: {unit: second, requests_per_unit: 3}
---
domain: messaging                      # example 2: nested, key-only
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: {unit: day, requests_per_unit: 2}
  - key: to_number
    rate_limit: {unit: day, requests_per_unit: 3}
---
domain: edge                           # examples 3 to 11
descriptors:
  - key: remote_address                # 3: per address, and a block list
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: remote_address
    value: 50.0.0.5
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: key                           # 4: the depth rule
    value: value
    rate_limit: {unit: second, requests_per_unit: 1}
    descriptors:
      - key: subkey
        rate_limit: {unit: second, requests_per_unit: 2}
  - key: cluster                       # 5: shadow mode
    value: trial
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: path                          # 6: wildcards
    value: "/foo*bar"
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: category                      # 7: replaces
    value: account
    rate_limit: {unit: minute, requests_per_unit: 1, name: account}
  - key: user
    detailed_metric: true              # 8: detailed metric
    rate_limit: {unit: minute, requests_per_unit: 5, name: per-user, replaces: [{name: account}]}
  - key: api
    value_to_metric: true              # 9: value to metric
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: tenant                        # 10: share_threshold
    value: "acme-*"
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: internal                      # 11: unlimited
    rate_limit: {unlimited: true}
  - key: health                        # whitelisted
`

func TestExamples(t *testing.T) {
	r := start(t, envoyrls.Options{Headers: envoyrls.Headers{Draft: true}}, examples)
	cases := []struct {
		name   string
		domain string
		ds     []*ratelimitv3.RateLimitDescriptor
		want   []string // the codes of each call, in order
	}{
		{"key and value", "mongo_cps", []*ratelimitv3.RateLimitDescriptor{desc("database", "users")},
			[]string{"OK", "OK", "OK", "OVER_LIMIT"}},
		{"a value with no rule", "mongo_cps", []*ratelimitv3.RateLimitDescriptor{desc("database", "other")},
			[]string{"OK", "OK", "OK", "OK", "OK"}},
		{"nested", "messaging", []*ratelimitv3.RateLimitDescriptor{desc("message_type", "marketing", "to_number", "2061111111")},
			[]string{"OK", "OK", "OVER_LIMIT"}},
		{"key-only: each value its own counter", "messaging", []*ratelimitv3.RateLimitDescriptor{desc("to_number", "2062222222")},
			[]string{"OK", "OK", "OK", "OVER_LIMIT"}},
		{"block list", "edge", []*ratelimitv3.RateLimitDescriptor{desc("remote_address", "50.0.0.5")},
			[]string{"OVER_LIMIT", "OVER_LIMIT"}},
		{"per address", "edge", []*ratelimitv3.RateLimitDescriptor{desc("remote_address", "10.0.0.1")},
			[]string{"OK", "OK", "OVER_LIMIT"}},
		{"depth: the parent alone", "edge", []*ratelimitv3.RateLimitDescriptor{desc("key", "value")},
			[]string{"OK", "OVER_LIMIT"}},
		{"depth: nested", "edge", []*ratelimitv3.RateLimitDescriptor{desc("key", "value", "subkey", "x")},
			[]string{"OK", "OK", "OVER_LIMIT"}},
		{"depth: too deep", "edge", []*ratelimitv3.RateLimitDescriptor{desc("key", "value", "subkey", "x", "more", "y")},
			[]string{"OK", "OK", "OK", "OK"}},
		{"shadow mode", "edge", []*ratelimitv3.RateLimitDescriptor{desc("cluster", "trial")},
			[]string{"OK", "OK", "OK"}},
		{"wildcard", "edge", []*ratelimitv3.RateLimitDescriptor{desc("path", "/foo/x/bar")},
			[]string{"OK", "OVER_LIMIT"}},
		{"wildcard: another value, its own counter", "edge", []*ratelimitv3.RateLimitDescriptor{desc("path", "/foo/y/bar")},
			[]string{"OK", "OVER_LIMIT"}},
		{"replaces: only per-user applies", "edge", []*ratelimitv3.RateLimitDescriptor{desc("category", "account"), desc("user", "u1")},
			[]string{"OK OK", "OK OK", "OK OK"}},
		{"share threshold: one counter", "edge", []*ratelimitv3.RateLimitDescriptor{desc("tenant", "acme-1")},
			[]string{"OK", "OK"}},
		{"share threshold: the same counter", "edge", []*ratelimitv3.RateLimitDescriptor{desc("tenant", "acme-2")},
			[]string{"OVER_LIMIT"}},
		{"unlimited", "edge", []*ratelimitv3.RateLimitDescriptor{desc("internal", "x")},
			[]string{"OK", "OK", "OK"}},
		{"whitelisted", "edge", []*ratelimitv3.RateLimitDescriptor{desc("health", "x")},
			[]string{"OK", "OK", "OK"}},
		{"unknown domain", "nowhere", []*ratelimitv3.RateLimitDescriptor{desc("database", "users")},
			[]string{"OK", "OK", "OK", "OK"}},
	}
	for _, c := range cases {
		for i, want := range c.want {
			if got := codesOf(r.ask(t, c.domain, c.ds...)); got != want {
				t.Errorf("%s: call %d: %s, want %s", c.name, i+1, got, want)
			}
		}
	}
	// The statuses' fields.
	resp := r.ask(t, "edge", desc("internal", "x"), desc("health", "x"), desc("api", "v1"))
	if st := resp.Statuses[0]; st.LimitRemaining != math.MaxUint32 || st.CurrentLimit != nil {
		t.Errorf("unlimited: %v", st)
	}
	if st := resp.Statuses[1]; st.LimitRemaining != 0 || st.CurrentLimit != nil || st.DurationUntilReset != nil {
		t.Errorf("whitelisted: %v", st)
	}
	st := resp.Statuses[2]
	if st.CurrentLimit.GetRequestsPerUnit() != 2 || st.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_HOUR ||
		st.LimitRemaining != 1 || st.DurationUntilReset.AsDuration() != 30*time.Minute {
		t.Errorf("api: %v (want 2/hour, 1 left, full again in 30 min)", st)
	}
	// Replaced: the category rule answers with no limit; per-user has its name.
	resp = r.ask(t, "edge", desc("category", "account"), desc("user", "u2"))
	if resp.Statuses[0].CurrentLimit != nil || resp.Statuses[1].CurrentLimit.GetName() != "per-user" {
		t.Errorf("replaces: %v", resp.Statuses)
	}
	// Shadow mode counted as would-be rejections.
	if v, _ := testutil.MetricValue(t, r.reg, "sluice_envoy_ratelimit_hits_total", "domain", "edge", "rule", "cluster_trial", "result", "shadow_mode"); v != 2 {
		t.Errorf("shadow_mode hits %v, want 2", v)
	}
	// value_to_metric: the request's value is a label; detailed_metric too.
	if v, _ := testutil.MetricValue(t, r.reg, "sluice_envoy_ratelimit_hits_total", "domain", "edge", "rule", "api_v1", "result", "within_limit"); v != 1 {
		t.Errorf("api_v1 within_limit %v, want 1", v)
	}
	if v, _ := testutil.MetricValue(t, r.reg, "sluice_envoy_ratelimit_hits_total", "domain", "edge", "rule", "user_u1", "result", "within_limit"); v != 3 {
		t.Errorf("user_u1 within_limit %v, want 3", v)
	}
	// The clock moves: a token bucket refills continuously.
	r.clock.Advance(500 * time.Millisecond)
	if got := codesOf(r.ask(t, "edge", desc("remote_address", "10.0.0.1"))); got != "OK" {
		t.Errorf("after half a second: %s, want OK (a token back)", got)
	}
}

// TestAtomic: when one descriptor is over its limit, the request charges
// none of the others, and they answer what they have.
func TestAtomic(t *testing.T) {
	for _, alg := range []string{"token_bucket", "fixed_window"} {
		t.Run(alg, func(t *testing.T) {
			r := start(t, envoyrls.Options{}, `
domain: d
algorithm: `+alg+`
descriptors:
  - {key: a, rate_limit: {unit: minute, requests_per_unit: 5}}
  - {key: b, rate_limit: {unit: minute, requests_per_unit: 1}}
  - {key: blocked, rate_limit: {unit: minute, requests_per_unit: 0}}
`)
			r.ask(t, "d", desc("b", "x")) // b is now empty
			for range 3 {
				resp := r.ask(t, "d", desc("a", "x"), desc("b", "x"))
				if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || codesOf(resp) != "OK OVER_LIMIT" || resp.Statuses[0].LimitRemaining != 5 {
					t.Fatalf("%v", resp)
				}
				resp = r.ask(t, "d", desc("a", "x"), desc("blocked", "x"))
				if codesOf(resp) != "OK OVER_LIMIT" || resp.Statuses[0].LimitRemaining != 5 {
					t.Fatalf("blocked: %v", resp)
				}
			}
			if resp := r.ask(t, "d", desc("a", "x")); resp.Statuses[0].LimitRemaining != 4 {
				t.Fatalf("a alone: %v, want 4 left (the refused requests took nothing)", resp.Statuses[0])
			}
		})
	}
}

// TestHitsAddend: the request's hits_addend (0 means 1), a descriptor's
// own (0 checks without charging), refunds, and the limit override.
func TestHitsAddend(t *testing.T) {
	r := start(t, envoyrls.Options{Headers: envoyrls.Headers{Draft: true, XRateLimit: true}}, `
domain: d
descriptors:
  - {key: tokens, rate_limit: {unit: hour, requests_per_unit: 100, name: llm}}
`)
	call := func(req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
		t.Helper()
		resp, err := r.client.ShouldRateLimit(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	remaining := func(resp *rlsv3.RateLimitResponse) uint32 { return resp.Statuses[0].LimitRemaining }
	d := desc("tokens", "u")
	if got := remaining(call(&rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{d}, HitsAddend: 30})); got != 70 {
		t.Fatalf("request hits_addend 30: %d left, want 70", got)
	}
	d.HitsAddend = wrapperspb.UInt64(0)
	if got := remaining(call(&rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{d}, HitsAddend: 30})); got != 70 {
		t.Fatalf("descriptor hits_addend 0: %d left, want 70 (check only)", got)
	}
	d.HitsAddend = wrapperspb.UInt64(80)
	resp := call(&rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{d}})
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || remaining(resp) != 70 {
		t.Fatalf("80 of 70: %v", resp)
	}
	headers := map[string]string{}
	for _, h := range resp.ResponseHeadersToAdd {
		headers[h.Key] = h.Value
	}
	// 10 more tokens take 10 × 36 s to come: Retry-After 360.
	want := map[string]string{"RateLimit-Policy": `"llm";q=100;w=3600`, "RateLimit": `"llm";r=70;t=1080`, "Retry-After": "360",
		"X-RateLimit-Limit": "100", "X-RateLimit-Remaining": "70", "X-RateLimit-Reset": "1080"}
	for k, v := range want {
		if headers[k] != v {
			t.Errorf("header %s: %q, want %q", k, headers[k], v)
		}
	}
	d.HitsAddend, d.IsNegativeHits = wrapperspb.UInt64(20), true
	if got := remaining(call(&rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{d}})); got != 90 {
		t.Fatalf("refund of 20: %d left, want 90", got)
	}
	// An override: its own counter, its own limit.
	o := desc("tokens", "u")
	o.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 3, Unit: typev3.RateLimitUnit_MINUTE}
	for i, want := range []string{"OK", "OK", "OK", "OVER_LIMIT"} {
		resp := call(&rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{o}})
		if codesOf(resp) != want || resp.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 3 {
			t.Fatalf("override call %d: %v", i, resp)
		}
	}
	if got := remaining(call(&rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("tokens", "u")}})); got != 89 {
		t.Fatalf("the rule's counter after the overrides: %d, want 89", got)
	}
}

// TestShadowModeFlag: the service's shadow mode answers OK, counting
// would-be rejections.
func TestShadowModeFlag(t *testing.T) {
	r := start(t, envoyrls.Options{ShadowMode: true}, `
domain: d
descriptors:
  - {key: k, rate_limit: {unit: minute, requests_per_unit: 1}}
  - {key: blocked, rate_limit: {unit: minute, requests_per_unit: 0}}
`)
	for range 3 {
		if resp := r.ask(t, "d", desc("k", "x"), desc("blocked", "x")); resp.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("%v", resp)
		}
	}
	v, _ := testutil.MetricValue(t, r.reg, "sluice_envoy_ratelimit_hits_total", "domain", "d", "rule", "k", "result", "shadow_mode")
	b, _ := testutil.MetricValue(t, r.reg, "sluice_envoy_ratelimit_hits_total", "domain", "d", "rule", "blocked", "result", "shadow_mode")
	if v != 2 || b != 3 {
		t.Fatalf("shadow_mode: k %v (want 2), blocked %v (want 3)", v, b)
	}
}

// TestBadInput: InvalidArgument naming the field, and no counter made.
func TestBadInput(t *testing.T) {
	store := rls.NewMemoryStore()
	r := start(t, envoyrls.Options{Store: store}, `
domain: d
descriptors:
  - {key: k, rate_limit: {unit: minute, requests_per_unit: 1}}
`)
	long := strings.Repeat("x", envoyrls.MaxNameBytes+1)
	many := make([]*ratelimitv3.RateLimitDescriptor, envoyrls.MaxDescriptors+1)
	for i := range many {
		many[i] = desc("k", "x")
	}
	badUnit := desc("k", "x")
	badUnit.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1}
	cases := []struct {
		req   *rlsv3.RateLimitRequest
		field string
	}{
		{&rlsv3.RateLimitRequest{Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("k", "x")}}, "domain"},
		{&rlsv3.RateLimitRequest{Domain: long, Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("k", "x")}}, "domain"},
		{&rlsv3.RateLimitRequest{Domain: "d"}, "descriptors"},
		{&rlsv3.RateLimitRequest{Domain: "d", Descriptors: many}, "descriptors"},
		{&rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("k", "x"), {}}}, "descriptors[1].entries"},
		{&rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("", "x")}}, "descriptors[0].entries[0].key"},
		{&rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("k", long)}}, "descriptors[0].entries[0].value"},
		{&rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{badUnit}}, "descriptors[0].limit.unit"},
	}
	for _, c := range cases {
		_, err := r.client.ShouldRateLimit(context.Background(), c.req)
		if status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), c.field+":") {
			t.Errorf("%s: %v, want InvalidArgument naming it", c.field, err)
		}
	}
	if store.Len() != 0 {
		t.Fatalf("%d counters made by bad requests", store.Len())
	}
}

// failing is a store that always fails.
type failing struct{}

func (failing) Decide(context.Context, int64, string, []rls.Hit, []rls.Result) (bool, error) {
	return false, limits.ErrStaleConfig // any error of the store's own
}

func (failing) Walk(context.Context, func(rls.Counter) bool) error   { return limits.ErrStaleConfig }
func (failing) Reset(context.Context, string, []string) (int, error) { return 0, limits.ErrStaleConfig }

// TestStoreError: closed answers Unavailable (Envoy's failure_mode_deny
// decides), open answers OK.
func TestStoreError(t *testing.T) {
	const y = "domain: d\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 1}}]\n"
	r := start(t, envoyrls.Options{Store: failing{}}, y)
	req := &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("k", "x")}}
	if _, err := r.client.ShouldRateLimit(context.Background(), req); status.Code(err) != codes.Unavailable {
		t.Fatalf("closed: %v, want Unavailable", err)
	}
	// A store down fails every request alike: the log says so once a
	// second (by the service's clock), the metric counts them all.
	var logs testutil.LogBuffer
	r = start(t, envoyrls.Options{Store: failing{}, Logger: slog.New(slog.NewTextHandler(&logs, nil))}, y)
	for range 50 {
		_, _ = r.client.ShouldRateLimit(context.Background(), req)
	}
	r.clock.Advance(2 * time.Second)
	_, _ = r.client.ShouldRateLimit(context.Background(), req)
	if n := strings.Count(logs.String(), "store error"); n != 2 {
		t.Fatalf("51 store errors over 2 s logged %d times, want 2:\n%s", n, logs.String())
	}
	r = start(t, envoyrls.Options{Store: failing{}, OnStoreError: limits.FailOpen}, y)
	if resp, err := r.client.ShouldRateLimit(context.Background(), req); err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("open: %v %v", resp, err)
	}
}

// TestXRateLimitNames: XRateLimit's headers under the names given
// (envoyproxy/ratelimit's LIMIT_*_HEADER), of the descriptor with the
// least remaining.
func TestXRateLimitNames(t *testing.T) {
	r := start(t, envoyrls.Options{Headers: envoyrls.Headers{XRateLimit: true,
		XRateLimitNames: [3]string{"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"}}}, `
domain: d
descriptors:
  - {key: a, rate_limit: {unit: minute, requests_per_unit: 10}}
  - {key: b, rate_limit: {unit: hour, requests_per_unit: 5}}
`)
	resp, err := r.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d",
		Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("a", "x"), desc("b", "y")}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, h := range resp.ResponseHeadersToAdd {
		got = append(got, h.Key+": "+h.Value)
	}
	want := []string{"RateLimit-Limit: 5", "RateLimit-Remaining: 4", "RateLimit-Reset: 720"}
	if !slices.Equal(got, want) {
		t.Fatalf("headers %q, want %q", got, want)
	}
}
