package chaos

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sort"
	"time"
)

// Window is a span of a run and what was granted in it: the grants whose
// [Start, End] lies inside [From, To], so that they certainly happened
// within it.
type Window struct {
	From, To time.Duration
	// Granted is what those grants gave; Bound what the model allows.
	Granted int64
	Bound   float64
}

// Excess is how much the window's grants exceed the bound (negative when
// they do not).
func (w Window) Excess() float64 { return float64(w.Granted) - w.Bound }

func (w Window) String() string {
	return fmt.Sprintf("[%v, %v] (%v): %d granted, bound %.1f", w.From.Round(time.Millisecond), w.To.Round(time.Millisecond),
		(w.To - w.From).Round(time.Millisecond), w.Granted, w.Bound)
}

// BucketCheck is CheckBucket's verdict.
type BucketCheck struct {
	// Grants counts the decided grants checked; Degraded the grants
	// flagged fail-open, left out of the check and counted apart.
	Grants, Degraded int64
	// Worst is the window whose grants exceed the bound by the most (or
	// come closest to it); Smallest, when some window exceeds it, the
	// shortest window that does.
	Worst    Window
	Smallest *Window
}

// Violated reports whether some window's grants exceed the bound.
func (c BucketCheck) Violated() bool { return c.Smallest != nil }

// CheckBucket checks a token bucket's history against the model: over any
// window of length T, the granted tokens are at most size + rate × T
// (size in tokens, rate in tokens per second). Only Granted operations
// that are not Degraded count; a grant counts in a window when its whole
// [Start, End] lies inside it, so a violation found is certain whatever
// the latencies. It runs in O(n log n) for n grants. (The model is the
// token bucket's, quotaservice-design.md, "Token buckets"; with a max
// wait the grants' tokens are due later, which this check does not
// model: run it on requests without waits.)
func CheckBucket(ops []Op, size, rate float64) BucketCheck {
	var c BucketCheck
	var grants []Op
	for _, op := range ops {
		if op.Outcome != Granted || op.N <= 0 {
			continue
		}
		if op.Degraded {
			c.Degraded++
			continue
		}
		grants = append(grants, op)
	}
	c.Grants = int64(len(grants))
	c.Worst = Window{Bound: size}
	if len(grants) == 0 {
		return c
	}
	// Windows are [a, b] with a some grant's Start and b some grant's End
	// (any other window is dominated by one of these). For each a, from
	// the latest to the earliest, the grants starting at or after a are
	// added to a segment tree over the Ends, whose leaf k holds
	// granted(a, End_k) − rate × End_k; the window's excess is then
	// leaf + rate × a − size.
	ends := make([]time.Duration, len(grants))
	for i, g := range grants {
		ends[i] = g.End
	}
	slices.Sort(ends)
	ends = slices.Compact(ends)
	init := make([]float64, len(ends))
	for k, e := range ends {
		init[k] = -rate * e.Seconds()
	}
	t := newMaxTree(init)
	slices.SortFunc(grants, func(x, y Op) int { return cmp.Compare(y.Start, x.Start) })
	worst := math.Inf(-1)
	for i := 0; i < len(grants); {
		a := grants[i].Start
		for ; i < len(grants) && grants[i].Start == a; i++ {
			k, _ := slices.BinarySearch(ends, grants[i].End)
			t.add(k, len(ends)-1, float64(grants[i].N))
		}
		lo, _ := slices.BinarySearch(ends, a)
		if lo == len(ends) {
			continue
		}
		base := rate*a.Seconds() - size
		if v, k := t.max(lo, len(ends)-1); v+base > worst {
			worst = v + base
			c.Worst = window(a, ends[k], v, rate, size)
		}
		// The shortest violation starting at a ends at the first End
		// whose leaf exceeds size − rate × a.
		if k, v, ok := t.first(lo, -base+1e-9); ok {
			if c.Smallest == nil || ends[k]-a < c.Smallest.To-c.Smallest.From {
				w := window(a, ends[k], v, rate, size)
				c.Smallest = &w
			}
		}
	}
	return c
}

// window rebuilds a window's figures from its tree leaf.
func window(a, b time.Duration, leaf, rate, size float64) Window {
	bound := size + rate*(b-a).Seconds()
	return Window{From: a, To: b, Granted: int64(math.Round(leaf + rate*b.Seconds())), Bound: bound}
}

// maxTree is a segment tree over float64 leaves with range add and range
// max (lazy propagation).
type maxTree struct {
	n    int
	mx   []float64
	lazy []float64
}

func newMaxTree(leaves []float64) *maxTree {
	t := &maxTree{n: len(leaves), mx: make([]float64, 4*len(leaves)), lazy: make([]float64, 4*len(leaves))}
	t.build(1, 0, t.n-1, leaves)
	return t
}

func (t *maxTree) build(node, l, r int, leaves []float64) {
	if l == r {
		t.mx[node] = leaves[l]
		return
	}
	m := (l + r) / 2
	t.build(2*node, l, m, leaves)
	t.build(2*node+1, m+1, r, leaves)
	t.mx[node] = max(t.mx[2*node], t.mx[2*node+1])
}

func (t *maxTree) push(node int) {
	if d := t.lazy[node]; d != 0 {
		for _, c := range []int{2 * node, 2*node + 1} {
			t.mx[c] += d
			t.lazy[c] += d
		}
		t.lazy[node] = 0
	}
}

// add adds d to the leaves lo..hi.
func (t *maxTree) add(lo, hi int, d float64) { t.addAt(1, 0, t.n-1, lo, hi, d) }

func (t *maxTree) addAt(node, l, r, lo, hi int, d float64) {
	if hi < l || r < lo {
		return
	}
	if lo <= l && r <= hi {
		t.mx[node] += d
		t.lazy[node] += d
		return
	}
	t.push(node)
	m := (l + r) / 2
	t.addAt(2*node, l, m, lo, hi, d)
	t.addAt(2*node+1, m+1, r, lo, hi, d)
	t.mx[node] = max(t.mx[2*node], t.mx[2*node+1])
}

// max returns the largest leaf in lo..hi and its index.
func (t *maxTree) max(lo, hi int) (float64, int) { return t.maxAt(1, 0, t.n-1, lo, hi) }

func (t *maxTree) maxAt(node, l, r, lo, hi int) (float64, int) {
	if hi < l || r < lo {
		return math.Inf(-1), -1
	}
	if l == r {
		return t.mx[node], l
	}
	if lo <= l && r <= hi {
		// Descend to the leaf holding the maximum.
		for l < r {
			t.push(node)
			m := (l + r) / 2
			if t.mx[2*node] >= t.mx[2*node+1] {
				node, r = 2*node, m
			} else {
				node, l = 2*node+1, m+1
			}
		}
		return t.mx[node], l
	}
	t.push(node)
	m := (l + r) / 2
	v1, k1 := t.maxAt(2*node, l, m, lo, hi)
	v2, k2 := t.maxAt(2*node+1, m+1, r, lo, hi)
	if v2 > v1 {
		return v2, k2
	}
	return v1, k1
}

// first returns the leftmost leaf at or after lo that exceeds x.
func (t *maxTree) first(lo int, x float64) (int, float64, bool) {
	return t.firstAt(1, 0, t.n-1, lo, x)
}

func (t *maxTree) firstAt(node, l, r, lo int, x float64) (int, float64, bool) {
	if r < lo || t.mx[node] <= x {
		return 0, 0, false
	}
	if l == r {
		return l, t.mx[node], true
	}
	t.push(node)
	m := (l + r) / 2
	if k, v, ok := t.firstAt(2*node, l, m, lo, x); ok {
		return k, v, true
	}
	return t.firstAt(2*node+1, m+1, r, lo, x)
}

// Hold is one granted hold of copies (or one lease) as the load
// generator saw it: certainly held from Acquired (its grant's answer) to
// Released (when its release was sent, or when its holder was killed);
// Released is zero while still held at the end of the run.
type Hold struct {
	Key                string
	N                  int64
	Acquired, Released time.Duration
	Degraded           bool
}

// CountCheck is CheckCount's verdict: the most held at one instant, when,
// and by how many holds.
type CountCheck struct {
	Max   int64
	At    time.Duration
	Holds int
	// Degraded counts the holds flagged fail-open, left out.
	Degraded int
}

// CheckCount sweeps the holds (Degraded ones apart) and returns the
// largest total held at one instant: for copies it must not exceed the
// limit, for leases the capacity. A hold released at the instant another
// is acquired is not counted with it (the release may have come first).
// end closes the holds still held (Released zero).
func CheckCount(holds []Hold, end time.Duration) CountCheck {
	type ev struct {
		at time.Duration
		d  int64
	}
	var c CountCheck
	var evs []ev
	for _, h := range holds {
		if h.Degraded {
			c.Degraded++
			continue
		}
		rel := h.Released
		if rel == 0 {
			rel = end
		}
		if rel <= h.Acquired {
			continue // never certainly held
		}
		c.Holds++
		evs = append(evs, ev{h.Acquired, h.N}, ev{rel, -h.N})
	}
	sort.Slice(evs, func(i, j int) bool {
		if evs[i].at != evs[j].at {
			return evs[i].at < evs[j].at
		}
		return evs[i].d < evs[j].d // releases first
	})
	var n int64
	for _, e := range evs {
		n += e.d
		if n > c.Max {
			c.Max, c.At = n, e.at
		}
	}
	return c
}

// MeanCount returns the mean over [from, to] of the total the holds
// (Degraded ones apart) certainly held at each instant, as CheckCount
// counts them; end closes the holds still held. 0 when to ≤ from.
func MeanCount(holds []Hold, from, to, end time.Duration) float64 {
	if to <= from {
		return 0
	}
	var area float64 // N × seconds
	for _, h := range holds {
		if h.Degraded {
			continue
		}
		rel := h.Released
		if rel == 0 {
			rel = end
		}
		if a, b := max(h.Acquired, from), min(rel, to); b > a {
			area += float64(h.N) * (b - a).Seconds()
		}
	}
	return area / (to - from).Seconds()
}
