package algorithm

import (
	"math"
	"sort"
	"testing"

	"pgregory.net/rapid"
)

// bandsOf groups parts into priority bands (highest first) over Slices.
func bandsOf(parts []Part) []PriorityBand {
	by := map[int64]Slice{}
	for _, p := range parts {
		by[p.Priority] = append(by[p.Priority], p.Requester)
	}
	var out []PriorityBand
	for prio, s := range by {
		out = append(out, PriorityBand{Priority: prio, Demand: s})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Priority > out[j].Priority })
	return out
}

func TestPriorityFairTargetTable(t *testing.T) {
	r := func(prio int64, wants, sub float64) Part {
		return Part{Priority: prio, Requester: Requester{Wants: wants, Subclients: sub}}
	}
	tests := []struct {
		name     string
		capacity float64
		parts    []Part
		want     []float64
	}{
		{"one band is plain fair share", 160, []Part{r(0, 20, 1), r(0, 50, 1), r(0, 60, 1), r(0, 100, 1)}, []float64{20, 46.666667, 46.666667, 46.666667}},
		{"high band first, low band the rest", 100, []Part{r(2, 30, 1), r(2, 40, 1), r(0, 50, 1), r(0, 50, 1)}, []float64{30, 40, 15, 15}},
		{"high band wants it all", 100, []Part{r(5, 80, 1), r(5, 80, 1), r(1, 10, 1)}, []float64{50, 50, 0}},
		{"subclients weigh within a band", 90, []Part{r(1, 100, 2), r(1, 100, 1), r(0, 100, 1)}, []float64{60, 30, 0}},
		{"three bands", 100, []Part{r(3, 20, 1), r(2, 30, 1), r(2, 30, 1), r(1, 100, 4)}, []float64{20, 30, 30, 20}},
		{"enough for everyone", 1000, []Part{r(3, 20, 1), r(0, 30, 1)}, []float64{20, 30}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bands := bandsOf(tt.parts)
			for i, p := range tt.parts {
				got := PriorityFairTarget(tt.capacity, []Part{p}, bands)
				if !near(got, tt.want[i]) {
					t.Fatalf("part %d (priority %d, wants %v) gets %v, want %v", i, p.Priority, p.Wants, got, tt.want[i])
				}
			}
		})
	}
}

// A server asking in several bands gets the sum of what each band's part
// would get.
func TestPriorityFairTargetSumsParts(t *testing.T) {
	server := []Part{{Priority: 2, Requester: Requester{Wants: 30, Subclients: 3}}, {Priority: 0, Requester: Requester{Wants: 60, Subclients: 6}}}
	other := Part{Priority: 0, Requester: Requester{Wants: 60, Subclients: 1}}
	bands := bandsOf(append([]Part{other}, server...))
	// Band 2 gets its 30; band 0 shares 70 max-min per subclient over 7
	// subclients: 10 each, so the server's band-0 part gets 60, other 10.
	if got := PriorityFairTarget(100, server, bands); !near(got, 90) {
		t.Fatalf("server gets %v, want 90", got)
	}
	if got := PriorityFairTarget(100, []Part{other}, bands); !near(got, 10) {
		t.Fatalf("other gets %v, want 10", got)
	}
}

func genParts(t *rapid.T) []Part {
	n := rapid.IntRange(1, 30).Draw(t, "n")
	ps := make([]Part, n)
	for i := range ps {
		ps[i] = Part{
			Priority: int64(rapid.IntRange(0, 3).Draw(t, "priority")),
			Requester: Requester{
				Wants:      rapid.Float64Range(0, 300).Draw(t, "wants"),
				Subclients: float64(rapid.IntRange(1, 5).Draw(t, "subclients")),
			},
		}
	}
	return ps
}

// Properties of priority-aware fair share: 0 ≤ gets ≤ wants; Σ gets =
// min(capacity, Σ wants); strict priority (if anyone in a band gets less
// than it wants, nobody in a lower band gets anything); max-min fair per
// subclient within each band.
func TestPropertyPriorityFairShare(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		parts := genParts(t)
		capacity := rapid.Float64Range(0, 3000).Draw(t, "capacity")
		bands := bandsOf(parts)
		got := make([]float64, len(parts))
		var sum, totalWants float64
		for i, p := range parts {
			got[i] = PriorityFairTarget(capacity, []Part{p}, bands)
			if got[i] < 0 || got[i] > p.Wants+eps {
				t.Fatalf("part %d gets %v, wants %v", i, got[i], p.Wants)
			}
			sum += got[i]
			totalWants += p.Wants
		}
		if want := math.Min(capacity, totalWants); math.Abs(sum-want) > 1e-6*math.Max(1, want) {
			t.Fatalf("Σ gets = %v, want min(capacity, Σ wants) = %v", sum, want)
		}
		for i, pi := range parts {
			if got[i] >= pi.Wants-1e-6 {
				continue // satisfied
			}
			for j, pj := range parts {
				if pj.Priority < pi.Priority && got[j] > 1e-6 {
					t.Fatalf("priority %d part %d is short (%v of %v) while priority %d part %d gets %v",
						pi.Priority, i, got[i], pi.Wants, pj.Priority, j, got[j])
				}
				if pj.Priority == pi.Priority && got[j]/pj.Subclients > got[i]/pi.Subclients+1e-6 {
					t.Fatalf("band %d not max-min fair: unsatisfied %d gets %v per subclient, %d gets %v",
						pi.Priority, i, got[i]/pi.Subclients, j, got[j]/pj.Subclients)
				}
			}
		}
	})
}
