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
// Nodes live in an arena and refer to each other and to the resource's
// entries by index (see store.go): the tree holds no pointer the garbage
// collector would scan. A leaf keeps no keys (an entry's key is its wants
// over its subclients, computed from the slot when needed); the keys and
// counts of an inner node are in a record of their own (innerSlots).
//
// The zero value, given ents, is an empty tree with the default fanout.
type tree struct {
	ents   *entries // the resource's entries
	root   int32    // 0: empty
	fanout int      // slots per node; 0 means maxFanout (tests use small ones)
	nodes  arena[node]
	inner  arena[innerSlots]
	spare  []int32 // emptied nodes, reused by splits

	// The root's totals, computed when first asked for after a change.
	dirty           bool
	wants, sub, has float64
	entries         int
}

// newTree returns an empty tree of the entries in ents.
func newTree(ents *entries, fanout int) tree {
	return tree{
		ents: ents, fanout: fanout,
		nodes: arena[node]{first: 1, last: 6},
		inner: arena[innerSlots]{first: 0, last: 6},
	}
}

// node is a tree node. In a leaf, slot i is one entry (kids[i] its index);
// in an inner node, slot i summarises child kids[i], and its innerSlots
// hold the child's largest key and number of entries.
type node struct {
	self   int32 // this node's index
	parent int32 // 0: the root
	pos    int32 // index of this node's slot in parent
	n      int32
	in     int32 // inner nodes: the index of their innerSlots (0: none yet)
	leaf   bool
	wants  [maxFanout]float64
	sub    [maxFanout]float64
	has    [maxFanout]float64
	kids   [maxFanout]int32 // leaf: entries; inner node: nodes
}

// innerSlots is what an inner node keeps beyond a leaf's slots.
type innerSlots struct {
	key   [maxFanout]float64 // the child's largest key
	count [maxFanout]int32   // entries below the child
}

func (t *tree) width() int {
	if t.fanout >= 3 && t.fanout <= maxFanout {
		return t.fanout
	}
	return maxFanout
}

// node returns node i.
func (t *tree) node(i int32) *node {
	c, off := locate(t.nodes.first, t.nodes.last, i)
	return &t.nodes.chunks[c][off]
}

// inn returns inner node x's keys and counts.
func (t *tree) inn(x *node) *innerSlots {
	c, off := locate(t.inner.first, t.inner.last, x.in)
	return &t.inner.chunks[c][off]
}

// key returns the key of slot i of x: in a leaf the entry's wants per
// subclient (exactly the key it was inserted with: the slot holds the
// entry's wants and subclients), in an inner node the child's largest.
func (t *tree) key(x *node, i int) float64 {
	if x.leaf {
		return x.wants[i] / x.sub[i]
	}
	return t.inn(x).key[i]
}

// lastKey returns x's largest key.
func (t *tree) lastKey(x *node) float64 { return t.key(x, int(x.n)-1) }

// totals returns the sums over all of n's slots.
func (t *tree) nodeTotals(n *node) (wants, sub, has float64, count int) {
	wants, sub, has = sum(n.wants[:n.n]), sum(n.sub[:n.n]), sum(n.has[:n.n])
	if n.leaf {
		return wants, sub, has, int(n.n)
	}
	for _, c := range t.inn(n).count[:n.n] {
		count += int(c)
	}
	return wants, sub, has, count
}

// setSlot makes slot i of inner node p summarise child c.
func (t *tree) setSlot(p *node, i int, c *node) {
	p.kids[i] = c.self
	c.parent, c.pos = p.self, int32(i)
	in := t.inn(p)
	in.key[i] = t.lastKey(c)
	var count int
	p.wants[i], p.sub[i], p.has[i], count = t.nodeTotals(c)
	in.count[i] = int32(count)
}

// setEntry makes slot i of leaf l hold entry ei.
func (t *tree) setEntry(l *node, i int, ei int32) {
	e := t.ents.at(ei)
	l.kids[i] = ei
	e.leaf = l.self
	l.wants[i], l.sub[i], l.has[i] = e.wants, e.subclients, e.has
}

// slot returns the index of entry ei in its leaf.
func (t *tree) slot(ei int32) int {
	l := t.node(t.ents.at(ei).leaf)
	for i := 0; i < int(l.n); i++ {
		if l.kids[i] == ei {
			return i
		}
	}
	panic("lease: tree entry not found in its leaf")
}

// adjustUp updates the summaries of x's ancestors after e joined (sign
// +1) or left (sign -1) the entries below x: Σ wants, Σ subclients and the
// count change by e's, the largest key and (unless e holds nothing) Σ has
// are recomputed from the node below.
func (t *tree) adjustUp(x *node, e *entry, sign int) {
	dw, ds := float64(sign)*e.wants, float64(sign)*e.subclients
	for x.parent != 0 {
		p := t.node(x.parent)
		t.adjust(p, x, dw, ds, sign, e.has != 0)
		x = p
	}
}

// adjust updates p's slot for child x by the given deltas.
func (t *tree) adjust(p, x *node, dw, ds float64, dc int, has bool) {
	i := x.pos
	in := t.inn(p)
	p.wants[i] += dw
	p.sub[i] += ds
	in.count[i] += int32(dc)
	in.key[i] = t.lastKey(x)
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
func (t *tree) moveSlots(dst *node, at int, src *node, from, k int) {
	for j := 0; j < k; j++ {
		if src.leaf {
			t.setEntry(dst, at+j, src.kids[from+j])
		} else {
			t.setSlot(dst, at+j, t.node(src.kids[from+j]))
		}
	}
}

// shift moves slots [i, n) of x by d places (d = ±1) within x.
func (t *tree) shift(x *node, i, d int) {
	n := int(x.n)
	if d > 0 {
		copy(x.wants[i+1:n+1], x.wants[i:n])
		copy(x.sub[i+1:n+1], x.sub[i:n])
		copy(x.has[i+1:n+1], x.has[i:n])
		copy(x.kids[i+1:n+1], x.kids[i:n])
		if !x.leaf {
			in := t.inn(x)
			copy(in.key[i+1:n+1], in.key[i:n])
			copy(in.count[i+1:n+1], in.count[i:n])
			t.renumber(x, i+1, n+1)
		}
		return
	}
	copy(x.wants[i-1:], x.wants[i:n])
	copy(x.sub[i-1:], x.sub[i:n])
	copy(x.has[i-1:], x.has[i:n])
	copy(x.kids[i-1:], x.kids[i:n])
	x.kids[n-1] = 0
	if !x.leaf {
		in := t.inn(x)
		copy(in.key[i-1:], in.key[i:n])
		copy(in.count[i-1:], in.count[i:n])
		t.renumber(x, i-1, n-1)
	}
}

// renumber records the slot index of the children in slots [from, to) of
// inner node x.
func (t *tree) renumber(x *node, from, to int) {
	for j := from; j < to; j++ {
		t.node(x.kids[j]).pos = int32(j)
	}
}

// insert adds entry ei, keyed by its current wants per subclient.
func (t *tree) insert(ei int32) {
	t.dirty = true
	e := t.ents.at(ei)
	key := e.wants / e.subclients
	if t.root == 0 {
		t.root = t.newNode(true).self
	}
	// Descend to the leaf whose range takes e: the first child whose
	// largest key is not below e's, or the last child; in it, go after
	// the keys up to e's.
	x := t.node(t.root)
	for !x.leaf {
		in := t.inn(x)
		i := 0
		for i < int(x.n)-1 && in.key[i] < key {
			i++
		}
		x = t.node(x.kids[i])
	}
	i := 0
	for i < int(x.n) && x.wants[i]/x.sub[i] <= key {
		i++
	}
	t.shift(x, i, 1)
	x.n++
	t.setEntry(x, i, ei)
	t.splitIfFull(x, e)
}

// splitIfFull splits x, which e has just joined, in two when it has
// reached the fanout, and so on up; then it updates the summaries above.
func (t *tree) splitIfFull(x *node, e *entry) {
	for int(x.n) >= t.width() {
		right := t.newNode(x.leaf)
		half := int(x.n) / 2
		t.moveSlots(right, 0, x, half, int(x.n)-half)
		right.n = x.n - int32(half)
		clear(x.kids[half:x.n])
		x.n = int32(half)
		var p *node
		if x.parent == 0 {
			p = t.newNode(false)
			t.root = p.self
			p.n = 1
			t.setSlot(p, 0, x)
		} else {
			p = t.node(x.parent)
		}
		i := int(x.pos)
		t.shift(p, i+1, 1)
		p.n++
		t.setSlot(p, i, x)
		t.setSlot(p, i+1, right)
		x = p
	}
	t.adjustUp(x, e, +1)
}

// newNode returns an empty node, reusing a spare one if there is one.
func (t *tree) newNode(leaf bool) *node {
	var x *node
	if n := len(t.spare); n > 0 {
		x = t.node(t.spare[n-1])
		t.spare = t.spare[:n-1]
	} else {
		i := t.nodes.add()
		x = t.node(i)
		x.self = i
	}
	x.leaf = leaf
	if !leaf && x.in == 0 {
		x.in = t.inner.add()
	}
	return x
}

// recycle keeps a node that left the tree for reuse (a few of them: splits
// and merges come in waves as requesters' keys move). A node not kept is
// lost to the arena (it never shrinks), which has room for the tree at its
// largest.
func (t *tree) recycle(x *node) {
	clear(x.kids[:])
	x.parent, x.n = 0, 0
	t.spare = append(t.spare, x.self)
}

// remove takes entry ei out of the tree.
func (t *tree) remove(ei int32) {
	e := t.ents.at(ei)
	x := t.node(e.leaf)
	t.shift(x, t.slot(ei)+1, -1)
	x.n--
	e.leaf = 0
	// A node left with a quarter of the fanout or less merges into a
	// neighbour when both fit in three quarters of it; otherwise the
	// sparse node stays next to a neighbour more than half full, which
	// keeps the depth logarithmic. Only sparse nodes look at a neighbour.
	t.dirty = true
	dw, ds := -e.wants, -e.subclients
	for x.parent != 0 {
		p := t.node(x.parent)
		i := int(x.pos)
		if x.n == 0 {
			t.shift(p, i+1, -1)
			p.n--
			t.recycle(x)
			x = p
			continue
		}
		if int(x.n) <= t.width()/4 && p.n > 1 {
			j := i + 1
			if i > 0 && (j >= int(p.n) || t.node(p.kids[i-1]).n < t.node(p.kids[j]).n) {
				j = i - 1
			}
			if nb := t.node(p.kids[j]); int(x.n+nb.n) <= t.width()*3/4 {
				left, right := x, nb
				if j < i {
					left, right = right, x
					i = j
				}
				t.moveSlots(left, int(left.n), right, 0, int(right.n))
				left.n += right.n
				t.shift(p, i+2, -1)
				p.n--
				t.setSlot(p, i, left)
				t.recycle(right)
				x = p
				continue
			}
		}
		t.adjust(p, x, dw, ds, -1, e.has != 0)
		x = p
	}
	// The root: drop an empty tree, collapse an inner root of one child.
	for t.root != 0 {
		old := t.node(t.root)
		if old.leaf || old.n != 1 {
			break
		}
		t.root = old.kids[0]
		t.node(t.root).parent = 0
		t.recycle(old)
	}
	if t.root != 0 && t.node(t.root).n == 0 {
		t.recycle(t.node(t.root))
		t.root = 0
	}
}

// setHas records entry ei's new has without moving it: one leaf slot
// changes and the Σ has summaries above it are recomputed.
func (t *tree) setHas(ei int32, has float64) {
	t.dirty = true
	e := t.ents.at(ei)
	e.has = has
	x := t.node(e.leaf)
	x.has[t.slot(ei)] = has
	for x.parent != 0 {
		p := t.node(x.parent)
		p.has[x.pos] = sum(x.has[:x.n])
		x = p
	}
}

// hasExcept returns Σ has over every entry but ei, summed afresh from the
// slots along its path (exact to rounding, no accumulated error).
func (t *tree) hasExcept(ei int32) float64 {
	var total float64
	skip := t.slot(ei)
	x := t.node(t.ents.at(ei).leaf)
	for {
		total += sum(x.has[:skip]) + sum(x.has[skip+1:x.n])
		if x.parent == 0 {
			return total
		}
		skip, x = int(x.pos), t.node(x.parent)
	}
}

// totals returns the sums over the whole tree, computing them once after
// each change.
func (t *tree) totals() (wants, sub, has float64, count int) {
	if t.dirty {
		t.dirty = false
		t.wants, t.sub, t.has, t.entries = 0, 0, 0, 0
		if t.root != 0 {
			t.wants, t.sub, t.has, t.entries = t.nodeTotals(t.node(t.root))
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
	for xi := t.root; xi != 0; {
		x := t.node(xi)
		i := 0
		for i < int(x.n) && t.key(x, i) <= level {
			wants += x.wants[i]
			subclients += x.sub[i]
			i++
		}
		if x.leaf || i == int(x.n) {
			break
		}
		xi = x.kids[i]
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
	for xi := t.root; xi != 0; {
		x := t.node(xi)
		i := 0
		for ; i < int(x.n); i++ {
			used := accWants + x.wants[i] + t.key(x, i)*(totalSub-accSub-x.sub[i])
			if used >= capacity {
				break
			}
			accWants += x.wants[i]
			accSub += x.sub[i]
		}
		if x.leaf || i == int(x.n) {
			break
		}
		xi = x.kids[i]
	}
	return algorithm.WaterLevelFrom(capacity, accWants, totalSub-accSub)
}

// check verifies the tree's structure and summaries (tests only). It
// returns a description of the first problem found, or "".
func (t *tree) check() string {
	if t.root == 0 {
		return ""
	}
	if t.node(t.root).parent != 0 {
		return "root has a parent"
	}
	var prevKey float64
	first := true
	var walk func(x *node, depth int) (int, string)
	walk = func(x *node, depth int) (int, string) {
		if x.n == 0 || int(x.n) >= t.width() {
			return 0, "node with bad slot count"
		}
		if x.leaf {
			for i := 0; i < int(x.n); i++ {
				e := t.ents.at(x.kids[i])
				key := e.wants / e.subclients
				if e.leaf != x.self || e.subclients != x.sub[i] || e.has != x.has[i] || e.wants != x.wants[i] {
					return 0, "leaf slot out of sync with its entry"
				}
				if !first && key < prevKey {
					return 0, "leaf keys out of order"
				}
				prevKey, first = key, false
			}
			return depth, ""
		}
		leafDepth := -1
		for i := 0; i < int(x.n); i++ {
			c := t.node(x.kids[i])
			if c.parent != x.self || int(c.pos) != i {
				return 0, "child with wrong parent or position"
			}
			w, s, h, n := t.nodeTotals(c)
			if !near(w, x.wants[i]) || !near(s, x.sub[i]) || !near(h, x.has[i]) || n != int(t.inn(x).count[i]) ||
				t.lastKey(c) != t.key(x, i) {
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
	_, msg := walk(t.node(t.root), 0)
	return msg
}

// near reports whether a and b agree to rounding error.
func near(a, b float64) bool {
	return math.Abs(a-b) <= 1e-9*math.Max(1, math.Max(math.Abs(a), math.Abs(b)))
}
