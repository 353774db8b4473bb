package limits

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// at returns the instant d after t0.
func at(d time.Duration) time.Time { return time.Unix(0, t0).Add(d) }

func bucket(size int64, rate float64) Bucket {
	return Bucket{Size: size, FillRate: rate, WaitTimeout: time.Second, MaxDebt: 10 * time.Second}
}

func bp(b Bucket) *Bucket { return &b }

func newEngine(t interface {
	Helper()
	Fatalf(string, ...any)
}, cfg *Config, l Listener) *Engine {
	t.Helper()
	e, err := New(cfg, Options{Listener: l})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return e
}

// lookupConfig has every kind of configuration, each with its own size so
// that Decision.Limit shows which answered.
func lookupConfig() *Config {
	return &Config{
		GlobalDefault: bp(bucket(5, 1)),
		Resources: map[string]*Resource{
			"api": {
				Buckets: map[string]Bucket{
					"rate_limit":              bucket(10, 1),
					"rate_limit/192.168.11.3": bucket(500, 100),
					"a":                       bucket(11, 1),
					"a/b":                     bucket(12, 1),
				},
				Template:          bp(bucket(2, 1)),
				MaxDynamicBuckets: 3,
			},
			"shared": {Default: bp(bucket(7, 1)), Buckets: map[string]Bucket{"x": bucket(8, 1)}},
			"bare":   {Buckets: map[string]Bucket{"x": bucket(9, 1)}},
			"empty":  {},
		},
	}
}

func TestLookupOrder(t *testing.T) {
	tests := []struct {
		name             string
		resource, domain string
		limit            int64
		bucket           string
		key              Key
	}{
		{"named", "api", "rate_limit", 10, "named", Key{"api", "rate_limit"}},
		{"named with a slash", "api", "rate_limit/192.168.11.3", 500, "named", Key{"api", "rate_limit/192.168.11.3"}},
		{"prefix: an IP of its own", "api", "rate_limit/10.0.0.1", 10, "prefix rate_limit", Key{"api", "rate_limit/10.0.0.1"}},
		{"longest prefix first", "api", "a/b/c", 12, "prefix a/b", Key{"api", "a/b/c"}},
		{"shorter prefix next", "api", "a/x/y", 11, "prefix a", Key{"api", "a/x/y"}},
		{"deep key under a/b", "api", "a/b/c/d/e", 12, "prefix a/b", Key{"api", "a/b/c/d/e"}},
		{"a prefix is whole segments", "api", "ab/c", 2, "dynamic", Key{"api", "ab/c"}},
		{"empty segment is no prefix", "api", "/a", 2, "dynamic", Key{"api", "/a"}},
		{"trailing slash falls back to the name", "api", "a/", 11, "prefix a", Key{"api", "a/"}},
		{"dynamic", "api", "user-42", 2, "dynamic", Key{"api", "user-42"}},
		{"named beats default", "shared", "x", 8, "named", Key{"shared", "x"}},
		{"default is shared", "shared", "y", 7, "default", Key{"shared", ""}},
		{"default below a slash", "shared", "x2/y", 7, "default", Key{"shared", ""}},
		{"prefix beats default", "shared", "x/y", 8, "prefix x", Key{"shared", "x/y"}},
		{"known resource, nothing matches: global", "bare", "y", 5, "global default", Key{}},
		{"resource with nothing: global", "empty", "y", 5, "global default", Key{}},
		{"unknown resource: global", "nope", "y", 5, "global default", Key{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine(t, lookupConfig(), nil)
			d := e.Allow(t.Context(), at(0), Request{Resource: tc.resource, Domain: tc.domain})
			if d.Status != StatusOK || d.Limit != tc.limit || d.Bucket.String() != tc.bucket {
				t.Fatalf("got %v limit %d bucket %q, want OK limit %d bucket %q", d.Status, d.Limit, d.Bucket, tc.limit, tc.bucket)
			}
			var keys []Key
			_ = e.Walk(t.Context(), at(0), func(b BucketInfo) bool {
				keys = append(keys, Key{b.Resource, b.Domain})
				return true
			})
			if len(keys) != 1 || keys[0] != tc.key {
				t.Fatalf("buckets %v, want just %v", keys, tc.key)
			}
		})
	}
}

func TestNoBucket(t *testing.T) {
	cfg := lookupConfig()
	cfg.GlobalDefault = nil
	e := newEngine(t, cfg, nil)
	for _, req := range []Request{{Resource: "nope", Domain: "y"}, {Resource: "bare", Domain: "y"}, {Resource: "empty", Domain: "x"}} {
		d := e.Allow(t.Context(), at(0), req)
		if d.Status != StatusNoBucket || !d.RetryNever || d.Bucket.Source != SourceNone {
			t.Errorf("%+v: %+v, want NO_BUCKET, never", req, d)
		}
	}
	if bucketCount(e) != 0 {
		t.Errorf("%d buckets after misses", bucketCount(e))
	}
	// A nil configuration configures nothing.
	if d := newEngine(t, nil, nil).Allow(t.Context(), at(0), Request{Resource: "r", Domain: "d"}); d.Status != StatusNoBucket {
		t.Errorf("nil config: %v", d.Status)
	}
}

func TestTooManyBuckets(t *testing.T) {
	e := newEngine(t, lookupConfig(), nil)
	// Template and prefix buckets count against max_dynamic_buckets (3);
	// named buckets do not.
	for i, domain := range []string{"rate_limit", "u1", "rate_limit/1.1.1.1", "a", "u2"} {
		if d := e.Allow(t.Context(), at(0), Request{Resource: "api", Domain: domain}); d.Status != StatusOK {
			t.Fatalf("request %d (%s): %v", i, domain, d.Status)
		}
	}
	for _, domain := range []string{"u3", "a/b/c"} {
		d := e.Allow(t.Context(), at(0), Request{Resource: "api", Domain: domain})
		if d.Status != StatusTooManyBuckets || !d.RetryNever {
			t.Fatalf("%s: %v, want TOO_MANY_BUCKETS", domain, d.Status)
		}
	}
	// Existing buckets still answer; other resources are not affected.
	if d := e.Allow(t.Context(), at(0), Request{Resource: "api", Domain: "u1"}); d.Status != StatusOK {
		t.Fatalf("existing dynamic bucket: %v", d.Status)
	}
	if got := e.Store().(*MemoryStore).Dynamic("api"); got != 3 {
		t.Fatalf("dynamic count %d, want 3", got)
	}
	// Too many buckets comes first, whatever the request asks; a refused
	// request below the limit does not count.
	small := newEngine(t, &Config{Resources: map[string]*Resource{"r": {
		Template: &Bucket{Size: 1, FillRate: 1, MaxTokensPerRequest: 5}, MaxDynamicBuckets: 1,
	}}}, nil)
	big := Request{Resource: "r", Domain: "x", Tokens: 5, MaxWait: 0, HasMaxWait: true}
	if d := small.Allow(t.Context(), at(0), big); d.Status != StatusTimeout || !d.RetryNever {
		t.Fatalf("5 tokens from a new bucket of 1: %+v", d)
	}
	if d := small.Allow(t.Context(), at(0), Request{Resource: "r", Domain: "y"}); d.Status != StatusOK {
		t.Fatalf("the one dynamic bucket: %v", d.Status)
	}
	if d := small.Allow(t.Context(), at(0), big); d.Status != StatusTooManyBuckets {
		t.Fatalf("past the limit: %v, want TOO_MANY_BUCKETS", d.Status)
	}
	// A refused request on a new domain creates nothing, so it does not
	// count either.
	cfg := lookupConfig()
	e = newEngine(t, cfg, nil)
	for i := range 3 {
		if d := e.Allow(t.Context(), at(0), Request{Resource: "api", Domain: fmt.Sprint("big", i), Tokens: 3}); d.Status != StatusTooManyTokensRequested {
			t.Fatalf("3 tokens from a bucket allowing 1 per request: %v", d.Status)
		}
		if d := e.Allow(t.Context(), at(0), Request{Resource: "api", Domain: fmt.Sprint("slow", i), Tokens: 1, MaxWait: 0, HasMaxWait: true}); d.Status != StatusOK {
			t.Fatalf("%v", d.Status)
		}
	}
	if bucketCount(e) != 3 {
		t.Fatalf("%d buckets, want 3", bucketCount(e))
	}
}

func TestDefaults(t *testing.T) {
	b := DefaultBucket()
	if b.Size != 100 || b.FillRate != 50 || b.WaitTimeout != time.Second || b.MaxIdle != -1 || b.MaxDebt != 10*time.Second || b.MaxTokensPerRequest != 50 {
		t.Fatalf("DefaultBucket() = %+v", b)
	}
	e := newEngine(t, &Config{GlobalDefault: &b}, nil)
	req := Request{Resource: "r", Domain: "d"} // Tokens 0 means 1
	if d := e.Allow(t.Context(), at(0), req); d.Status != StatusOK || d.Granted != 1 || d.Wait != 0 || d.Remaining != 99 || d.Limit != 100 {
		t.Fatalf("first: %+v", d)
	}
	// Drain the rest: 99 tokens at once is more than 50 per request.
	if d := e.Allow(t.Context(), at(0), Request{Resource: "r", Domain: "d", Tokens: 99}); d.Status != StatusTooManyTokensRequested {
		t.Fatalf("99 tokens: %v", d.Status)
	}
	for _, n := range []int64{50, 49} {
		if d := e.Allow(t.Context(), at(0), Request{Resource: "r", Domain: "d", Tokens: n}); d.Status != StatusOK || d.Wait != 0 {
			t.Fatalf("%d tokens: %+v", n, d)
		}
	}
	// Empty: 50 tokens take a second at 50/s, within the default wait.
	if d := e.Allow(t.Context(), at(0), Request{Resource: "r", Domain: "d", Tokens: 50}); d.Status != StatusOK || d.Wait != time.Second {
		t.Fatalf("50 future tokens: %+v", d)
	}
	// One more would wait 1.02 s.
	if d := e.Allow(t.Context(), at(0), req); d.Status != StatusTimeout || d.RetryAfter != 20*time.Millisecond {
		t.Fatalf("past the wait: %+v", d)
	}
	// A Bucket built in Go with MaxTokensPerRequest 0 allows the fill
	// rate, rounded up.
	e = newEngine(t, &Config{GlobalDefault: &Bucket{Size: 10, FillRate: 0.5}}, nil)
	if d := e.Allow(t.Context(), at(0), Request{Resource: "r", Domain: "d", Tokens: 2}); d.Status != StatusTooManyTokensRequested {
		t.Fatalf("2 tokens at 0.5/s: %v", d.Status)
	}
	if d := e.Allow(t.Context(), at(0), req); d.Status != StatusOK {
		t.Fatalf("1 token at 0.5/s: %v", d.Status)
	}
}

func TestMaxWait(t *testing.T) {
	// 10 tokens at 10/s, wait timeout 500 ms, max debt 300 ms unless
	// said otherwise; the bucket starts empty.
	tests := []struct {
		name    string
		bucket  Bucket
		req     Request
		status  Status
		granted int64
		wait    time.Duration
		retry   time.Duration
		never   bool
	}{
		{name: "the bucket's wait applies", bucket: Bucket{Size: 10, FillRate: 10, WaitTimeout: 500 * time.Millisecond, MaxDebt: time.Second},
			req: Request{Tokens: 5}, status: StatusOK, granted: 5, wait: 500 * time.Millisecond},
		{name: "beyond the bucket's wait", bucket: Bucket{Size: 10, FillRate: 10, WaitTimeout: 500 * time.Millisecond, MaxDebt: time.Second},
			req: Request{Tokens: 6}, status: StatusTimeout, retry: 100 * time.Millisecond},
		{name: "a request may lower it", bucket: Bucket{Size: 10, FillRate: 10, WaitTimeout: 500 * time.Millisecond, MaxDebt: time.Second},
			req: Request{Tokens: 5, MaxWait: 400 * time.Millisecond, HasMaxWait: true}, status: StatusTimeout, retry: 100 * time.Millisecond},
		{name: "a request may not raise it", bucket: Bucket{Size: 10, FillRate: 10, WaitTimeout: 500 * time.Millisecond, MaxDebt: time.Second},
			req: Request{Tokens: 6, MaxWait: time.Hour, HasMaxWait: true}, status: StatusTimeout, retry: 100 * time.Millisecond},
		{name: "max wait 0: only tokens that exist", bucket: Bucket{Size: 10, FillRate: 10, WaitTimeout: 500 * time.Millisecond, MaxDebt: time.Second},
			req: Request{Tokens: 1, MaxWait: 0, HasMaxWait: true}, status: StatusTimeout, retry: 100 * time.Millisecond},
		{name: "max debt binds below the wait", bucket: Bucket{Size: 10, FillRate: 10, WaitTimeout: 500 * time.Millisecond, MaxDebt: 300 * time.Millisecond},
			req: Request{Tokens: 4}, status: StatusTimeout, retry: 100 * time.Millisecond},
		{name: "within the debt", bucket: Bucket{Size: 10, FillRate: 10, WaitTimeout: 500 * time.Millisecond, MaxDebt: 300 * time.Millisecond},
			req: Request{Tokens: 3}, status: StatusOK, granted: 3, wait: 300 * time.Millisecond},
		{name: "partial grant within the wait", bucket: Bucket{Size: 10, FillRate: 10, WaitTimeout: 500 * time.Millisecond, MaxDebt: time.Second},
			req: Request{Tokens: 8, MinTokens: 2}, status: StatusOK, granted: 5, wait: 500 * time.Millisecond},
		{name: "never: more than size plus the debt allowed", bucket: Bucket{Size: 10, FillRate: 10, WaitTimeout: 500 * time.Millisecond, MaxDebt: time.Second, MaxTokensPerRequest: 100},
			req: Request{Tokens: 16}, status: StatusTimeout, never: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine(t, &Config{GlobalDefault: &tc.bucket}, nil)
			// Empty the bucket (10 tokens now), leaving no debt.
			if d := e.Allow(t.Context(), at(0), Request{Resource: "r", Domain: "d", Tokens: 10, MaxWait: 0, HasMaxWait: true}); d.Status != StatusOK && tc.bucket.MaxTokensPerRequest == 0 {
				t.Fatalf("drain: %+v", d)
			}
			if tc.bucket.MaxTokensPerRequest != 0 {
				e.Allow(t.Context(), at(0), Request{Resource: "r", Domain: "d", Tokens: 10})
			}
			tc.req.Resource, tc.req.Domain = "r", "d"
			d := e.Allow(t.Context(), at(0), tc.req)
			if d.Status != tc.status || d.Granted != tc.granted || d.Wait != tc.wait || d.RetryAfter != tc.retry || d.RetryNever != tc.never {
				t.Fatalf("got %v granted %d wait %v retry %v never %v; want %v %d %v %v %v",
					d.Status, d.Granted, d.Wait, d.RetryAfter, d.RetryNever, tc.status, tc.granted, tc.wait, tc.retry, tc.never)
			}
		})
	}
}

func TestTooManyTokens(t *testing.T) {
	b := Bucket{Size: 100, FillRate: 10, MaxTokensPerRequest: 5}
	tests := []struct {
		name    string
		req     Request
		status  Status
		granted int64
	}{
		{"at the limit", Request{Tokens: 5}, StatusOK, 5},
		{"above", Request{Tokens: 6}, StatusTooManyTokensRequested, 0},
		{"above, but the minimum is within: lowered", Request{Tokens: 6, MinTokens: 5}, StatusOK, 5},
		{"minimum above", Request{Tokens: 7, MinTokens: 6}, StatusTooManyTokensRequested, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine(t, &Config{GlobalDefault: &b}, nil)
			tc.req.Resource, tc.req.Domain = "r", "d"
			d := e.Allow(t.Context(), at(0), tc.req)
			if d.Status != tc.status || d.Granted != tc.granted {
				t.Fatalf("%+v", d)
			}
			if d.Status == StatusTooManyTokensRequested && (!d.RetryNever || bucketCount(e) != 0 || d.Limit != 100) {
				t.Fatalf("too many tokens: %+v, %d buckets", d, bucketCount(e))
			}
		})
	}
}

func TestRejectionChangesNothing(t *testing.T) {
	e := newEngine(t, &Config{GlobalDefault: &Bucket{Size: 10, FillRate: 10, WaitTimeout: 100 * time.Millisecond, MaxDebt: time.Second}}, nil)
	req := func(n int64) Request { return Request{Resource: "r", Domain: "d", Tokens: n} }
	if d := e.Allow(t.Context(), at(0), req(8)); d.Status != StatusOK {
		t.Fatal(d.Status)
	}
	snap := func() State {
		var s State
		_ = e.Store().Walk(t.Context(), func(sn Snapshot) bool { s = sn.State; return true })
		return s
	}
	before := snap()
	for _, r := range []Request{req(4), req(9), req(1 << 40), {Resource: "r", Domain: "d", Tokens: 3, MinTokens: 3, MaxWait: 0, HasMaxWait: true}, {Resource: "r", Domain: "d", Tokens: -1}} {
		if d := e.Allow(t.Context(), at(0), r); d.Status == StatusOK {
			t.Fatalf("%+v granted", r)
		}
		if after := snap(); after != before {
			t.Fatalf("%+v changed the state: %+v → %+v", r, before, after)
		}
	}
	if d := e.Allow(t.Context(), at(0), req(3)); d.Status != StatusOK || d.Granted != 3 || d.Wait != 100*time.Millisecond {
		t.Fatalf("after the rejections: %+v", d)
	}
}

func TestInvalidRequests(t *testing.T) {
	long := strings.Repeat("a", MaxNameLen)
	tests := []struct {
		name  string
		req   Request
		field string
	}{
		{"empty resource", Request{Domain: "d"}, "resource"},
		{"empty domain", Request{Resource: "r"}, "domain"},
		{"space in domain", Request{Resource: "r", Domain: "a b"}, "domain"},
		{"star in resource", Request{Resource: "r*", Domain: "d"}, "resource"},
		{"non-ASCII domain", Request{Resource: "r", Domain: "é"}, "domain"},
		{"NUL in domain", Request{Resource: "r", Domain: "a\x00"}, "domain"},
		{"resource too long", Request{Resource: long + "a", Domain: "d"}, "resource"},
		{"domain too long", Request{Resource: "r", Domain: long + "a"}, "domain"},
		{"negative tokens", Request{Resource: "r", Domain: "d", Tokens: -1}, "tokens"},
		{"tokens beyond 2^53", Request{Resource: "r", Domain: "d", Tokens: MaxTokens + 1}, "tokens"},
		{"negative min", Request{Resource: "r", Domain: "d", Tokens: 2, MinTokens: -1}, "min_tokens"},
		{"min above tokens", Request{Resource: "r", Domain: "d", Tokens: 2, MinTokens: 3}, "min_tokens"},
		{"min above the default 1", Request{Resource: "r", Domain: "d", MinTokens: 2}, "min_tokens"},
		{"negative max wait", Request{Resource: "r", Domain: "d", MaxWait: -1, HasMaxWait: true}, "max_wait"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var events []Event
			e := newEngine(t, &Config{GlobalDefault: bp(DefaultBucket()), Resources: map[string]*Resource{"r": {Template: bp(DefaultBucket())}}}, ListenerFunc(func(ev Event) { events = append(events, ev) }))
			d := e.Allow(t.Context(), at(0), tc.req)
			var re *RequestError
			if d.Status != StatusInvalidRequest || !errors.As(d.Err, &re) || re.Field != tc.field || !errors.Is(d.Err, ErrInvalidRequest) {
				t.Fatalf("got %v %v, want INVALID_REQUEST on %s", d.Status, d.Err, tc.field)
			}
			if bucketCount(e) != 0 {
				t.Fatalf("an invalid request created %d buckets", bucketCount(e))
			}
			if len(events) != 1 || events[0].Type != EventInvalidRequest {
				t.Fatalf("events %+v", events)
			}
		})
	}
	// The longest valid names, and every allowed character.
	e := newEngine(t, &Config{GlobalDefault: bp(DefaultBucket())}, nil)
	for _, req := range []Request{{Resource: long, Domain: long}, {Resource: "AZaz09/_-.:", Domain: "AZaz09/_-.:"}} {
		if d := e.Allow(t.Context(), at(0), req); d.Status != StatusOK {
			t.Errorf("%q/%q: %v %v", req.Resource, req.Domain, d.Status, d.Err)
		}
	}
}

func TestReap(t *testing.T) {
	cfg := &Config{Resources: map[string]*Resource{"r": {
		Buckets: map[string]Bucket{
			"fast":  {Size: 10, FillRate: 10, MaxIdle: time.Second},                           // full 1 s after draining
			"slow":  {Size: 10, FillRate: 0.1, MaxIdle: time.Second, MaxTokensPerRequest: 10}, // full 100 s after
			"never": {Size: 10, FillRate: 10, MaxIdle: DefaultMaxIdle},                        // never reaped
			"zero":  {Size: 10, FillRate: 10},                                                 // MaxIdle 0: never
			"a":     {Size: 10, FillRate: 10, MaxIdle: 500 * time.Millisecond},                // prefix buckets below it
		},
		MaxDynamicBuckets: 1,
	}}}
	var removed []string
	e := newEngine(t, cfg, ListenerFunc(func(ev Event) {
		if ev.Type == EventBucketRemoved {
			removed = append(removed, fmt.Sprintf("%s %s", ev.Domain, ev.Removed))
		}
	}))
	for _, d := range []string{"fast", "slow", "never", "zero", "a/1"} {
		if got := e.Allow(t.Context(), at(0), Request{Resource: "r", Domain: d, Tokens: 10, MaxWait: 0, HasMaxWait: true}); got.Status != StatusOK {
			t.Fatalf("%s: %v", d, got.Status)
		}
	}
	if d := e.Allow(t.Context(), at(0), Request{Resource: "r", Domain: "a/2"}); d.Status != StatusTooManyBuckets {
		t.Fatalf("a/2: %v", d.Status)
	}
	tests := []struct {
		at      time.Duration
		removed []string
		left    int
	}{
		{999 * time.Millisecond, nil, 5},                    // fast is full but idle < 1 s; a/1 idle but not full
		{time.Second, []string{"a/1 idle", "fast idle"}, 3}, // both idle and full
		{99 * time.Second, nil, 3},                          // slow idle, not full yet
		{100 * time.Second, []string{"slow idle"}, 2},       // full now
		{time.Hour, nil, 2},                                 // never, zero
	}
	for _, tc := range tests {
		removed = nil
		n, err := e.Reap(t.Context(), at(tc.at))
		if err != nil || n != len(tc.removed) || bucketCount(e) != tc.left {
			t.Fatalf("reap at %v: %d removed (%v), %d left, %v", tc.at, n, removed, bucketCount(e), err)
		}
		slicesSort(removed)
		if fmt.Sprint(removed) != fmt.Sprint(tc.removed) {
			t.Fatalf("reap at %v: removed %v, want %v", tc.at, removed, tc.removed)
		}
	}
	// A reaped bucket comes back full, and the dynamic count went down.
	if d := e.Allow(t.Context(), at(time.Hour), Request{Resource: "r", Domain: "fast", Tokens: 10, MaxWait: 0, HasMaxWait: true}); d.Status != StatusOK {
		t.Fatalf("fast after reaping: %+v", d)
	}
	if d := e.Allow(t.Context(), at(time.Hour), Request{Resource: "r", Domain: "a/2"}); d.Status != StatusOK {
		t.Fatalf("a/2 after a/1 was reaped: %v", d.Status)
	}
	// Rejected requests count as use: fast, refused at +0.5 s, is full at
	// +1 s but idle only 0.7 s at +1.2 s; a/2 goes.
	if d := e.Allow(t.Context(), at(time.Hour+500*time.Millisecond), Request{Resource: "r", Domain: "fast", Tokens: 10, MaxWait: 0, HasMaxWait: true}); d.Status != StatusTimeout {
		t.Fatalf("fast at +0.5 s: %v", d.Status)
	}
	removed = nil
	if n, _ := e.Reap(t.Context(), at(time.Hour+1200*time.Millisecond)); n != 1 || fmt.Sprint(removed) != "[a/2 idle]" {
		t.Fatalf("reaped %d: %v, want a/2 only", n, removed)
	}
}

func slicesSort(s []string) {
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
}

// state returns the state of bucket k.
func state(t *testing.T, e *Engine, k Key) (State, bool) {
	t.Helper()
	var s State
	found := false
	_ = e.Store().Walk(t.Context(), func(sn Snapshot) bool {
		if sn.Key == k {
			s, found = sn.State, true
			return false
		}
		return true
	})
	return s, found
}

func TestSetConfig(t *testing.T) {
	base := func() *Config {
		return &Config{
			GlobalDefault: bp(bucket(10, 10)),
			Resources: map[string]*Resource{
				"r": {
					Buckets:  map[string]Bucket{"changed": bucket(10, 10), "same": bucket(10, 10), "gone": bucket(10, 10)},
					Template: bp(bucket(10, 10)),
				},
				"other": {Default: bp(bucket(10, 10))},
			},
		}
	}
	var removed []string
	e := newEngine(t, base(), ListenerFunc(func(ev Event) {
		if ev.Type == EventBucketRemoved {
			removed = append(removed, ev.Resource+"/"+ev.Domain)
		}
	}))
	// Half of each bucket, at t0.
	for _, k := range []Key{{"r", "changed"}, {"r", "same"}, {"r", "gone"}, {"r", "dyn"}, {"r", "dyn2"}, {"other", "x"}, {"nope", "x"}} {
		if d := e.Allow(t.Context(), at(0), Request{Resource: k.Resource, Domain: k.Domain, Tokens: 5}); d.Status != StatusOK {
			t.Fatalf("%v: %v", k, d.Status)
		}
	}
	sameBefore, _ := state(t, e, Key{"r", "same"})

	next := base()
	next.Resources["r"].Buckets["changed"] = bucket(20, 40) // size doubles: 10 tokens
	next.Resources["r"].Buckets["same"] = Bucket{Size: 10, FillRate: 10, WaitTimeout: time.Hour, MaxDebt: time.Hour}
	delete(next.Resources["r"].Buckets, "gone")        // falls to the template: a new bucket
	next.Resources["r"].Buckets["dyn"] = bucket(4, 10) // dynamic → named: half of 4
	next.Resources["r"].Template = nil                 // dyn2 has no bucket of its own any more
	next.Resources["r"].Default = bp(bucket(30, 1))    // … it falls to the default
	delete(next.Resources, "other")                    // vanished: to the global default
	next.GlobalDefault = bp(bucket(100, 10))           // the global bucket: half of 100
	now := at(0)
	if err := e.SetConfig(now, next); err != nil {
		t.Fatal(err)
	}
	slicesSort(removed)
	if want := "[other/ r/dyn2 r/gone]"; fmt.Sprint(removed) != want {
		t.Fatalf("removed %v, want %v", removed, want)
	}
	tests := []struct {
		key    Key
		tokens float64
	}{
		{Key{"r", "changed"}, 10},
		{Key{"r", "same"}, 5},
		{Key{"r", "dyn"}, 2},
		{Key{}, 50},
	}
	for _, tc := range tests {
		var got *BucketInfo
		_ = e.Walk(t.Context(), now, func(b BucketInfo) bool {
			if b.Resource == tc.key.Resource && b.Domain == tc.key.Domain {
				got = &b
			}
			return true
		})
		if got == nil {
			t.Fatalf("%v: gone", tc.key)
		}
		if math.Abs(got.Tokens-tc.tokens) > 1e-9 || math.Abs(got.Fraction-tc.tokens/float64(got.Size)) > 1e-9 {
			t.Errorf("%v: %v tokens (fraction %v), want %v", tc.key, got.Tokens, got.Fraction, tc.tokens)
		}
	}
	if after, _ := state(t, e, Key{"r", "same"}); after != sameBefore {
		t.Errorf("an unchanged bucket was touched: %+v → %+v", sameBefore, after)
	}
	if got := e.Store().(*MemoryStore).Dynamic("r"); got != 0 {
		t.Errorf("dynamic count of r %d, want 0", got)
	}
	if d := e.Allow(t.Context(), now, Request{Resource: "r", Domain: "dyn2"}); d.Bucket.Source != SourceDefault || d.Limit != 30 {
		t.Errorf("dyn2 after: %v %d", d.Bucket, d.Limit)
	}
	// A bad configuration is refused and the old one stays.
	bad := base()
	bad.Resources["r"].Buckets["changed"] = Bucket{Size: 10}
	err := e.SetConfig(now, bad)
	if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "resources.r.domains.changed.fill_rate: 0 must be > 0") {
		t.Fatalf("bad config: %v", err)
	}
	if d := e.Allow(t.Context(), now, Request{Resource: "r", Domain: "changed"}); d.Limit != 20 {
		t.Errorf("after a refused config: limit %d, want 20", d.Limit)
	}
}

func TestEvents(t *testing.T) {
	var got []string
	e := newEngine(t, lookupConfig(), ListenerFunc(func(ev Event) {
		s := fmt.Sprintf("%s %s/%s %s tokens=%d", ev.Type, ev.Resource, ev.Domain, ev.Bucket, ev.Tokens)
		if ev.Wait > 0 {
			s += " wait=" + ev.Wait.String()
		}
		if ev.Dynamic {
			s += " dynamic"
		}
		if ev.Status != 0 {
			s += " " + ev.Status.String()
		}
		got = append(got, s)
	}))
	e.Allow(t.Context(), at(0), Request{Resource: "api", Domain: "u1"})
	e.Allow(t.Context(), at(0), Request{Resource: "api", Domain: "u1"})
	e.Allow(t.Context(), at(0), Request{Resource: "api", Domain: "u1"})
	e.Allow(t.Context(), at(0), Request{Resource: "api", Domain: "u1", MaxWait: 0, HasMaxWait: true})
	e.Allow(t.Context(), at(0), Request{Resource: "api", Domain: "u1", Tokens: 5})
	e.Allow(t.Context(), at(0), Request{Resource: "api", Domain: "u2"})
	e.Allow(t.Context(), at(0), Request{Resource: "api", Domain: "u3"})
	e.Allow(t.Context(), at(0), Request{Resource: "api", Domain: "u4"})
	e.Allow(t.Context(), at(0), Request{Resource: "api", Domain: "bad domain"})
	cfg := lookupConfig()
	cfg.GlobalDefault = nil
	if err := e.SetConfig(at(0), cfg); err != nil {
		t.Fatal(err)
	}
	e.Allow(t.Context(), at(0), Request{Resource: "nope", Domain: "x"})
	want := []string{
		"bucket_created api/u1 dynamic tokens=0 dynamic",
		"tokens_served api/u1 dynamic tokens=1 dynamic OK",
		"tokens_served api/u1 dynamic tokens=1 dynamic OK",
		"tokens_served api/u1 dynamic tokens=1 wait=1s dynamic OK",
		"timeout api/u1 dynamic tokens=1 dynamic TIMEOUT",
		"too_many_tokens_requested api/u1 dynamic tokens=5 TOO_MANY_TOKENS_REQUESTED",
		"bucket_created api/u2 dynamic tokens=0 dynamic",
		"tokens_served api/u2 dynamic tokens=1 dynamic OK",
		"bucket_created api/u3 dynamic tokens=0 dynamic",
		"tokens_served api/u3 dynamic tokens=1 dynamic OK",
		"bucket_miss api/u4 dynamic tokens=1 dynamic TOO_MANY_BUCKETS",
		"invalid_request api/bad domain  tokens=0 INVALID_REQUEST",
		"bucket_miss nope/x  tokens=1 NO_BUCKET",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestWalk(t *testing.T) {
	e := newEngine(t, lookupConfig(), nil)
	for range 10 {
		e.Allow(t.Context(), at(0), Request{Resource: "api", Domain: "rate_limit/1.2.3.4"})
	}
	e.Allow(t.Context(), at(0), Request{Resource: "api", Domain: "rate_limit/1.2.3.4", MaxWait: 0, HasMaxWait: true})
	var infos []BucketInfo
	if err := e.Walk(t.Context(), at(500*time.Millisecond), func(b BucketInfo) bool { infos = append(infos, b); return true }); err != nil {
		t.Fatal(err)
	}
	if len(infos) != 1 {
		t.Fatalf("%d buckets", len(infos))
	}
	b := infos[0]
	want := BucketInfo{
		Resource: "api", Domain: "rate_limit/1.2.3.4", Bucket: BucketRef{Source: SourcePrefix, Prefix: "rate_limit"}, Dynamic: true,
		Size: 10, FillRate: 1, Tokens: 0.5, Fraction: 0.05, LastUsed: at(0), Grants: 10, Rejections: 1,
	}
	if b != want {
		t.Fatalf("got  %+v\nwant %+v", b, want)
	}
	// Stopping early.
	e.Allow(t.Context(), at(0), Request{Resource: "api", Domain: "x"})
	n := 0
	_ = e.Walk(t.Context(), at(0), func(BucketInfo) bool { n++; return false })
	if n != 1 {
		t.Fatalf("walk went on after false: %d", n)
	}
}

// Concurrent decisions on one bucket never grant more than it holds plus
// its fill, and a concurrent SetConfig and Reap do not disturb them (run
// with -race).
func TestConcurrent(t *testing.T) {
	b := Bucket{Size: 1000, FillRate: 1, MaxTokensPerRequest: 1}
	cfg := &Config{Resources: map[string]*Resource{"r": {Template: &b}}}
	e := newEngine(t, cfg, ListenerFunc(func(Event) {}))
	var wg sync.WaitGroup
	var mu sync.Mutex
	granted := map[string]int64{}
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				domain := fmt.Sprint("d", i%3)
				d := e.Allow(t.Context(), at(time.Duration(i)*time.Microsecond), Request{Resource: "r", Domain: domain, MaxWait: 0, HasMaxWait: true})
				if d.Status == StatusOK {
					mu.Lock()
					granted[domain] += d.Granted
					mu.Unlock()
				}
				if g == 0 && i%500 == 0 {
					if err := e.SetConfig(at(0), cfg); err != nil {
						t.Error(err)
					}
					_, _ = e.Reap(t.Context(), at(0))
				}
			}
		}()
	}
	wg.Wait()
	for d, n := range granted {
		// 8 × 2000 / 3 ≈ 5333 asked per domain over 2 ms: at most 1000 + 0.002.
		if n != 1000 {
			t.Errorf("%s: granted %d, want exactly the 1000 it holds", d, n)
		}
	}
}

func TestQuery(t *testing.T) {
	cfg := &Config{Resources: map[string]*Resource{
		"msg": {Template: &Bucket{Size: 10, FillRate: 1, MaxTokensPerRequest: 10}},
		"api": {Template: &Bucket{Size: 10, FillRate: 1, MaxTokensPerRequest: 10}},
	}}
	e := newEngine(t, cfg, nil)
	// msg/u0 … msg/u19 hold 10 − i%10 tokens; api/u0 … api/u4 are full.
	for i := range 20 {
		if i%10 > 0 {
			e.Allow(t.Context(), at(0), Request{Resource: "msg", Domain: fmt.Sprint("u", i), Tokens: int64(i % 10)})
		} else {
			e.Allow(t.Context(), at(0), Request{Resource: "msg", Domain: fmt.Sprint("u", i), Tokens: 1, MaxWait: 0, HasMaxWait: true})
		}
	}
	for i := range 5 {
		e.Allow(t.Context(), at(0), Request{Resource: "api", Domain: fmt.Sprint("u", i), Tokens: 1})
	}
	// "Show all buckets whose key begins with msg where the fraction is
	// below 50 %", lowest first.
	half := Query{
		Filter: func(b *BucketInfo) bool { return b.Resource == "msg" && b.Fraction < 0.5 },
		Less:   func(a, b *BucketInfo) bool { return a.Fraction < b.Fraction },
		Limit:  100,
	}
	p, err := e.Query(t.Context(), at(0), half)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, b := range p.Buckets {
		got = append(got, fmt.Sprintf("%s:%g", b.Domain, b.Tokens))
	}
	// u9 and u19 hold 1, u8 and u18 hold 2, …; ties by key.
	if want := "[u19:1 u9:1 u18:2 u8:2 u17:3 u7:3 u16:4 u6:4]"; fmt.Sprint(got) != want || p.Total != 8 {
		t.Fatalf("got %v (total %d), want %s", got, p.Total, want)
	}
	// Pages of 3 follow each other exactly, whatever the order.
	all, _ := e.Query(t.Context(), at(0), Query{Limit: 1000})
	if all.Total != 25 || len(all.Buckets) != 25 || all.Buckets[0].Resource != "api" || all.Buckets[24].Domain != "u9" {
		t.Fatalf("by key: %d of %d, first %v", len(all.Buckets), all.Total, all.Buckets[0])
	}
	for _, less := range []func(a, b *BucketInfo) bool{nil, func(a, b *BucketInfo) bool { return a.Fraction > b.Fraction }} {
		full, _ := e.Query(t.Context(), at(0), Query{Less: less, Limit: 1000})
		var paged []BucketInfo
		for off := 0; ; off += 3 {
			p, _ := e.Query(t.Context(), at(0), Query{Less: less, Offset: off, Limit: 3})
			if len(p.Buckets) == 0 {
				break
			}
			paged = append(paged, p.Buckets...)
		}
		if !slices.Equal(paged, full.Buckets) {
			t.Fatalf("pages of 3 differ from the whole")
		}
	}
	// Limit 0: only the total.
	if p, _ := e.Query(t.Context(), at(0), Query{Filter: func(b *BucketInfo) bool { return b.Resource == "api" }}); p.Total != 5 || len(p.Buckets) != 0 {
		t.Fatalf("total only: %+v", p)
	}
	// A budget bounds the walk: 10 of the 25 buckets looked at, the page
	// over those, and it says it is not complete; a budget of all of them
	// is complete.
	if p, _ := e.Query(t.Context(), at(0), Query{Limit: 100, Budget: 10}); p.Walked != 10 || p.Complete || p.Total != 10 || len(p.Buckets) != 10 {
		t.Fatalf("budget 10: walked %d, complete %v, total %d, %d rows", p.Walked, p.Complete, p.Total, len(p.Buckets))
	}
	if p, _ := e.Query(t.Context(), at(0), Query{Limit: 100, Budget: 25}); p.Walked != 25 || !p.Complete || p.Total != 25 {
		t.Fatalf("budget 25: walked %d, complete %v, total %d", p.Walked, p.Complete, p.Total)
	}
}

// A bucket starts full whatever the clock: a simulator's virtual time may
// start at the Unix epoch.
func TestStartsFullAtEpoch(t *testing.T) {
	e := newEngine(t, &Config{Resources: map[string]*Resource{"r": {Template: &Bucket{Size: 100, FillRate: 1, MaxTokensPerRequest: 100}}}}, nil)
	for _, now := range []time.Time{time.Unix(0, 0), time.Unix(-5, 0)} {
		if d := e.Allow(t.Context(), now, Request{Resource: "r", Domain: "d" + fmt.Sprint(now.Unix()), Tokens: 100, MaxWait: 0, HasMaxWait: true}); d.Status != StatusOK {
			t.Fatalf("at %v: %v", now, d.Status)
		}
	}
}

// failingStore is the memory store with Take failing as told: the store
// error path (a Redis outage) and a configuration that keeps changing.
type failingStore struct {
	*MemoryStore
	err error
}

func (f failingStore) Take(context.Context, int64, Key, *Limit, Ask) (Outcome, error) {
	return Outcome{}, f.err
}

func TestStoreErrors(t *testing.T) {
	down := errors.New("redis: connection refused")
	for _, tc := range []struct {
		err  error
		want error
	}{{down, down}, {fmt.Errorf("wrapped: %w", ErrStaleConfig), ErrStaleConfig}} {
		var events []EventType
		e, err := New(&Config{GlobalDefault: bp(DefaultBucket())}, Options{
			Store:    failingStore{NewMemoryStore(), tc.err},
			Listener: ListenerFunc(func(ev Event) { events = append(events, ev.Type) }),
		})
		if err != nil {
			t.Fatal(err)
		}
		d := e.Allow(t.Context(), at(0), Request{Resource: "r", Domain: "d"})
		if d.Status != StatusServerError || !errors.Is(d.Err, tc.want) || !d.RetryNever {
			t.Errorf("%v: %+v", tc.err, d)
		}
		if len(events) != 1 || events[0] != EventServerError {
			t.Errorf("%v: events %v", tc.err, events)
		}
	}
}

func TestConfigCopies(t *testing.T) {
	cfg := lookupConfig()
	e := newEngine(t, cfg, nil)
	// The engine keeps a copy: changing the caller's changes nothing.
	cfg.Resources["api"].Buckets["rate_limit"] = bucket(1, 1)
	if d := e.Allow(t.Context(), at(0), Request{Resource: "api", Domain: "rate_limit"}); d.Limit != 10 {
		t.Fatalf("the engine saw the caller's change: limit %d", d.Limit)
	}
	got := e.Config()
	if got.Resources["api"].Buckets["rate_limit"].Size != 10 || got.GlobalDefault.Size != 5 {
		t.Fatalf("Config() = %+v", got)
	}
	got.Resources["api"].Template.Size = 99
	if e.Config().Resources["api"].Template.Size != 2 {
		t.Fatal("Config() returned the engine's own copy")
	}
}

func TestValidName(t *testing.T) {
	for s, want := range map[string]bool{
		"a": true, "Pinky_TheBrain:UserService": true, "rate_limit/192.168.11.3": true, "a-b.c": true,
		"": false, "a b": false, "a*": false, "ü": false, strings.Repeat("x", MaxNameLen): true, strings.Repeat("x", MaxNameLen+1): false,
	} {
		if got := ValidName(s); got != want {
			t.Errorf("ValidName(%q) = %v", s, got)
		}
	}
}

func TestNames(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{StatusTooManyTokensRequested.String(), "TOO_MANY_TOKENS_REQUESTED"},
		{Status(99).String(), "Status(99)"},
		{EventBucketRemoved.String(), "bucket_removed"},
		{EventType(99).String(), "unknown"},
		{RemovedIdle.String(), "idle"},
		{RemovedReconfigured.String(), "reconfigured"},
		{TokenBucket.String(), "token_bucket"},
		{Algorithm(2).String(), "Algorithm(2)"},
		{(&RequestError{Field: "domain", Reason: "empty"}).Error(), "domain: empty"},
		{BucketRef{}.String(), ""},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

// bucketCount returns e's number of buckets (exact: the tests' stores
// are in memory).
func bucketCount(e *Engine) int {
	n, _ := e.EstimateLen(context.Background())
	return n
}
