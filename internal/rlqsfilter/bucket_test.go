package rlqsfilter_test

import (
	"math"
	"math/big"
	"testing"
	"time"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"pgregory.net/rapid"

	"github.com/sluice-rl/sluice/internal/rlqsfilter"
	"github.com/sluice-rl/sluice/internal/testutil"
)

var t0 = time.Unix(1_000_000, 0)

// denying returns a bucket whose fallbacks deny (DENY_ALL before an
// assignment and after one expired): it admits only what is assigned.
func denying() rlqsfilter.Bucket {
	return rlqsfilter.Bucket{NoAssignment: typev3.RateLimitStrategy_DENY_ALL, Expired: typev3.RateLimitStrategy_DENY_ALL}
}

func bucketOf(maxTokens, perFill uint32, interval time.Duration) rlqsfilter.Strategy {
	return rlqsfilter.Strategy{TokenBucket: &rlqsfilter.TokenBucket{MaxTokens: maxTokens, TokensPerFill: perFill, FillInterval: interval}}
}

// TestRate: the filter reads tokens_per_fill ÷ the whole seconds of
// fill_interval.
func TestRate(t *testing.T) {
	for _, tt := range []struct {
		name string
		tb   rlqsfilter.TokenBucket
		want float64
	}{
		{"whole seconds", rlqsfilter.TokenBucket{TokensPerFill: 5, FillInterval: 2 * time.Second}, 2.5},
		{"nanos ignored", rlqsfilter.TokenBucket{TokensPerFill: 5, FillInterval: 2*time.Second + 999*time.Millisecond}, 2.5},
		{"under a second", rlqsfilter.TokenBucket{TokensPerFill: 5, FillInterval: 500 * time.Millisecond}, math.Inf(1)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.tb.Rate(); got != tt.want {
				t.Errorf("Rate() = %v, want %v", got, tt.want)
			}
		})
	}
	if r := (rlqsfilter.TokenBucket{}).Rate(); !math.IsNaN(r) {
		t.Errorf("0 ÷ 0 s: %v, want NaN", r)
	}
}

// TestSame: the filter compares max_tokens, tokens_per_fill and the
// fill interval's nanos, nothing else.
func TestSame(t *testing.T) {
	a := rlqsfilter.TokenBucket{MaxTokens: 10, TokensPerFill: 1000, FillInterval: 3*time.Second + 3}
	for _, tt := range []struct {
		name string
		b    rlqsfilter.TokenBucket
		want bool
	}{
		{"equal", a, true},
		{"other seconds, same nanos", rlqsfilter.TokenBucket{MaxTokens: 10, TokensPerFill: 1000, FillInterval: 4*time.Second + 3}, true},
		{"other nanos", rlqsfilter.TokenBucket{MaxTokens: 10, TokensPerFill: 1000, FillInterval: 3*time.Second + 4}, false},
		{"other max_tokens", rlqsfilter.TokenBucket{MaxTokens: 11, TokensPerFill: 1000, FillInterval: 3*time.Second + 3}, false},
		{"other tokens_per_fill", rlqsfilter.TokenBucket{MaxTokens: 10, TokensPerFill: 999, FillInterval: 3*time.Second + 3}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := a.Same(tt.b); got != tt.want {
				t.Errorf("Same = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestEncode: read as the filter reads it, the token bucket never fills
// faster than the rate, is within a thousandth of it (from 0.3 requests a
// second), holds burst's worth, and two rates never make buckets the
// filter takes for the Same unless they fill at the same rate.
func TestEncode(t *testing.T) {
	seen := map[rlqsfilter.TokenBucket]float64{}
	for _, rate := range []float64{rlqsfilter.MinRate, 0.3, 0.31, 0.5, 1, 2.7, 45.5, 45.6, 999.9, 1000, 3e6, 1e10} {
		tb := rlqsfilter.Encode(rate, time.Second)
		got := tb.Rate()
		if got > rate || rate >= 0.3 && got < min(rate, math.MaxUint32)*(1-1e-3) || got <= 0 {
			t.Errorf("rate %v: fills at %v", rate, got)
		}
		for other, r := range seen {
			if other.Same(tb) && rlqsfilter.Encode(r, time.Second).Rate() != got {
				t.Errorf("rates %v and %v: buckets the filter takes for the same (%+v, %+v)", r, rate, other, tb)
			}
		}
		seen[tb] = rate
		if want := max(1, min(uint32(rate+0.999999), 1<<32-1)); tb.MaxTokens != want && rate < 1e9 {
			t.Errorf("rate %v: max_tokens %d, want %d", rate, tb.MaxTokens, want)
		}
		if tb.FillInterval > time.Hour+time.Second {
			t.Errorf("rate %v: fill interval %v", rate, tb.FillInterval)
		}
	}
	if tb := rlqsfilter.Encode(45.5, 100*time.Millisecond); tb.MaxTokens != 5 {
		t.Errorf("a tenth of a second of 45.5: max_tokens %d, want 5", tb.MaxTokens)
	}
}

// TestAllowTokenBucket: on a fake clock, a new token bucket (max 3,
// 2 tokens a second) admits its 3 tokens at once, then a request per
// half second, and holds no more than 3 however long it waits.
func TestAllowTokenBucket(t *testing.T) {
	clock := testutil.NewClock(t0)
	b := denying()
	if !b.Assign(clock.Now(), bucketOf(3, 2, time.Second), time.Minute) {
		t.Fatal("a first token bucket did not start")
	}
	for i, step := range []struct {
		advance time.Duration
		offered int
		want    int
	}{
		{0, 5, 3},                      // full: 3
		{400 * time.Millisecond, 1, 0}, // 0.8 token
		{100 * time.Millisecond, 2, 1}, // 1.0
		{250 * time.Millisecond, 1, 0}, // 0.5
		{250 * time.Millisecond, 1, 1}, // 1.0
		{10 * time.Second, 10, 3},      // capped at 3
		{1500 * time.Millisecond, 10, 3},
		{2 * time.Second, 10, 3},
	} {
		clock.Advance(step.advance)
		got := 0
		for range step.offered {
			if b.Allow(clock.Now()) {
				got++
			}
		}
		if got != step.want {
			t.Errorf("step %d (+%v): admitted %d of %d, want %d", i, step.advance, got, step.offered, step.want)
		}
	}
}

// TestAllowProperty: whatever the token bucket and the requests' timing,
// Allow admits exactly what a token bucket filling continuously at
// Rate up to MaxTokens, starting full and spending a whole token per
// request, admits (computed in exact rational arithmetic; the steps are
// eighths of a second, which the model's floats hold exactly).
func TestAllowProperty(t *testing.T) {
	testutil.RapidChecks(200)
	rapid.Check(t, func(t *rapid.T) {
		maxTokens := rapid.Uint32Range(1, 20).Draw(t, "max_tokens")
		per := rapid.Uint32Range(1, 40).Draw(t, "tokens_per_fill")
		k := rapid.SampledFrom([]int64{1, 2, 4, 8}).Draw(t, "fill_interval_s")
		now := t0
		b := denying()
		b.Assign(now, bucketOf(maxTokens, per, time.Duration(k)*time.Second+time.Duration(k)), time.Hour)
		tokens := new(big.Rat).SetInt64(int64(maxTokens))
		capRat := new(big.Rat).SetInt64(int64(maxTokens))
		for i := range rapid.IntRange(1, 40).Draw(t, "steps") {
			eighths := rapid.IntRange(0, 24).Draw(t, "eighths")
			offered := rapid.IntRange(0, 25).Draw(t, "offered")
			now = now.Add(time.Duration(eighths) * time.Second / 8)
			tokens.Add(tokens, big.NewRat(int64(per)*int64(eighths), 8*k))
			if tokens.Cmp(capRat) > 0 {
				tokens.Set(capRat)
			}
			want := 0
			for ; want < offered && tokens.Cmp(big.NewRat(1, 1)) >= 0; want++ {
				tokens.Sub(tokens, big.NewRat(1, 1))
			}
			got := 0
			for range offered {
				if b.Allow(now) {
					got++
				}
			}
			if got != want {
				t.Fatalf("step %d (+%d/8 s): admitted %d of %d, the token bucket allows %d", i, eighths, got, offered, want)
			}
		}
	})
}

// TestAdmit: requests as a fluid take fractions of tokens.
func TestAdmit(t *testing.T) {
	clock := testutil.NewClock(t0)
	b := denying()
	b.Assign(clock.Now(), bucketOf(3, 2, time.Second), time.Minute)
	for i, step := range []struct {
		advance time.Duration
		offered float64
		want    float64
	}{
		{0, 0.5, 0.5},
		{0, 10, 2.5},
		{250 * time.Millisecond, 10, 0.5},
		{time.Minute - 250*time.Millisecond, 10, 0}, // expired: DENY_ALL
	} {
		clock.Advance(step.advance)
		if got := b.Admit(clock.Now(), step.offered); got != step.want {
			t.Errorf("step %d: admitted %v of %v, want %v", i, got, step.offered, step.want)
		}
	}
}

// TestAssign: how assignments replace and extend one another, their time
// to live, the fallbacks, and an abandon.
func TestAssign(t *testing.T) {
	tb := bucketOf(3, 2, time.Second+1)
	t.Run("the same token bucket is kept", func(t *testing.T) {
		clock := testutil.NewClock(t0)
		b := denying()
		b.Assign(clock.Now(), tb, 10*time.Second)
		for range 3 {
			b.Allow(clock.Now())
		}
		clock.Advance(time.Second)
		if b.Assign(clock.Now(), bucketOf(3, 2, time.Second+1), 10*time.Second) {
			t.Error("the same bucket started again")
		}
		if a, ok := b.Active(clock.Now()); !ok || !a.Expires.Equal(clock.Now().Add(10*time.Second)) {
			t.Errorf("not extended: %+v %v", a, ok)
		}
		if n := admitted(&b, clock.Now(), 10); n != 2 {
			t.Errorf("admitted %d, want the 2 tokens filled since (kept, not full)", n)
		}
	})
	t.Run("another token bucket starts full", func(t *testing.T) {
		clock := testutil.NewClock(t0)
		b := denying()
		b.Assign(clock.Now(), tb, 10*time.Second)
		admitted(&b, clock.Now(), 10)
		if !b.Assign(clock.Now(), bucketOf(4, 2, time.Second+1), 10*time.Second) {
			t.Error("a new bucket did not start")
		}
		if n := admitted(&b, clock.Now(), 10); n != 4 {
			t.Errorf("admitted %d, want the new bucket's 4", n)
		}
	})
	t.Run("same on the wire, other seconds: the old rate kept", func(t *testing.T) {
		clock := testutil.NewClock(t0)
		b := denying()
		b.Assign(clock.Now(), tb, 10*time.Second)
		b.Assign(clock.Now(), bucketOf(3, 2, 2*time.Second+1), 10*time.Second)
		if a, _ := b.Active(clock.Now()); a.Rate != 2 {
			t.Errorf("rate %v, want the kept bucket's 2", a.Rate)
		}
	})
	t.Run("after the time to live, a new bucket", func(t *testing.T) {
		clock := testutil.NewClock(t0)
		b := denying()
		b.Assign(clock.Now(), tb, 2900*time.Millisecond) // whole seconds: 2 s
		admitted(&b, clock.Now(), 10)
		clock.Advance(2 * time.Second)
		if _, ok := b.Active(clock.Now()); ok {
			t.Error("active 2 s after an assignment of 2.9 s: the filter reads whole seconds")
		}
		if n := admitted(&b, clock.Now(), 10); n != 0 {
			t.Errorf("expired, DENY_ALL: admitted %d", n)
		}
		if !b.Assign(clock.Now(), tb, 10*time.Second) {
			t.Error("the same bucket after an expiry did not start full")
		}
		if n := admitted(&b, clock.Now(), 10); n != 3 {
			t.Errorf("admitted %d, want 3", n)
		}
	})
	t.Run("fallbacks and blanket rules", func(t *testing.T) {
		clock := testutil.NewClock(t0)
		b := rlqsfilter.Bucket{NoAssignment: typev3.RateLimitStrategy_ALLOW_ALL, Expired: typev3.RateLimitStrategy_ALLOW_ALL}
		if _, ok := b.Active(clock.Now()); ok || admitted(&b, clock.Now(), 5) != 5 {
			t.Error("no assignment: want none active, and ALLOW_ALL's 5 of 5")
		}
		b.Assign(clock.Now(), rlqsfilter.Strategy{Blanket: typev3.RateLimitStrategy_DENY_ALL}, time.Second)
		if a, ok := b.Active(clock.Now()); !ok || a.Rate != 0 || admitted(&b, clock.Now(), 5) != 0 {
			t.Errorf("DENY_ALL: %+v %v", a, ok)
		}
		b.Assign(clock.Now(), rlqsfilter.Strategy{Blanket: typev3.RateLimitStrategy_ALLOW_ALL}, time.Second)
		if a, _ := b.Active(clock.Now()); !math.IsInf(a.Rate, 1) || admitted(&b, clock.Now(), 5) != 5 {
			t.Errorf("ALLOW_ALL: %+v", a)
		}
		b.Assign(clock.Now(), tb, 10*time.Second)
		b.Abandon()
		if _, ok := b.Active(clock.Now()); ok || admitted(&b, clock.Now(), 5) != 5 {
			t.Error("abandoned: want no assignment, the no_assignment_behavior's ALLOW_ALL")
		}
	})
}

// admitted offers n requests to b at now and returns how many it admits.
func admitted(b *rlqsfilter.Bucket, now time.Time, n int) int {
	got := 0
	for range n {
		if b.Allow(now) {
			got++
		}
	}
	return got
}
