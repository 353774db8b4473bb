package redisstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/sluice-rl/sluice/limits/rls"
)

// TestRLSMatchesMemory runs the same random requests on rls.MemoryStore
// and on the Redis script, at the same instants: every answer and every
// grant must be the same (the script mirrors rls.Decide), over periods up
// to a year and limits up to 2³²−1, where the float products are
// inexact; with token buckets of a depth of their own and calendar
// windows (starting a minute before a month's end in a zone).
func TestRLSMatchesMemory(t *testing.T) {
	c := client(t)
	n := 0
	rapid.Check(t, func(rt *rapid.T) {
		n++
		st := New(c, Options{Prefix: fmt.Sprintf("%s%d:", prefix(t), n), callerTime: true})
		red := NewRLS(st)
		mem := rls.NewMemoryStore()
		policies := make([]rls.Policy, 3)
		for i := range policies {
			policies[i] = drawPolicy(rt, []uint32{1, 3, 7, 10, 1000, 4294967295}, []int64{1e6, 60e6, 3600e6, 86400e6, 365 * 86400e6})
		}
		now := drawStart(rt)
		ctx := context.Background()
		for step := range rapid.IntRange(1, 30).Draw(rt, "steps") {
			now += rapid.Int64Range(0, 2e6).Draw(rt, "dt")
			hits := make([]rls.Hit, rapid.IntRange(1, 4).Draw(rt, "hits"))
			for i := range hits {
				b := rapid.IntRange(0, 2).Draw(rt, "bucket")
				p := policies[b]
				hits[i] = rls.Hit{Bucket: fmt.Sprint("b", b), Policy: p,
					Hits:   rapid.SampledFrom([]uint64{0, 1, 2, 5, uint64(p.Limit), uint64(p.Limit) + 1, 1 << 40}).Draw(rt, "n"),
					Refund: rapid.IntRange(0, 9).Draw(rt, "refund") == 0, Soft: rapid.IntRange(0, 4).Draw(rt, "soft") == 0}
			}
			want := make([]rls.Result, len(hits))
			got := make([]rls.Result, len(hits))
			wok, _ := mem.Decide(ctx, now, "d", hits, want)
			gok, err := red.Decide(ctx, now, "d", hits, got)
			if err != nil {
				rt.Fatal(err)
			}
			if wok != gok {
				rt.Fatalf("step %d: redis granted %v, memory %v", step, gok, wok)
			}
			for i := range hits {
				if got[i] != want[i] {
					rt.Fatalf("step %d, hit %d (%+v): redis %+v, memory %+v", step, i, hits[i], got[i], want[i])
				}
			}
		}
		// Walk reads back what the script wrote: the memory store's counters.
		compareCounters(rt, red, mem, now)
	})
}

// drawPolicy draws a policy of one of limits and periods: a token bucket
// (a third of them with a depth of their own, below or above the limit),
// a fixed window, or a calendar's window (a day, week, month or year in
// UTC or Europe/Paris).
func drawPolicy(rt *rapid.T, limits []uint32, periods []int64) rls.Policy {
	p := rls.Policy{
		Algorithm: rapid.SampledFrom([]rls.Algorithm{rls.TokenBucket, rls.FixedWindow}).Draw(rt, "alg"),
		Limit:     rapid.SampledFrom(limits).Draw(rt, "limit"),
		Period:    rapid.SampledFrom(periods).Draw(rt, "period"),
	}
	switch rapid.IntRange(0, 2).Draw(rt, "shape") {
	case 1:
		if p.Algorithm == rls.TokenBucket {
			p.Burst = rapid.SampledFrom([]uint32{1, 2, 5, 100, 4294967295}).Draw(rt, "burst")
		} else {
			paris, err := time.LoadLocation("Europe/Paris")
			if err != nil {
				rt.Fatal(err)
			}
			p.Calendar = rls.Calendar{Unit: rapid.SampledFrom([]rls.Unit{rls.Day, rls.Week, rls.Month, rls.Year}).Draw(rt, "unit"),
				Location: rapid.SampledFrom([]*time.Location{time.UTC, paris}).Draw(rt, "zone")}
		}
	}
	return p
}

// drawStart draws a test's first instant (Unix µs): in 2026 or 2027,
// half the time within a minute before a month ends in UTC or Paris.
func drawStart(rt *rapid.T) int64 {
	now := int64(1_790_000_000_000_000) + rapid.Int64Range(0, 1e12).Draw(rt, "start")
	if rapid.Bool().Draw(rt, "edge") {
		paris, _ := time.LoadLocation("Europe/Paris")
		loc := rapid.SampledFrom([]*time.Location{time.UTC, paris}).Draw(rt, "edgezone")
		end := time.Date(2026, time.Month(rapid.IntRange(1, 24).Draw(rt, "month")), 1, 0, 0, 0, 0, loc)
		now = end.UnixMicro() - rapid.Int64Range(0, 60e6).Draw(rt, "before")
	}
	return now
}

// compareCounters fails t unless every counter red holds is mem's (which
// also keeps those Redis deleted when they were written the same as
// none), and every counter of mem's not yet the same as none at now is
// in red.
func compareCounters(t interface{ Fatalf(string, ...any) }, red *RLS, mem *rls.MemoryStore, now int64) {
	type id struct {
		bucket string
		alg    rls.Algorithm
	}
	held := func(s rls.Store) map[id]rls.State {
		m := map[id]rls.State{}
		if err := s.Walk(context.Background(), func(c rls.Counter) bool { m[id{c.Bucket, c.Algorithm}] = c.State; return true }); err != nil {
			t.Fatalf("walk: %v", err)
		}
		return m
	}
	mh, rh := held(mem), held(red)
	for k, rs := range rh {
		ms, ok := mh[k]
		ms.Until = 0
		if !ok || ms != rs {
			t.Fatalf("counter %v: redis %+v, memory %+v (held %v)", k, rs, ms, ok)
		}
	}
	for k, ms := range mh {
		if _, ok := rh[k]; !ok && ms.Until > now {
			t.Fatalf("counter %v: %+v in memory, not in redis", k, ms)
		}
	}
}

// TestRLSCluster: a request's descriptors, on as many counters as it
// has, are one script on one master of a Redis Cluster (no CROSSSLOT),
// and a refused request writes none of them.
func TestRLSCluster(t *testing.T) {
	st := New(clusterClient(t), Options{Prefix: prefix(t)})
	red := NewRLS(st)
	ctx := context.Background()
	p := rls.Policy{Algorithm: rls.TokenBucket, Limit: 2, Period: 3600e6}
	hits := make([]rls.Hit, 20)
	for i := range hits {
		hits[i] = rls.Hit{Bucket: fmt.Sprint("value-", i), Policy: p, Hits: 1}
	}
	res := make([]rls.Result, len(hits))
	for range 2 {
		if ok, err := red.Decide(ctx, 0, "edge", hits, res); err != nil || !ok {
			t.Fatalf("granted %v, err %v", ok, err)
		}
	}
	refused := []rls.Hit{{Bucket: "value-new", Policy: p, Hits: 1}, {Bucket: "value-0", Policy: p, Hits: 1}} // value-0 is empty
	ok, err := red.Decide(ctx, 0, "edge", refused, res)
	if err != nil || ok || res[0].Over || res[0].Remaining != 2 || !res[1].Over {
		t.Fatalf("granted %v, err %v, %+v", ok, err, res[:2])
	}
	// The refused request charged nothing: a fresh counter still has 2.
	fresh := []rls.Hit{{Bucket: "value-new", Policy: p, Hits: 0}}
	if _, err := red.Decide(ctx, 0, "edge", fresh, res); err != nil || res[0].Remaining != 2 {
		t.Fatalf("fresh counter: %+v, %v", res[0], err)
	}
}
