package limits

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// genTierParams draws a burst-tier configuration: 0 to 4 tiers of small
// limits, windows from 1 ms to 2 s, active times of 1 to 4 windows,
// cooldowns from none to several windows, some skippable; H and G
// sometimes.
func genTierParams(t *rapid.T) *TierParams {
	n := rapid.IntRange(0, 4).Draw(t, "tiers")
	tiers := make([]Tier, n)
	for i := range tiers {
		w := time.Duration(rapid.SampledFrom([]int64{1e6, 1e8, 5e8, 1e9, 2e9}).Draw(t, "window"))
		tiers[i] = Tier{
			Limit:     rapid.Int64Range(1, 6).Draw(t, "limit"),
			Window:    w,
			Active:    w * time.Duration(rapid.Int64Range(1, 4).Draw(t, "windows active")),
			Cooldown:  w * time.Duration(rapid.SampledFrom([]int64{0, 0, 1, 3}).Draw(t, "windows cooldown")),
			Skippable: rapid.Bool().Draw(t, "skippable"),
		}
	}
	h := rapid.OneOf(rapid.Just(int64(0)), rapid.Int64Range(1, 10)).Draw(t, "H")
	g := rapid.OneOf(rapid.Just(int64(0)), rapid.Int64Range(1, 15)).Draw(t, "G")
	return newTierParams(h, g, tiers, false)
}

// tierReq is one drawn request: dt after the previous one, a domain, the
// ask.
type tierReq struct {
	dt     int64
	domain int
	a      Ask
}

func genTierReqs(t *rapid.T, n, domains int) []tierReq {
	reqs := make([]tierReq, n)
	for i := range reqs {
		dt := rapid.OneOf(
			rapid.Just(int64(0)),
			rapid.Just(int64(1)),
			rapid.Int64Range(0, 3e9),
			rapid.SampledFrom([]int64{1e6, 1e8, 5e8, 1e9, 1e9 + 1, 2e9}),
		).Draw(t, "dt")
		tokens := rapid.Int64Range(1, 10).Draw(t, "tokens")
		reqs[i] = tierReq{dt, rapid.IntRange(0, domains-1).Draw(t, "domain"),
			Ask{Tokens: tokens, Min: rapid.Int64Range(1, tokens).Draw(t, "min")}}
	}
	return reqs
}

// tierView is what a domain's state shows at an instant: every tier's
// phase, time left and hits, the hits of the last second.
type tierView struct {
	tiers  []TierStatus
	second int64
}

func viewOf(p *TierParams, s *TierState, now int64) tierView {
	v := tierView{second: s.Second.Since(now - second)}
	for i := range p.Tiers {
		ph, left, hits := s.status(p, i+1, now)
		v.tiers = append(v.tiers, TierStatus{ph, left, hits})
	}
	return v
}

func cloneLog(g *HitLog) *HitLog {
	c := g.Clone()
	return &c
}

// The invariants of burst tiers, on the pure step with a shared global
// log, as the stores run it.
func TestPropertyTiers(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := genTierParams(t)
		const domains = 3
		reqs := genTierReqs(t, rapid.IntRange(1, 60).Draw(t, "n"), domains)
		states := make([]*TierState, domains)
		for i := range states {
			states[i] = &TierState{}
		}
		var glob HitLog
		type grant struct {
			at, n  int64
			domain int
		}
		var grants []grant
		now := t0
		for i, rq := range reqs {
			now += rq.dt
			s := states[rq.domain]
			before, gBefore := s.Clone(), cloneLog(&glob)
			raw, gRaw := rawState(s), rawLog(&glob)
			r := StepTiers(p, s, &glob, now, rq.a)
			label := fmt.Sprintf("request %d (%+v at +%v, domain %d)", i, rq.a, time.Duration(now-t0), rq.domain)
			if r.Granted == 0 {
				// A rejection changes nothing, not even a pruned entry.
				if !reflect.DeepEqual(s, raw) || !reflect.DeepEqual(glob, gRaw) {
					t.Fatalf("%s: a rejection changed the state", label)
				}
				if r.Available >= rq.a.Min || r.Available < 0 {
					t.Fatalf("%s: rejected with %d available", label, r.Available)
				}
				if r.RetryAfter == RetryNever {
					if rq.a.Min <= p.Most() {
						t.Fatalf("%s: never, yet min %d ≤ most %d", label, rq.a.Min, p.Most())
					}
					continue
				}
				if r.RetryAfter <= 0 {
					t.Fatalf("%s: retry after %d", label, r.RetryAfter)
				}
				// Exact: granted at now + RetryAfter, not a nanosecond before
				// (if no other hit comes).
				if r2 := StepTiers(p, before.Clone(), cloneLog(gBefore), now+r.RetryAfter, rq.a); r2.Granted < rq.a.Min {
					t.Fatalf("%s: not granted after its RetryAfter %v: %+v", label, time.Duration(r.RetryAfter), r2)
				}
				if r2 := StepTiers(p, before.Clone(), cloneLog(gBefore), now+r.RetryAfter-1, rq.a); r2.Granted != 0 {
					t.Fatalf("%s: granted before its RetryAfter %v", label, time.Duration(r.RetryAfter))
				}
				continue
			}
			if r.Granted < rq.a.Min || r.Granted > rq.a.Tokens || r.RetryAfter != 0 || r.Available < 0 {
				t.Fatalf("%s: %+v", label, r)
			}
			// The most that fits: one more is refused.
			if r.Granted < rq.a.Tokens {
				if r2 := StepTiers(p, before.Clone(), cloneLog(gBefore), now, Ask{Tokens: r.Granted + 1, Min: r.Granted + 1}); r2.Granted != 0 {
					t.Fatalf("%s: granted %d, yet %d fit", label, r.Granted, r.Granted+1)
				}
			}
			// A bulk request is its hits one at a time, atomically.
			one, oneG := before.Clone(), cloneLog(gBefore)
			burst := false
			for k := range r.Granted {
				r1 := StepTiers(p, one, oneG, now, Ask{Tokens: 1, Min: 1})
				if r1.Granted != 1 {
					t.Fatalf("%s: hit %d of %d one at a time refused", label, k+1, r.Granted)
				}
				burst = burst || r1.Burst
			}
			if v1, v2 := viewOf(p, one, now), viewOf(p, s, now); !reflect.DeepEqual(v1, v2) || burst != r.Burst || oneG.Since(now-second) != glob.Since(now-second) {
				t.Fatalf("%s: bulk %+v (burst %v), one at a time %+v (burst %v)", label, v2, r.Burst, v1, burst)
			}
			grants = append(grants, grant{now, r.Granted, rq.domain})
			// No window holds more than its limit; memory is bounded.
			for j, tr := range p.Tiers {
				if j >= len(s.Tiers) {
					continue
				}
				w := &s.Tiers[j].Window
				if hits := w.Since(now - int64(tr.Window)); hits > tr.Limit {
					t.Fatalf("%s: tier %d holds %d > %d", label, j+1, hits, tr.Limit)
				}
				if w.Len() > int(tr.Limit) {
					t.Fatalf("%s: tier %d keeps %d entries > %d", label, j+1, w.Len(), tr.Limit)
				}
			}
			if bound := secondBound(p); int64(s.Second.Len()) > bound {
				t.Fatalf("%s: %d entries in the last second > %d", label, s.Second.Len(), bound)
			}
			if p.GlobalLimit > 0 && int64(glob.Len()) > p.GlobalLimit {
				t.Fatalf("%s: %d global entries > G", label, glob.Len())
			}
			if r.DomainHitsLastSecond != s.Second.Since(now-second) || r.Tier > len(p.Tiers) || r.Tier > 0 && r.TierHits > r.TierLimit {
				t.Fatalf("%s: context %+v", label, r.TierContext)
			}
		}
		// H and G hold over every closed one-second window (the densest
		// begins at a grant).
		for i, gi := range grants {
			var dom [domains]int64
			var all int64
			for _, gj := range grants[i:] {
				if gj.at > gi.at+second {
					break
				}
				dom[gj.domain] += gj.n
				all += gj.n
			}
			for d, n := range dom {
				if p.HardLimit > 0 && n > p.HardLimit {
					t.Fatalf("domain %d: %d hits in [%v, +1s] > H %d", d, n, time.Duration(gi.at-t0), p.HardLimit)
				}
			}
			if p.GlobalLimit > 0 && all > p.GlobalLimit {
				t.Fatalf("%d hits in [%v, +1s] > G %d", all, time.Duration(gi.at-t0), p.GlobalLimit)
			}
		}
	})
}

// rawState and rawLog copy a state as it is held (Clone compacts the
// logs), for a comparison of every bit.
func rawState(s *TierState) *TierState {
	c := &TierState{Second: rawLog(&s.Second)}
	if s.Tiers != nil {
		c.Tiers = make([]TierRun, len(s.Tiers))
		for i, r := range s.Tiers {
			c.Tiers[i] = TierRun{Entered: r.Entered, InUse: r.InUse, Window: rawLog(&r.Window)}
		}
	}
	return c
}

func rawLog(l *HitLog) HitLog {
	c := *l
	if l.e != nil {
		c.e = append(make([]hitEntry, 0, cap(l.e)), l.e...)
	}
	return c
}

// secondBound is TierState's documented bound on the entries of the last
// second.
func secondBound(p *TierParams) int64 {
	var b int64
	for _, t := range p.Tiers {
		b += t.Limit * (second/int64(t.Window) + 2)
	}
	if p.HardLimit > 0 {
		b = min(b, p.HardLimit)
	}
	return b
}

// The engine answers what the pure step answers, whatever else happens in
// between (walks, reaps of fresh domains, requests of other domains,
// setting the same configuration again).
func TestPropertyTiersEngine(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := genTierParams(t)
		cfg := tiered(p.HardLimit, p.GlobalLimit, p.Tiers...)
		if p.Tiers == nil {
			cfg.Resources["r"].Tiers = nil
		}
		e := newEngine(t, cfg, nil)
		reqs := genTierReqs(t, rapid.IntRange(1, 40).Draw(t, "n"), 2)
		model := []*TierState{{}, {}}
		var glob HitLog
		now := t0
		for i, rq := range reqs {
			for range rapid.IntRange(0, 2).Draw(t, "extra") {
				switch rapid.IntRange(0, 2).Draw(t, "kind") {
				case 0:
					_ = e.Walk(context.Background(), time.Unix(0, now), func(BucketInfo) bool { return true })
				case 1:
					if _, err := e.Reap(context.Background(), time.Unix(0, now)); err != nil {
						t.Fatal(err)
					}
				case 2:
					if err := e.SetConfig(time.Unix(0, now), cfg); err != nil {
						t.Fatal(err)
					}
				}
			}
			now += rq.dt
			dom := fmt.Sprint("d", rq.domain)
			d := e.Allow(context.Background(), time.Unix(0, now), Request{Resource: "r", Domain: dom, Tokens: rq.a.Tokens, MinTokens: rq.a.Min})
			r := StepTiers(p, model[rq.domain], &glob, now, rq.a)
			want := Decision{Status: StatusOK, Granted: r.Granted, Remaining: float64(r.Available), Limit: p.Most(), Bucket: BucketRef{Source: SourceDynamic},
				Algorithm: BurstTiers, Tiers: r.TierContext}
			if r.Granted == 0 {
				want.Status = StatusTimeout
				if r.RetryAfter < 0 {
					want.RetryNever = true
				} else {
					want.RetryAfter = time.Duration(r.RetryAfter)
				}
			}
			if d != want {
				t.Fatalf("request %d: engine %+v\nstep %+v", i, d, want)
			}
		}
	})
}

// HitLog counts exactly, in time order, whatever the pruning.
func TestPropertyHitLog(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var l HitLog
		type e struct{ at, n int64 }
		var model []e
		now := int64(0)
		for range rapid.IntRange(1, 200).Draw(t, "ops") {
			now += rapid.Int64Range(0, 5).Draw(t, "dt")
			switch rapid.IntRange(0, 3).Draw(t, "op") {
			case 0, 1:
				n := rapid.Int64Range(1, 1<<50).Draw(t, "n")
				at := now - rapid.Int64Range(0, 2).Draw(t, "late")
				l.Add(at, n)
				if k := len(model); k > 0 && at <= model[k-1].at {
					model[k-1].n += n
				} else {
					model = append(model, e{at, n})
				}
			case 2:
				cut := now - rapid.Int64Range(0, 10).Draw(t, "age")
				l.Prune(cut)
				for len(model) > 0 && model[0].at < cut {
					model = model[1:]
				}
			case 3:
				c := l.Clone()
				l = c
			}
			from := now - rapid.Int64Range(-1, 12).Draw(t, "since")
			var want int64
			for _, x := range model {
				if x.at >= from {
					want += x.n
				}
			}
			if got := l.Since(from); got != want {
				t.Fatalf("since %d: %d, want %d (%v)", from, got, want, model)
			}
			if l.Len() != len(model) {
				t.Fatalf("%d entries, want %d", l.Len(), len(model))
			}
			var got []e
			l.Entries(func(at, n int64) bool { got = append(got, e{at, n}); return true })
			if len(got) != len(model) || len(got) > 0 && !reflect.DeepEqual(got, model) {
				t.Fatalf("entries %v, want %v", got, model)
			}
		}
	})
}
