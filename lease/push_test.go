package lease

import (
	"fmt"
	"math"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/sluice-rl/sluice/algorithm"
)

// pushes records what Offer sends.
type pushes map[string]Grant

func (p pushes) send(client string, g Grant) bool {
	p[client] = g
	return true
}

func TestOfferGivesBackFreedCapacity(t *testing.T) {
	r := pastLearning(algorithm.FairShare, 100)
	now := t0
	r.Decide(now, Request{Client: "a", Wants: 100, Watched: true})
	g := r.Decide(now, Request{Client: "b", Wants: 100, Watched: true})
	if g.Capacity != 0 || r.Waiting() != 1 {
		t.Fatalf("b gets %v (waiting %d), want 0 and waiting", g.Capacity, r.Waiting())
	}
	if n := r.Offer(now, pushes{}.send); n != 0 {
		t.Fatalf("nothing is free, yet %d pushed", n)
	}
	// a's refresh cuts it to its share: the 50 it gives back go to b at
	// once, not at b's next request.
	now = now.Add(5 * time.Second)
	if g := r.Decide(now, Request{Client: "a", Wants: 100, Watched: true}); g.Capacity != 50 {
		t.Fatalf("a refreshes to %v, want 50", g.Capacity)
	}
	p := pushes{}
	if n := r.Offer(now, p.send); n != 1 || p["b"].Capacity != 50 {
		t.Fatalf("pushed %d: %+v, want b 50", n, p)
	}
	if !p["b"].Expiry.Equal(now.Add(60*time.Second)) || p["b"].Sequence <= g.Sequence {
		t.Fatalf("pushed lease %+v: want a lease length from now and a later sequence than %d", p["b"], g.Sequence)
	}
	if l, _ := r.Has("b"); l.Has != 50 || r.Waiting() != 2 {
		t.Fatalf("b's record %+v, waiting %d (a and b both want more)", l, r.Waiting())
	}
	// b may still send its request 5 s after its last one: the push was
	// not a request.
	if g := r.Decide(now, Request{Client: "b", Wants: 100, Watched: true}); g.Early || g.Capacity != 50 {
		t.Fatalf("b's request after the push: %+v", g)
	}
	// a leaves: b gets all at once.
	r.Release("a")
	p = pushes{}
	if r.Offer(now, p.send); p["b"].Capacity != 100 {
		t.Fatalf("after a left: %+v, want b 100", p)
	}
	if r.Waiting() != 0 {
		t.Fatalf("waiting %d, want 0: b has all it wants", r.Waiting())
	}
	now = now.Add(5 * time.Second)
	r.Decide(now, Request{Client: "a", Wants: 100, Watched: true}) // back: 0 free
	r.Decide(now, Request{Client: "c", Wants: 100})                // not watched: never pushed
	r.Release("b")
	p = pushes{}
	if r.Offer(now, p.send); len(p) != 1 || p["a"].Capacity != 50 {
		t.Fatalf("after b left: %+v, want a its share of 50 and nothing for c (it does not watch)", p)
	}
	// A change of the others' demand raises a's share: c wants less.
	now = now.Add(5 * time.Second)
	if g := r.Decide(now, Request{Client: "c", Wants: 10}); g.Capacity != 10 {
		t.Fatalf("c gets %v, want 10", g.Capacity)
	}
	p = pushes{}
	if r.Offer(now, p.send); p["a"].Capacity != 90 {
		t.Fatalf("after c asked less: %+v, want a 90", p)
	}
}

func TestOfferNotDelivered(t *testing.T) {
	r := pastLearning(algorithm.FairShare, 100)
	r.Decide(t0, Request{Client: "a", Wants: 100})
	r.Decide(t0, Request{Client: "b", Wants: 100, Watched: true})
	r.Release("a")
	if n := r.Offer(t0, func(string, Grant) bool { return false }); n != 0 {
		t.Fatalf("%d pushed", n)
	}
	if l, _ := r.Has("b"); l.Has != 0 || r.Waiting() != 0 {
		t.Fatalf("an undelivered lease was recorded: %+v, waiting %d", l, r.Waiting())
	}
}

func TestOfferNotInLearningMode(t *testing.T) {
	r := NewResource("r", params(algorithm.FairShare, 100), t0)
	r.Decide(t0, Request{Client: "a", Wants: 100, Watched: true, Has: f(10)})
	if r.Waiting() != 0 || r.Offer(t0, pushes{}.send) != 0 {
		t.Fatal("learning mode queued or pushed")
	}
}

func TestOfferStaticNeverQueues(t *testing.T) {
	r := pastLearning(algorithm.Static, 10)
	r.Decide(t0, Request{Client: "a", Wants: 100, Watched: true})
	if r.Waiting() != 0 {
		t.Fatal("STATIC queued a requester")
	}
}

// TestOfferNeverOvercommits runs random requests, releases, expiries and
// offers, and checks that Σ has never exceeds the capacity and that a
// pushed lease never exceeds its holder's wants.
func TestOfferNeverOvercommits(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		capacity := rapid.Float64Range(0, 1000).Draw(t, "capacity")
		kind := rapid.SampledFrom([]algorithm.Kind{algorithm.FairShare, algorithm.ProportionalShare}).Draw(t, "kind")
		r := pastLearning(kind, capacity)
		now := t0
		wants := map[string]float64{}
		for i := range rapid.IntRange(1, 60).Draw(t, "steps") {
			c := fmt.Sprintf("c%d", rapid.IntRange(0, 5).Draw(t, "client"))
			switch rapid.IntRange(0, 3).Draw(t, "op") {
			case 0, 1:
				w := rapid.Float64Range(0, 600).Draw(t, "wants")
				prio := int64(rapid.IntRange(0, 1).Draw(t, "priority"))
				r.Decide(now, Request{Client: c, Wants: w, Priority: prio, Watched: rapid.Bool().Draw(t, "watched")})
				wants[c] = w
			case 2:
				r.Release(c)
			case 3:
				now = now.Add(time.Duration(rapid.IntRange(0, 70).Draw(t, "advance")) * time.Second)
			}
			r.Offer(now, func(client string, g Grant) bool {
				if g.Capacity > wants[client]+1e-9 {
					t.Fatalf("step %d: pushed %s %v, above its wants %v", i, client, g.Capacity, wants[client])
				}
				return true
			})
			if _, h, _, _ := r.Totals(); h > capacity*(1+1e-9)+1e-9 {
				t.Fatalf("step %d: Σ has %v > capacity %v", i, h, capacity)
			}
			if math.IsNaN(r.bands.sumHas()) {
				t.Fatal("NaN")
			}
		}
	})
}

// An intermediate's learning mode ends when its predecessor's lease from
// the parent has ended (Params.LearningEndsBy), and the parent reports when
// that is (Grant.PreviousExpiry).
func TestLearningEndsBy(t *testing.T) {
	p := params(algorithm.FairShare, 100)
	p.LearningEndsBy = t0.Add(5 * time.Second)
	r := NewResource("r", p, t0)
	if !r.Learning(t0.Add(4*time.Second)) || r.Learning(t0.Add(5*time.Second)) {
		t.Fatalf("learning ends at %v, want t0+5s", r.LearningEnd())
	}
	p.LearningEndsBy = t0.Add(time.Hour) // later than the duration: no effect
	r.SetParams(p)
	if !r.LearningEnd().Equal(t0.Add(60 * time.Second)) {
		t.Fatalf("learning ends at %v, want t0+60s", r.LearningEnd())
	}

	parent := pastLearning(algorithm.FairShare, 100)
	if g := parent.Decide(t0, Request{Client: "child", Wants: 10}); !g.PreviousExpiry.Equal(t0) {
		t.Fatalf("first grant's previous expiry %v, want now (none ran)", g.PreviousExpiry)
	}
	g := parent.Decide(t0.Add(10*time.Second), Request{Client: "child", Wants: 10})
	if !g.PreviousExpiry.Equal(t0.Add(60 * time.Second)) {
		t.Fatalf("previous expiry %v, want the first lease's t0+60s", g.PreviousExpiry)
	}
	// Leases of 0 back nothing downstream: the previous expiry is that of
	// the last lease of more than 0, or now when there was none.
	g = parent.Decide(t0.Add(20*time.Second), Request{Client: "child", Wants: 0, Repeat: true})
	if g.Capacity != 0 || !g.PreviousExpiry.Equal(t0.Add(70*time.Second)) {
		t.Fatalf("grant %v, previous expiry %v, want 0 and the second lease's t0+70s", g.Capacity, g.PreviousExpiry)
	}
	if g := parent.Decide(t0.Add(30*time.Second), Request{Client: "child", Wants: 0, Repeat: true}); !g.PreviousExpiry.Equal(t0.Add(70 * time.Second)) {
		t.Fatalf("previous expiry %v after a lease of 0, want the last lease of more than 0's t0+70s", g.PreviousExpiry)
	}
	if g := parent.Decide(t0, Request{Client: "idle", Wants: 0}); g.Capacity != 0 {
		t.Fatalf("idle child granted %v", g.Capacity)
	}
	if g := parent.Decide(t0.Add(10*time.Second), Request{Client: "idle", Wants: 0, Repeat: true}); !g.PreviousExpiry.Equal(t0.Add(10 * time.Second)) {
		t.Fatalf("previous expiry %v of a child only ever granted 0, want now", g.PreviousExpiry)
	}
	learning := NewResource("r", params(algorithm.FairShare, 100), t0)
	if g := learning.Decide(t0, Request{Client: "child", Wants: 10}); !g.PreviousExpiry.IsZero() {
		t.Fatalf("a store in learning mode reported %v, want nothing", g.PreviousExpiry)
	}
}
