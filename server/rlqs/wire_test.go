package rlqs

import (
	"maps"
	"math"
	"strconv"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/sluice-rl/sluice/internal/testutil"
)

// TestPairsOfRoundTrip: the bucket id rebuilt from its resource id (and
// its priority) is the bucket id received, whatever its keys and values
// hold; distinct bucket ids of a domain are distinct resources.
func TestPairsOfRoundTrip(t *testing.T) {
	testutil.RapidChecks(200)
	text := rapid.StringOfN(rapid.RuneFrom([]rune("ab=,%/\x01é*z")), 0, 6, -1)
	rapid.Check(t, func(t *rapid.T) {
		domain := rapid.StringMatching(`[a-z/]{1,5}`).Draw(t, "domain")
		pairs := rapid.MapOfN(rapid.StringOfN(rapid.RuneFrom([]rune("ab=,%/\x01é")), 1, 6, -1), text, 1, 4).Draw(t, "pairs")
		prio := ""
		if rapid.Bool().Draw(t, "has priority") {
			prio = strconv.Itoa(rapid.IntRange(-5, 5).Draw(t, "priority"))
			pairs[PriorityKey] = prio
		}
		res := ResourceID(domain, pairs)
		if got := pairsOf(res, prio); !maps.Equal(got, pairs) {
			t.Fatalf("pairsOf(%q, %q) = %v, want %v", res, prio, got, pairs)
		}
		other := rapid.MapOfN(rapid.StringOfN(rapid.RuneFrom([]rune("ab=,%/")), 1, 3, -1), text, 1, 3).Draw(t, "other")
		delete(other, PriorityKey)
		delete(pairs, PriorityKey)
		if !maps.Equal(other, pairs) && ResourceID(domain, other) == ResourceID(domain, pairs) {
			t.Fatalf("%v and %v are both %q", other, pairs, ResourceID(domain, other))
		}
	})
}

// TestTokenBucket: read as Envoy's filter reads it (whole seconds), the
// token bucket never fills faster than the rate, is within a thousandth
// of it (from 0.3 requests a second), holds one second's worth, and two
// rates never make buckets Envoy's filter takes for the same.
func TestTokenBucket(t *testing.T) {
	type envoyKey struct {
		max, per uint32
		nanos    int32
	}
	seen := map[envoyKey]float64{}
	for _, rate := range []float64{MinRate, 0.3, 0.31, 0.5, 1, 2.7, 45.5, 45.6, 999.9, 1000, 3e6, 1e10} {
		tb := tokenBucket(rate, time.Second)
		got := FillRate(tb)
		if got > rate || rate >= 0.3 && got < min(rate, math.MaxUint32)*(1-1e-3) || got <= 0 {
			t.Errorf("rate %v: fills at %v", rate, got)
		}
		k := envoyKey{tb.GetMaxTokens(), tb.GetTokensPerFill().GetValue(), tb.GetFillInterval().GetNanos()}
		if other, ok := seen[k]; ok && FillRate(tokenBucket(other, time.Second)) != got {
			t.Errorf("rates %v and %v: buckets Envoy's filter takes for the same (%+v)", other, rate, k)
		}
		seen[k] = rate
		if want := max(1, min(uint32(rate+0.999999), 1<<32-1)); tb.GetMaxTokens() != want && rate < 1e9 {
			t.Errorf("rate %v: max_tokens %d, want %d", rate, tb.GetMaxTokens(), want)
		}
		if tb.GetFillInterval().AsDuration() > time.Hour+time.Second {
			t.Errorf("rate %v: fill interval %v", rate, tb.GetFillInterval().AsDuration())
		}
	}
}
