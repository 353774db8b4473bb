package redisstore

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"

	"github.com/sluice-rl/sluice/internal/testutil/redistest"
	"github.com/sluice-rl/sluice/limits"
)

// concurrently runs n Allows on e at once (released together) and returns
// their Decisions.
func concurrently(e *limits.Engine, n int, req limits.Request) []limits.Decision {
	out := make([]limits.Decision, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range out {
		wg.Go(func() {
			<-start
			out[i] = e.Allow(context.Background(), time.Now(), req)
		})
	}
	close(start)
	wg.Wait()
	return out
}

// TestBatchExact: 200 concurrent requests for one token each on a bucket
// of 10 (filling one token in 1000 s) over real Redis, single and
// Cluster, grant exactly 10, and share round trips: fewer round trips
// than scripts.
func TestBatchExact(t *testing.T) {
	for name, c := range map[string]redis.UniversalClient{"single": client(t), "cluster": clusterClient(t)} {
		t.Run(name, func(t *testing.T) {
			// A round trip may take long on a loaded machine: exactness is
			// tested here, not the timeout (probe_test.go, ctx_test.go).
			st := New(c, Options{Prefix: prefix(t), Timeout: 30 * time.Second})
			cfg := &limits.Config{Resources: map[string]*limits.Resource{"r": {Default: &limits.Bucket{Size: 10, FillRate: 0.001}}}}
			e, err := limits.New(cfg, limits.Options{Store: st})
			if err != nil {
				t.Fatal(err)
			}
			granted := 0
			for _, d := range concurrently(e, 200, limits.Request{Resource: "r", Domain: "d"}) {
				switch d.Status {
				case limits.StatusOK:
					granted++
				case limits.StatusTimeout:
				default:
					t.Fatalf("%+v", d)
				}
			}
			if granted != 10 {
				t.Fatalf("granted %d of 200, want exactly 10", granted)
			}
			h := st.Health()
			t.Logf("%d requests in %d scripts in %d round trips", h.Calls, h.Scripts, h.RoundTrips)
			// (A script Redis did not have yet is sent twice.)
			if h.Calls != 200 || h.RoundTrips >= 200 || h.Scripts > h.RoundTrips+1 || h.State != "up" || h.Failures != 0 {
				t.Fatalf("health %+v: want 200 requests in fewer round trips, one script each", h)
			}
			if h.Latency.Count == 0 || h.Latency.Count > h.RoundTrips || h.Latency.Sum <= 0 {
				t.Fatalf("latency %+v: %d round trips", h.Latency, h.RoundTrips)
			}
		})
	}
}

// TestBatchMatchesMemory: concurrent requests on many buckets, batched,
// get the answers the memory store gives them (each bucket sees one
// request at a time, so the order within a batch does not matter): every
// one of 40 requests on each of 20 buckets of 30 tokens (asking 1 to 3)
// is answered as alone.
func TestBatchMatchesMemory(t *testing.T) {
	st := New(client(t), Options{Prefix: prefix(t), callerTime: true, MaxBatch: 7})
	mem := limits.NewMemoryStore()
	l := &limits.Limit{Resource: "r", Kind: limits.KindTemplate, Algorithm: limits.TokenBucket,
		Bucket: limits.Bucket{Size: 30, FillRate: 3}, Params: limits.Bucket{Size: 30, FillRate: 3}.Params(), Gen: 1}
	now := t0.UnixNano()
	for step := range 40 {
		var wg sync.WaitGroup
		got := make([]limits.Outcome, 20)
		errs := make([]error, 20)
		ask := func(i int) limits.Ask { n := int64(1 + (i+step)%3); return limits.Ask{Tokens: n, Min: 1} }
		for i := range got {
			wg.Go(func() {
				got[i], errs[i] = st.Take(t.Context(), now, limits.Key{Resource: "r", Domain: string(rune('a' + i))}, l, ask(i))
			})
		}
		wg.Wait()
		for i := range got {
			want, _ := mem.Take(t.Context(), now, limits.Key{Resource: "r", Domain: string(rune('a' + i))}, l, ask(i))
			if errs[i] != nil || got[i] != want {
				t.Fatalf("step %d bucket %d: %+v %v, want %+v", step, i, got[i], errs[i], want)
			}
		}
		now += int64(100 * time.Millisecond)
	}
	if h := st.Health(); h.RoundTrips >= h.Calls || h.Scripts >= h.Calls {
		t.Errorf("%d requests in %d scripts in %d round trips: no batching", h.Calls, h.Scripts, h.RoundTrips)
	}
}

// TestNoScriptInPipeline: after SCRIPT FLUSH, a pipeline gets NOSCRIPT for
// each of its scripts; the store loads the script (EVAL) and runs just
// those again, in one more round trip, and answers them all. On a single
// Redis and on a cluster node; the six requests on one bucket are one
// script, the other call one of its own.
func TestNoScriptInPipeline(t *testing.T) {
	ctx := context.Background()
	for name, c := range map[string]redis.UniversalClient{"single": client(t), "cluster": clusterClient(t)} {
		t.Run(name, func(t *testing.T) {
			st := New(c, Options{Prefix: prefix(t), callerTime: true})
			l := &limits.Limit{Resource: "r", Kind: limits.KindTemplate, Algorithm: limits.TokenBucket,
				Bucket: limits.Bucket{Size: 5, FillRate: 1}, Params: limits.Bucket{Size: 5, FillRate: 1}.Params(), Gen: 1}
			k := limits.Key{Resource: "r", Domain: "d"}
			calls := make([]*call, 6)
			for i := range calls {
				calls[i] = st.takeCall(t0.UnixNano(), k, l, limits.Ask{Tokens: 1, Min: 1})
			}
			get := newScript("get", "return redis.call('GET', KEYS[1])")
			other := getCall(get)
			other.args = append(other.args, 1, calls[0].key)
			b, err := st.batcherFor(ctx, calls[0].key)
			if err != nil {
				t.Fatal(err)
			}
			if err := b.node.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			h0 := st.Health()
			_ = b.sendNow(ctx, append(calls, other))
			for i, c := range calls {
				if c.err != nil {
					t.Fatalf("call %d: %v", i, c.err)
				}
				out, err := parseTake(c.res, l.Params)
				if want := i < 5; err != nil || (out.Granted == 1) != want || out.Created != (i == 0) {
					t.Fatalf("call %d: %+v %v, want granted %v", i, out, err, want)
				}
				putCall(c)
			}
			// The other script ran after the take script: the bucket holds
			// its five grants under generation 1.
			v, err := other.cmd.Text()
			if snap, ok := st.bucketSnapshot(st.bucketKey("r", "d"), v); other.err != nil || err != nil || !ok || snap.Grants != 5 || snap.Limit.Gen != 1 {
				t.Fatalf("the other script: %q %v %v: %+v", v, err, other.err, snap)
			}
			putCall(other)
			h := st.Health()
			if h.Calls-h0.Calls != 7 || h.RoundTrips-h0.RoundTrips != 2 || h.Scripts-h0.Scripts != 4 {
				t.Fatalf("%d calls, %d round trips, %d scripts; want 7, 2 and 4 (2 EVALSHA, then 2 EVAL)",
					h.Calls-h0.Calls, h.RoundTrips-h0.RoundTrips, h.Scripts-h0.Scripts)
			}
			// The scripts are cached again: one round trip now.
			if out, err := st.Take(ctx, t0.UnixNano(), limits.Key{Resource: "r", Domain: "e"}, l, limits.Ask{Tokens: 1, Min: 1}); err != nil || out.Granted != 1 || !out.Created {
				t.Fatalf("Take: %+v %v", out, err)
			}
			if _, err := st.eval(ctx, get, []string{st.bucketKey("r", "e")}); err != nil {
				t.Fatal(err)
			}
			if h2 := st.Health(); h2.RoundTrips != h.RoundTrips+2 || h2.Scripts != h.Scripts+2 {
				t.Fatalf("after the reload: %d round trips and %d scripts, want 2 and 2", h2.RoundTrips-h.RoundTrips, h2.Scripts-h.Scripts)
			}
		})
	}
}

// TestBreaker: with its Redis stopped, Take fails with ErrUnavailable;
// after BreakerFailures failed round trips the breaker opens and Takes
// fail at once (gobreaker.ErrOpenState, counted as refused, no round
// trip), the engine answers StatusServerError for a resource that fails
// closed and a degraded grant for one that fails open; once Redis is back
// and the probe period over, Takes succeed again.
func TestBreaker(t *testing.T) {
	srv, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			srv.Stop()
		}
	})
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	cfg := &limits.Config{Resources: map[string]*limits.Resource{
		"open":   {Default: &limits.Bucket{Size: 100, FillRate: 1, MaxTokensPerRequest: 10}, OnStoreError: limits.FailOpen},
		"closed": {Default: &limits.Bucket{Size: 100, FillRate: 1}},
	}}
	engine := func(probe time.Duration) (*Store, *limits.Engine) {
		st := New(c, Options{Prefix: prefix(t), BreakerFailures: 2, BreakerProbe: probe})
		t.Cleanup(func() { _ = st.Close() })
		e, err := limits.New(cfg, limits.Options{Store: st})
		if err != nil {
			t.Fatal(err)
		}
		if d := e.Allow(t.Context(), time.Now(), limits.Request{Resource: "closed", Domain: "d"}); d.Status != limits.StatusOK {
			t.Fatalf("Redis up: %+v", d)
		}
		return st, e
	}
	// One store stays open for the test (probe in an hour), the other
	// probes every 100 ms.
	st, e := engine(time.Hour)
	st2, e2 := engine(100 * time.Millisecond)

	srv.Stop()
	stopped = true
	// Each breaker opens at its second failed round trip. A call that
	// queued behind a failing round trip fails with it, uncounted (the
	// caller's deadline can end before the sender records the failure):
	// so call until the breaker opens, not exactly twice.
	for _, se := range []struct {
		st *Store
		e  *limits.Engine
	}{{st, e}, {st2, e2}} {
		for i := 0; se.st.Health().Breaker == "closed"; i++ {
			if i == 50 {
				t.Fatalf("Redis stopped: the breaker still closed after %d calls: %+v", i, se.st.Health())
			}
			d := se.e.Allow(t.Context(), time.Now(), limits.Request{Resource: "closed", Domain: "d"})
			if d.Status != limits.StatusServerError || !errors.Is(d.Err, ErrUnavailable) {
				t.Fatalf("Redis stopped, request %d: %+v", i, d)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	h := st.Health()
	if h.State != "down" || h.Breaker != "open" || h.Failures != 2 || h.LastError == "" || h.LastErrorAt.IsZero() {
		t.Fatalf("after 2 failures: %+v, want down", h)
	}
	// Open: at once, no round trip.
	start := time.Now()
	for range 50 {
		d := e.Allow(t.Context(), time.Now(), limits.Request{Resource: "closed", Domain: "d"})
		if d.Status != limits.StatusServerError || !errors.Is(d.Err, ErrUnavailable) || !errors.Is(d.Err, gobreaker.ErrOpenState) {
			t.Fatalf("breaker open: %+v", d)
		}
	}
	d := e.Allow(t.Context(), time.Now(), limits.Request{Resource: "open", Domain: "d", Tokens: 3})
	if d.Status != limits.StatusOK || !d.Degraded || d.Granted != 3 || !errors.Is(d.Err, ErrUnavailable) {
		t.Fatalf("fail-open resource, Redis down: %+v", d)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("51 answers with the breaker open took %v", took)
	}
	if h2 := st.Health(); h2.RoundTrips != h.RoundTrips || h2.Refused-h.Refused != 51 {
		t.Fatalf("breaker open: %+v (before %+v), want 51 refused and no round trip", h2, h)
	}

	// Redis back (empty) on the same port: the store that probes closes
	// its breaker again.
	back := startRedisOn(t, srv.Addr)
	defer back()
	deadline := time.Now().Add(20 * time.Second)
	for {
		d := e2.Allow(t.Context(), time.Now(), limits.Request{Resource: "closed", Domain: "d"})
		if d.Status == limits.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Redis back: %+v; health %+v", d, st2.Health())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if h := st2.Health(); h.State != "up" || h.Breaker != "closed" {
		t.Fatalf("after the probe: %+v", h)
	}
	if h := st.Health(); h.State != "down" {
		t.Fatalf("the store that probes in an hour: %+v", h)
	}
}

// startRedisOn starts redis-server on addr (a port another one used) and
// returns the function that stops it.
func startRedisOn(t *testing.T, addr string) func() {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
}

// BenchmarkAllowParallel: Allow from 50 goroutines (25 per core) on one
// hot bucket; reports the mean requests per round trip.
func BenchmarkAllowParallel(b *testing.B) {
	st := New(client(b), Options{Prefix: prefix(b)})
	cfg := &limits.Config{Resources: map[string]*limits.Resource{"r": {Default: &limits.Bucket{Size: 1e9, FillRate: 1e6}}}}
	e, _ := limits.New(cfg, limits.Options{Store: st})
	req := limits.Request{Resource: "r", Domain: "d"}
	b.ReportAllocs()
	b.SetParallelism(25)
	h0 := st.Health()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if d := e.Allow(b.Context(), time.Now(), req); d.Status != limits.StatusOK {
				b.Error(d)
				return
			}
		}
	})
	h := st.Health()
	b.ReportMetric(float64(h.Calls-h0.Calls)/float64(max(h.RoundTrips-h0.RoundTrips, 1)), "requests/roundtrip")
}

// BenchmarkAllowRedisCPU: Allow from 50 goroutines through the engine on
// the local redis-server, as sluice server's quota service path does,
// on one hot bucket and on 10 000 dynamic buckets in turn; reports
// Redis's own CPU per request (INFO cpu: user + sys) and the requests per
// round trip. Unlike ../shared/tools/quota-bench, no gRPC front end or
// load generator shares the cores, so the figure is the script's cost
// without the contention that inflates it under a full load:
//
//	go test -run '^$' -bench AllowRedisCPU -benchtime 200000x ./limits/redis
func BenchmarkAllowRedisCPU(b *testing.B) {
	for _, bc := range []struct {
		name    string
		domains int
	}{{"hot", 1}, {"buckets=10000", 10000}} {
		b.Run(bc.name, func(b *testing.B) {
			c := client(b)
			st := New(c, Options{Prefix: prefix(b)})
			big := &limits.Bucket{Size: 1e6, FillRate: 1e6}
			cfg := &limits.Config{Resources: map[string]*limits.Resource{"r": {Template: big}}}
			e, err := limits.New(cfg, limits.Options{Store: st})
			if err != nil {
				b.Fatal(err)
			}
			allowParallel(b, c, st, e, "k", bc.domains, func(d limits.Decision) bool { return d.Status == limits.StatusOK })
		})
	}
}

// allowParallel runs b.N Allow calls of e from 50 goroutines (25 per
// core), in turn on n domains prefix0 … prefix(n-1) of resource "r" of
// store st (on c's Redis), fails on a decision ok rejects, and reports
// Redis's CPU per call (redis-µs/op, INFO cpu) and the calls per round
// trip (requests/roundtrip).
func allowParallel(b *testing.B, c *redis.Client, st *Store, e *limits.Engine, prefix string, n int, ok func(limits.Decision) bool) {
	reqs := make([]limits.Request, n)
	for i := range reqs {
		reqs[i] = limits.Request{Resource: "r", Domain: prefix + strconv.Itoa(i)}
	}
	var next atomic.Uint64
	h0, cpu0 := st.Health(), redisCPU(b, c)
	b.ReportAllocs()
	b.SetParallelism(25)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if d := e.Allow(b.Context(), time.Now(), reqs[next.Add(1)%uint64(len(reqs))]); !ok(d) {
				b.Error(d)
				return
			}
		}
	})
	h, cpu := st.Health(), redisCPU(b, c)
	b.ReportMetric((cpu-cpu0)*1e6/float64(b.N), "redis-µs/op")
	b.ReportMetric(float64(h.Calls-h0.Calls)/float64(max(h.RoundTrips-h0.RoundTrips, 1)), "requests/roundtrip")
}

// redisCPU returns the CPU time redis-server has used, in seconds (INFO
// cpu: used_cpu_user + used_cpu_sys).
func redisCPU(b *testing.B, c *redis.Client) float64 {
	info, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if k == "used_cpu_user" || k == "used_cpu_sys" {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatal(err)
			}
			total += f
		}
	}
	return total
}

// TestBatchDifferential: batches of requests, many on the same buckets,
// under several limits of one resource (named buckets, a prefix, the
// template: dynamic buckets), with times that move on within a batch and
// a configuration change that rescales buckets, each batch run as one
// round trip (one script), give the memory store's Outcomes for the same
// requests in the same order.
func TestBatchDifferential(t *testing.T) {
	for seed := range uint64(12) {
		r := rand.New(rand.NewPCG(seed, 9))
		st := New(client(t), Options{Prefix: prefix(t) + strconvU(seed) + ":", callerTime: true})
		mem := limits.NewMemoryStore()
		mk := func(gen uint64) map[string]*limits.Limit {
			ls := map[string]*limits.Limit{}
			for i, name := range []string{"a", "b", ""} {
				bk := limits.Bucket{Size: 1 + r.Int64N(12), FillRate: []float64{0.5, 1, 3.7, 20}[r.IntN(4)], MaxIdle: time.Duration(r.IntN(2)) * time.Hour}
				kind := limits.KindNamed
				if name == "" {
					kind = limits.KindTemplate
				}
				ls[name] = &limits.Limit{Resource: "r", Name: name, Kind: kind, Algorithm: limits.TokenBucket, Bucket: bk, Params: bk.Params(), Gen: gen}
				_ = i
			}
			return ls
		}
		ls := mk(1)
		resolve := func(k limits.Key) *limits.Limit {
			if l := ls[k.Domain]; l != nil {
				return l
			}
			if strings.HasPrefix(k.Domain, "a/") {
				return ls["a"]
			}
			return ls[""]
		}
		domains := []string{"a", "b", "a/x", "p", "q", "q_1"}
		now := t0.UnixNano()
		for step := range 30 {
			if step == 15 {
				ls = mk(2)
				if err := mem.Reconfigure(t.Context(), now, 2, resolve, nil); err != nil {
					t.Fatal(err)
				}
				if err := st.Reconfigure(t.Context(), now, 2, resolve, nil); err != nil {
					t.Fatal(err)
				}
			}
			n := 1 + r.IntN(20)
			batch := make([]*call, n)
			type req struct {
				now int64
				k   limits.Key
				l   *limits.Limit
				a   limits.Ask
			}
			reqs := make([]req, n)
			for i := range batch {
				now += r.Int64N(int64(300 * time.Millisecond))
				k := limits.Key{Resource: "r", Domain: domains[r.IntN(len(domains))]}
				tok := 1 + r.Int64N(6)
				a := limits.Ask{Tokens: tok, Min: 1 + r.Int64N(tok), MaxWait: []int64{0, int64(time.Second), int64(time.Minute)}[r.IntN(3)]}
				reqs[i] = req{now, k, resolve(k), a}
				batch[i] = st.takeCall(now, k, reqs[i].l, a)
			}
			b, err := st.batcherFor(t.Context(), batch[0].key)
			if err != nil {
				t.Fatal(err)
			}
			_ = b.sendNow(t.Context(), batch)
			for i, c := range batch {
				want, err := mem.Take(t.Context(), reqs[i].now, reqs[i].k, reqs[i].l, reqs[i].a)
				if err != nil {
					t.Fatal(err)
				}
				if c.err != nil {
					t.Fatalf("seed %d step %d request %d: %v", seed, step, i, c.err)
				}
				got, err := parseTake(c.res, reqs[i].l.Params)
				if err != nil || got != want {
					t.Fatalf("seed %d step %d request %d of %d %+v %+v:\nmemory %+v\nredis  %+v %v", seed, step, i, n, reqs[i].k, reqs[i].a, want, got, err)
				}
				putCall(c)
			}
		}
		// What the batches wrote is what the memory store holds (but
		// rejections: Redis records grants only).
		got := map[limits.Key]limits.Snapshot{}
		if err := st.Walk(t.Context(), func(s limits.Snapshot) bool { got[s.Key] = s; return true }); err != nil {
			t.Fatal(err)
		}
		n := 0
		_ = mem.Walk(t.Context(), func(s limits.Snapshot) bool {
			n++
			g, ok := got[s.Key]
			if !ok || g.State != s.State || g.Grants != s.Grants || g.Limit.Params != s.Limit.Params {
				t.Errorf("seed %d bucket %+v: redis %+v, memory %+v", seed, s.Key, g, s)
			}
			return true
		})
		if len(got) > n {
			t.Errorf("seed %d: redis holds %d buckets, memory %d", seed, len(got), n)
		}
	}
}

// TestBatchTooManyBuckets: in one script, a dynamic bucket created by an
// earlier request counts against max_dynamic_buckets for a later one; a
// rejected creation counts nothing; the dynamic set holds the created
// bucket with its expiry.
func TestBatchTooManyBuckets(t *testing.T) {
	c := client(t)
	st := New(c, Options{Prefix: prefix(t), callerTime: true})
	bk := limits.Bucket{Size: 2, FillRate: 1}
	l := &limits.Limit{Resource: "r", Kind: limits.KindTemplate, Algorithm: limits.TokenBucket, Bucket: bk, Params: bk.Params(), MaxDynamic: 2, Gen: 1}
	ask := func(tokens int64) limits.Ask { return limits.Ask{Tokens: tokens, Min: tokens} }
	now := t0.UnixNano()
	batch := []*call{
		st.takeCall(now, limits.Key{Resource: "r", Domain: "x"}, l, ask(3)), // too many tokens: rejected, not created
		st.takeCall(now, limits.Key{Resource: "r", Domain: "y"}, l, ask(1)), // created (1 of 2)
		st.takeCall(now, limits.Key{Resource: "r", Domain: "y"}, l, ask(1)), // exists
		st.takeCall(now, limits.Key{Resource: "r", Domain: "z"}, l, ask(1)), // created (2 of 2)
		st.takeCall(now, limits.Key{Resource: "r", Domain: "x"}, l, ask(1)), // too many buckets
		st.takeCall(now, limits.Key{Resource: "r", Domain: "y"}, l, ask(1)), // exists, empty: rejected
	}
	b, _ := st.batcherFor(t.Context(), batch[0].key)
	_ = b.sendNow(t.Context(), batch)
	want := []limits.Outcome{
		{Result: limits.Result{RetryAfter: -1, Tokens: 2}},
		{Result: limits.Result{Granted: 1, Tokens: 1}, Created: true},
		{Result: limits.Result{Granted: 1}},
		{Result: limits.Result{Granted: 1, Tokens: 1}, Created: true},
		{TooManyBuckets: true},
		{Result: limits.Result{RetryAfter: int64(time.Second)}},
	}
	for i, c := range batch {
		got, err := parseTake(c.res, l.Params)
		if c.err != nil || err != nil || got != want[i] {
			t.Errorf("request %d: %+v %v %v, want %+v", i, got, c.err, err, want[i])
		}
	}
	members, err := c.ZRangeWithScores(context.Background(), st.dynKey("r"), 0, -1).Result()
	if err != nil || len(members) != 2 || members[0].Member != "z" && members[0].Member != "y" {
		t.Fatalf("dynamic set: %v %v", members, err)
	}
	if ttl := c.PTTL(context.Background(), st.dynKey("r")).Val(); ttl <= 0 {
		t.Fatalf("dynamic set's TTL %v", ttl)
	}
}

// TestTakeLargeBatch: one round trip of 17 000 requests on 8 500 buckets
// (each twice, the second time under the first's write) is one script
// whose keys and answer exceed what Lua's unpack takes at once (about
// 8 000 values): the script reads its buckets 1 000 at a time and packs
// its answer 4 000 numbers at a time, and every request is answered as
// the memory store answers it, in order.
func TestTakeLargeBatch(t *testing.T) {
	const buckets, n = 8500, 17000
	st := New(client(t), Options{Prefix: prefix(t), callerTime: true, MaxBatch: n, Timeout: 30 * time.Second}) // one long script: not a timeout test
	mem := limits.NewMemoryStore()
	l := &limits.Limit{Resource: "r", Kind: limits.KindTemplate, Algorithm: limits.TokenBucket,
		Bucket: limits.Bucket{Size: 3, FillRate: 1}, Params: limits.Bucket{Size: 3, FillRate: 1}.Params(), Gen: 1}
	now := t0.UnixNano()
	batch := make([]*call, n)
	for i := range batch {
		batch[i] = st.takeCall(now, limits.Key{Resource: "r", Domain: "d" + strconv.Itoa(i%buckets)}, l, limits.Ask{Tokens: 2, Min: 1})
	}
	if err := st.single.sendNow(t.Context(), batch); err != nil {
		t.Fatal(err)
	}
	for i, c := range batch {
		if c.err != nil {
			t.Fatalf("request %d: %v", i, c.err)
		}
		got, err := parseTake(c.res, l.Params)
		want, _ := mem.Take(t.Context(), now, limits.Key{Resource: "r", Domain: "d" + strconv.Itoa(i%buckets)}, l, limits.Ask{Tokens: 2, Min: 1})
		if err != nil || got != want {
			t.Fatalf("request %d: %+v %v, want %+v", i, got, err, want)
		}
		putCall(c)
	}
	// One script, sent again as EVAL if Redis did not have it yet.
	if h := st.Health(); h.Calls != n || h.Scripts != h.RoundTrips || h.RoundTrips < 1 || h.RoundTrips > 2 {
		t.Fatalf("health %+v: want %d requests in one script (sent twice if NOSCRIPT)", h, n)
	}
}
