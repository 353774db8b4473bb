package lease

import (
	"math"

	"github.com/sluice-rl/sluice/algorithm"
)

// maxFanout is the most slots a tree node has. 32 slots of each per-slot
// array fit in four cache lines, so a node is scanned with a few memory
// reads and a tree of 100 000 leases is three or four nodes deep.
const maxFanout = 32

// tree is an augmented B+tree of a resource's leases, ordered by wants per
// subclient (equal keys in no particular order; a new one joins the first
// leaf that can take it, which keeps recently used leaves hot). Every
// slot carries the sums of wants, subclients and has below it, so the
// queries the algorithms need (algorithm.Demand) and Σ has cost
// O(fanout × depth) = O(log n) and read memory mostly sequentially; a
// decision never walks all clients.
//
// Σ has, which guards "never more than is free", is recomputed from a
// node's slots whenever it changes, so floating-point error cannot
// accumulate in it (an entry that holds nothing changes no Σ has). Σ wants, Σ subclients and counts are adjusted by
// deltas on the path of a change (they only steer how capacity is shared)
// and recomputed whenever a node splits or merges.
//
// The zero value is an empty tree with the default fanout.
type tree struct {
	root   *node
	fanout int     // slots per node; 0 means maxFanout (tests use small ones)
	spare  []*node // emptied nodes, reused by splits

	// The root's totals, computed when first asked for after a change.
	dirty           bool
	wants, sub, has float64
	entries         int
}

// node is a tree node. In a leaf, slot i is one entry; in an inner node,
// slot i summarises child i, and key holds the child's largest key.
type node struct {
	parent *node
	pos    int // index of this node's slot in parent
	leaf   bool
	n      int
	key    [maxFanout]float64
	wants  [maxFanout]float64
	sub    [maxFanout]float64
	has    [maxFanout]float64
	count  [maxFanout]int    // inner node: entries below each child
	ents   [maxFanout]*entry // leaf
	kids   [maxFanout]*node  // inner node
}

func (t *tree) width() int {
	if t.fanout >= 3 && t.fanout <= maxFanout {
		return t.fanout
	}
	return maxFanout
}

// totals returns the sums over all of n's slots.
func (n *node) totals() (wants, sub, has float64, count int) {
	wants, sub, has = sum(n.wants[:n.n]), sum(n.sub[:n.n]), sum(n.has[:n.n])
	if n.leaf {
		return wants, sub, has, n.n
	}
	for _, c := range n.count[:n.n] {
		count += c
	}
	return wants, sub, has, count
}

// setSlot makes slot i of inner node p summarise child c.
func (p *node) setSlot(i int, c *node) {
	p.kids[i] = c
	c.parent, c.pos = p, i
	p.key[i] = c.key[c.n-1]
	p.wants[i], p.sub[i], p.has[i], p.count[i] = c.totals()
}

// setEntry makes slot i of leaf l hold e.
func (l *node) setEntry(i int, e *entry) {
	l.ents[i] = e
	e.leaf = l
	l.key[i] = e.key
	l.wants[i], l.sub[i], l.has[i] = e.wants, e.subclients, e.has
}

// slotOf returns the index of child c in inner node p.
func (p *node) slotOf(c *node) int { return c.pos }

// entrySlot returns the index of e in its leaf.
func (e *entry) slot() int {
	l := e.leaf
	for i := 0; i < l.n; i++ {
		if l.ents[i] == e {
			return i
		}
	}
	panic("lease: tree entry not found in its leaf")
}

// adjustUp updates the summaries of x's ancestors after e joined (sign
// +1) or left (sign -1) the entries below x: Σ wants, Σ subclients and the
// count change by e's, the largest key and (unless e holds nothing) Σ has
// are recomputed from the node below.
func adjustUp(x *node, e *entry, sign int) {
	dw, ds := float64(sign)*e.wants, float64(sign)*e.subclients
	for p := x.parent; p != nil; x, p = p, p.parent {
		p.adjust(x, dw, ds, sign, e.has != 0)
	}
}

// adjust updates p's slot for child x by the given deltas.
func (p *node) adjust(x *node, dw, ds float64, dc int, has bool) {
	i := x.pos
	p.wants[i] += dw
	p.sub[i] += ds
	p.count[i] += dc
	p.key[i] = x.key[x.n-1]
	if has {
		p.has[i] = sum(x.has[:x.n])
	}
}

// sum returns Σ xs. It adds in four independent chains, which is several
// times faster than one chain of dependent additions; the result depends
// only on xs, never on earlier sums.
func sum(xs []float64) float64 {
	var a, b, c, d float64
	for len(xs) >= 4 {
		a += xs[0]
		b += xs[1]
		c += xs[2]
		d += xs[3]
		xs = xs[4:]
	}
	for _, x := range xs {
		a += x
	}
	return (a + b) + (c + d)
}

// moveSlots copies slots [from, from+k) of src into dst at index at,
// re-parenting what moves.
func moveSlots(dst *node, at int, src *node, from, k int) {
	for j := 0; j < k; j++ {
		if src.leaf {
			dst.setEntry(at+j, src.ents[from+j])
		} else {
			dst.setSlot(at+j, src.kids[from+j])
		}
	}
}

// shift moves slots [i, n) of x by d places (d = ±1) within x.
func (x *node) shift(i, d int) {
	if d > 0 {
		copy(x.key[i+1:x.n+1], x.key[i:x.n])
		copy(x.wants[i+1:x.n+1], x.wants[i:x.n])
		copy(x.sub[i+1:x.n+1], x.sub[i:x.n])
		copy(x.has[i+1:x.n+1], x.has[i:x.n])
		if x.leaf {
			copy(x.ents[i+1:x.n+1], x.ents[i:x.n])
		} else {
			copy(x.count[i+1:x.n+1], x.count[i:x.n])
			copy(x.kids[i+1:x.n+1], x.kids[i:x.n])
			x.renumber(i+1, x.n+1)
		}
		return
	}
	copy(x.key[i-1:], x.key[i:x.n])
	copy(x.wants[i-1:], x.wants[i:x.n])
	copy(x.sub[i-1:], x.sub[i:x.n])
	copy(x.has[i-1:], x.has[i:x.n])
	if x.leaf {
		copy(x.ents[i-1:], x.ents[i:x.n])
		x.ents[x.n-1] = nil
	} else {
		copy(x.count[i-1:], x.count[i:x.n])
		copy(x.kids[i-1:], x.kids[i:x.n])
		x.kids[x.n-1] = nil
		x.renumber(i-1, x.n-1)
	}
}

// renumber records the slot index of the children in slots [from, to) of
// inner node x.
func (x *node) renumber(from, to int) {
	for j := from; j < to; j++ {
		x.kids[j].pos = j
	}
}

// insert adds e, keyed by its current wants per subclient.
func (t *tree) insert(e *entry) {
	t.dirty = true
	e.key = e.wants / e.subclients
	if t.root == nil {
		t.root = &node{leaf: true}
	}
	// Descend to the leaf whose range takes e: the first child whose
	// largest key is not below e's, or the last child; in it, go after
	// the keys up to e's.
	x := t.root
	for !x.leaf {
		i := 0
		for i < x.n-1 && x.key[i] < e.key {
			i++
		}
		x = x.kids[i]
	}
	i := 0
	for i < x.n && x.key[i] <= e.key {
		i++
	}
	x.shift(i, 1)
	x.n++
	x.setEntry(i, e)
	t.splitIfFull(x, e)
}

// splitIfFull splits x, which e has just joined, in two when it has
// reached the fanout, and so on up; then it updates the summaries above.
func (t *tree) splitIfFull(x *node, e *entry) {
	for x.n >= t.width() {
		right := t.newNode(x.leaf)
		half := x.n / 2
		moveSlots(right, 0, x, half, x.n-half)
		right.n = x.n - half
		for j := half; j < x.n; j++ {
			x.ents[j], x.kids[j] = nil, nil
		}
		x.n = half
		p := x.parent
		if p == nil {
			p = t.newNode(false)
			t.root = p
			p.n = 1
			p.setSlot(0, x)
		}
		i := p.slotOf(x)
		p.shift(i+1, 1)
		p.n++
		p.setSlot(i, x)
		p.setSlot(i+1, right)
		x = p
	}
	adjustUp(x, e, +1)
}

// newNode returns an empty node, reusing a spare one if there is one.
func (t *tree) newNode(leaf bool) *node {
	if n := len(t.spare); n > 0 {
		x := t.spare[n-1]
		t.spare = t.spare[:n-1]
		x.leaf = leaf
		return x
	}
	return &node{leaf: leaf}
}

// recycle keeps a node that left the tree for reuse (a few of them: splits
// and merges come in waves as requesters' keys move).
func (t *tree) recycle(x *node) {
	if len(t.spare) >= 16 {
		return
	}
	clear(x.ents[:])
	clear(x.kids[:])
	x.parent, x.n = nil, 0
	t.spare = append(t.spare, x)
}

// remove takes e out of the tree.
func (t *tree) remove(e *entry) {
	x := e.leaf
	x.shift(e.slot()+1, -1)
	x.n--
	e.leaf = nil
	// A node left with a quarter of the fanout or less merges into a
	// neighbour when both fit in three quarters of it; otherwise the
	// sparse node stays next to a neighbour more than half full, which
	// keeps the depth logarithmic. Only sparse nodes look at a neighbour.
	t.dirty = true
	dw, ds := -e.wants, -e.subclients
	for p := x.parent; p != nil; x, p = p, p.parent {
		i := x.pos
		if x.n == 0 {
			p.shift(i+1, -1)
			p.n--
			t.recycle(x)
			continue
		}
		if x.n <= t.width()/4 && p.n > 1 {
			j := i + 1
			if i > 0 && (j >= p.n || p.kids[i-1].n < p.kids[j].n) {
				j = i - 1
			}
			if x.n+p.kids[j].n <= t.width()*3/4 {
				left, right := x, p.kids[j]
				if j < i {
					left, right = right, x
					i = j
				}
				moveSlots(left, left.n, right, 0, right.n)
				left.n += right.n
				p.shift(i+2, -1)
				p.n--
				p.setSlot(i, left)
				t.recycle(right)
				continue
			}
		}
		p.adjust(x, dw, ds, -1, e.has != 0)
	}
	// The root: drop an empty tree, collapse an inner root of one child.
	for t.root != nil && !t.root.leaf && t.root.n == 1 {
		old := t.root
		t.root = old.kids[0]
		t.root.parent = nil
		t.recycle(old)
	}
	if t.root != nil && t.root.n == 0 {
		t.root = nil
	}
}

// setHas records e's new has without moving it: one leaf slot changes and
// the Σ has summaries above it are recomputed.
func (t *tree) setHas(e *entry, has float64) {
	t.dirty = true
	e.has = has
	x := e.leaf
	x.has[e.slot()] = has
	for p := x.parent; p != nil; x, p = p, p.parent {
		p.has[x.pos] = sum(x.has[:x.n])
	}
}

// hasExcept returns Σ has over every entry but e, summed afresh from the
// slots along e's path (exact to rounding, no accumulated error).
func (t *tree) hasExcept(e *entry) float64 {
	var total float64
	skip := e.slot()
	x := e.leaf
	for {
		total += sum(x.has[:skip]) + sum(x.has[skip+1:x.n])
		p := x.parent
		if p == nil {
			return total
		}
		skip, x = x.pos, p
	}
}

// totals returns the sums over the whole tree, computing them once after
// each change.
func (t *tree) totals() (wants, sub, has float64, count int) {
	if t.dirty {
		t.dirty = false
		t.wants, t.sub, t.has, t.entries = 0, 0, 0, 0
		if t.root != nil {
			t.wants, t.sub, t.has, t.entries = t.root.totals()
		}
	}
	return t.wants, t.sub, t.has, t.entries
}

// Totals implements algorithm.Demand.
func (t *tree) Totals() (wants, subclients float64) {
	w, s, _, _ := t.totals()
	return w, s
}

func (t *tree) sumHas() float64 {
	_, _, h, _ := t.totals()
	return h
}

func (t *tree) count() int {
	_, _, _, c := t.totals()
	return c
}

// Below implements algorithm.Demand.
func (t *tree) Below(level float64) (wants, subclients float64) {
	for x := t.root; x != nil; {
		i := 0
		for i < x.n && x.key[i] <= level {
			wants += x.wants[i]
			subclients += x.sub[i]
			i++
		}
		if x.leaf || i == x.n {
			break
		}
		x = x.kids[i]
	}
	return wants, subclients
}

// WaterLevel implements algorithm.Demand: it descends to the first
// requester (in order of wants per subclient) that the capacity cannot
// fully satisfy. With the requesters in key order, the capacity used if
// everyone up to and including requester i were satisfied and everyone
// after it got i's level is non-decreasing in i, so the first slot where it
// reaches the capacity contains that requester.
func (t *tree) WaterLevel(capacity float64) float64 {
	totalWants, totalSub := t.Totals()
	if totalWants <= capacity {
		return math.Inf(1)
	}
	var accWants, accSub float64
	for x := t.root; x != nil; {
		i := 0
		for ; i < x.n; i++ {
			used := accWants + x.wants[i] + x.key[i]*(totalSub-accSub-x.sub[i])
			if used >= capacity {
				break
			}
			accWants += x.wants[i]
			accSub += x.sub[i]
		}
		if x.leaf || i == x.n {
			break
		}
		x = x.kids[i]
	}
	return algorithm.WaterLevelFrom(capacity, accWants, totalSub-accSub)
}

// check verifies the tree's structure and summaries (tests only). It
// returns a description of the first problem found, or "".
func (t *tree) check() string {
	if t.root == nil {
		return ""
	}
	if t.root.parent != nil {
		return "root has a parent"
	}
	var prevKey float64
	first := true
	var walk func(x *node, depth int) (int, string)
	walk = func(x *node, depth int) (int, string) {
		if x.n == 0 || x.n >= t.width() {
			return 0, "node with bad slot count"
		}
		if x.leaf {
			for i := 0; i < x.n; i++ {
				e := x.ents[i]
				if e.leaf != x || e.key != x.key[i] || e.has != x.has[i] || e.wants != x.wants[i] {
					return 0, "leaf slot out of sync with its entry"
				}
				if !first && e.key < prevKey {
					return 0, "leaf keys out of order"
				}
				prevKey, first = e.key, false
			}
			return depth, ""
		}
		leafDepth := -1
		for i := 0; i < x.n; i++ {
			c := x.kids[i]
			if c.parent != x || c.pos != i {
				return 0, "child with wrong parent or position"
			}
			w, s, h, n := c.totals()
			if !near(w, x.wants[i]) || !near(s, x.sub[i]) || !near(h, x.has[i]) || n != x.count[i] ||
				c.key[c.n-1] != x.key[i] {
				return 0, "inner slot out of sync with its child"
			}
			d, msg := walk(c, depth+1)
			if msg != "" {
				return 0, msg
			}
			if leafDepth >= 0 && d != leafDepth {
				return 0, "leaves at different depths"
			}
			leafDepth = d
		}
		return leafDepth, ""
	}
	_, msg := walk(t.root, 0)
	return msg
}

// near reports whether a and b agree to rounding error.
func near(a, b float64) bool {
	return math.Abs(a-b) <= 1e-9*math.Max(1, math.Max(math.Abs(a), math.Abs(b)))
}
