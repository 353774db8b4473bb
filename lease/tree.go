package lease

import (
	"math"

	"github.com/sluice-rl/sluice/algorithm"
)

// tree is a treap of a resource's leases ordered by wants per subclient
// (then client id), each node carrying the sums of wants, subclients and
// has of its subtree. It implements algorithm.Demand with O(log n) queries
// and keeps Σ has for the "never more than is free" rule, so a decision
// never walks all clients.
//
// Sums are recomputed from the children on every change, so floating-point
// error does not accumulate over the life of a resource.
type tree struct {
	root *entry
	seed uint64
}

// less orders entries by (wants per subclient, client id).
func less(k1 float64, id1 string, k2 float64, id2 string) bool {
	if k1 != k2 {
		return k1 < k2
	}
	return id1 < id2
}

func (e *entry) update() {
	e.sumWants, e.sumSub, e.sumHas, e.count = e.wants, e.subclients, e.has, 1
	if l := e.left; l != nil {
		e.sumWants += l.sumWants
		e.sumSub += l.sumSub
		e.sumHas += l.sumHas
		e.count += l.count
	}
	if r := e.right; r != nil {
		e.sumWants += r.sumWants
		e.sumSub += r.sumSub
		e.sumHas += r.sumHas
		e.count += r.count
	}
}

// split splits t into the entries ordered before (k, id) and the rest; with
// inclusive set, (k, id) itself goes to the left part.
func split(t *entry, k float64, id string, inclusive bool) (l, r *entry) {
	if t == nil {
		return nil, nil
	}
	goesLeft := less(t.key, t.id, k, id) || (inclusive && t.key == k && t.id == id)
	if goesLeft {
		t.right, r = split(t.right, k, id, inclusive)
		t.update()
		return t, r
	}
	l, t.left = split(t.left, k, id, inclusive)
	t.update()
	return l, t
}

func merge(l, r *entry) *entry {
	switch {
	case l == nil:
		return r
	case r == nil:
		return l
	case l.prio > r.prio:
		l.right = merge(l.right, r)
		l.update()
		return l
	default:
		r.left = merge(l, r.left)
		r.update()
		return r
	}
}

// insert adds e, keyed by its current wants per subclient.
func (t *tree) insert(e *entry) {
	t.seed += 0x9e3779b97f4a7c15
	e.prio = splitmix(t.seed)
	e.key = e.wants / e.subclients
	e.left, e.right = nil, nil
	e.update()
	l, r := split(t.root, e.key, e.id, false)
	t.root = merge(merge(l, e), r)
}

// remove takes e out of the tree.
func (t *tree) remove(e *entry) {
	l, r := split(t.root, e.key, e.id, false)
	_, r = split(r, e.key, e.id, true)
	t.root = merge(l, r)
	e.left, e.right = nil, nil
}

// Totals implements algorithm.Demand.
func (t *tree) Totals() (wants, subclients float64) {
	if t.root == nil {
		return 0, 0
	}
	return t.root.sumWants, t.root.sumSub
}

func (t *tree) sumHas() float64 {
	if t.root == nil {
		return 0
	}
	return t.root.sumHas
}

func (t *tree) count() int {
	if t.root == nil {
		return 0
	}
	return t.root.count
}

// Below implements algorithm.Demand.
func (t *tree) Below(level float64) (wants, subclients float64) {
	for n := t.root; n != nil; {
		if n.key <= level {
			wants += n.wants
			subclients += n.subclients
			if l := n.left; l != nil {
				wants += l.sumWants
				subclients += l.sumSub
			}
			n = n.right
		} else {
			n = n.left
		}
	}
	return wants, subclients
}

// WaterLevel implements algorithm.Demand: it descends the tree to the
// first requester (in order of wants per subclient) that the capacity
// cannot fully satisfy.
func (t *tree) WaterLevel(capacity float64) float64 {
	totalWants, totalSub := t.Totals()
	if totalWants <= capacity {
		return math.Inf(1)
	}
	var accWants, accSub float64
	for n := t.root; n != nil; {
		var lw, ls float64
		if l := n.left; l != nil {
			lw, ls = l.sumWants, l.sumSub
		}
		used := accWants + lw + n.wants + n.key*(totalSub-accSub-ls-n.subclients)
		if used >= capacity {
			n = n.left
		} else {
			accWants += lw + n.wants
			accSub += ls + n.subclients
			n = n.right
		}
	}
	return algorithm.WaterLevelFrom(capacity, accWants, totalSub-accSub)
}

func splitmix(x uint64) uint64 {
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
