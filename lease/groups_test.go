package lease

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/algorithm"
)

// A band's demand curve: exact while its clients want few distinct
// amounts; grouped within a bound when they want more; never more than
// MaxGroups groups, and always the band's sums.
func TestBandGroups(t *testing.T) {
	for _, tc := range []struct {
		name  string
		wants []float64
		exact bool
	}{
		{"equal", []float64{7, 7, 7, 7}, true},
		{"few distinct", []float64{0, 0, 1, 2, 2, 3, 50, 50, 1000}, true},
		{"many", spread(5000, 1), false},
		{"wide", spread(300, 1e6), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := pastLearning(algorithm.FairShare, 1e9)
			var total float64
			for i, w := range tc.wants {
				r.Decide(t0, Request{Client: string(rune('A'+i%26)) + string(rune(i)), Wants: w})
				total += w
			}
			bands := r.Bands()
			var one [1]algorithm.Requester
			gs := groupsOf(bands[0], &one)
			if len(gs) > MaxGroups {
				t.Fatalf("%d groups", len(gs))
			}
			var w, sub float64
			for i, g := range gs {
				w += g.Wants
				sub += g.Subclients
				if i > 0 && g.Wants/g.Subclients < gs[i-1].Wants/gs[i-1].Subclients {
					t.Fatalf("groups out of order: %v", gs)
				}
			}
			if math.Abs(w-total) > 1e-6*total || sub != float64(len(tc.wants)) {
				t.Fatalf("groups sum to %v wants, %v clients; want %v, %d", w, sub, total, len(tc.wants))
			}
			// The curve at every level: never below the clients' own,
			// exact when it should be, and within 1/64·(the groups'
			// wants) plus a coarser bound only when the clients span
			// more than 32 groups of 1/64.
			for _, level := range []float64{0, 0.5, 1, 2, 3, 7, 10, 49, 50, 51, 100, 999, 5000, 1e5} {
				var curve, own float64
				for _, g := range gs {
					curve += math.Min(g.Wants, g.Subclients*level)
				}
				for _, x := range tc.wants {
					own += math.Min(x, level)
				}
				if curve < own-1e-6*(1+own) {
					t.Fatalf("level %v: curve %v below the clients' %v", level, curve, own)
				}
				if tc.exact && math.Abs(curve-own) > 1e-9*(1+own) {
					t.Fatalf("level %v: curve %v, clients %v: want exact", level, curve, own)
				}
				if !tc.exact && tc.name == "many" && curve-own > total/64 {
					t.Fatalf("level %v: curve %v over the clients' %v by more than 1/64 of %v", level, curve, own, total)
				}
			}
		})
	}
}

// spread returns n wants spread from 1 to top (deterministic).
func spread(n int, top float64) []float64 {
	rng := rand.New(rand.NewPCG(1, 2))
	out := make([]float64, n)
	for i := range out {
		out[i] = 1 + rng.Float64()*top
	}
	return out
}

// Through a tree, the root's water level runs across every client beneath
// it when the intermediates send their demand curves; without them the
// root splits by subtree, as if each intermediate's clients wanted the
// same.
func TestGroupsGiveGlobalMaxMin(t *testing.T) {
	// Intermediate X: clients wanting 90 and 2. Intermediate Y: 8 clients
	// wanting 10. Capacity 50 over 10 clients: the level L with
	// min(90, L) + min(2, L) + 8·min(10, L) = 50 is L = 48/9 ≈ 5.33:
	// X gets L + 2, Y gets 8L.
	x := pastLearning(algorithm.FairShare, 1e9)
	x.Decide(t0, Request{Client: "big", Wants: 90})
	x.Decide(t0, Request{Client: "small", Wants: 2})
	y := pastLearning(algorithm.FairShare, 1e9)
	for i := range 8 {
		y.Decide(t0, Request{Client: string(rune('a' + i)), Wants: 10})
	}
	level := 48.0 / 9
	for _, curves := range []bool{true, false} {
		root := pastLearning(algorithm.FairShare, 50)
		xb, yb := x.Bands(), y.Bands()
		if !curves {
			xb[0].Groups, yb[0].Groups = nil, nil
		}
		var gx, gy float64
		for i := range 4 {
			now := t0.Add(time.Duration(i) * 10 * time.Second)
			gx = root.Decide(now, Request{Client: "X", Bands: xb, KeepOutstanding: true, Has: f(gx)}).Capacity
			gy = root.Decide(now, Request{Client: "Y", Bands: yb, KeepOutstanding: true, Has: f(gy)}).Capacity
		}
		if curves {
			if math.Abs(gx-(level+2)) > 1e-9 || math.Abs(gy-8*level) > 1e-9 {
				t.Fatalf("with curves X gets %v, Y %v; want %v, %v", gx, gy, level+2, 8*level)
			}
			continue
		}
		// By subtree (Doorman's view): X's 2 subclients as if each wanted
		// 46: the level is 5 (2·5 + 8·5 = 50), X gets 10, Y 40.
		if math.Abs(gx-10) > 1e-9 || math.Abs(gy-40) > 1e-9 {
			t.Fatalf("without curves X gets %v, Y %v; want 10, 40", gx, gy)
		}
	}
}

// Under both sharing algorithms and with two priority bands, a downstream
// server that sends its curve gets what its clients would get together as
// clients of the root: the sum of their shares over the flat list.
func TestGroupsMatchFlatClients(t *testing.T) {
	under := []float64{90, 2, 30, 30} // the intermediate's clients
	direct := []float64{10, 10, 10, 10, 10, 10, 10, 10}
	for _, kind := range []algorithm.Kind{algorithm.FairShare, algorithm.ProportionalShare} {
		x := pastLearning(kind, 1e9)
		for i, w := range under {
			x.Decide(t0, Request{Client: fmt.Sprint("u", i), Wants: w})
		}
		flat := make([]algorithm.Requester, 0, len(under)+len(direct))
		for _, w := range under {
			flat = append(flat, algorithm.Requester{Wants: w, Subclients: 1})
		}
		for _, w := range direct {
			flat = append(flat, algorithm.Requester{Wants: w, Subclients: 1})
		}
		want := 0.0
		for _, s := range algorithm.Allocate(kind, 100, flat)[:len(under)] {
			want += s
		}
		root := pastLearning(kind, 100)
		var got float64
		for round := range 4 {
			now := t0.Add(time.Duration(round) * 10 * time.Second)
			for i, w := range direct {
				root.Decide(now, Request{Client: fmt.Sprint("d", i), Wants: w})
			}
			got = root.Decide(now, Request{Client: "X", Bands: x.Bands(), KeepOutstanding: true, Has: f(got)}).Capacity
		}
		if math.Abs(got-want) > 1e-9 {
			t.Errorf("%v: the intermediate gets %v, its clients as the root's would get %v", kind, got, want)
		}
	}

	// Priority bands: the intermediate's high band (one client wanting 30)
	// is served first; its low band's curve shares the rest with the
	// direct clients, all in band 0.
	x := pastLearning(algorithm.FairShare, 1e9)
	x.Decide(t0, Request{Client: "hi", Priority: 1, Wants: 30})
	x.Decide(t0, Request{Client: "lo1", Wants: 50})
	x.Decide(t0, Request{Client: "lo2", Wants: 2})
	root := pastLearning(algorithm.FairShare, 100)
	var got float64
	for round := range 4 {
		now := t0.Add(time.Duration(round) * 10 * time.Second)
		for i := range 4 {
			root.Decide(now, Request{Client: fmt.Sprint("d", i), Wants: 40})
		}
		got = root.Decide(now, Request{Client: "X", Bands: x.Bands(), KeepOutstanding: true, Has: f(got)}).Capacity
	}
	// 30 to the high band; 70 in band 0 over lo1, lo2 and four clients
	// wanting 40: lo2 takes 2, the five others 68/5 each.
	if want := 30 + 2 + 68.0/5; math.Abs(got-want) > 1e-9 {
		t.Errorf("with priority bands the intermediate gets %v, want %v", got, want)
	}
}
