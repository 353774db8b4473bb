package lease

import (
	"fmt"
	"math"
	"os"
	"reflect"
	"testing"
	"time"
	"unsafe"

	"github.com/sluice-rl/sluice/algorithm"
	"pgregory.net/rapid"

	"github.com/sluice-rl/sluice/internal/testutil"
)

func TestMain(m *testing.M) {
	testutil.RapidChecks(1000)
	os.Exit(m.Run())
}

var t0 = time.Unix(1_700_000_000, 0)

func params(kind algorithm.Kind, capacity float64) Params {
	return Params{Kind: kind, Capacity: capacity, LeaseLength: 60 * time.Second, RefreshInterval: 16 * time.Second, LearningModeDuration: 60 * time.Second}
}

// pastLearning returns a resource whose learning mode is already over.
func pastLearning(kind algorithm.Kind, capacity float64) *Resource {
	return NewResource("r", params(kind, capacity), t0.Add(-time.Hour))
}

func f(x float64) *float64 { return &x }

func TestDecideFairShareConverges(t *testing.T) {
	r := pastLearning(algorithm.FairShare, 100)
	now := t0
	g := r.Decide(now, Request{Client: "a", Wants: 80})
	if g.Capacity != 80 {
		t.Fatalf("a alone gets %v, want 80", g.Capacity)
	}
	if want := now.Add(60 * time.Second); !g.Expiry.Equal(want) || g.RefreshInterval != 16*time.Second {
		t.Fatalf("lease %v/%v", g.Expiry, g.RefreshInterval)
	}
	// b arrives: its fair share is 50 but a still holds 80.
	if g := r.Decide(now, Request{Client: "b", Wants: 80}); g.Capacity != 20 {
		t.Fatalf("b gets %v, want 20 (what is free)", g.Capacity)
	}
	if g := r.Decide(now.Add(time.Second), Request{Client: "a", Wants: 80}); g.Capacity != 50 {
		t.Fatalf("a refreshes to %v, want 50", g.Capacity)
	}
	if g := r.Decide(now.Add(2*time.Second), Request{Client: "b", Wants: 80}); g.Capacity != 50 {
		t.Fatalf("b refreshes to %v, want 50", g.Capacity)
	}
	if w, h, s, n := r.Totals(); w != 160 || h != 100 || s != 2 || n != 2 {
		t.Fatalf("totals %v %v %v %v", w, h, s, n)
	}
	if got := r.SafeCapacity(); got != 50 {
		t.Fatalf("dynamic safe capacity %v, want 100/2", got)
	}
}

func TestLearningMode(t *testing.T) {
	// Became master at t0: learning mode lasts the lease length (60 s).
	r := NewResource("r", params(algorithm.FairShare, 100), t0)
	now := t0.Add(10 * time.Second)
	if !r.Learning(now) {
		t.Fatal("not learning 10 s after winning")
	}
	if g := r.Decide(now, Request{Client: "old", Wants: 90, Has: f(70)}); g.Capacity != 70 || !g.Learning {
		t.Fatalf("claimant gets %+v, want its claimed 70", g)
	}
	if g := r.Decide(now, Request{Client: "new", Wants: 90}); g.Capacity != 0 {
		t.Fatalf("new client gets %v in learning mode, want 0", g.Capacity)
	}
	// A claim beyond what is free is cut to what is free.
	if g := r.Decide(now, Request{Client: "greedy", Wants: 90, Has: f(50)}); g.Capacity != 30 {
		t.Fatalf("greedy claimant gets %v, want 30", g.Capacity)
	}
	after := t0.Add(60 * time.Second) // learning over; a's lease (until t0+61 s) still runs
	if r.Learning(after) {
		t.Fatal("still learning after the lease length")
	}
	// After learning mode the algorithm runs (others hold 70+30 until they refresh).
	if g := r.Decide(after, Request{Client: "new", Wants: 90}); g.Capacity != 0 || g.Learning {
		t.Fatalf("new gets %+v with nothing free", g)
	}
}

// In learning mode a client that claims nothing (Fallback) is left in its
// fallback mode: 0 with an expired lease, no dynamic safe capacity (the
// store knows only some clients), and min(wants, safe capacity) booked
// within what is free, so that when learning mode ends nobody is granted
// what the clients in safe mode may still use.
func TestLearningLeavesClaimlessClientsInFallback(t *testing.T) {
	p := params(algorithm.FairShare, 100)
	p.SafeCapacity, p.HasSafeCapacity = 30, true
	r := NewResource("r", p, t0)
	now := t0.Add(10 * time.Second)
	g := r.Decide(now, Request{Client: "a", Wants: 90, Fallback: true})
	if g.Capacity != 0 || g.Expiry.After(now) || g.SafeCapacity != 30 {
		t.Fatalf("a: %+v, want 0 with an expired lease and the template's safe capacity", g)
	}
	if g := r.Decide(now, Request{Client: "b", Wants: 20, Fallback: true}); g.Capacity != 0 || g.Expiry.After(now) {
		t.Fatalf("b: %+v", g)
	}
	if _, has, _, _ := r.Totals(); has != 30+20 {
		t.Fatalf("booked %v, want min(wants, 30) each: 50", has)
	}
	// A claim is handed back as before.
	if g := r.Decide(now, Request{Client: "c", Wants: 90, Has: f(40), HasExpiry: now.Add(30 * time.Second), Fallback: true}); g.Capacity != 40 {
		t.Fatalf("c: %+v, want its claim", g)
	}
	// Booked only within what is free: 10 is left.
	r.Decide(now, Request{Client: "d", Wants: 90, Fallback: true})
	if _, has, _, _ := r.Totals(); has != 100 {
		t.Fatalf("booked %v, want the capacity, no more", has)
	}
	// Learning over: what the others may use is not free.
	after := t0.Add(61 * time.Second)
	if g := r.Decide(after, Request{Client: "e", Wants: 50, Fallback: true}); g.Capacity != 0 {
		t.Fatalf("e gets %v while the others' safe capacity is booked", g.Capacity)
	}
	// a asks again: its booking is free for it, and it gets a lease of its
	// fair share (100 over a, b, c, d, e: 20 each).
	if g := r.Decide(after, Request{Client: "a", Wants: 90, Fallback: true}); g.Capacity != 20 || !g.Expiry.After(after) {
		t.Fatalf("a after learning: %+v, want a lease of 20", g)
	}

	// Dynamic safe capacity: not sent while learning.
	d := NewResource("r", params(algorithm.FairShare, 100), t0)
	if g := d.Decide(now, Request{Client: "a", Wants: 90, Fallback: true}); !math.IsInf(g.SafeCapacity, 1) {
		t.Fatalf("dynamic safe capacity %v sent while learning", g.SafeCapacity)
	}
	// Without Fallback (Doorman's allocation): a lease of 0, nothing booked.
	o := NewResource("r", params(algorithm.FairShare, 100), t0)
	if g := o.Decide(now, Request{Client: "a", Wants: 90}); g.Capacity != 0 || !g.Expiry.After(now) || g.SafeCapacity != 100 {
		t.Fatalf("Doorman: %+v, want a lease of 0 and the dynamic safe capacity", g)
	}
	if _, has, _, _ := o.Totals(); has != 0 {
		t.Fatalf("Doorman books %v", has)
	}
}

// A downstream server that must take capacity back from its clients keeps
// it booked until it says they gave it back: its siblings grow only then.
func TestKeepOutstandingChildShrinksBeforeOthersGrow(t *testing.T) {
	r := pastLearning(algorithm.FairShare, 100)
	now := t0
	if g := r.Decide(now, Request{Client: "a", Wants: 100, KeepOutstanding: true, Has: f(0)}); g.Capacity != 100 {
		t.Fatalf("a gets %v", g.Capacity)
	}
	if g := r.Decide(now, Request{Client: "b", Wants: 100, KeepOutstanding: true, Has: f(0)}); g.Capacity != 0 {
		t.Fatalf("b gets %v with everything booked", g.Capacity)
	}
	// a's share is now 50, but its clients still hold 100.
	if g := r.Decide(now.Add(time.Second), Request{Client: "a", Wants: 100, KeepOutstanding: true, Has: f(100)}); g.Capacity != 50 {
		t.Fatalf("a refreshes to %v, want 50", g.Capacity)
	}
	if g := r.Decide(now.Add(2*time.Second), Request{Client: "b", Wants: 100, KeepOutstanding: true, Has: f(0)}); g.Capacity != 0 {
		t.Fatalf("b gets %v while a's clients still hold 100", g.Capacity)
	}
	// Unknown (a new master of a in learning mode): all it had stays booked.
	if g := r.Decide(now.Add(3*time.Second), Request{Client: "a", Wants: 100, KeepOutstanding: true}); g.Capacity != 50 {
		t.Fatalf("a gets %v", g.Capacity)
	}
	if g := r.Decide(now.Add(4*time.Second), Request{Client: "b", Wants: 100, KeepOutstanding: true, Has: f(0)}); g.Capacity != 0 {
		t.Fatalf("b gets %v while a's outstanding is unknown", g.Capacity)
	}
	// a's clients gave it back.
	r.Decide(now.Add(5*time.Second), Request{Client: "a", Wants: 100, KeepOutstanding: true, Has: f(50)})
	if g := r.Decide(now.Add(6*time.Second), Request{Client: "b", Wants: 100, KeepOutstanding: true, Has: f(0)}); g.Capacity != 50 {
		t.Fatalf("b gets %v after a's clients gave back, want 50", g.Capacity)
	}
	// Without KeepOutstanding (a client), what a is no longer granted is free at once.
	c := pastLearning(algorithm.FairShare, 100)
	c.Decide(now, Request{Client: "a", Wants: 100})
	c.Decide(now, Request{Client: "b", Wants: 100})
	c.Decide(now.Add(time.Second), Request{Client: "a", Wants: 100, Has: f(100)})
	if g := c.Decide(now.Add(2*time.Second), Request{Client: "b", Wants: 100}); g.Capacity != 50 {
		t.Fatalf("client b gets %v, want 50", g.Capacity)
	}
}

// In learning mode, a claim the store cannot cover is handed back until
// its own expiry, never extended.
func TestLearningHandsBackUncoveredClaims(t *testing.T) {
	p := params(algorithm.FairShare, 10)
	r := NewResource("r", p, t0)
	now := t0.Add(5 * time.Second)
	g := r.Decide(now, Request{Client: "a", Wants: 40, Has: f(30), HasExpiry: now.Add(20 * time.Second)})
	if g.Capacity != 30 || !g.Expiry.Equal(now.Add(20*time.Second)) {
		t.Fatalf("uncovered claim: %+v, want 30 until its own expiry", g)
	}
	// A claim that fits is renewed for a lease length.
	g = r.Decide(now, Request{Client: "b", Wants: 40, Has: f(0), HasExpiry: now.Add(20 * time.Second)})
	if g.Capacity != 0 {
		t.Fatalf("b: %+v", g)
	}
	// An expired claim is not handed back.
	g = r.Decide(now, Request{Client: "c", Wants: 40, Has: f(5), HasExpiry: now.Add(-time.Second)})
	if g.Capacity != 0 {
		t.Fatalf("expired claim: %+v", g)
	}
}

func TestLearningModeDurationFromTemplate(t *testing.T) {
	p := params(algorithm.FairShare, 100)
	p.LearningModeDuration = 5 * time.Second
	r := NewResource("r", p, t0)
	if r.Learning(t0.Add(5*time.Second)) || !r.Learning(t0.Add(4*time.Second)) {
		t.Fatal("learning_mode_duration not honoured")
	}
}

func TestNoAlgorithmAndStaticIgnoreLearningAndCapacity(t *testing.T) {
	r := NewResource("r", params(algorithm.NoAlgorithm, 10), t0)
	if g := r.Decide(t0, Request{Client: "a", Wants: 50}); g.Capacity != 50 {
		t.Fatalf("NO_ALGORITHM gets %v, want 50", g.Capacity)
	}
	r = NewResource("r", params(algorithm.Static, 10), t0)
	if g := r.Decide(t0, Request{Client: "a", Wants: 50, Subclients: 3}); g.Capacity != 30 {
		t.Fatalf("STATIC gets %v, want 3×10", g.Capacity)
	}
}

func TestCleanupAndRelease(t *testing.T) {
	r := pastLearning(algorithm.FairShare, 100)
	r.Decide(t0, Request{Client: "a", Wants: 60})
	r.Decide(t0.Add(30*time.Second), Request{Client: "b", Wants: 60})
	// a's lease ends at t0+60; its capacity stays booked ExpiryAllowance
	// more (a server whose clock runs ahead must not hand it out again).
	r.Cleanup(t0.Add(60 * time.Second))
	if _, h, _, _ := r.Totals(); h != 100 {
		t.Fatalf("Σ has %v at a's expiry, want a's 60 still booked", h)
	}
	if g := r.Decide(t0.Add(60*time.Second), Request{Client: "c", Wants: 60}); g.Capacity != 0 {
		t.Fatalf("c gets %v of a's lease at its expiry", g.Capacity)
	}
	r.Release("c")
	r.Cleanup(t0.Add(60*time.Second + ExpiryAllowance))
	if _, ok := r.Has("a"); ok {
		t.Fatal("expired lease of a not cleaned up")
	}
	if _, h, _, n := r.Totals(); n != 1 || h != 40 {
		t.Fatalf("after cleanup: %d leases, Σ has %v", n, h)
	}
	r.Release("b")
	r.Release("nobody")
	if _, h, _, n := r.Totals(); n != 0 || h != 0 {
		t.Fatalf("after release: %d leases, Σ has %v", n, h)
	}
}

func TestSafeCapacityAndMaxExpiry(t *testing.T) {
	p := params(algorithm.FairShare, 100)
	p.HasSafeCapacity, p.SafeCapacity = true, 7
	p.MaxExpiry = t0.Add(20 * time.Second)
	r := NewResource("r", p, t0.Add(-time.Hour))
	g := r.Decide(t0, Request{Client: "a", Wants: 10})
	if g.SafeCapacity != 7 {
		t.Fatalf("safe capacity %v, want 7", g.SafeCapacity)
	}
	if !g.Expiry.Equal(p.MaxExpiry) {
		t.Fatalf("expiry %v beyond the server's own lease %v", g.Expiry, p.MaxExpiry)
	}
	// The server's own lease is over: nothing is granted.
	if g := r.Decide(t0.Add(21*time.Second), Request{Client: "a", Wants: 10}); g.Capacity != 0 {
		t.Fatalf("granted %v past the server's own lease", g.Capacity)
	}
}

func TestBands(t *testing.T) {
	r := pastLearning(algorithm.FairShare, 100)
	r.Decide(t0, Request{Client: "a", Wants: 10, Priority: 1})
	r.Decide(t0, Request{Client: "b", Wants: 20, Priority: 1, Subclients: 4})
	r.Decide(t0, Request{Client: "c", Wants: 5, Priority: 0})
	got := r.Bands()
	// Band 1's curve: b's 4 subclients want 5 each, a 10.
	want := []Band{{Priority: 1, Clients: 5, Wants: 30, Groups: []algorithm.Requester{{Wants: 20, Subclients: 4}, {Wants: 10, Subclients: 1}}}, {Priority: 0, Clients: 1, Wants: 5}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("bands %v, want %v", got, want)
	}
}

// Property: the tree answers every Demand query exactly like the reference
// slice implementation, through any sequence of inserts, updates, releases
// and expiries.
func TestPropertyTreeMatchesSlice(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r := pastLearning(algorithm.FairShare, 1e9)
		// Small nodes, so that splits, merges and deep trees happen.
		r.bands.fanout = rapid.IntRange(3, 8).Draw(t, "fanout")
		now := t0
		ids := make([]string, rapid.IntRange(1, 60).Draw(t, "clients"))
		for i := range ids {
			ids[i] = fmt.Sprint("c", i)
		}
		steps := rapid.IntRange(1, 300).Draw(t, "steps")
		for i := 0; i < steps; i++ {
			id := rapid.SampledFrom(ids).Draw(t, "id")
			switch rapid.IntRange(0, 5).Draw(t, "op") {
			case 0:
				r.Release(id)
			case 1:
				now = now.Add(time.Duration(rapid.IntRange(0, 70).Draw(t, "dt")) * time.Second)
				r.Cleanup(now)
			default:
				r.Decide(now, Request{Client: id,
					Wants:      float64(rapid.IntRange(0, 100).Draw(t, "wants")),
					Subclients: int64(rapid.IntRange(1, 4).Draw(t, "sub"))})
			}
			if b := r.bands.get(0, false); b != nil {
				if msg := b.tree.check(); msg != "" {
					t.Fatalf("after step %d: %s", i, msg)
				}
			}
		}
		var ref algorithm.Slice
		for _, l := range r.Leases() {
			ref = append(ref, algorithm.Requester{Wants: l.Wants, Subclients: float64(l.Subclients)})
		}
		tr := &tree{}
		if b := r.bands.get(0, false); b != nil {
			tr = &b.tree
		}
		tw, ts := tr.Totals()
		rw, rs := ref.Totals()
		if tw != rw || ts != rs || tr.count() != len(ref) {
			t.Fatalf("totals tree (%v,%v,%d) slice (%v,%v,%d)", tw, ts, tr.count(), rw, rs, len(ref))
		}
		level := rapid.Float64Range(0, 120).Draw(t, "level")
		bw, bs := tr.Below(level)
		sw, ss := ref.Below(level)
		if math.Abs(bw-sw) > 1e-9 || bs != ss {
			t.Fatalf("Below(%v): tree (%v,%v) slice (%v,%v)", level, bw, bs, sw, ss)
		}
		capacity := rapid.Float64Range(0, 500).Draw(t, "capacity")
		tl, sl := tr.WaterLevel(capacity), ref.WaterLevel(capacity)
		if !(tl == sl || math.Abs(tl-sl) <= 1e-9*math.Max(1, sl)) {
			t.Fatalf("WaterLevel(%v): tree %v slice %v", capacity, tl, sl)
		}
	})
}

// Property: at every moment, the unexpired leases of a sharing resource
// add up to at most its capacity, through arrivals, changing wants,
// releases, time passing and learning mode.
func TestPropertyNeverOvercommits(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		kind := rapid.SampledFrom([]algorithm.Kind{algorithm.FairShare, algorithm.ProportionalShare}).Draw(t, "kind")
		capacity := rapid.Float64Range(0, 1000).Draw(t, "capacity")
		r := NewResource("r", params(kind, capacity), t0)
		now := t0
		ids := []string{"a", "b", "c", "d", "e", "f"}
		steps := rapid.IntRange(1, 100).Draw(t, "steps")
		for i := 0; i < steps; i++ {
			id := rapid.SampledFrom(ids).Draw(t, "id")
			switch rapid.IntRange(0, 6).Draw(t, "op") {
			case 0:
				r.Release(id)
			case 1:
				now = now.Add(time.Duration(rapid.IntRange(0, 30).Draw(t, "dt")) * time.Second)
			default:
				var has *float64
				if rapid.Bool().Draw(t, "claims") {
					has = f(rapid.Float64Range(0, 1000).Draw(t, "claim"))
				}
				wants := rapid.Float64Range(0, 500).Draw(t, "wants")
				req := Request{Client: id, Wants: wants, Has: has, Subclients: int64(rapid.IntRange(1, 3).Draw(t, "sub")),
					Priority: int64(rapid.IntRange(0, 2).Draw(t, "priority")), KeepOutstanding: rapid.Bool().Draw(t, "keep outstanding")}
				if rapid.Bool().Draw(t, "server") {
					// A downstream server asking in several bands.
					req.Bands = make([]Band, rapid.IntRange(1, 3).Draw(t, "bands"))
					wants = 0
					for j := range req.Bands {
						req.Bands[j] = Band{Priority: int64(rapid.IntRange(0, 2).Draw(t, "band priority")),
							Clients: int64(rapid.IntRange(1, 10).Draw(t, "band clients")),
							Wants:   rapid.Float64Range(0, 300).Draw(t, "band wants")}
						wants += req.Bands[j].Wants
					}
				}
				g := r.Decide(now, req)
				if g.Capacity < 0 || (!g.Learning && g.Capacity > wants+1e-9) {
					t.Fatalf("grant %v for wants %v", g.Capacity, wants)
				}
			}
			r.Cleanup(now)
			sum := 0.0
			for _, l := range r.Leases() {
				sum += l.Has
			}
			if sum > capacity+1e-6 {
				t.Fatalf("Σ unexpired leases %v > capacity %v", sum, capacity)
			}
		}
	})
}

// BenchmarkDecide measures one GetCapacity decision on one resource with
// n clients, as a server sees them: the clients refresh in turn, each once
// per refresh interval (so time advances by interval/n per decision and
// every lease moves to a later expiry), and each refresh changes the
// client's wants (so its place in the order moves too).
func BenchmarkDecide(b *testing.B) {
	for _, kind := range []algorithm.Kind{algorithm.FairShare, algorithm.ProportionalShare} {
		for _, n := range []int{10, 1000, 100000, 1000000} {
			b.Run(fmt.Sprintf("%v/clients=%d", kind, n), func(b *testing.B) {
				r := pastLearning(kind, float64(n)*50)
				step := r.Params().RefreshInterval / time.Duration(n)
				now := t0
				ids := make([]string, n)
				for i := range ids {
					ids[i] = fmt.Sprintf("client-%d", i)
					r.Decide(now, Request{Client: ids[i], Wants: float64(i % 100)})
					now = now.Add(step)
				}
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; b.Loop(); i++ {
					j, round := i%n, i/n+1
					r.Decide(now, Request{Client: ids[j], Wants: float64((j + 7*round) % 100)})
					now = now.Add(step)
				}
				if _, _, _, leases := r.Totals(); leases != n {
					b.Fatalf("%d leases outstanding, want %d", leases, n)
				}
			})
		}
	}
}

// BenchmarkDecideHot is BenchmarkDecide/FAIR_SHARE with 100 000 leases
// held but only 10 clients refreshing (the others hold long leases): the
// same tree depth and sizes as 100 000 active clients, with the memory the
// decisions touch in cache. Next to BenchmarkDecide it separates what a
// decision computes from what it waits for in memory.
func BenchmarkDecideHot(b *testing.B) {
	const n, hot = 100000, 10
	p := params(algorithm.FairShare, n*50)
	p.LeaseLength = 24 * time.Hour
	r := NewResource("r", p, t0.Add(-48*time.Hour))
	step := p.RefreshInterval / hot
	now := t0
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("client-%d", i)
		r.Decide(now, Request{Client: ids[i], Wants: float64(i % 100)})
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		j, round := i%hot, i/hot+1
		r.Decide(now, Request{Client: ids[j], Wants: float64((j + 7*round) % 100)})
		now = now.Add(step)
	}
}

// A large resource: 100 000 clients arrive, change their wants and leave
// in a pseudo-random order; the tree stays consistent and shallow, and its
// totals match a direct sum.
func TestTreeLarge(t *testing.T) {
	r := pastLearning(algorithm.FairShare, 1e6)
	const n = 100000
	x := uint64(1)
	next := func() uint64 { x = splitmix(x); return x }
	wants := map[string]float64{}
	for i := 0; i < 3*n; i++ {
		id := fmt.Sprint("c", next()%n)
		if next()%10 == 0 {
			r.Release(id)
			delete(wants, id)
			continue
		}
		w := float64(next() % 1000)
		r.Decide(t0, Request{Client: id, Wants: w})
		wants[id] = w
	}
	if msg := r.bands.get(0, false).tree.check(); msg != "" {
		t.Fatal(msg)
	}
	var sum float64
	for _, w := range wants {
		sum += w
	}
	got, _, _, leases := r.Totals()
	if leases != len(wants) || math.Abs(got-sum) > 1e-6*sum {
		t.Fatalf("totals: %v wants over %d leases, want %v over %d", got, leases, sum, len(wants))
	}
	depth := 0
	tr := &r.bands.get(0, false).tree
	for x := tr.node(tr.root); !x.leaf; x = tr.node(x.kids[0]) {
		depth++
	}
	if depth > 5 {
		t.Fatalf("tree of %d leases is %d levels deep", leases, depth)
	}
	for id := range wants {
		r.Release(id)
	}
	if len(r.bands.list) != 0 || r.ids.count != 0 || len(r.parts.more) != 0 {
		t.Fatal("tree not empty after releasing every lease")
	}
}

// The entry layout comment promises a decision's fields in one cache
// line, and the store's memory per lease (BenchmarkLeaseMemory) counts on
// 88-byte entries.
func TestEntrySize(t *testing.T) {
	if s := unsafe.Sizeof(entry{}); s > 88 {
		t.Fatalf("entry is %d bytes, want ≤ 88", s)
	}
	if o := unsafe.Offsetof(entry{}.hasMore); o >= 64 {
		t.Fatalf("the fields a decision reads end at byte %d, want < 64", o)
	}
}

// splitmix is the SplitMix64 step: a well-spread pseudo-random sequence.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// Strict priority through the store: a high-priority client is satisfied
// before lower bands share the rest; a downstream server's bands count as
// that many subclients at those priorities.
func TestDecidePriorityBands(t *testing.T) {
	r := pastLearning(algorithm.FairShare, 100)
	now := t0
	reqs := []Request{
		{Client: "a", Priority: 1, Wants: 60},
		{Client: "s", Bands: []Band{{Priority: 1, Clients: 1, Wants: 10}, {Priority: 0, Clients: 4, Wants: 100}}},
		{Client: "b", Priority: 0, Wants: 50},
	}
	var got map[string]float64
	for round := 0; round < 5; round++ { // refresh until the leases settle
		got = map[string]float64{}
		for _, q := range reqs {
			got[q.Client] = r.Decide(now, q).Capacity
		}
		now = now.Add(time.Second)
	}
	// Band 1: a 60 + s 10 = 70 of 100. Band 0 shares the last 30 over
	// 5 subclients (s has 4, b 1): 6 each, so s gets 24 more, b 6.
	want := map[string]float64{"a": 60, "s": 34, "b": 6}
	for c, w := range want {
		if math.Abs(got[c]-w) > 1e-9 {
			t.Fatalf("%s gets %v, want %v (all: %v)", c, got[c], w, got)
		}
	}
	bands := r.Bands()
	// With their demand curves: s's 4 subclients want 25 each, b 50.
	wantBands := []Band{
		{Priority: 1, Clients: 2, Wants: 70, Groups: []algorithm.Requester{{Wants: 10, Subclients: 1}, {Wants: 60, Subclients: 1}}},
		{Priority: 0, Clients: 5, Wants: 150, Groups: []algorithm.Requester{{Wants: 100, Subclients: 4}, {Wants: 50, Subclients: 1}}},
	}
	if !reflect.DeepEqual(bands, wantBands) {
		t.Fatalf("bands %+v", bands)
	}
	// The server drops its high band: its entry moves, nothing leaks.
	r.Decide(now, Request{Client: "s", Bands: []Band{{Priority: 0, Clients: 4, Wants: 100}}})
	if l, _ := r.Has("s"); l.Wants != 100 || l.Subclients != 4 || l.Priority != 0 {
		t.Fatalf("server lease %+v", l)
	}
	r.Release("s")
	r.Release("a")
	r.Release("b")
	if len(r.bands.list) != 0 {
		t.Fatalf("%d bands left after every release", len(r.bands.list))
	}
}

// Doorman's 5-second rule: a request within MinRequestInterval of the
// requester's last one changes nothing and gets the current lease back.
func TestMinRequestInterval(t *testing.T) {
	p := params(algorithm.FairShare, 100)
	p.MinRequestInterval = 5 * time.Second
	r := NewResource("r", p, t0.Add(-time.Hour))
	g := r.Decide(t0, Request{Client: "a", Wants: 80})
	if g.Capacity != 80 || g.Early {
		t.Fatalf("first request: %+v", g)
	}
	if g := r.Decide(t0, Request{Client: "b", Wants: 80}); g.Capacity != 20 {
		t.Fatalf("b gets %v, want 20", g.Capacity)
	}
	// a asks again 4.9 s later wanting less: ignored, its lease comes back.
	early := r.Decide(t0.Add(4900*time.Millisecond), Request{Client: "a", Wants: 10})
	if !early.Early || early.Capacity != 80 || !early.Expiry.Equal(g.Expiry) || early.RefreshInterval != p.RefreshInterval {
		t.Fatalf("early request: %+v, want a's current lease 80 until %v", early, g.Expiry)
	}
	if l, _ := r.Has("a"); l.Wants != 80 || !l.LastRequest.Equal(t0) {
		t.Fatalf("early request changed the record: %+v", l)
	}
	// At 5 s it is decided: a wants 10 now.
	if g := r.Decide(t0.Add(5*time.Second), Request{Client: "a", Wants: 10}); g.Early || g.Capacity != 10 {
		t.Fatalf("request after the window: %+v", g)
	}
	// Repeat is exempt.
	if g := r.Decide(t0.Add(6*time.Second), Request{Client: "a", Wants: 20, Repeat: true}); g.Early || g.Capacity != 20 {
		t.Fatalf("repeated request: %+v", g)
	}
	// Without the parameter every request is decided.
	q := NewResource("q", params(algorithm.FairShare, 100), t0.Add(-time.Hour))
	q.Decide(t0, Request{Client: "a", Wants: 80})
	if g := q.Decide(t0.Add(time.Second), Request{Client: "a", Wants: 10}); g.Early || g.Capacity != 10 {
		t.Fatalf("no window: %+v", g)
	}
}

// A request within MinRequestInterval whose last lease has ended (an
// expired grant: the server's own lease was gone; or a live lease that ran
// out) is decided, not answered with the ended lease: its requester holds
// nothing.
func TestMinRequestIntervalEndedLease(t *testing.T) {
	p := params(algorithm.FairShare, 100)
	p.MinRequestInterval = 5 * time.Second
	p.MaxExpiry = t0.Add(-time.Second)
	r := NewResource("r", p, t0.Add(-time.Hour))
	if g := r.Decide(t0, Request{Client: "a", Wants: 80}); g.Capacity != 0 || g.Expiry.After(t0) {
		t.Fatalf("grant past MaxExpiry: %+v", g)
	}
	if g := r.Decide(t0.Add(time.Second), Request{Client: "a", Wants: 80}); g.Early || g.Capacity != 0 || g.Expiry.After(t0.Add(time.Second)) {
		t.Fatalf("request after an expired grant, own lease still gone: %+v", g)
	}
	// The server's own lease is renewed until t0+3 s: a's next request,
	// 1 s later, gets a lease until then.
	p.MaxExpiry = t0.Add(3 * time.Second)
	r.SetParams(p)
	g := r.Decide(t0.Add(2*time.Second), Request{Client: "a", Wants: 80})
	if g.Early || g.Capacity != 80 || !g.Expiry.Equal(t0.Add(3*time.Second)) {
		t.Fatalf("request after an expired grant, own lease renewed: %+v", g)
	}
	if g := r.Decide(t0.Add(2500*time.Millisecond), Request{Client: "a", Wants: 80}); !g.Early || g.Capacity != 80 {
		t.Fatalf("request while the lease runs: %+v, want it back early", g)
	}
	// That lease ran out at t0+3 s; at t0+4 s a is decided again (0: the
	// server's own lease is gone again).
	if g := r.Decide(t0.Add(4*time.Second), Request{Client: "a", Wants: 80}); g.Early || g.Capacity != 0 {
		t.Fatalf("request after the lease ran out: %+v, want decided", g)
	}
}

// An early request renews a lease cut short by the server's own lease
// (MaxExpiry) as far as the server's renewed lease allows, to no later than
// a lease length after the decision, its capacity unchanged.
func TestEarlyRequestRenewsCappedLease(t *testing.T) {
	p := params(algorithm.FairShare, 100)
	p.LeaseLength = 10 * time.Second
	p.MinRequestInterval = 5 * time.Second
	p.MaxExpiry = t0.Add(2 * time.Second)
	r := NewResource("r", p, t0.Add(-time.Hour))
	if g := r.Decide(t0, Request{Client: "a", Wants: 80}); g.Capacity != 80 || !g.Expiry.Equal(t0.Add(2*time.Second)) {
		t.Fatalf("capped grant: %+v", g)
	}
	// Not renewed while the server's own lease is not.
	if g := r.Decide(t0.Add(time.Second), Request{Client: "a", Wants: 80}); !g.Early || !g.Expiry.Equal(t0.Add(2*time.Second)) {
		t.Fatalf("early request, own lease as before: %+v", g)
	}
	p.MaxExpiry = t0.Add(7 * time.Second)
	r.SetParams(p)
	if g := r.Decide(t0.Add(1500*time.Millisecond), Request{Client: "a", Wants: 80}); !g.Early || g.Capacity != 80 || !g.Expiry.Equal(t0.Add(7*time.Second)) {
		t.Fatalf("early request, own lease renewed to t0+7 s: %+v", g)
	}
	p.MaxExpiry = t0.Add(30 * time.Second)
	r.SetParams(p)
	if g := r.Decide(t0.Add(4*time.Second), Request{Client: "a", Wants: 80}); !g.Early || g.Capacity != 80 || !g.Expiry.Equal(t0.Add(10*time.Second)) {
		t.Fatalf("early request, own lease renewed to t0+30 s: %+v, want until a lease length after the decision", g)
	}
	if l, _ := r.Has("a"); !l.Expiry.Equal(t0.Add(10*time.Second)) || l.Has != 80 {
		t.Fatalf("record after the renewal: %+v", l)
	}
	r.Cleanup(t0.Add(9 * time.Second))
	if _, ok := r.Has("a"); !ok {
		t.Fatal("renewed lease dropped before its new expiry")
	}
	if g := r.Decide(t0.Add(9*time.Second), Request{Client: "a", Wants: 80}); g.Early || !g.PreviousExpiry.Equal(t0.Add(10*time.Second)) {
		t.Fatalf("previous expiry %v, want the renewed lease's end", g.PreviousExpiry)
	}
}

// A claim (Has) without a record outside learning mode is flagged; in
// learning mode it is how the store learns, and not flagged.
func TestUnrecordedHas(t *testing.T) {
	r := NewResource("r", params(algorithm.FairShare, 100), t0)
	if g := r.Decide(t0.Add(time.Second), Request{Client: "a", Wants: 10, Has: f(5)}); g.Unrecorded {
		t.Fatalf("claim in learning mode flagged: %+v", g)
	}
	after := t0.Add(60 * time.Second) // learning over; a's lease (until t0+61 s) still runs
	if g := r.Decide(after, Request{Client: "b", Wants: 10, Has: f(5)}); !g.Unrecorded || g.Capacity != 10 {
		t.Fatalf("claim without a record after learning: %+v, want flagged and decided", g)
	}
	if g := r.Decide(after, Request{Client: "a", Wants: 10, Has: f(5)}); g.Unrecorded {
		t.Fatalf("claim with a record flagged: %+v", g)
	}
	if g := r.Decide(after, Request{Client: "c", Wants: 10}); g.Unrecorded {
		t.Fatalf("new client without a claim flagged: %+v", g)
	}
}
