package lease

import "github.com/sluice-rl/sluice/algorithm"

// MaxGroups is the most groups a band's demand curve has (Band.Groups, on
// the wire PriorityBandAggregate.groups): enough that a band whose clients
// want a few dozen distinct amounts is described exactly, and that a
// GetServerCapacity request stays small (a group is two doubles, about 20
// bytes).
const MaxGroups = 32

// groups returns the tree's requesters as at most max groups of
// consecutive requesters in order of wants per subclient (each group the
// sums of its requesters' wants and subclients), appended to out. Groups
// are as fine as max allows: first requesters with equal wants per
// subclient only (exact), then, while there are too many, requesters
// whose wants per subclient lie within a factor 1 + eps of the group's
// first, with eps 1/64, 1/32, … A group (A, S) stands for its requesters
// at every level L as min(A, S × L): exact when they want the same per
// subclient, and otherwise never less than Σ min(a_i, s_i × L), and more
// by at most eps × A.
//
// A subtree whose keys all fall within the open group is added from its
// node's sums without being walked, so a walk costs O(groups × fanout ×
// depth) rather than O(n) once requesters are grouped coarsely; an
// attempt with too many groups stops at max + 1.
func (t *tree) groups(max int, out []algorithm.Requester) []algorithm.Requester {
	if t.root == 0 || max < 1 {
		return out
	}
	base := len(out)
	for eps := 0.0; ; eps = nextEps(eps) {
		w := groupWalk{t: t, eps: eps, max: max, out: out[:base]}
		if w.visit(t.node(t.root)) {
			return w.out
		}
		out = w.out
	}
}

// nextEps is the grouping tolerance after eps: 1/64, then doubling. From
// 2⁶⁰ on every key lies within a factor 1 + eps of any positive one and
// the walk ends with at most two groups (the zeros, and the rest).
func nextEps(eps float64) float64 {
	if eps == 0 {
		return 1.0 / 64
	}
	return 2 * eps
}

// groupWalk is one attempt of tree.groups.
type groupWalk struct {
	t     *tree
	eps   float64
	max   int
	out   []algorithm.Requester
	n     int     // groups made
	start float64 // the open group's first key (valid when open)
	open  bool
}

// visit walks x's slots in key order; false when max groups were exceeded.
func (w *groupWalk) visit(x *node) bool {
	for i := 0; i < int(x.n); i++ {
		if x.leaf {
			if !w.add(w.t.key(x, i), x.wants[i], x.sub[i]) {
				return false
			}
			continue
		}
		if w.open && w.fits(w.t.key(x, i)) {
			// The child's largest key fits: so do all of its keys.
			w.merge(x.wants[i], x.sub[i])
			continue
		}
		if !w.visit(w.t.node(x.kids[i])) {
			return false
		}
	}
	return true
}

func (w *groupWalk) fits(key float64) bool {
	return key <= w.start*(1+w.eps)
}

func (w *groupWalk) merge(wants, sub float64) {
	g := &w.out[len(w.out)-1]
	g.Wants += wants
	g.Subclients += sub
}

// add adds a requester with key wants/sub; false when that makes more
// than max groups.
func (w *groupWalk) add(key, wants, sub float64) bool {
	if w.open && w.fits(key) {
		w.merge(wants, sub)
		return true
	}
	if w.n >= w.max {
		return false
	}
	w.n++
	w.out = append(w.out, algorithm.Requester{Wants: wants, Subclients: sub})
	w.start, w.open = key, true
	return true
}
