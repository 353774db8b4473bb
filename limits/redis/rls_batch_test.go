package redisstore

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/sluice-rl/sluice/internal/testutil/redistest"
	"github.com/sluice-rl/sluice/limits/rls"
)

// rlsReq is one request of a batch: its domain, instant (Unix µs) and
// hits.
type rlsReq struct {
	domain string
	now    int64
	hits   []rls.Hit
}

// decideBatch sends reqs as one round trip of st's (one script per
// domain) and returns each request's grant and results. It fails t
// unless the round trip ran exactly as many scripts as reqs have
// domains.
func decideBatch(t testing.TB, st *Store, reqs []rlsReq) ([]bool, [][]rls.Result) {
	t.Helper()
	red := NewRLS(st)
	batch := make([]*call, len(reqs))
	domains := map[string]bool{}
	for i, q := range reqs {
		batch[i] = red.call(q.now, q.domain, q.hits)
		domains[q.domain] = true
	}
	if err := st.c.ScriptLoad(t.Context(), rlsScript.src).Err(); err != nil { // no NOSCRIPT, no second script
		t.Fatal(err)
	}
	h0 := st.Health()
	if err := st.single.sendNow(t.Context(), batch); err != nil {
		t.Fatal(err)
	}
	if h := st.Health(); h.Scripts-h0.Scripts != uint64(len(domains)) {
		t.Fatalf("%d requests of %d domains in %d scripts", len(reqs), len(domains), h.Scripts-h0.Scripts)
	}
	oks := make([]bool, len(reqs))
	res := make([][]rls.Result, len(reqs))
	for i, c := range batch {
		if c.err != nil {
			t.Fatalf("request %d: %v", i, c.err)
		}
		res[i] = make([]rls.Result, len(reqs[i].hits))
		oks[i] = parseRLS(c.res, res[i])
		putCall(c)
	}
	return oks, res
}

// decideAlone decides reqs one by one on s, in order: what a batch of
// them must answer.
func decideAlone(t testing.TB, s rls.Store, reqs []rlsReq) ([]bool, [][]rls.Result) {
	t.Helper()
	oks := make([]bool, len(reqs))
	res := make([][]rls.Result, len(reqs))
	for i, q := range reqs {
		res[i] = make([]rls.Result, len(q.hits))
		ok, err := s.Decide(t.Context(), q.now, q.domain, q.hits, res[i])
		if err != nil {
			t.Fatal(err)
		}
		oks[i] = ok
	}
	return oks, res
}

// TestRLSBatchMatchesAlone: requests merged into one script (one per
// domain) are decided in order, each exactly as if alone: random batches
// on a few counters of two domains, with requests refused in the middle,
// the same counters across requests, both algorithms, refunds and soft
// hits, answer as the memory store deciding them one by one, and leave
// the same counters.
func TestRLSBatchMatchesAlone(t *testing.T) {
	c := client(t)
	n := 0
	rapid.Check(t, func(rt *rapid.T) {
		n++
		st := New(c, Options{Prefix: fmt.Sprintf("%s%d:", prefix(t), n), callerTime: true})
		mem := rls.NewMemoryStore()
		policies := make([]rls.Policy, 3)
		for i := range policies {
			policies[i] = drawPolicy(rt, []uint32{1, 2, 3, 7, 1000}, []int64{1e6, 60e6, 3600e6})
		}
		now := drawStart(rt)
		for range rapid.IntRange(1, 8).Draw(rt, "batches") {
			reqs := make([]rlsReq, rapid.IntRange(1, 10).Draw(rt, "requests"))
			for i := range reqs {
				now += rapid.Int64Range(0, 1e6).Draw(rt, "dt")
				q := &reqs[i]
				q.domain, q.now = rapid.SampledFrom([]string{"d", "e"}).Draw(rt, "domain"), now
				q.hits = make([]rls.Hit, rapid.IntRange(1, 3).Draw(rt, "hits"))
				for j := range q.hits {
					b := rapid.IntRange(0, 2).Draw(rt, "bucket")
					p := policies[b]
					// The memory store keys counters by bucket alone:
					// the domain is in the bucket, as rls.Match's is.
					q.hits[j] = rls.Hit{Bucket: fmt.Sprint(q.domain, "/b", b), Policy: p,
						Hits:   rapid.SampledFrom([]uint64{0, 1, 2, uint64(p.Limit), uint64(p.Limit) + 1}).Draw(rt, "n"),
						Refund: rapid.IntRange(0, 9).Draw(rt, "refund") == 0, Soft: rapid.IntRange(0, 5).Draw(rt, "soft") == 0}
				}
			}
			gok, got := decideBatch(t, st, reqs)
			wok, want := decideAlone(t, mem, reqs)
			for i := range reqs {
				if gok[i] != wok[i] {
					rt.Fatalf("request %d (%+v): batched granted %v, alone %v", i, reqs[i], gok[i], wok[i])
				}
				for j := range want[i] {
					if got[i][j] != want[i][j] {
						rt.Fatalf("request %d, hit %d (%+v): batched %+v, alone %+v", i, j, reqs[i].hits[j], got[i][j], want[i][j])
					}
				}
			}
		}
		compareCounters(rt, NewRLS(st), mem, now)
	})
}

// TestRLSBatchCases: named batches, each one script, against the same
// requests decided one by one.
func TestRLSBatchCases(t *testing.T) {
	tb := rls.Policy{Algorithm: rls.TokenBucket, Limit: 3, Period: 60e6}
	fw := rls.Policy{Algorithm: rls.FixedWindow, Limit: 2, Period: 60e6}
	hit := func(bucket string, p rls.Policy, n uint64) rls.Hit {
		return rls.Hit{Bucket: bucket, Policy: p, Hits: n}
	}
	const t0 = int64(1_790_000_000_000_000)
	for _, tc := range []struct {
		name  string
		reqs  [][]rls.Hit
		grant []bool
		check func(t *testing.T, res [][]rls.Result)
	}{{
		name:  "refused in the middle writes nothing",
		reqs:  [][]rls.Hit{{hit("a", tb, 2)}, {hit("a", tb, 1), hit("b", tb, 4)}, {hit("a", tb, 1)}},
		grant: []bool{true, false, true},
		check: func(t *testing.T, res [][]rls.Result) {
			// The refused request took nothing from a: the third finds
			// the first's 1 left, and takes it.
			if r := res[1][0]; r.Over || r.Remaining != 1 {
				t.Errorf("refused request's a: %+v, want not over, 1 left", r)
			}
			if r := res[2][0]; r.Over || r.Remaining != 0 {
				t.Errorf("third request: %+v, want 0 left", r)
			}
		},
	}, {
		name:  "the same counters across requests",
		reqs:  [][]rls.Hit{{hit("a", tb, 1), hit("a", tb, 1)}, {hit("a", tb, 1)}, {hit("a", tb, 1)}, {hit("a", tb, 1), hit("b", tb, 1)}},
		grant: []bool{true, true, false, false},
		check: func(t *testing.T, res [][]rls.Result) {
			if r := res[3][1]; r.Over || r.Remaining != 3 {
				t.Errorf("b in a refused request: %+v, want 3 left (untouched)", r)
			}
		},
	}, {
		name: "token bucket and fixed window on one name",
		reqs: [][]rls.Hit{{hit("a", tb, 1), hit("a", fw, 1)}, {hit("a", fw, 1)}, {hit("a", fw, 1), hit("a", tb, 1)},
			{hit("a", tb, 2)}},
		grant: []bool{true, true, false, true},
		check: func(t *testing.T, res [][]rls.Result) {
			if r := res[2][0]; !r.Over || r.RetryAfter <= 0 {
				t.Errorf("the full window: %+v, want over", r)
			}
			if r := res[3][0]; r.Remaining != 0 {
				t.Errorf("the bucket after the refused request: %+v, want 0 left", r)
			}
		},
	}, {
		name:  "a refund between takes",
		reqs:  [][]rls.Hit{{hit("a", fw, 2)}, {{Bucket: "a", Policy: fw, Hits: 1, Refund: true}}, {hit("a", fw, 1)}, {hit("a", fw, 1)}},
		grant: []bool{true, true, true, false},
	}, {
		name:  "a soft hit over its limit refuses nothing",
		reqs:  [][]rls.Hit{{hit("a", tb, 3)}, {{Bucket: "a", Policy: tb, Hits: 1, Soft: true}, hit("b", tb, 1)}, {hit("b", tb, 2)}, {hit("b", tb, 1)}},
		grant: []bool{true, true, true, false},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			st := New(client(t), Options{Prefix: prefix(t), callerTime: true})
			reqs := make([]rlsReq, len(tc.reqs))
			for i, hits := range tc.reqs {
				reqs[i] = rlsReq{domain: "d", now: t0 + int64(i), hits: hits}
			}
			mem := rls.NewMemoryStore()
			gok, got := decideBatch(t, st, reqs)
			wok, want := decideAlone(t, mem, reqs)
			for i := range reqs {
				if gok[i] != tc.grant[i] || wok[i] != tc.grant[i] {
					t.Errorf("request %d: batched granted %v, alone %v, want %v", i, gok[i], wok[i], tc.grant[i])
				}
				for j := range want[i] {
					if got[i][j] != want[i][j] {
						t.Errorf("request %d, hit %d: batched %+v, alone %+v", i, j, got[i][j], want[i][j])
					}
				}
			}
			if tc.check != nil {
				tc.check(t, got)
			}
			compareCounters(t, NewRLS(st), mem, reqs[len(reqs)-1].now)
		})
	}
}

// TestRLSConcurrentShareScripts: concurrent Decides on one domain share
// scripts (the store's batcher merges them), and every one is granted
// and counted: the counter ends at its limit less every hit.
func TestRLSConcurrentShareScripts(t *testing.T) {
	st := New(client(t), Options{Prefix: prefix(t)})
	red := NewRLS(st)
	const callers, each = 50, 20
	p := rls.Policy{Algorithm: rls.FixedWindow, Limit: 1e9, Period: 3600e6}
	h0 := st.Health()
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for g := range callers {
		wg.Go(func() {
			res := make([]rls.Result, 2)
			for i := range each {
				hits := []rls.Hit{{Bucket: "shared", Policy: p, Hits: 1}, {Bucket: fmt.Sprint("own-", g, "-", i%3), Policy: p, Hits: 1}}
				if ok, err := red.Decide(t.Context(), 0, "edge", hits, res); err != nil || !ok {
					errs <- fmt.Errorf("caller %d: granted %v, err %v", g, ok, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	h := st.Health()
	calls, scripts := h.Calls-h0.Calls, h.Scripts-h0.Scripts
	t.Logf("%d requests in %d scripts in %d round trips", calls, scripts, h.RoundTrips-h0.RoundTrips)
	if calls != callers*each || scripts >= calls {
		t.Errorf("%d requests in %d scripts: want %d requests in fewer scripts", calls, scripts, callers*each)
	}
	res := make([]rls.Result, 1)
	if _, err := red.Decide(t.Context(), 0, "edge", []rls.Hit{{Bucket: "shared", Policy: p}}, res); err != nil || res[0].Remaining != uint32(p.Limit)-callers*each {
		t.Errorf("shared counter: %+v, %v; want %d left", res[0], err, p.Limit-callers*each)
	}
}

// TestRLSKeyLife: a counter's key is made (SET with its TTL) when its
// TTL must grow, and otherwise written in place (SETRANGE, keeping the
// TTL); a write that makes the state the same as none deletes it; a
// value of two doubles, as servers before 2026-11-27 wrote, reads the
// same.
func TestRLSKeyLife(t *testing.T) {
	c := client(t)
	st := New(c, Options{Prefix: prefix(t), callerTime: true})
	red := NewRLS(st)
	fw := rls.Policy{Algorithm: rls.FixedWindow, Limit: 100, Period: 3600e6}
	tb := rls.Policy{Algorithm: rls.TokenBucket, Limit: 10, Period: 60e6}
	w0 := int64(1_790_000_000_000_000) / fw.Period * fw.Period // a window's start
	key := prefix(t) + "{ed}wa"
	res := make([]rls.Result, 1)
	decide := func(now int64, h rls.Hit) rls.Result {
		t.Helper()
		if ok, err := red.Decide(t.Context(), now, "d", []rls.Hit{h}, res); err != nil || !ok {
			t.Fatalf("granted %v, err %v", ok, err)
		}
		return res[0]
	}
	counts := func() (int64, int64) {
		return redistest.CommandCalls(t, c, "set"), redistest.CommandCalls(t, c, "setrange")
	}
	for _, step := range []struct {
		name           string
		now            int64
		hit            rls.Hit
		remaining      uint32
		sets, setRange int64
	}{
		{"a new counter is made", w0, rls.Hit{Bucket: "a", Policy: fw, Hits: 1}, 99, 1, 0},
		{"its window's next hit writes in place", w0 + 1e6, rls.Hit{Bucket: "a", Policy: fw, Hits: 1}, 98, 0, 1},
		{"the next window needs a longer TTL", w0 + fw.Period, rls.Hit{Bucket: "a", Policy: fw, Hits: 1}, 99, 1, 0},
		{"a check writes nothing", w0 + fw.Period, rls.Hit{Bucket: "a", Policy: fw}, 99, 0, 0},
	} {
		set0, range0 := counts()
		if r := decide(step.now, step.hit); r.Remaining != step.remaining {
			t.Errorf("%s: %+v, want %d left", step.name, r, step.remaining)
		}
		set1, range1 := counts()
		if set1-set0 != step.sets || range1-range0 != step.setRange {
			t.Errorf("%s: %d SET and %d SETRANGE, want %d and %d", step.name, set1-set0, range1-range0, step.sets, step.setRange)
		}
		if v, err := c.Get(t.Context(), key).Result(); err != nil || len(v) != 24 {
			t.Errorf("%s: value %q, %v; want 24 bytes", step.name, v, err)
		}
	}

	// A refund that fills the bucket again deletes its key.
	decide(w0, rls.Hit{Bucket: "b", Policy: tb, Hits: 3})
	if n := c.Exists(t.Context(), prefix(t)+"{ed}tb").Val(); n != 1 {
		t.Fatalf("bucket's key: %d, want 1", n)
	}
	if r := decide(w0, rls.Hit{Bucket: "b", Policy: tb, Hits: 3, Refund: true}); r.Remaining != 10 {
		t.Errorf("refunded: %+v, want 10 left", r)
	}
	if n := c.Exists(t.Context(), prefix(t)+"{ed}tb").Val(); n != 0 {
		t.Errorf("full bucket's key: %d, want 0 (deleted)", n)
	}

	// A value of A and B alone (no X) reads the same, and is made anew.
	old := appendDoubles(nil, float64(w0/fw.Period), 97)
	if err := c.Set(t.Context(), prefix(t)+"{ed}wc", old, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	set0, _ := counts()
	if r := decide(w0+2e6, rls.Hit{Bucket: "c", Policy: fw, Hits: 2}); r.Remaining != 1 {
		t.Errorf("old value: %+v, want 1 left", r)
	}
	if set1, _ := counts(); set1-set0 != 1 {
		t.Errorf("old value: %d SET, want 1", set1-set0)
	}
}

// TestRLSBatchLarge: the largest script a server sends — MaxBatch
// (DefaultMaxBatch) requests of 64 descriptors (envoyrls.MaxDescriptors)
// of two limits each, one a calendar's — runs (Lua's unpack has a bound of
// about 8 000 values, which its numbers and keys are past) and answers
// as the requests decided alone.
func TestRLSBatchLarge(t *testing.T) {
	st := New(client(t), Options{Prefix: prefix(t), callerTime: true})
	mem := rls.NewMemoryStore()
	tb := rls.Policy{Algorithm: rls.TokenBucket, Limit: 1000, Period: 60e6, Burst: 2000}
	month := rls.Policy{Algorithm: rls.FixedWindow, Limit: 3, Period: 30 * 86400e6, Calendar: rls.Calendar{Unit: rls.Month}}
	now := int64(1_790_000_000_000_000)
	reqs := make([]rlsReq, DefaultMaxBatch)
	for i := range reqs {
		q := &reqs[i]
		q.domain, q.now = "d", now+int64(i)
		for j := range 64 {
			b := fmt.Sprint("d/", (i*64+j)%5000) // 8 192 descriptors on 5 000 counters: some used twice
			q.hits = append(q.hits, rls.Hit{Bucket: b, Policy: tb, Hits: 1}, rls.Hit{Bucket: rls.LimitBucket(b, 1), Policy: month, Hits: 1})
		}
	}
	gok, got := decideBatch(t, st, reqs)
	wok, want := decideAlone(t, mem, reqs)
	for i := range reqs {
		if gok[i] != wok[i] {
			t.Fatalf("request %d: batched granted %v, alone %v", i, gok[i], wok[i])
		}
		for j := range want[i] {
			if got[i][j] != want[i][j] {
				t.Fatalf("request %d, hit %d: batched %+v, alone %+v", i, j, got[i][j], want[i][j])
			}
		}
	}
}
