package admin

import (
	"fmt"
	"strings"
)

// maxDiffEdits bounds the edit distance the diff searches for a shortest
// edit script (memory grows with its square); past it, the differing
// middle of the two texts is shown as removed, then added: a correct
// diff, not a minimal one.
const maxDiffEdits = 2000

// diffContext is the number of unchanged lines around each change.
const diffContext = 3

// Diff returns the unified diff (diff -u, three lines of context) of a
// and b, line by line, headed "--- aName" and "+++ bName"; "" when they
// are equal. It finds a shortest edit script (Myers' O(ND) algorithm) for
// up to 2000 edits.
func Diff(aName, bName string, a, b []byte) string {
	if string(a) == string(b) {
		return ""
	}
	al, bl := splitLines(string(a)), splitLines(string(b))
	ops := diffLines(al, bl)
	var out strings.Builder
	fmt.Fprintf(&out, "--- %s\n+++ %s\n", aName, bName)
	// Hunks: runs of changes with up to 2*context equal lines between.
	i := 0
	for i < len(ops) {
		for i < len(ops) && ops[i].kind == opEqual {
			i++
		}
		if i == len(ops) {
			break
		}
		start := max(0, i-diffContext)
		end := i
		for end < len(ops) {
			if ops[end].kind != opEqual {
				end++
				continue
			}
			j := end
			for j < len(ops) && ops[j].kind == opEqual {
				j++
			}
			if j == len(ops) || j-end > 2*diffContext {
				end = min(j, end+diffContext)
				break
			}
			end = j
		}
		writeHunk(&out, ops[start:end])
		i = end
	}
	return out.String()
}

type opKind byte

const (
	opEqual  opKind = ' '
	opDelete opKind = '-'
	opInsert opKind = '+'
)

type diffOp struct {
	kind opKind
	text string // the line, with its newline if it had one
	a, b int    // 0-based line numbers in a and b before this op
}

func writeHunk(out *strings.Builder, ops []diffOp) {
	aStart, bStart := ops[0].a, ops[0].b
	var aN, bN int
	for _, op := range ops {
		if op.kind != opInsert {
			aN++
		}
		if op.kind != opDelete {
			bN++
		}
	}
	fmt.Fprintf(out, "@@ -%s +%s @@\n", hunkRange(aStart, aN), hunkRange(bStart, bN))
	for _, op := range ops {
		out.WriteByte(byte(op.kind))
		out.WriteString(op.text)
		if !strings.HasSuffix(op.text, "\n") {
			out.WriteString("\n\\ No newline at end of file\n")
		}
	}
}

func hunkRange(start, n int) string {
	switch n {
	case 0:
		return fmt.Sprintf("%d,0", start)
	case 1:
		return fmt.Sprintf("%d", start+1)
	}
	return fmt.Sprintf("%d,%d", start+1, n)
}

// splitLines splits s after each newline; the last line may lack one.
func splitLines(s string) []string {
	var out []string
	for s != "" {
		i := strings.IndexByte(s, '\n')
		if i < 0 {
			out = append(out, s)
			break
		}
		out = append(out, s[:i+1])
		s = s[i+1:]
	}
	return out
}

// diffLines returns an edit script turning a into b.
func diffLines(a, b []string) []diffOp {
	var ops []diffOp
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		ops = append(ops, diffOp{opEqual, a[pre], pre, pre})
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	ma, mb := a[pre:len(a)-suf], b[pre:len(b)-suf]
	mid := myers(ma, mb)
	if mid == nil { // too many edits: all of the middle out, all in
		for i, l := range ma {
			mid = append(mid, diffOp{opDelete, l, i, 0})
		}
		for j, l := range mb {
			mid = append(mid, diffOp{opInsert, l, len(ma), j})
		}
	}
	for _, op := range mid {
		op.a += pre
		op.b += pre
		ops = append(ops, op)
	}
	for k := suf; k > 0; k-- {
		i, j := len(a)-k, len(b)-k
		ops = append(ops, diffOp{opEqual, a[i], i, j})
	}
	return ops
}

// myers returns a shortest edit script from a to b, or nil (for a
// non-empty difference) when it takes more than maxDiffEdits edits.
func myers(a, b []string) []diffOp {
	n, m := len(a), len(b)
	if n == 0 && m == 0 {
		return []diffOp{}
	}
	limit := min(n+m, maxDiffEdits)
	off := limit + 1
	v := make([]int, 2*limit+3)
	var trace [][]int // trace[d][k+d]: the furthest x on diagonal k after d edits
	found := -1
	for d := 0; d <= limit && found < 0; d++ {
		for k := -d; k <= d; k += 2 {
			var x int
			if k == -d || k != d && v[off+k-1] < v[off+k+1] {
				x = v[off+k+1]
			} else {
				x = v[off+k-1] + 1
			}
			y := x - k
			for x < n && y < m && a[x] == b[y] {
				x, y = x+1, y+1
			}
			v[off+k] = x
			if x >= n && y >= m {
				found = d
			}
		}
		snap := make([]int, 2*d+1)
		copy(snap, v[off-d:off+d+1])
		trace = append(trace, snap)
	}
	if found < 0 {
		return nil
	}
	var rev []diffOp
	x, y := n, m
	for d := found; d > 0; d-- {
		prev := trace[d-1] // prev[k+d-1]
		at := func(k int) int { return prev[k+d-1] }
		k := x - y
		var pk int
		if k == -d || k != d && at(k-1) < at(k+1) {
			pk = k + 1
		} else {
			pk = k - 1
		}
		px := at(pk)
		py := px - pk
		for x > px && y > py {
			x, y = x-1, y-1
			rev = append(rev, diffOp{opEqual, a[x], x, y})
		}
		if x == px {
			y--
			rev = append(rev, diffOp{opInsert, b[y], x, y})
		} else {
			x--
			rev = append(rev, diffOp{opDelete, a[x], x, y})
		}
	}
	for x > 0 && y > 0 {
		x, y = x-1, y-1
		rev = append(rev, diffOp{opEqual, a[x], x, y})
	}
	out := make([]diffOp, len(rev))
	for i, op := range rev {
		out[len(rev)-1-i] = op
	}
	return out
}
