package envoyrls_test

import (
	"context"
	"sync"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/server/envoyrls"
)

// recorder is a StatsSink that keeps what it is told.
type recorder struct {
	mu  sync.Mutex
	ds  []envoyrls.DescriptorStats
	req []envoyrls.RequestStats
}

func (r *recorder) Descriptor(d envoyrls.DescriptorStats) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ds = append(r.ds, d)
}

func (r *recorder) Request(q envoyrls.RequestStats) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.req = append(r.req, q)
}

// take returns what r was told since the last take.
func (r *recorder) take() ([]envoyrls.DescriptorStats, []envoyrls.RequestStats) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ds, req := r.ds, r.req
	r.ds, r.req = nil, nil
	return ds, req
}

// withHits returns d with its own hits_addend.
func withHits(d *ratelimitv3.RateLimitDescriptor, n uint64) *ratelimitv3.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

// TestStatsKeys: each descriptor's statistics are named as
// envoyproxy/ratelimit names them, request values included for the rules
// that ask; descriptors with no limit, unlimited or replaced report
// nothing.
func TestStatsKeys(t *testing.T) {
	rec := &recorder{}
	r := start(t, envoyrls.Options{Stats: rec}, examples, `
domain: names
descriptors:
  - key: source                        # value_to_metric on the parent only
    value_to_metric: true
    descriptors:
      - key: path
        rate_limit: {unit: minute, requests_per_unit: 100}
  - key: host                          # a wildcard, value_to_metric
    value: "api-*"
    value_to_metric: true
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: zone                          # a shared wildcard stays its pattern
    value: "eu-*"
    share_threshold: true
    value_to_metric: true
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: team                          # detailed under a shared wildcard
    value: "t-*"
    share_threshold: true
    descriptors:
      - key: user
        detailed_metric: true
        rate_limit: {unit: minute, requests_per_unit: 100}
`)
	cases := []struct {
		name, domain string
		d            *ratelimitv3.RateLimitDescriptor
		want         string // "" for no statistics
	}{
		{"key and value", "mongo_cps", desc("database", "users"), "database_users"},
		{"key only", "messaging", desc("to_number", "2062222222"), "to_number"},
		{"nested", "messaging", desc("message_type", "marketing", "to_number", "2061111111"), "message_type_marketing.to_number"},
		{"wildcard", "edge", desc("path", "/foo/x/bar"), "path_/foo*bar"},
		{"share threshold", "edge", desc("tenant", "acme-1"), "tenant_acme-*"},
		{"detailed_metric", "edge", desc("user", "u1"), "user_u1"},
		{"value_to_metric", "edge", desc("api", "v1"), "api_v1"},
		{"value_to_metric on the parent", "names", desc("source", "s1", "path", "/p"), "source_s1.path"},
		{"value_to_metric on a wildcard", "names", desc("host", "api-7"), "host_api-7"},
		{"value_to_metric on a shared wildcard", "names", desc("zone", "eu-1"), "zone_eu-*"},
		{"detailed_metric under a shared wildcard", "names", desc("team", "t-1", "user", "u9"), "team_t-*.user_u9"},
		{"block list", "edge", desc("remote_address", "50.0.0.5"), "remote_address_50.0.0.5"},
		{"unlimited", "edge", desc("internal", "x"), ""},
		{"whitelisted", "edge", desc("health", "x"), ""},
		{"no rule", "mongo_cps", desc("database", "other"), ""},
		{"unknown domain", "nowhere", desc("database", "users"), ""},
	}
	for _, c := range cases {
		r.ask(t, c.domain, c.d)
		ds, req := rec.take()
		var got string
		if len(ds) > 1 {
			t.Errorf("%s: %d descriptor statistics, want at most 1", c.name, len(ds))
		}
		if len(ds) == 1 {
			got = ds[0].Key
			if ds[0].Domain != c.domain || ds[0].Hits != 1 || ds[0].Counts.TotalHits != 1 {
				t.Errorf("%s: %+v, want domain %s, 1 hit", c.name, ds[0], c.domain)
			}
		}
		if got != c.want {
			t.Errorf("%s: key %q, want %q", c.name, got, c.want)
		}
		if len(req) != 1 || req[0].Domain != c.domain || req[0].Err != nil {
			t.Errorf("%s: request statistics %+v", c.name, req)
		}
	}
	// replaces: only per-user's.
	r.ask(t, "edge", desc("category", "account"), desc("user", "u2"))
	if ds, _ := rec.take(); len(ds) != 1 || ds[0].Key != "user_u2" {
		t.Errorf("replaces: %+v, want user_u2's alone", ds)
	}
	// An unknown domain: each descriptor counted.
	r.ask(t, "nowhere", desc("a", "1"), desc("b", "2"))
	if _, req := rec.take(); len(req) != 1 || req[0].DomainNotFound != 2 {
		t.Errorf("unknown domain: %+v, want DomainNotFound 2", req)
	}
	// An override: named by its entries, on its own limit.
	o := desc("database", "users", "shard", "")
	o.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5, Unit: typev3.RateLimitUnit_MINUTE}
	r.ask(t, "mongo_cps", o)
	if ds, _ := rec.take(); len(ds) != 1 || ds[0].Key != "database_users.shard" || ds[0].Result != envoyrls.ResultWithin {
		t.Errorf("override: %+v, want database_users.shard within", ds)
	}
}

// TestStatsCounts: the counts of one descriptor as upstream splits a
// request's hits (hits_addend) between within, near and over: a limit of
// 10 (near from 8 on).
func TestStatsCounts(t *testing.T) {
	rec := &recorder{}
	r := start(t, envoyrls.Options{Stats: rec}, `
domain: d
descriptors:
  - {key: k, rate_limit: {unit: minute, requests_per_unit: 10}}
  - {key: s, shadow_mode: true, rate_limit: {unit: minute, requests_per_unit: 10}}
  - {key: blocked, rate_limit: {unit: minute, requests_per_unit: 0}}
`)
	type counts = envoyrls.Counts
	steps := []struct {
		name string
		key  string
		hits uint64
		code string
		res  envoyrls.Result
		want counts
	}{
		{"5 of 10", "k", 5, "OK", envoyrls.ResultWithin, counts{TotalHits: 5, WithinLimit: 5}},
		{"4 more: 1 above 8", "k", 4, "OK", envoyrls.ResultNear, counts{TotalHits: 4, WithinLimit: 4, NearLimit: 1}},
		{"3 with 1 left: 1 near, 2 over", "k", 3, "OVER_LIMIT", envoyrls.ResultOver, counts{TotalHits: 3, NearLimit: 1, OverLimit: 2}},
		{"the last one", "k", 1, "OK", envoyrls.ResultNear, counts{TotalHits: 1, WithinLimit: 1, NearLimit: 1}},
		{"at the limit: all over", "k", 2, "OVER_LIMIT", envoyrls.ResultOver, counts{TotalHits: 2, OverLimit: 2}},
		{"check only", "k", 0, "OK", envoyrls.ResultNear, counts{}},
		{"shadow: 9", "s", 9, "OK", envoyrls.ResultNear, counts{TotalHits: 9, WithinLimit: 9, NearLimit: 1}},
		{"shadow: 3 over", "s", 3, "OK", envoyrls.ResultShadow, counts{TotalHits: 3, NearLimit: 1, OverLimit: 2, ShadowMode: 2}},
		{"a limit of 0", "blocked", 2, "OVER_LIMIT", envoyrls.ResultOver, counts{TotalHits: 2, OverLimit: 2}},
	}
	for _, s := range steps {
		resp := r.ask(t, "d", withHits(desc(s.key, "x"), s.hits))
		if got := codesOf(resp); got != s.code {
			t.Fatalf("%s: %s, want %s", s.name, got, s.code)
		}
		ds, req := rec.take()
		if len(ds) != 1 || len(req) != 1 {
			t.Fatalf("%s: %+v %+v", s.name, ds, req)
		}
		if d := ds[0]; d.Key != s.key || d.Hits != s.hits || d.Result != s.res || d.Counts != s.want {
			t.Errorf("%s: %s %d hits %v %+v, want %s %v %+v", s.name, d.Key, d.Hits, d.Result, d.Counts, s.key, s.res, s.want)
		}
		if req[0].GlobalShadowMode || req[0].StoreFailed || req[0].Err != nil || req[0].Duration != 0 {
			t.Errorf("%s: request %+v", s.name, req[0])
		}
	}
	// A refused request charges nothing: its descriptor that fits counts
	// as if charged (within, near above 8), the other over.
	resp := r.ask(t, "d", withHits(desc("k", "y"), 9), desc("blocked", "y"))
	if codesOf(resp) != "OK OVER_LIMIT" {
		t.Fatalf("%v", resp)
	}
	ds, _ := rec.take()
	want := []envoyrls.Counts{{TotalHits: 9, WithinLimit: 9, NearLimit: 1}, {TotalHits: 1, OverLimit: 1}}
	if len(ds) != 2 || ds[0].Counts != want[0] || ds[1].Counts != want[1] {
		t.Errorf("refused request: %+v, want %+v", ds, want)
	}
	if resp := r.ask(t, "d", desc("k", "y")); resp.Statuses[0].LimitRemaining != 9 {
		t.Errorf("k/y after the refusal: %v, want 9 left", resp.Statuses[0])
	}
	// A refund: its hits alone, as negative hits.
	rec.take()
	refund := withHits(desc("k", "y"), 1)
	refund.IsNegativeHits = true
	r.ask(t, "d", refund)
	if ds, _ := rec.take(); len(ds) != 1 || ds[0].Counts != (envoyrls.Counts{NegativeHits: 1}) {
		t.Errorf("refund: %+v", ds)
	}
}

// TestStatsShadowModeFlag: the service's shadow mode counts over_limit
// but not a rule's shadow_mode, and marks the request.
func TestStatsShadowModeFlag(t *testing.T) {
	rec := &recorder{}
	r := start(t, envoyrls.Options{Stats: rec, ShadowMode: true}, `
domain: d
descriptors:
  - {key: k, rate_limit: {unit: minute, requests_per_unit: 1}}
`)
	r.ask(t, "d", desc("k", "x"))
	if _, req := rec.take(); req[0].GlobalShadowMode {
		t.Fatalf("within: %+v", req)
	}
	if resp := r.ask(t, "d", desc("k", "x")); resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("%v", resp)
	}
	ds, req := rec.take()
	if len(ds) != 1 || ds[0].Result != envoyrls.ResultShadow || ds[0].Counts != (envoyrls.Counts{TotalHits: 1, OverLimit: 1}) {
		t.Errorf("over: %+v", ds)
	}
	if len(req) != 1 || !req[0].GlobalShadowMode {
		t.Errorf("over: %+v, want GlobalShadowMode", req)
	}
}

// TestStatsErrors: a refused request counts as an error with no
// descriptor; a failed store marks the request, and failing closed its
// descriptors count their hits alone.
func TestStatsErrors(t *testing.T) {
	const y = "domain: d\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 1}}]\n"
	rec := &recorder{}
	r := start(t, envoyrls.Options{Stats: rec}, y)
	if _, err := r.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d"}); status.Code(err) != codes.InvalidArgument {
		t.Fatal(err)
	}
	ds, req := rec.take()
	if len(ds) != 0 || len(req) != 1 || status.Code(req[0].Err) != codes.InvalidArgument || req[0].StoreFailed {
		t.Errorf("bad input: %+v %+v", ds, req)
	}

	for _, c := range []struct {
		name string
		mode limits.OnStoreError
		code codes.Code
		res  envoyrls.Result
	}{
		{"closed", limits.FailClosed, codes.Unavailable, envoyrls.ResultFailed},
		{"open", limits.FailOpen, codes.OK, envoyrls.ResultDegraded},
	} {
		rec := &recorder{}
		r := start(t, envoyrls.Options{Store: failing{}, OnStoreError: c.mode, Stats: rec}, y)
		_, err := r.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d", HitsAddend: 3,
			Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("k", "x")}})
		if status.Code(err) != c.code {
			t.Fatalf("%s: %v", c.name, err)
		}
		ds, req := rec.take()
		want := []envoyrls.DescriptorStats{{Domain: "d", Key: "k", Result: c.res, Hits: 3, Counts: envoyrls.Counts{TotalHits: 3}}}
		if diff := cmp.Diff(want, ds); diff != "" {
			t.Errorf("%s: descriptors (-want +got):\n%s", c.name, diff)
		}
		if len(req) != 1 || !req[0].StoreFailed || status.Code(req[0].Err) != c.code {
			t.Errorf("%s: request %+v", c.name, req)
		}
	}
}

// TestResultString: the results' names are the metrics' labels.
func TestResultString(t *testing.T) {
	got := []string{}
	for r := envoyrls.ResultWithin; r <= envoyrls.ResultFailed+1; r++ {
		got = append(got, r.String())
	}
	want := []string{"within_limit", "near_limit", "over_limit", "shadow_mode", "degraded", "failed", "Result(6)"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Error(diff)
	}
}

// TestStatsBurstTiers: a burst-tier rule counts its hits by its answer;
// a token bucket descriptor of a request its tiers refused counts as
// granted (its hits were given back).
func TestStatsBurstTiers(t *testing.T) {
	rec := &recorder{}
	r, _ := startTiers(t, envoyrls.Options{Stats: rec})
	for range 6 {
		r.ask(t, "api", desc("tenant", "t1"))
	}
	rec.take()
	if resp := r.ask(t, "api", desc("route", "r"), desc("tenant", "t1")); codesOf(resp) != "OK OVER_LIMIT" {
		t.Fatalf("%v", resp)
	}
	ds, _ := rec.take()
	want := []envoyrls.DescriptorStats{
		{Domain: "api", Key: "route", Result: envoyrls.ResultWithin, Hits: 1, Counts: envoyrls.Counts{TotalHits: 1, WithinLimit: 1}},
		{Domain: "api", Key: "tenant", Result: envoyrls.ResultOver, Hits: 1, Counts: envoyrls.Counts{TotalHits: 1, OverLimit: 1}},
	}
	if diff := cmp.Diff(want, ds); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
