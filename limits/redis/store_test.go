package redisstore

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/testutil/redistest"
	"github.com/sluice-rl/sluice/limits"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// randConfig returns a random configuration of two resources.
func randConfig(r *rand.Rand, maxDyn int64) *limits.Config {
	b := func() *limits.Bucket {
		return &limits.Bucket{
			Size:        1 + r.Int64N(20),
			FillRate:    []float64{0.3, 1, 3.7, 10, 1e3 / 7}[r.IntN(5)],
			WaitTimeout: time.Duration(r.IntN(3)) * 700 * time.Millisecond,
			MaxDebt:     time.Duration(r.IntN(3)) * 900 * time.Millisecond,
		}
	}
	return &limits.Config{
		GlobalDefault: b(),
		Resources: map[string]*limits.Resource{
			"r1": {Default: b(), Buckets: map[string]limits.Bucket{"a": *b(), "a/b": *b()}},
			"r2": {Template: b(), MaxDynamicBuckets: maxDyn},
		},
	}
}

func randRequest(r *rand.Rand) limits.Request {
	res := []string{"r1", "r2", "r3"}[r.IntN(3)]
	dom := []string{"a", "a/b", "a/c", "x", "y", "z_1"}[r.IntN(6)]
	tok := 1 + r.Int64N(6)
	req := limits.Request{Resource: res, Domain: dom, Tokens: tok}
	if r.IntN(2) == 0 {
		req.MinTokens = 1 + r.Int64N(tok)
	}
	if r.IntN(3) == 0 {
		req.MaxWait, req.HasMaxWait = time.Duration(r.IntN(1000))*time.Millisecond, true
	}
	return req
}

// TestDifferential: the Redis store and the memory store give identical
// Decisions over random sequences at controlled times, across one
// configuration change that rescales buckets.
func TestDifferential(t *testing.T) { differential(t, client(t), 20, 300) }

// differential runs seeds random sequences of steps requests on the
// memory store and on the Redis store on c, and compares every Decision.
func differential(t *testing.T, c redis.UniversalClient, seeds uint64, steps int) {
	for seed := range seeds {
		r := rand.New(rand.NewPCG(seed, 1))
		cfg := randConfig(r, 0)
		mem, err := limits.New(cfg, limits.Options{})
		if err != nil {
			t.Fatal(err)
		}
		st := New(c, Options{Prefix: prefix(t) + strconvU(seed) + ":", callerTime: true})
		red, err := limits.New(cfg, limits.Options{Store: st})
		if err != nil {
			t.Fatal(err)
		}
		now := t0
		for i := range steps {
			now = now.Add(time.Duration(r.IntN(400)) * time.Millisecond)
			if i == steps/2 {
				cfg2 := randConfig(r, 0)
				if err := mem.SetConfig(now, cfg2); err != nil {
					t.Fatal(err)
				}
				if err := red.SetConfig(now, cfg2); err != nil {
					t.Fatal(err)
				}
			}
			req := randRequest(r)
			dm, dr := mem.Allow(t.Context(), now, req), red.Allow(t.Context(), now, req)
			if dm != dr {
				t.Fatalf("seed %d step %d %+v:\nmemory %+v\nredis  %+v", seed, i, req, dm, dr)
			}
		}
	}
}

func strconvU(n uint64) string { return string(rune('a'+n%26)) + string(rune('a'+n/26)) }

// TestTwoEngines: two engines sharing one Redis answer as one memory
// engine does.
func TestTwoEngines(t *testing.T) {
	twoEngines(t, [2]redis.UniversalClient{client(t), client(t)})
}

// twoEngines runs random requests alternately on two engines, one on
// each of cs, sharing one Redis, and compares their Decisions with one
// memory engine's.
func twoEngines(t *testing.T, cs [2]redis.UniversalClient) {
	r := rand.New(rand.NewPCG(7, 7))
	// max_dynamic_buckets: 0, since in virtual time a full dynamic bucket
	// is forgotten on Redis (TestRejectionWritesNothing covers the limit
	// across two engines).
	cfg := randConfig(r, 0)
	mem, _ := limits.New(cfg, limits.Options{})
	var eng [2]*limits.Engine
	for i := range eng {
		var err error
		eng[i], err = limits.New(cfg, limits.Options{Store: New(cs[i], Options{Prefix: prefix(t), callerTime: true})})
		if err != nil {
			t.Fatal(err)
		}
	}
	now := t0
	for i := range 400 {
		now = now.Add(time.Duration(r.IntN(300)) * time.Millisecond)
		req := randRequest(r)
		dm, dr := mem.Allow(t.Context(), now, req), eng[i%2].Allow(t.Context(), now, req)
		if dm != dr {
			t.Fatalf("step %d %+v:\nmemory %+v\nredis  %+v", i, req, dm, dr)
		}
	}
}

// TestRejectionWritesNothing: a rejected request, or one past
// max_dynamic_buckets, creates no key.
func TestRejectionWritesNothing(t *testing.T) {
	c := client(t)
	st := New(c, Options{Prefix: prefix(t)})
	cfg := &limits.Config{Resources: map[string]*limits.Resource{
		"r": {Template: &limits.Bucket{Size: 2, FillRate: 1, MaxTokensPerRequest: 5}, MaxDynamicBuckets: 1},
	}}
	e, err := limits.New(cfg, limits.Options{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	keys := func() []string {
		k, err := c.Keys(ctx, prefix(t)+"*").Result()
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	if d := e.Allow(ctx, time.Now(), limits.Request{Resource: "r", Domain: "d1", Tokens: 3}); d.Status != limits.StatusTimeout {
		t.Fatalf("3 of 2: %+v", d)
	}
	if k := keys(); len(k) != 0 {
		t.Fatalf("a rejection wrote %v", k)
	}
	if d := e.Allow(ctx, time.Now(), limits.Request{Resource: "r", Domain: "d1"}); d.Status != limits.StatusOK {
		t.Fatalf("1 of 2: %+v", d)
	}
	if k := keys(); len(k) != 2 {
		t.Fatalf("after a grant: %v, want the bucket and the dynamic set", k)
	}
	if d := e.Allow(ctx, time.Now(), limits.Request{Resource: "r", Domain: "d2"}); d.Status != limits.StatusTooManyBuckets {
		t.Fatalf("second dynamic bucket: %+v", d)
	}
	if k := keys(); len(k) != 2 {
		t.Fatalf("after too many buckets: %v", k)
	}
	if n := walkLen(t, st); n != 1 {
		t.Fatalf("walk counts %d, want 1", n)
	}
	// A second engine on the same Redis sees the same count.
	e2, _ := limits.New(cfg, limits.Options{Store: New(c, Options{Prefix: prefix(t)})})
	if d := e2.Allow(ctx, time.Now(), limits.Request{Resource: "r", Domain: "d3"}); d.Status != limits.StatusTooManyBuckets {
		t.Fatalf("second engine, second dynamic bucket: %+v", d)
	}
	if d := e2.Allow(ctx, time.Now(), limits.Request{Resource: "r", Domain: "d1"}); d.Status != limits.StatusOK || d.Remaining > 0.1 {
		t.Fatalf("second engine, the first engine's bucket: %+v", d)
	}
}

// TestUnreadableBucket: a bucket key that holds something else than a
// bucket (too short, numbers that are not numbers, or a configuration
// that does not parse) is taken for a full bucket and rewritten on the
// next grant with a TTL of its own, never a script error nor a bucket
// that rejects or lives forever.
func TestUnreadableBucket(t *testing.T) {
	c := client(t)
	st := New(c, Options{Prefix: prefix(t)})
	cfg := &limits.Config{Resources: map[string]*limits.Resource{"r": {Default: &limits.Bucket{Size: 5, FillRate: 1}}}}
	e, _ := limits.New(cfg, limits.Options{Store: st})
	ctx := context.Background()
	nan := strings.Repeat("\xff", 56) // seven NaNs
	for _, v := range []string{"garbage", nan + "x", nan + "5 1 5000000000 0 3 "} {
		if err := c.Set(ctx, st.bucketKey("r", ""), v, 0).Err(); err != nil { // the default bucket, shared; no TTL
			t.Fatal(err)
		}
		if d := e.Allow(ctx, time.Now(), limits.Request{Resource: "r", Domain: "d"}); d.Status != limits.StatusOK || d.Remaining != 4 {
			t.Fatalf("over %q: %+v, want granted from a full bucket of 5", v, d)
		}
		if d := e.Allow(ctx, time.Now(), limits.Request{Resource: "r", Domain: "d"}); d.Status != limits.StatusOK || d.Remaining > 3.01 {
			t.Fatalf("over %q, again: %+v, want the bucket rewritten (3 left)", v, d)
		}
		if ttl, err := c.PTTL(ctx, st.bucketKey("r", "")).Result(); err != nil || ttl <= 0 {
			t.Fatalf("over %q: TTL %v %v, want the bucket's own", v, ttl, err)
		}
	}
}

// TestExpiry: keys expire once full again, or after MaxIdle when longer,
// plus one to four seconds (a new expiry is set four seconds past, and
// kept while enough); an expired bucket comes back full.
func TestExpiry(t *testing.T) {
	c := client(t)
	st := New(c, Options{Prefix: prefix(t)})
	cfg := &limits.Config{Resources: map[string]*limits.Resource{
		"fast": {Default: &limits.Bucket{Size: 1, FillRate: 10}},
		"idle": {Default: &limits.Bucket{Size: 1, FillRate: 10, MaxIdle: 5 * time.Second}},
	}}
	e, _ := limits.New(cfg, limits.Options{Store: st})
	ctx := context.Background()
	for _, tc := range []struct {
		res      string
		lo, high time.Duration
	}{{"fast", 3900 * time.Millisecond, 4100 * time.Millisecond}, {"idle", 8900 * time.Millisecond, 9100 * time.Millisecond}} {
		if d := e.Allow(ctx, time.Now(), limits.Request{Resource: tc.res, Domain: "d"}); d.Status != limits.StatusOK {
			t.Fatalf("%s: %+v", tc.res, d)
		}
		ttl, err := c.PTTL(ctx, st.bucketKey(tc.res, "")).Result()
		if err != nil {
			t.Fatal(err)
		}
		if ttl < tc.lo || ttl > tc.high {
			t.Errorf("%s: TTL %v, want in [%v, %v]", tc.res, ttl, tc.lo, tc.high)
		}
	}
	// A grant that needs no longer keeps the TTL.
	time.Sleep(200 * time.Millisecond)
	if d := e.Allow(ctx, time.Now(), limits.Request{Resource: "fast", Domain: "d"}); d.Status != limits.StatusOK {
		t.Fatalf("fast, again: %+v", d)
	}
	if ttl, err := c.PTTL(ctx, st.bucketKey("fast", "")).Result(); err != nil || ttl > 3900*time.Millisecond {
		t.Errorf("fast, again: TTL %v %v, want the first one's, at most 3.9 s", ttl, err)
	}
	time.Sleep(4 * time.Second)
	if n, _ := c.Exists(ctx, st.bucketKey("fast", "")).Result(); n != 0 {
		t.Fatal("the full bucket did not expire")
	}
	if d := e.Allow(ctx, time.Now(), limits.Request{Resource: "fast", Domain: "d"}); d.Status != limits.StatusOK || d.Remaining > 0.1 {
		t.Fatalf("after expiry: %+v", d)
	}
}

// tagOf returns the hash tag Redis Cluster hashes for key.
func tagOf(key string) string {
	i := strings.IndexByte(key, '{')
	if i < 0 {
		return key
	}
	j := strings.IndexByte(key[i+1:], '}')
	if j <= 0 {
		return key
	}
	return key[i+1 : i+1+j]
}

// TestKeys: every key of one resource has one hash tag holding the whole
// resource; escaping keeps tricky names apart and round-trips.
func TestKeys(t *testing.T) {
	st := New(nil, Options{Prefix: "p{x}:"})
	names := [][2]string{
		{"a_b", ""}, {"a", "b"}, {"a", "_b"}, {"a}", "x"}, {"a", "}x"}, {"a{b}", "c"}, {"a", "b}b:c"},
		{"a%7D", "x"}, {"", ""}, {"r", ""}, {"r", "%"}, {"r", "%25"}, {"a:b", "c"}, {"a", "b:c"},
	}
	seen := map[string]limits.Key{}
	for _, n := range names {
		k := limits.Key{Resource: n[0], Domain: n[1]}
		bk, dk := st.bucketKey(k.Resource, escape(k.Domain)), st.dynKey(k.Resource)
		if tagOf(bk) != tagOf(dk) || tagOf(bk) == bk || tagOf(bk) != "r"+escape(k.Resource) {
			t.Errorf("%q: tags %q and %q", k, tagOf(bk), tagOf(dk))
		}
		if o, dup := seen[bk]; dup {
			t.Errorf("%q and %q share key %q", o, k, bk)
		}
		seen[bk] = k
		if got, ok := st.parseKey(bk); !ok || got != k {
			t.Errorf("parseKey(%q) = %q, %v; want %q", bk, got, ok, k)
		}
	}
}

// TestRedisTime: without callerTime, the scripts use Redis TIME and ignore
// the caller's clock.
func TestRedisTime(t *testing.T) {
	st := New(client(t), Options{Prefix: prefix(t)})
	cfg := &limits.Config{Resources: map[string]*limits.Resource{"r": {Default: &limits.Bucket{Size: 3, FillRate: 0.01}}}}
	e, _ := limits.New(cfg, limits.Options{Store: st})
	for i, when := range []time.Time{time.Now(), time.Now().Add(time.Hour), time.Now().Add(-time.Hour)} {
		if d := e.Allow(t.Context(), when, limits.Request{Resource: "r", Domain: "d"}); d.Status != limits.StatusOK {
			t.Fatalf("%d: %+v", i, d)
		}
	}
	if d := e.Allow(t.Context(), time.Now().Add(24*time.Hour), limits.Request{Resource: "r", Domain: "d"}); d.Status != limits.StatusTimeout {
		t.Fatalf("a fourth token a day later by the caller's clock: %+v", d)
	}
}

// TestWalkReconfigure: Walk sees the buckets; Reconfigure sends no SCAN
// or KEYS and deletes nothing: a bucket whose configuration vanished is
// no longer shown by the engine's walk, and Redis expires it by its TTL;
// one whose configuration shrank is rescaled by its next request.
func TestWalkReconfigure(t *testing.T) {
	c := client(t)
	st := New(c, Options{Prefix: prefix(t), callerTime: true})
	b := &limits.Bucket{Size: 5, FillRate: 1, MaxTokensPerRequest: 5}
	cfg := &limits.Config{Resources: map[string]*limits.Resource{"r": {Template: b}, "s": {Template: b}}}
	e, _ := limits.New(cfg, limits.Options{Store: st})
	for _, d := range []string{"x", "y", "z"} {
		e.Allow(t.Context(), t0, limits.Request{Resource: "r", Domain: d, Tokens: 2})
	}
	e.Allow(t.Context(), t0, limits.Request{Resource: "s", Domain: "q", Tokens: 4})
	got := map[limits.Key]limits.Snapshot{}
	if err := st.Walk(t.Context(), func(s limits.Snapshot) bool { got[s.Key] = s; return true }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 || got[limits.Key{Resource: "r", Domain: "y"}].Grants != 1 {
		t.Fatalf("walk: %+v", got)
	}
	info := limits.Describe(got[limits.Key{Resource: "r", Domain: "x"}], t0.UnixNano())
	if info.Tokens != 3 {
		t.Fatalf("describe: %+v", info)
	}
	before := map[string]int64{"scan": redistest.CommandCalls(t, c, "scan"), "keys": redistest.CommandCalls(t, c, "keys")}
	b2 := *b
	b2.Size = 2 // s's bucket q (1 token of 5 left) keeps its fill fraction: 0.4 of 2 (no wait allowed)
	if err := e.SetConfig(t0, &limits.Config{Resources: map[string]*limits.Resource{"s": {Template: &b2}}}); err != nil {
		t.Fatal(err)
	}
	for cmd, n := range before {
		if d := redistest.CommandCalls(t, c, cmd) - n; d != 0 {
			t.Errorf("Reconfigure sent %d %s", d, cmd)
		}
	}
	if n := walkLen(t, st); n != 4 {
		t.Fatalf("the store's walk counts %d after removing r, want 4 (Redis expires them)", n)
	}
	var shown []limits.BucketInfo
	if err := e.Walk(t.Context(), t0, func(b limits.BucketInfo) bool { shown = append(shown, b); return true }); err != nil {
		t.Fatal(err)
	}
	if len(shown) != 1 || shown[0].Resource != "s" {
		t.Fatalf("the engine's walk after removing r: %+v", shown)
	}
	if d := e.Allow(t.Context(), t0, limits.Request{Resource: "s", Domain: "q", Tokens: 1, HasMaxWait: true}); d.Status != limits.StatusTimeout || d.Remaining < 0.399 || d.Remaining > 0.401 || d.Limit != 2 {
		t.Fatalf("s/q shrunk to 2, 0.4 left, asks 1: %+v", d)
	}
	// r's buckets expire by their TTL: full again after 2 s, plus 1 to 4 s.
	ttl, err := c.PTTL(t.Context(), st.bucketKey("r", "x")).Result()
	if err != nil || ttl <= 0 || ttl > 7*time.Second {
		t.Fatalf("r/x's TTL %v, %v", ttl, err)
	}
}

func BenchmarkAllow(b *testing.B) {
	st := New(client(b), Options{Prefix: prefix(b)})
	cfg := &limits.Config{Resources: map[string]*limits.Resource{"r": {Default: &limits.Bucket{Size: 1e9, FillRate: 1e6}}}}
	e, _ := limits.New(cfg, limits.Options{Store: st})
	req := limits.Request{Resource: "r", Domain: "d"}
	b.ReportAllocs()
	for b.Loop() {
		if d := e.Allow(b.Context(), time.Now(), req); d.Status != limits.StatusOK {
			b.Fatal(d)
		}
	}
}
