package algorithm

import (
	"fmt"
	"math"
	"os"
	"testing"

	"pgregory.net/rapid"

	"github.com/sluice-rl/sluice/internal/testutil"
)

// TestMain runs every rapid property with at least 1000 random cases unless
// -rapid.checks says otherwise.
func TestMain(m *testing.M) {
	testutil.RapidChecks(1000)
	os.Exit(m.Run())
}

const eps = 1e-9

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-6*math.Max(1, math.Abs(b)) }

func TestAllocateTables(t *testing.T) {
	tests := []struct {
		name     string
		kind     Kind
		capacity float64
		rs       []Requester
		want     []float64
	}{
		{
			// charon-paper.md §5.1: capacity 90; A 100, B 50, C 10 get
			// 30+15.6, 30+4.4, 10.
			name: "proportional charon table", kind: ProportionalShare, capacity: 90,
			rs:   []Requester{{100, 1}, {50, 1}, {10, 1}},
			want: []float64{30 + 20*70.0/90, 30 + 20*20.0/90, 10},
		},
		{
			// charon-paper.md §5.1: capacity 160; A 100, B 50, C 45, D 10
			// get 40+10+5, 40+10, 40+5, 10.
			name: "fair charon table", kind: FairShare, capacity: 160,
			rs:   []Requester{{100, 1}, {50, 1}, {45, 1}, {10, 1}},
			want: []float64{55, 50, 45, 10},
		},
		{
			name: "fair under capacity everyone gets wants", kind: FairShare, capacity: 500,
			rs:   []Requester{{100, 1}, {50, 1}, {45, 1}},
			want: []float64{100, 50, 45},
		},
		{
			name: "proportional under capacity everyone gets wants", kind: ProportionalShare, capacity: 500,
			rs:   []Requester{{100, 1}, {50, 1}, {45, 1}},
			want: []float64{100, 50, 45},
		},
		{
			// A downstream server standing for 3 clients counts three times.
			name: "fair weights subclients", kind: FairShare, capacity: 100,
			rs:   []Requester{{1000, 3}, {1000, 1}},
			want: []float64{75, 25},
		},
		{
			name: "proportional weights subclients", kind: ProportionalShare, capacity: 100,
			rs: []Requester{{1000, 3}, {1000, 1}, {0, 1}},
			// equal share 20; base 60, 20, 0; leftover 20 split by excess
			// 940 : 980.
			want: []float64{60 + 20*940.0/1920, 20 + 20*980.0/1920, 0},
		},
		{
			name: "static is a per-client cap", kind: Static, capacity: 10,
			rs:   []Requester{{5, 1}, {50, 1}, {50, 4}},
			want: []float64{5, 10, 40},
		},
		{
			name: "none grants wants beyond capacity", kind: NoAlgorithm, capacity: 10,
			rs:   []Requester{{50, 1}, {70, 1}},
			want: []float64{50, 70},
		},
		{
			name: "zero capacity", kind: FairShare, capacity: 0,
			rs:   []Requester{{50, 1}, {70, 1}},
			want: []float64{0, 0},
		},
		{
			name: "all equal overloaded", kind: FairShare, capacity: 500,
			rs:   []Requester{{110, 1}, {110, 1}, {110, 1}, {110, 1}, {110, 1}},
			want: []float64{100, 100, 100, 100, 100},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Allocate(tt.kind, tt.capacity, tt.rs)
			for i := range got {
				if !near(got[i], tt.want[i]) {
					t.Errorf("requester %d: got %v, want %v (all: %v)", i, got[i], tt.want[i], got)
				}
			}
		})
	}
}

func TestDecideClampsToFree(t *testing.T) {
	// Two clients on capacity 100: A holds 80 from an earlier round, B now
	// wants 60. B's fair share is 50, but only 20 is free until A refreshes.
	d := Slice{{Wants: 60, Subclients: 1}, {Wants: 60, Subclients: 1}}
	for _, kind := range []Kind{FairShare, ProportionalShare} {
		got := Decide(kind, 100, Requester{Wants: 60, Subclients: 1}, d, 80)
		if !near(got, 20) {
			t.Errorf("%v: got %v, want 20 (what is free)", kind, got)
		}
		// Once A has given back down to 50, B gets its full share.
		got = Decide(kind, 100, Requester{Wants: 60, Subclients: 1}, d, 50)
		if !near(got, 50) {
			t.Errorf("%v: got %v, want 50", kind, got)
		}
		// Others over capacity (config lowered): nothing is free.
		if got := Decide(kind, 100, Requester{Wants: 60, Subclients: 1}, d, 150); got != 0 {
			t.Errorf("%v: got %v, want 0 with nothing free", kind, got)
		}
	}
}

func TestParseKind(t *testing.T) {
	for in, want := range map[string]Kind{
		"FAIR_SHARE": FairShare, "FairShare": FairShare, "fair_share": FairShare,
		"PROPORTIONAL_SHARE": ProportionalShare, "STATIC": Static, "None": NoAlgorithm, "NO_ALGORITHM": NoAlgorithm,
	} {
		got, err := ParseKind(in)
		if err != nil || got != want {
			t.Errorf("ParseKind(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := ParseKind("ROUND_ROBIN"); err == nil {
		t.Error("ParseKind(ROUND_ROBIN) succeeded")
	}
	if FairShare.String() != "FAIR_SHARE" || Kind(42).String() != "Kind(42)" || Kind(42).Valid() {
		t.Error("String/Valid")
	}
}

// genRequesters draws 1..40 requesters with wants in [0, 300] and 1..5
// subclients.
func genRequesters(t *rapid.T) []Requester {
	n := rapid.IntRange(1, 40).Draw(t, "n")
	rs := make([]Requester, n)
	for i := range rs {
		rs[i] = Requester{
			Wants:      rapid.Float64Range(0, 300).Draw(t, "wants"),
			Subclients: float64(rapid.IntRange(1, 5).Draw(t, "subclients")),
		}
	}
	return rs
}

var sharing = []Kind{FairShare, ProportionalShare}

// Property: every allocation is within [0, wants] and, for the sharing
// algorithms, adds up to exactly min(capacity, Σ wants): never more than
// exists, never capacity left on the table while someone wants it.
func TestPropertyAllocationBounds(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		rs := genRequesters(t)
		capacity := rapid.Float64Range(0, 3000).Draw(t, "capacity")
		totalWants, _ := Slice(rs).Totals()
		for _, kind := range []Kind{FairShare, ProportionalShare, Static, NoAlgorithm} {
			got := Allocate(kind, capacity, rs)
			sum := 0.0
			for i, g := range got {
				if g < 0 || g > rs[i].Wants+eps {
					t.Fatalf("%v: requester %d gets %v, wants %v", kind, i, g, rs[i].Wants)
				}
				sum += g
			}
			if kind == FairShare || kind == ProportionalShare {
				if want := math.Min(capacity, totalWants); !near(sum, want) {
					t.Fatalf("%v: Σ gets = %v, want min(capacity, Σ wants) = %v", kind, sum, want)
				}
			}
		}
	})
}

// Property: FairShare is max-min fair per subclient. Whoever does not get
// all it wants gets at least as much per subclient as anyone else.
func TestPropertyFairShareMaxMin(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		rs := genRequesters(t)
		capacity := rapid.Float64Range(0, 3000).Draw(t, "capacity")
		got := Allocate(FairShare, capacity, rs)
		for i, gi := range got {
			if gi >= rs[i].Wants-1e-6 {
				continue // satisfied
			}
			for j, gj := range got {
				if gj/rs[j].Subclients > gi/rs[i].Subclients+1e-6 {
					t.Fatalf("unsatisfied %d gets %v per subclient, but %d gets %v", i, gi/rs[i].Subclients, j, gj/rs[j].Subclients)
				}
			}
		}
	})
}

// Property: under ProportionalShare every subclient gets at least its equal
// share of capacity (or all it wants), and among those wanting more than
// their equal share the extra is proportional to the excess demand.
func TestPropertyProportionalShareEqualShare(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		rs := genRequesters(t)
		capacity := rapid.Float64Range(0, 3000).Draw(t, "capacity")
		got := Allocate(ProportionalShare, capacity, rs)
		totalWants, totalSub := Slice(rs).Totals()
		if totalWants <= capacity {
			return
		}
		equal := capacity / totalSub
		var ratio float64 = -1
		for i, g := range got {
			floor := math.Min(rs[i].Wants, rs[i].Subclients*equal)
			if g < floor-1e-6 {
				t.Fatalf("requester %d gets %v, below its equal share %v", i, g, floor)
			}
			if excess := rs[i].Wants - rs[i].Subclients*equal; excess > 1e-6 {
				r := (g - rs[i].Subclients*equal) / excess
				if ratio >= 0 && math.Abs(r-ratio) > 1e-6 {
					t.Fatalf("extra not proportional to excess: %v vs %v", r, ratio)
				}
				ratio = r
			}
		}
	})
}

// Property: whatever order requesters refresh in and however their wants
// change, each decision obeys the requester's own rule (0 ≤ gets ≤ wants,
// and gets ≤ what is free: capacity minus every other requester's lease),
// and the state after every decision, the new grant included, has Σ
// outstanding leases ≤ capacity.
func TestPropertyNeverOvercommits(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		rs := genRequesters(t)
		capacity := rapid.Float64Range(0, 3000).Draw(t, "capacity")
		kind := rapid.SampledFrom(sharing).Draw(t, "kind")
		has := make([]float64, len(rs))
		steps := rapid.IntRange(1, 200).Draw(t, "steps")
		for s := 0; s < steps; s++ {
			i := rapid.IntRange(0, len(rs)-1).Draw(t, "who")
			if rapid.Bool().Draw(t, "change") {
				rs[i].Wants = rapid.Float64Range(0, 300).Draw(t, "new wants")
			}
			othersHas := sum(has) - has[i]
			g := Decide(kind, capacity, rs[i], Slice(rs), othersHas)
			if err := ownRule(g, rs[i].Wants, capacity-othersHas); err != nil {
				t.Fatalf("step %d, requester %d: %v", s, i, err)
			}
			has[i] = g
			if err := withinCapacity(has, capacity); err != nil {
				t.Fatalf("step %d, after requester %d gets %v: %v", s, i, g, err)
			}
		}
	})
}

// ownRule checks one decision: gets is in [0, wants] and at most free
// (what is not leased to others, or 0 if that is negative).
func ownRule(gets, wants, free float64) error {
	switch {
	case !(gets >= 0):
		return fmt.Errorf("gets %v < 0", gets)
	case gets > wants+eps:
		return fmt.Errorf("gets %v > wants %v", gets, wants)
	case gets > math.Max(free, 0)+eps:
		return fmt.Errorf("gets %v > free %v", gets, free)
	}
	return nil
}

// withinCapacity checks a state: Σ has ≤ capacity (up to rounding).
func withinCapacity(has []float64, capacity float64) error {
	if total := sum(has); total > capacity+1e-6*math.Max(1, capacity) {
		return fmt.Errorf("Σ outstanding %v > capacity %v (leases %v)", total, capacity, has)
	}
	return nil
}

func sum(xs []float64) float64 {
	total := 0.0
	for _, x := range xs {
		total += x
	}
	return total
}

// The checks of TestPropertyNeverOvercommits flag an over-committed final
// state and a grant beyond what is free, so the property can fail.
func TestOvercommitChecksCanFail(t *testing.T) {
	tests := []struct {
		name              string
		gets, wants, free float64
		has               []float64
		capacity          float64
		wantOwn, wantSum  bool // whether ownRule / withinCapacity must fail
	}{
		{name: "fits", gets: 50, wants: 60, free: 50, has: []float64{50, 50}, capacity: 100},
		{name: "last grant overcommits", gets: 60, wants: 60, free: 50, has: []float64{50, 60}, capacity: 100, wantOwn: true, wantSum: true},
		{name: "beyond wants", gets: 61, wants: 60, free: 100, has: []float64{61}, capacity: 100, wantOwn: true},
		{name: "negative", gets: -1, wants: 60, free: 100, has: []float64{0}, capacity: 100, wantOwn: true},
		{name: "NaN", gets: math.NaN(), wants: 60, free: 100, has: []float64{0}, capacity: 100, wantOwn: true},
		{name: "nothing free", gets: 1, wants: 60, free: -20, has: []float64{120, 1}, capacity: 100, wantOwn: true, wantSum: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := ownRule(tt.gets, tt.wants, tt.free); (err != nil) != tt.wantOwn {
				t.Errorf("ownRule(%v, %v, %v) = %v, want failure %v", tt.gets, tt.wants, tt.free, err, tt.wantOwn)
			}
			if err := withinCapacity(tt.has, tt.capacity); (err != nil) != tt.wantSum {
				t.Errorf("withinCapacity(%v, %v) = %v, want failure %v", tt.has, tt.capacity, err, tt.wantSum)
			}
		})
	}
}

// Property: when refreshes go round, the allocation converges to the
// steady state of Allocate within a few rounds.
func TestPropertyConverges(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		rs := genRequesters(t)
		capacity := rapid.Float64Range(1, 3000).Draw(t, "capacity")
		kind := rapid.SampledFrom(sharing).Draw(t, "kind")
		has := make([]float64, len(rs))
		for round := 0; round < 3; round++ {
			for i := range rs {
				total := 0.0
				for _, h := range has {
					total += h
				}
				has[i] = Decide(kind, capacity, rs[i], Slice(rs), total-has[i])
			}
		}
		want := Allocate(kind, capacity, rs)
		for i := range has {
			if !near(has[i], want[i]) {
				t.Fatalf("requester %d has %v after 3 rounds, steady state %v", i, has[i], want[i])
			}
		}
	})
}
