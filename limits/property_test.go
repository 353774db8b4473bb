package limits

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// genParams draws a bucket: 1 to 1000 tokens, 0.01 to 10⁶ tokens per
// second.
func genParams(t *rapid.T) Params {
	size := rapid.Int64Range(1, 1000).Draw(t, "size")
	rate := math.Pow(10, rapid.Float64Range(-2, 6).Draw(t, "log10 rate"))
	return Bucket{Size: size, FillRate: rate}.Params()
}

// step is one drawn request: dt after the previous one, and the ask.
type step struct {
	dt int64
	a  Ask
}

func genSteps(t *rapid.T, p Params, n int) []step {
	steps := make([]step, n)
	for i := range steps {
		// Mostly short gaps, sometimes none, sometimes a full refill.
		dt := rapid.OneOf(rapid.Just(int64(0)), rapid.Int64Range(0, p.Span/4+1), rapid.Int64Range(0, 2*p.Span+1)).Draw(t, "dt")
		tokens := rapid.Int64Range(1, 2*p.Size).Draw(t, "tokens")
		lo := rapid.Int64Range(1, tokens).Draw(t, "min")
		wait := rapid.OneOf(rapid.Just(int64(0)), rapid.Int64Range(0, p.Span)).Draw(t, "max wait")
		steps[i] = step{dt, Ask{Tokens: tokens, Min: lo, MaxWait: wait}}
	}
	return steps
}

// Over any interval, the tokens granted in it and usable within it
// (decided at or after its start, decision time + wait at or before its
// end) are at most size + fill_rate × its length; tokens are never
// negative; a rejection changes nothing; a grant is the most that fits;
// the wait is within the ask's maximum.
func TestPropertyStep(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := genParams(t)
		steps := genSteps(t, p, rapid.IntRange(1, 80).Draw(t, "n"))
		s := rapid.Custom(func(t *rapid.T) State {
			return State{Empty: t0 - rapid.Int64Range(0, 2*p.Span).Draw(t, "initially")}
		}).Draw(t, "state")
		type grant struct {
			n             int64
			decided, used int64
		}
		var grants []grant
		now := t0
		for i, st := range steps {
			now += st.dt
			next, r := Step(s, p, now, st.a)
			if r.Tokens < 0 || r.Tokens > float64(p.Size) || math.IsNaN(r.Tokens) || Level(next, p, now) < 0 {
				t.Fatalf("step %d: tokens %v, level %v", i, r.Tokens, Level(next, p, now))
			}
			if r.Granted == 0 {
				if next != s {
					t.Fatalf("step %d: rejection changed the state %+v → %+v", i, s, next)
				}
				if r.RetryAfter == 0 || r.RetryAfter < RetryNever {
					t.Fatalf("step %d: rejection with retry after %d", i, r.RetryAfter)
				}
				if r.RetryAfter > 0 {
					if _, r2 := Step(s, p, now+r.RetryAfter, st.a); r2.Granted < st.a.Min {
						t.Fatalf("step %d: not granted at the retry time", i)
					}
				} else if _, r2 := Step(State{Empty: math.MinInt64}, p, now, st.a); r2.Granted != 0 {
					t.Fatalf("step %d: 'never', yet a full bucket grants it", i)
				}
				continue
			}
			if r.Granted < st.a.Min || r.Granted > st.a.Tokens || r.Wait < 0 || r.Wait > st.a.MaxWait || r.RetryAfter != 0 {
				t.Fatalf("step %d: %+v for %+v", i, r, st.a)
			}
			if r.Granted < st.a.Tokens {
				if _, r2 := Step(s, p, now, Ask{Tokens: r.Granted + 1, Min: r.Granted + 1, MaxWait: st.a.MaxWait}); r2.Granted != 0 {
					t.Fatalf("step %d: granted %d, yet %d fit", i, r.Granted, r.Granted+1)
				}
			}
			grants = append(grants, grant{r.Granted, now, now + r.Wait})
			s = next
		}
		// Decision times and usable times both never decrease, so the
		// grants of any interval are a run of consecutive grants.
		for k := 1; k < len(grants); k++ {
			if grants[k].used < grants[k-1].used {
				t.Fatalf("usable times decrease: %d then %d", grants[k-1].used, grants[k].used)
			}
		}
		for i := range grants {
			var sum int64
			for j := i; j < len(grants); j++ {
				sum += grants[j].n
				span := float64(grants[j].used - grants[i].decided)
				bound := float64(p.Size) + p.Rate*(span+1)/1e9
				if float64(sum) > bound*(1+1e-12) {
					t.Fatalf("grants %d..%d: %d tokens over %v, bound %v (size %d, rate %v)", i, j, sum, time.Duration(span), bound, p.Size, p.Rate)
				}
			}
		}
	})
}

// The answers for a sequence of requests do not depend on what else
// happens in between: extra observations (rejected requests, requests for
// other domains, walks, reaps of idle full buckets, setting the same
// configuration again) change no answer, and every answer is the pure
// Step's on the bucket's state.
func TestPropertyBatching(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := genParams(t)
		b := Bucket{Size: p.Size, FillRate: p.Rate, WaitTimeout: MaxDuration, MaxDebt: MaxDuration,
			MaxTokensPerRequest: 2 * p.Size, MaxIdle: time.Duration(rapid.Int64Range(1, 2*p.Span+1).Draw(t, "max idle"))}
		cfg := &Config{Resources: map[string]*Resource{"r": {Template: &b}}}
		plain, busy := newEngine(t, cfg, nil), newEngine(t, cfg, nil)
		steps := genSteps(t, p, rapid.IntRange(1, 60).Draw(t, "n"))
		var model State
		now := t0
		for i, st := range steps {
			// The busy engine sees extra traffic spread over the gap.
			extra := rapid.IntRange(0, 3).Draw(t, "extra")
			for k := range extra {
				when := now + st.dt*int64(k+1)/int64(extra+1)
				switch rapid.IntRange(0, 5).Draw(t, "kind") {
				case 0: // can never succeed: more than size plus any wait
					busy.Allow(context.Background(), time.Unix(0, when), Request{Resource: "r", Domain: "d", Tokens: 2 * p.Size, MaxWait: 0, HasMaxWait: true})
				case 1:
					busy.Allow(context.Background(), time.Unix(0, when), Request{Resource: "r", Domain: "other", Tokens: 1})
				case 2:
					_ = busy.Walk(context.Background(), time.Unix(0, when), func(BucketInfo) bool { return true })
				case 3:
					if _, err := busy.Reap(context.Background(), time.Unix(0, when)); err != nil {
						t.Fatal(err)
					}
				case 4:
					if err := busy.SetConfig(time.Unix(0, when), cfg); err != nil {
						t.Fatal(err)
					}
				case 5: // too many tokens: changes nothing either
					busy.Allow(context.Background(), time.Unix(0, when), Request{Resource: "r", Domain: "d", Tokens: 3 * p.Size, MinTokens: 3 * p.Size})
				}
			}
			now += st.dt
			req := Request{Resource: "r", Domain: "d", Tokens: st.a.Tokens, MinTokens: st.a.Min, MaxWait: time.Duration(st.a.MaxWait), HasMaxWait: true}
			d1 := plain.Allow(context.Background(), time.Unix(0, now), req)
			d2 := busy.Allow(context.Background(), time.Unix(0, now), req)
			if fmt.Sprint(d1) != fmt.Sprint(d2) {
				t.Fatalf("request %d: plain %+v, busy %+v", i, d1, d2)
			}
			next, r := Step(model, p, now, st.a)
			want := Decision{Status: StatusOK, Granted: r.Granted, Wait: time.Duration(r.Wait), Remaining: r.Tokens, Limit: p.Size, Bucket: BucketRef{Source: SourceDynamic}}
			if r.Granted == 0 {
				want.Status, want.Granted = StatusTimeout, 0
				if r.RetryAfter < 0 {
					want.RetryNever = true
				} else {
					want.RetryAfter = time.Duration(r.RetryAfter)
				}
			} else {
				model = next
			}
			if d1 != want {
				t.Fatalf("request %d: engine %+v, Step %+v", i, d1, want)
			}
		}
	})
}

// Rescale keeps the fill fraction (to the nanosecond of fill), never
// exceeds the new size, keeps debt in tokens, and leaves equal parameters
// alone.
func TestPropertyRescale(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		from, to := genParams(t), genParams(t)
		s := State{Empty: t0 + rapid.Int64Range(-2*from.Span, from.Span).Draw(t, "empty-now")}
		got := Rescale(s, from, to, t0)
		if Rescale(s, from, from, t0) != s {
			t.Fatal("equal parameters changed the state")
		}
		if s.Empty > t0 { // debt in tokens
			owed := float64(s.Empty-t0) * from.Rate / 1e9
			now := float64(got.Empty-t0) * to.Rate / 1e9
			if got.Empty < t0 || math.Abs(now-owed) > 1e-9*owed+to.Rate/1e9+1e-9 {
				t.Fatalf("debt %v tokens became %v", owed, now)
			}
			return
		}
		f1 := Level(s, from, t0) / float64(from.Size)
		f2 := Level(got, to, t0) / float64(to.Size)
		if f2 > 1 || f2 < 0 || math.Abs(f1-f2) > 1e-9+to.Rate/1e9/float64(to.Size) {
			t.Fatalf("fraction %v became %v", f1, f2)
		}
	})
}
