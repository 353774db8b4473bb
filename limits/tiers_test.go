package limits

import (
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// tier returns a tier of limit hits per window, active for active, with a
// cooldown.
func tier(limit int64, window, active, cooldown time.Duration) Tier {
	return Tier{Limit: limit, Window: window, Active: active, Cooldown: cooldown}
}

func skippable(t Tier) Tier { t.Skippable = true; return t }

const (
	sec = time.Second
	mn  = time.Minute
	hr  = time.Hour
)

// tiered returns a configuration with one burst-tier resource "r".
func tiered(h, g int64, tiers ...Tier) *Config {
	return &Config{Resources: map[string]*Resource{"r": {Algorithm: BurstTiers, HardLimit: h, GlobalLimit: g, Tiers: tiers}}}
}

// cookbookTiers is cookbook/tiers of examples/charon.yaml: tier 1 (L=3,
// Tʷ=2 s, Tᵃ=6 s, Tᶜ=0), tier 2 (L=4, Tʷ=2 s, Tᵃ=2 s, Tᶜ=4 s), neither
// skippable.
var cookbookTiers = []Tier{tier(3, 2*sec, 6*sec, 0), tier(4, 2*sec, 2*sec, 4*sec)}

// hit is one request of a sequence and what it must get. A rejection has
// granted 0; retry is its RetryAfter (never: RetryNever).
type hit struct {
	at          time.Duration
	tokens, min int64 // min 0: tokens
	granted     int64
	tier        int
	tierHits    int64
	burst       bool
	retry       time.Duration
	domain      string // "" is "d"
	why         string
}

const never = time.Duration(-1)

// run plays hits on e against resource "r" and checks each decision.
func run(t *testing.T, e *Engine, hits []hit) {
	t.Helper()
	for i, h := range hits {
		dom := h.domain
		if dom == "" {
			dom = "d"
		}
		tok := max(h.tokens, 1)
		d := e.Allow(t.Context(), at(h.at), Request{Resource: "r", Domain: dom, Tokens: tok, MinTokens: h.min})
		label := fmt.Sprintf("hit %d at %v (%s)", i, h.at, h.why)
		if d.Algorithm != BurstTiers {
			t.Fatalf("%s: algorithm %v", label, d.Algorithm)
		}
		if h.granted == 0 {
			retry := d.RetryAfter
			if d.RetryNever {
				retry = never
			}
			if d.Status != StatusTimeout || d.Granted != 0 || retry != h.retry || d.Tiers.Tier != h.tier || d.Tiers.TierHits != h.tierHits {
				t.Fatalf("%s: got %v granted %d retry %v tier %d hits %d; want rejected, retry %v, tier %d hits %d\n%+v",
					label, d.Status, d.Granted, retry, d.Tiers.Tier, d.Tiers.TierHits, h.retry, h.tier, h.tierHits, d)
			}
			continue
		}
		if d.Status != StatusOK || d.Granted != h.granted || d.Tiers.Tier != h.tier || d.Tiers.TierHits != h.tierHits || d.Tiers.Burst != h.burst || d.Wait != 0 {
			t.Fatalf("%s: got %v granted %d tier %d hits %d burst %v; want granted %d tier %d hits %d burst %v\n%+v",
				label, d.Status, d.Granted, d.Tiers.Tier, d.Tiers.TierHits, d.Tiers.Burst, h.granted, h.tier, h.tierHits, h.burst, d)
		}
	}
}

// TestTierSequences plays the paper's figures and cookbook patterns on
// fake time.
//
// Source: charon-paper.md, section 2.1 (Figures 2 and 3) and section 2.3.
func TestTierSequences(t *testing.T) {
	ms := time.Millisecond
	ns := time.Nanosecond
	tests := []struct {
		name  string
		tiers []Tier
		h, g  int64
		hits  []hit
	}{
		{
			// Figure 2: tier 1's window fills; the next request bursts
			// into tier 2, which begins its active period; when that ends
			// (cooldown), the domain falls back to tier 1.
			name: "figure 2: successful burst", tiers: cookbookTiers,
			hits: []hit{
				{at: 0, granted: 1, tier: 1, tierHits: 1, burst: true, why: "tier 0 always bursts"},
				{at: 0, granted: 1, tier: 1, tierHits: 2},
				{at: 0, granted: 1, tier: 1, tierHits: 3, why: "tier 1 full"},
				{at: 500 * ms, granted: 1, tier: 2, tierHits: 1, burst: true, why: "bursts into tier 2"},
				{at: 500 * ms, tokens: 3, granted: 3, tier: 2, tierHits: 4},
				{at: 600 * ms, tier: 2, tierHits: 4, retry: 1900 * ms, why: "tier 2 full, no tier 3; tier 2's active period ends at 2.5 s"},
				{at: 2500*ms - ns, tier: 2, tierHits: 4, retry: ns},
				{at: 2500 * ms, granted: 1, tier: 1, tierHits: 1, why: "fallback to tier 1, whose window emptied at 2 s"},
			},
		},
		{
			// Figure 3: tier 2 is in cooldown and not skippable: tier 1's
			// window full, no burst is possible until tier 1's hits leave
			// its window, or the cooldown ends.
			name: "figure 3: burst blocked by cooldown", tiers: cookbookTiers,
			hits: []hit{
				{at: 0, tokens: 7, granted: 7, tier: 2, tierHits: 4, burst: true, why: "through tiers 1 and 2"},
				{at: 2 * sec, tier: 1, tierHits: 3, retry: ns, why: "a hit at t is in the window until t + Tʷ inclusive; tier 2 in cooldown"},
				{at: 2*sec + ns, tokens: 3, granted: 3, tier: 1, tierHits: 3, why: "tier 2 in cooldown until 6 s; tier 1's window emptied"},
				{at: 3 * sec, tier: 1, tierHits: 3, retry: 1*sec + 2*ns, why: "blocked by tier 2's cooldown; tier 1's hits leave after 4 s + 1 ns"},
				{at: 4*sec + 2*ns, tokens: 3, granted: 3, tier: 1, tierHits: 3},
				{at: 5 * sec, tier: 1, tierHits: 3, retry: sec, why: "tier 1's active period ends at 6 s, tier 2's cooldown too"},
				{at: 6 * sec, tokens: 8, min: 1, granted: 7, tier: 2, tierHits: 4, burst: true, why: "both tiers anew"},
			},
		},
		{
			name: "the cooldown ends after the active period of the tier below", tiers: []Tier{tier(3, 2*sec, 2*sec, 0), tier(4, 2*sec, 2*sec, 4*sec)},
			hits: []hit{
				{at: 0, tokens: 7, granted: 7, tier: 2, tierHits: 4, burst: true},
				{at: 2 * sec, tokens: 3, granted: 3, tier: 1, tierHits: 3, burst: true, why: "tier 1 ended at 2 s (no cooldown): entered anew"},
				{at: 3 * sec, tier: 1, tierHits: 3, retry: sec, why: "tier 2 in cooldown until 6 s blocks; tier 1 ends at 4 s and can be entered anew"},
				{at: 4 * sec, tokens: 3, granted: 3, tier: 1, tierHits: 3, burst: true},
				{at: 5 * sec, tier: 1, tierHits: 3, retry: sec, why: "tier 1 ends at 6 s, tier 2's cooldown too"},
				{at: 6 * sec, tokens: 5, min: 1, granted: 5, tier: 2, tierHits: 2, burst: true, why: "tier 1 ended at 6 s: 3 in tier 1 anew, 2 in tier 2"},
			},
		},
		{
			name: "a bulk request passes through several tiers", tiers: []Tier{tier(2, sec, hr, 0), tier(3, sec, hr, 0), tier(4, sec, hr, 0)},
			hits: []hit{
				{at: 0, tokens: 1, granted: 1, tier: 1, tierHits: 1, burst: true},
				{at: 0, tokens: 5, granted: 5, tier: 3, tierHits: 1, burst: true, why: "1 in tier 1, 3 in tier 2, 1 in tier 3"},
				{at: 0, tokens: 4, min: 4, tier: 3, tierHits: 1, retry: sec + ns, why: "tier 3 holds 3 more"},
				{at: 0, tokens: 4, min: 1, granted: 3, tier: 3, tierHits: 4, why: "partial grant"},
				{at: 0, tokens: 10, min: 10, tier: 3, tierHits: 4, retry: never, why: "more than Σ L = 9"},
				{at: sec + ns, tokens: 4, granted: 4, tier: 3, tierHits: 4, why: "the current tier stays tier 3"},
			},
		},
		{
			name: "fallback drops several tiers at once", tiers: []Tier{tier(1, sec, 10*sec, 0), tier(1, sec, sec, 0), tier(5, 10*sec, 10*sec, 0)},
			hits: []hit{
				{at: 0, tokens: 3, granted: 3, tier: 3, tierHits: 1, burst: true},
				{at: 2 * sec, granted: 1, tier: 3, tierHits: 2, why: "tier 2 ended at 1 s; tier 3 is current"},
				{at: 10 * sec, granted: 1, tier: 1, tierHits: 1, burst: true, why: "tier 3 and tier 1 ended at 10 s: tier 0, into tier 1"},
			},
		},
		{
			name: "fallback from tier 3 straight to tier 1", tiers: []Tier{tier(1, sec, 20*sec, 0), tier(1, sec, sec, 0), tier(5, 5*sec, 5*sec, 0)},
			hits: []hit{
				{at: 0, tokens: 3, granted: 3, tier: 3, tierHits: 1, burst: true},
				{at: 5 * sec, granted: 1, tier: 1, tierHits: 1, why: "tier 3 ended, tier 2 long inactive: tier 1, whose window has room"},
			},
		},
		{
			name: "a skippable tier in cooldown is skipped", tiers: []Tier{tier(1, sec, hr, 0), skippable(tier(1, sec, sec, 5*sec)), tier(2, sec, sec, 0)},
			hits: []hit{
				{at: 0, tokens: 2, granted: 2, tier: 2, tierHits: 1, burst: true},
				{at: 1500 * ms, granted: 1, tier: 1, tierHits: 1, why: "tier 2 in cooldown; tier 1's window has room"},
				{at: 1500 * ms, granted: 1, tier: 3, tierHits: 1, burst: true, why: "past tier 2 into tier 3"},
				{at: 1500 * ms, tokens: 2, min: 1, granted: 1, tier: 3, tierHits: 2},
			},
		},
		{
			name: "a non-skippable tier in cooldown blocks", tiers: []Tier{tier(1, sec, hr, 0), tier(1, sec, sec, 5*sec), tier(2, sec, sec, 0)},
			hits: []hit{
				{at: 0, tokens: 2, granted: 2, tier: 2, tierHits: 1, burst: true},
				{at: 1500 * ms, granted: 1, tier: 1, tierHits: 1},
				{at: 1500 * ms, tier: 1, tierHits: 1, retry: sec + ns, why: "tier 2 in cooldown until 6 s; tier 1's hit leaves at 2.5 s"},
			},
		},
		{
			name: "no tiers: inaccessible", tiers: nil,
			hits: []hit{{at: 0, retry: never}, {at: hr, tokens: 5, min: 1, retry: never}},
		},
		{
			// Penalties: the higher a domain bursts, the more it gets, for
			// a shorter time; then it is forced down and cannot burst until
			// the upper tiers' cooldowns end.
			name: "penalties", tiers: []Tier{tier(10, sec, hr, 0), tier(20, sec, 10*sec, mn), tier(40, sec, 5*sec, 5*mn)},
			hits: []hit{
				{at: 0, tokens: 70, granted: 70, tier: 3, tierHits: 40, burst: true, why: "a burst of 70"},
				{at: sec + ns, tokens: 40, granted: 40, tier: 3, tierHits: 40, why: "tier 3: 40 a second"},
				{at: 5 * sec, tokens: 20, granted: 20, tier: 2, tierHits: 20, why: "tier 3 over: back to tier 2"},
				{at: 5 * sec, tier: 2, tierHits: 20, retry: sec + ns, why: "tier 3 in cooldown"},
				{at: 10 * sec, tokens: 10, granted: 10, tier: 1, tierHits: 10, why: "tier 2 over: back to tier 1"},
				{at: 10 * sec, tier: 1, tierHits: 10, retry: sec + ns, why: "tier 2 in cooldown until 1m10s"},
				{at: 70 * sec, tokens: 30, granted: 30, tier: 2, tierHits: 20, burst: true, why: "tier 2's cooldown over"},
				{at: 70 * sec, tier: 2, tierHits: 20, retry: sec + ns, why: "tier 3 in cooldown until 5m5s"},
				{at: 5*mn + 5*sec, tokens: 70, granted: 70, tier: 3, tierHits: 40, burst: true},
			},
		},
		{
			// Punishment: a buffer tier entered slightly by normal traffic;
			// a domain that moves through it lands in a prison tier of
			// limit 1 and a long active period, and is refused until it
			// ends.
			name: "punishment: prison tier", tiers: []Tier{tier(5, sec, hr, 0), tier(5, sec, 10*sec, 0), tier(1, hr, hr, 0)},
			hits: []hit{
				{at: 0, tokens: 5, granted: 5, tier: 1, tierHits: 5, burst: true, why: "normal traffic"},
				{at: 500 * ms, granted: 1, tier: 2, tierHits: 1, burst: true, why: "slightly into the buffer"},
				{at: 2 * sec, tokens: 5, granted: 5, tier: 2, tierHits: 5, why: "the buffer is current for 10 s"},
				{at: 2 * sec, granted: 1, tier: 3, tierHits: 1, burst: true, why: "through the buffer: prison"},
				{at: 2 * sec, tier: 3, tierHits: 1, retry: hr, why: "refused until the prison's active period ends"},
				{at: 30 * mn, tier: 3, tierHits: 1, retry: 30*mn + 2*sec, why: "tier 1 and the buffer free, still refused"},
				{at: hr + 2*sec, tokens: 5, granted: 5, tier: 1, tierHits: 5, burst: true, why: "out"},
			},
		},
		{
			// Batch processing: 5000 requests within 5 minutes, then none
			// for the rest of the day.
			name: "batch processing", tiers: []Tier{tier(5000, 300*sec, 300*sec, 86100*sec)},
			hits: []hit{
				{at: 0, tokens: 1000, granted: 1000, tier: 1, tierHits: 1000, burst: true},
				{at: 100 * sec, tokens: 4000, granted: 4000, tier: 1, tierHits: 5000},
				{at: 200 * sec, tier: 1, tierHits: 5000, retry: 86200 * sec, why: "full: refused until the day is over"},
				{at: 300 * sec, tier: 0, retry: 86100 * sec, why: "cooldown: tier 0 cannot burst into tier 1"},
				{at: 86400*sec - ns, tier: 0, retry: ns},
				{at: 86400 * sec, tokens: 5000, granted: 5000, tier: 1, tierHits: 5000, burst: true, why: "the next day's batch"},
			},
		},
		{
			name: "hard limit", h: 2, tiers: []Tier{tier(1000, sec, hr, 0)},
			hits: []hit{
				{at: 0, tokens: 3, min: 1, granted: 2, tier: 1, tierHits: 2, burst: true},
				{at: 500 * ms, tier: 1, tierHits: 2, retry: 500*ms + ns, why: "H over the last second, inclusive"},
				{at: sec + ns, tokens: 2, granted: 2, tier: 1, tierHits: 2},
				{at: sec + ns, tokens: 3, min: 3, tier: 1, tierHits: 2, retry: never, why: "min above H: always fails"},
			},
		},
		{
			name: "global limit across domains", g: 3, tiers: []Tier{tier(1000, sec, hr, 0)},
			hits: []hit{
				{at: 0, tokens: 2, granted: 2, tier: 1, tierHits: 2, burst: true, domain: "a"},
				{at: 100 * ms, tokens: 2, min: 1, granted: 1, tier: 1, tierHits: 1, burst: true, domain: "b"},
				{at: 200 * ms, tier: 1, tierHits: 1, retry: 800*ms + ns, domain: "b", why: "a's hits leave at 1 s"},
				{at: sec + ns, tokens: 2, granted: 2, tier: 1, tierHits: 3, domain: "b", why: "a's left; b's at 0.1 s still count"},
				{at: sec + ns, tier: 1, tierHits: 0, retry: 100 * ms, domain: "a", why: "b's hit at 0.1 s leaves at 1.1 s + 1 ns"},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			run(t, newEngine(t, tiered(tc.h, tc.g, tc.tiers...), nil), tc.hits)
		})
	}
}

// The decision carries the paper's context: limits, hits of the last
// second, which limit held the request back.
func TestTierContext(t *testing.T) {
	e := newEngine(t, tiered(2, 3, tier(10, sec, hr, 0)), nil)
	d := e.Allow(t.Context(), at(0), Request{Resource: "r", Domain: "a", Tokens: 5, MinTokens: 1})
	want := TierContext{HardLimit: 2, GlobalLimit: 3, Tier: 1, TierLimit: 10, TierWindow: time.Second, TierHits: 2, DomainHitsLastSecond: 2, GlobalHitsLastSecond: 2, Burst: true, HardLimited: true, GlobalLimited: true}
	if d.Status != StatusOK || d.Granted != 2 || d.Tiers != want || d.Limit != 2 || d.Remaining != 0 || d.Bucket.Source != SourceDynamic {
		t.Fatalf("a: %+v", d)
	}
	d = e.Allow(t.Context(), at(0), Request{Resource: "r", Domain: "b", Tokens: 2, MinTokens: 1})
	want = TierContext{HardLimit: 2, GlobalLimit: 3, Tier: 1, TierLimit: 10, TierWindow: time.Second, TierHits: 1, DomainHitsLastSecond: 1, GlobalHitsLastSecond: 3, Burst: true, GlobalLimited: true}
	if d.Status != StatusOK || d.Granted != 1 || d.Tiers != want {
		t.Fatalf("b: %+v", d)
	}
	d = e.Allow(t.Context(), at(0), Request{Resource: "r", Domain: "c"})
	want = TierContext{HardLimit: 2, GlobalLimit: 3, GlobalHitsLastSecond: 3, GlobalLimited: true}
	if d.Status != StatusTimeout || d.Tiers != want || d.RetryAfter != sec+1 {
		t.Fatalf("c: %+v", d)
	}
	// Unbounded limits are 0 and not flagged; without G no global count.
	e = newEngine(t, tiered(0, 0, tier(1, sec, hr, 0)), nil)
	d = e.Allow(t.Context(), at(0), Request{Resource: "r", Domain: "a"})
	want = TierContext{Tier: 1, TierLimit: 1, TierWindow: time.Second, TierHits: 1, DomainHitsLastSecond: 1, Burst: true}
	if d.Tiers != want || d.Remaining != 0 || d.Limit != 1 {
		t.Fatalf("unbounded: %+v", d)
	}
}

// A domain-specific configuration replaces the default one: its own
// tiers (possibly none) and hard limit; the global limit stays the
// resource's.
func TestTierDomains(t *testing.T) {
	cfg := tiered(1, 4, tier(1, sec, hr, 0))
	cfg.Resources["r"].TierDomains = map[string]TierDomain{
		"big":     {HardLimit: 3, Tiers: []Tier{tier(5, sec, hr, 0)}},
		"free":    {HardLimit: Unbounded},
		"blocked": {Tiers: []Tier{}},
	}
	e := newEngine(t, cfg, nil)
	for _, c := range []struct {
		domain  string
		granted int64
		source  Source
	}{
		{"other", 1, SourceDynamic},  // H 1, L 1
		{"big", 3, SourceNamed},      // its H 3, its L 5... and G: 4 − 1
		{"big/eu", 0, SourcePrefix},  // big's configuration, own state; G exhausted
		{"blocked", 0, SourceNamed},  // no tiers
		{"free", 0, SourceNamed},     // G exhausted
		{"free/x", 0, SourcePrefix},  // G exhausted
		{"other2", 0, SourceDynamic}, // G exhausted
	} {
		d := e.Allow(t.Context(), at(0), Request{Resource: "r", Domain: c.domain, Tokens: 10, MinTokens: 1})
		if d.Granted != c.granted || d.Bucket.Source != c.source || d.Tiers.GlobalLimit != 4 {
			t.Errorf("%s: %+v", c.domain, d)
		}
	}
	// A second later: free has no hard limit, only its tier (the
	// resource's: L 1).
	d := e.Allow(t.Context(), at(2*sec), Request{Resource: "r", Domain: "free", Tokens: 10, MinTokens: 1})
	if d.Granted != 1 || d.Tiers.HardLimit != 0 || d.Tiers.HardLimited {
		t.Errorf("free: %+v", d)
	}
	if d := e.Allow(t.Context(), at(2*sec), Request{Resource: "r", Domain: "blocked"}); d.Status != StatusTimeout || !d.RetryNever || d.Limit != 0 {
		t.Errorf("blocked: %+v", d)
	}
}

// Normalization at load (paper section 4.1), and its notes.
func TestNormalize(t *testing.T) {
	cfg := tiered(0, 0,
		tier(1, sec, 0, 0),                       // removed
		tier(2, 10*sec, 5*sec, 0),                // window shortened to 5 s
		tier(3, 2*sec, 7*sec, sec),               // active trimmed to 6 s
		tier(4, 3*sec, 9*sec, 0),                 // unchanged
		tier(5, 4*sec, 4*sec+1, 0),               // trimmed to 4 s
		tier(6, 5*sec, 3500*time.Millisecond, 0), // window 3.5 s, then whole
	)
	cfg.Resources["r"].TierDomains = map[string]TierDomain{"x": {Tiers: []Tier{tier(1, sec, 0, 0)}}, "y": {}}
	notes := cfg.Normalize()
	want := []string{
		"resources.r.tiers[0]: active time 0s: the tier is removed (it could never be active)",
		"resources.r.tiers[1].window: 10s is longer than the active time 5s: shortened to 5s",
		"resources.r.tiers[2].active: 7s is not a whole number of 2s windows: trimmed to 6s (no partial window at the end of the active period)",
		"resources.r.tiers[4].active: 4.000000001s is not a whole number of 4s windows: trimmed to 4s (no partial window at the end of the active period)",
		"resources.r.tiers[5].window: 5s is longer than the active time 3.5s: shortened to 3.5s",
		"resources.r.domains.x.tiers[0]: active time 0s: the tier is removed (it could never be active)",
	}
	if !reflect.DeepEqual(notes, want) {
		t.Fatalf("notes:\n%s\nwant\n%s", strings.Join(notes, "\n"), strings.Join(want, "\n"))
	}
	wantTiers := []Tier{tier(2, 5*sec, 5*sec, 0), tier(3, 2*sec, 6*sec, sec), tier(4, 3*sec, 9*sec, 0), tier(5, 4*sec, 4*sec, 0), tier(6, 3500*time.Millisecond, 3500*time.Millisecond, 0)}
	r := cfg.Resources["r"]
	if !reflect.DeepEqual(r.Tiers, wantTiers) {
		t.Fatalf("tiers %+v", r.Tiers)
	}
	if x := r.TierDomains["x"].Tiers; x == nil || len(x) != 0 {
		t.Fatalf("x: all tiers removed must stay 'no tiers', not 'inherit': %#v", x)
	}
	if r.TierDomains["y"].Tiers != nil {
		t.Fatalf("y inherits")
	}
	if again := cfg.Normalize(); again != nil {
		t.Fatalf("not idempotent: %v", again)
	}
	// The engine runs the normalized tiers: tier 1 is the 2-hit one.
	e := newEngine(t, tiered(0, 0, tier(1, sec, 0, 0), tier(2, 10*sec, 5*sec, 0)), nil)
	if d := e.Allow(t.Context(), at(0), Request{Resource: "r", Domain: "d", Tokens: 9, MinTokens: 1}); d.Granted != 2 || d.Tiers.Tier != 1 {
		t.Fatalf("%+v", d)
	}
	if got := e.Config().Resources["r"].Tiers; len(got) != 1 || got[0].Window != 5*sec {
		t.Fatalf("engine's configuration %+v", got)
	}
}

// Namespaces (paper section 4.3): ignore configured limits, allow
// unconfigured resources, each recorded.
func TestNamespaces(t *testing.T) {
	cfg := &Config{
		GlobalDefault: &Bucket{Size: 1, FillRate: 1},
		Namespaces: map[string]Namespace{
			"open/":       {AllowUnconfigured: true},
			"muted/":      {IgnoreConfigured: true},
			"muted/loud/": {}, // the longest prefix decides alone
			"both/":       {IgnoreConfigured: true, AllowUnconfigured: true},
		},
		Resources: map[string]*Resource{
			"muted/r":      {Algorithm: BurstTiers, Tiers: []Tier{tier(1, mn, mn, 0)}, HardLimit: 5, GlobalLimit: 7},
			"muted/tb":     {Template: bp(Bucket{Size: 2, FillRate: 1, MaxTokensPerRequest: 2})},
			"muted/loud/r": {Algorithm: BurstTiers, Tiers: []Tier{tier(1, mn, mn, 0)}},
			"open/r":       {Algorithm: BurstTiers, Tiers: []Tier{tier(1, mn, mn, 0)}},
			"both/none":    {Algorithm: BurstTiers},
		},
	}
	e := newEngine(t, cfg, nil)
	// Ignored: every request granted in full; the tiers take what they
	// can, the logs everything.
	for i := range 3 {
		d := e.Allow(t.Context(), at(0), Request{Resource: "muted/r", Domain: "d", Tokens: 4})
		want := TierContext{HardLimit: 5, GlobalLimit: 7, Tier: 1, TierLimit: 1, TierWindow: time.Minute, TierHits: 1, DomainHitsLastSecond: 4 * int64(i+1), GlobalHitsLastSecond: 4 * int64(i+1),
			Burst: i == 0, HardLimited: i > 0, GlobalLimited: i > 0}
		if d.Status != StatusOK || d.Granted != 4 || !d.Unlimited || d.Tiers != want {
			t.Fatalf("muted/r %d: %+v", i, d)
		}
	}
	if d := e.Allow(t.Context(), at(0), Request{Resource: "both/none", Domain: "d", Tokens: 3}); d.Status != StatusOK || d.Granted != 3 || !d.Unlimited || d.Tiers.DomainHitsLastSecond != 3 {
		t.Fatalf("no tiers, ignored: %+v", d)
	}
	// A token bucket: drained to empty, never in debt, no wait.
	for i := range 3 {
		d := e.Allow(t.Context(), at(0), Request{Resource: "muted/tb", Domain: "d", Tokens: 5, MinTokens: 5})
		if d.Status != StatusOK || d.Granted != 5 || d.Wait != 0 || !d.Unlimited || d.Remaining != 0 {
			t.Fatalf("muted/tb %d: %+v", i, d)
		}
	}
	if d := e.Allow(t.Context(), at(1500*time.Millisecond), Request{Resource: "muted/tb", Domain: "d"}); d.Remaining != 0.5 {
		t.Fatalf("muted/tb refills from empty, not from debt: %+v", d)
	}
	// The longest prefix decides: muted/loud/ does not ignore.
	e.Allow(t.Context(), at(0), Request{Resource: "muted/loud/r", Domain: "d"})
	if d := e.Allow(t.Context(), at(0), Request{Resource: "muted/loud/r", Domain: "d"}); d.Status != StatusTimeout || d.Unlimited {
		t.Fatalf("muted/loud/r: %+v", d)
	}
	// Configured, under a prefix that only allows unconfigured: limited.
	e.Allow(t.Context(), at(0), Request{Resource: "open/r", Domain: "d"})
	if d := e.Allow(t.Context(), at(0), Request{Resource: "open/r", Domain: "d"}); d.Status != StatusTimeout {
		t.Fatalf("open/r: %+v", d)
	}
	// Unconfigured under open/: the most permissive configuration,
	// recorded per (resource, domain).
	for i := range 3 {
		d := e.Allow(t.Context(), at(0), Request{Resource: "open/new", Domain: "d", Tokens: MaxTokens / 4})
		if d.Status != StatusOK || d.Granted != MaxTokens/4 || !d.Unlimited || d.Bucket.String() != "namespace open/" ||
			d.Tiers.DomainHitsLastSecond != int64(i+1)*(MaxTokens/4) || d.Tiers.HardLimit != 0 {
			t.Fatalf("open/new %d: %+v", i, d)
		}
	}
	if d := e.Allow(t.Context(), at(0), Request{Resource: "open/other", Domain: "d"}); d.Tiers.DomainHitsLastSecond != 1 {
		t.Fatalf("open/other shares open/new's state: %+v", d)
	}
	// Unconfigured elsewhere: the global default bucket, limited, even
	// under muted/ (the global default is not the resource's
	// configuration).
	for _, r := range []string{"elsewhere", "muted/unknown"} {
		e.Allow(t.Context(), at(0), Request{Resource: r, Domain: "d"})
		if d := e.Allow(t.Context(), at(0), Request{Resource: r, Domain: "d"}); d.Status != StatusTimeout || d.Unlimited || d.Bucket.Source != SourceGlobalDefault {
			t.Fatalf("%s: %+v", r, d)
		}
	}
	// The buckets are recorded: the walk shows them.
	seen := map[Key]BucketInfo{}
	_ = e.Walk(t.Context(), at(0), func(b BucketInfo) bool { seen[Key{b.Resource, b.Domain}] = b; return true })
	if b, ok := seen[Key{"open/new", "d"}]; !ok || b.HitsLastSecond != 3*(MaxTokens/4) || b.Bucket.Source != SourceNamespace {
		t.Fatalf("open/new: %+v (%v)", b, ok)
	}
	if b := seen[Key{"muted/r", "d"}]; b.HitsLastSecond != 12 || b.Tier != 1 || b.TierHits != 1 {
		t.Fatalf("muted/r: %+v", b)
	}
	// Reconfigured without the namespace: open/new is unknown (no
	// bucket), its state removed.
	cfg2 := cfg.Clone()
	delete(cfg2.Namespaces, "open/")
	if err := e.SetConfig(at(0), cfg2); err != nil {
		t.Fatal(err)
	}
	if d := e.Allow(t.Context(), at(0), Request{Resource: "open/new", Domain: "d"}); d.Bucket.Source != SourceGlobalDefault {
		t.Fatalf("open/new after: %+v", d)
	}
	if _, ok := state(t, e, Key{"open/new", "d"}); ok {
		t.Fatal("open/new's state survived")
	}
}

// Introspection of a burst-tier domain: its current tier, the phase and
// time left, hits in its window, the cooldown that blocks it.
func TestTierWalk(t *testing.T) {
	e := newEngine(t, tiered(5, 0, cookbookTiers...), nil)
	e.Allow(t.Context(), at(0), Request{Resource: "r", Domain: "d", Tokens: 5})
	info := func(when time.Duration) BucketInfo {
		var got BucketInfo
		_ = e.Walk(t.Context(), at(when), func(b BucketInfo) bool { got = b; return true })
		return got
	}
	b := info(500 * time.Millisecond)
	want := BucketInfo{Resource: "r", Domain: "d", Bucket: BucketRef{Source: SourceDynamic}, Dynamic: true, Size: 5, Tokens: 0, Fraction: 0,
		LastUsed: at(0), Grants: 1, Algorithm: BurstTiers, HardLimit: 5, Tier: 2, TierPhase: PhaseActive, TierLeft: 1500 * time.Millisecond,
		TierLimit: 4, TierHits: 2, HitsLastSecond: 5}
	if b != want {
		t.Fatalf("at 0.5 s:\n%+v\nwant\n%+v", b, want)
	}
	b = info(3 * sec)
	want.Tier, want.TierLeft, want.TierLimit, want.TierHits, want.HitsLastSecond = 1, 3*sec, 3, 0, 0
	want.CooldownTier, want.CooldownLeft, want.Tokens, want.Fraction = 2, 3*sec, 3, 0.6
	if b != want {
		t.Fatalf("at 3 s:\n%+v\nwant\n%+v", b, want)
	}
	var snap Snapshot
	_ = e.Store().Walk(t.Context(), func(s Snapshot) bool { snap = s; return true })
	if got := TierStatuses(snap, at(3*sec).UnixNano()); !reflect.DeepEqual(got, []TierStatus{{PhaseActive, 3 * sec, 0}, {PhaseCooldown, 3 * sec, 0}}) {
		t.Fatalf("statuses %+v", got)
	}
	// Fresh again once everything is inactive and a second has passed:
	// Reap removes it.
	if n, _ := e.Reap(t.Context(), at(6*sec-1)); n != 0 {
		t.Fatalf("reaped a domain with tier 2 in cooldown")
	}
	if n, _ := e.Reap(t.Context(), at(6*sec)); n != 1 || bucketCount(e) != 0 {
		t.Fatalf("reaped %d, %d left", n, bucketCount(e))
	}
}

// A change of configuration keeps a domain's hits: its one-second log
// and its tiers by index; a domain changing algorithm starts afresh.
func TestTierSetConfig(t *testing.T) {
	e := newEngine(t, tiered(3, 0, tier(2, sec, hr, 0), tier(2, sec, hr, 0)), nil)
	e.Allow(t.Context(), at(0), Request{Resource: "r", Domain: "d", Tokens: 3})
	if err := e.SetConfig(at(0), tiered(4, 0, tier(2, sec, hr, 0))); err != nil {
		t.Fatal(err)
	}
	// Tier 2 is gone: tier 1 is full; H has room for one.
	if d := e.Allow(t.Context(), at(0), Request{Resource: "r", Domain: "d"}); d.Status != StatusTimeout || d.Tiers.Tier != 1 || d.Tiers.DomainHitsLastSecond != 3 {
		t.Fatalf("%+v", d)
	}
	if err := e.SetConfig(at(0), &Config{Resources: map[string]*Resource{"r": {Template: &Bucket{Size: 5, FillRate: 1, MaxTokensPerRequest: 5}}}}); err != nil {
		t.Fatal(err)
	}
	if d := e.Allow(t.Context(), at(0), Request{Resource: "r", Domain: "d", Tokens: 5}); d.Status != StatusOK || d.Algorithm != TokenBucket {
		t.Fatalf("token bucket: %+v", d)
	}
	if err := e.SetConfig(at(0), tiered(0, 0, tier(2, sec, hr, 0))); err != nil {
		t.Fatal(err)
	}
	if d := e.Allow(t.Context(), at(0), Request{Resource: "r", Domain: "d", Tokens: 2}); d.Status != StatusOK || d.Tiers.DomainHitsLastSecond != 2 {
		t.Fatalf("tiers again: %+v", d)
	}
}

// max_dynamic_buckets bounds the domains of a burst-tier resource too.
func TestTierTooManyDomains(t *testing.T) {
	cfg := tiered(0, 0, tier(5, sec, hr, 0))
	cfg.Resources["r"].MaxDynamicBuckets = 1
	var events []EventType
	e, err := New(cfg, Options{Listener: ListenerFunc(func(ev Event) { events = append(events, ev.Type) })})
	if err != nil {
		t.Fatal(err)
	}
	e.Allow(t.Context(), at(0), Request{Resource: "r", Domain: "a"})
	if d := e.Allow(t.Context(), at(0), Request{Resource: "r", Domain: "b"}); d.Status != StatusTooManyBuckets || !d.RetryNever {
		t.Fatalf("%+v", d)
	}
	if want := []EventType{EventBucketCreated, EventTokensServed, EventBucketMiss}; !reflect.DeepEqual(events, want) {
		t.Fatalf("events %v", events)
	}
}

// Concurrent requests on one domain never exceed its tiers' limits, nor
// concurrent requests on many domains the global limit, whatever walks,
// reaps and reconfigurations run beside them.
func TestTierConcurrent(t *testing.T) {
	cfg := tiered(0, 0, tier(100, hr, hr, 0), tier(50, hr, hr, 0))
	cfg.Resources["g"] = &Resource{Algorithm: BurstTiers, GlobalLimit: 70, HardLimit: 20, Tiers: []Tier{tier(1000, hr, hr, 0)}}
	e := newEngine(t, cfg, ListenerFunc(func(Event) {}))
	var wg sync.WaitGroup
	var one, global atomic.Int64
	perDomain := make([]atomic.Int64, 8)
	for g := range 8 {
		wg.Go(func() {
			for i := range 500 {
				// Instants out of order across goroutines, all within the
				// windows (an hour) and the same second.
				when := at(time.Duration(i%7) * time.Millisecond)
				d := e.Allow(t.Context(), when, Request{Resource: "r", Domain: "d", Tokens: 1 + int64(i%4), MinTokens: 1})
				if d.Tiers.Tier > 0 && d.Tiers.TierHits > d.Tiers.TierLimit {
					t.Errorf("tier %d holds %d > %d", d.Tiers.Tier, d.Tiers.TierHits, d.Tiers.TierLimit)
				}
				one.Add(d.Granted)
				d = e.Allow(t.Context(), when, Request{Resource: "g", Domain: fmt.Sprint("d", g), Tokens: 1 + int64(i%3), MinTokens: 1})
				global.Add(d.Granted)
				perDomain[g].Add(d.Granted)
				if g == 0 && i%100 == 0 {
					_ = e.Walk(t.Context(), when, func(BucketInfo) bool { return true })
					_, _ = e.Reap(t.Context(), when)
					if err := e.SetConfig(when, cfg); err != nil {
						t.Error(err)
					}
				}
			}
		})
	}
	wg.Wait()
	if n := one.Load(); n != 150 {
		t.Errorf("one domain: granted %d, want exactly its tiers' 100 + 50", n)
	}
	if n := global.Load(); n != 70 {
		t.Errorf("global: granted %d, want exactly G = 70", n)
	}
	for g := range perDomain {
		if n := perDomain[g].Load(); n > 20 {
			t.Errorf("domain %d: granted %d > H = 20", g, n)
		}
	}
}

// A log keeps its cumulative counts small (rebased as they grow) and
// saturates at 2⁶¹ hits held, counting exactly below that.
func TestHitLogLarge(t *testing.T) {
	var l HitLog
	const big = int64(MaxTokens)
	for i := range int64(2000) {
		l.Prune(i - 2)
		l.Add(i, big)
		if got := l.Since(i - 2); got != 3*big && i >= 2 {
			t.Fatalf("at %d: %d hits, want %d", i, got, 3*big)
		}
	}
	if l.base > 1<<62 || l.e[len(l.e)-1].cum > 1<<62+big {
		t.Fatalf("counts not rebased: base %d", l.base)
	}
	var s HitLog
	for i := range int64(300) {
		s.Add(i, big)
	}
	if got := s.Total(); got != maxLogHits {
		t.Fatalf("total %d, want the 2^61 it saturates at", got)
	}
	if s.Since(299) != 0 || s.Since(255) != maxLogHits-255*big {
		t.Fatalf("since 299: %d, since 255: %d", s.Since(299), s.Since(255))
	}
}
