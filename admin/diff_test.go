package admin

import (
	"strings"
	"testing"

	"pgregory.net/rapid"
)

func TestDiffExample(t *testing.T) {
	a := "a\nb\nc\nd\ne\nf\ng\nh\ni\nj\nk\n"
	b := "a\nB\nc\nd\ne\nf\ng\nh\ni\nj\nk\nl"
	want := `--- old
+++ new
@@ -1,5 +1,5 @@
 a
-b
+B
 c
 d
 e
@@ -9,3 +9,4 @@
 i
 j
 k
+l
\ No newline at end of file
`
	if got := unifiedDiff("old", "new", []byte(a), []byte(b)); got != want {
		t.Errorf("Diff:\n%s\nwant:\n%s", got, want)
	}
	if got := unifiedDiff("old", "new", []byte(a), []byte(a)); got != "" {
		t.Errorf("Diff of equal texts: %q", got)
	}
	if got := unifiedDiff("old", "new", nil, []byte("x\n")); got != "--- old\n+++ new\n@@ -0,0 +1 @@\n+x\n" {
		t.Errorf("Diff from nothing: %q", got)
	}
}

// applyDiff applies a unified diff (as Diff writes it) to a.
func applyDiff(t *rapid.T, a, diff string) string {
	lines := splitLines(a)
	var out []string
	next := 0 // next line of a to copy
	dl := strings.Split(diff, "\n")
	var last byte
	for i := 2; i < len(dl); i++ {
		l := dl[i]
		if l != "" && l != `\ No newline at end of file` {
			last = l[0]
		}
		switch {
		case strings.HasPrefix(l, "@@ -"):
			var aStart, aN int
			spec := strings.Fields(l)[1][1:]
			if s, n, ok := strings.Cut(spec, ","); ok {
				aStart, aN = atoi(t, s), atoi(t, n)
			} else {
				aStart, aN = atoi(t, spec), 1
			}
			if aN > 0 {
				aStart-- // 1-based
			}
			for next < aStart {
				out = append(out, lines[next])
				next++
			}
		case l == `\ No newline at end of file`:
			if last == '-' {
				continue
			}
			last := len(out) - 1
			out[last] = strings.TrimSuffix(out[last], "\n")
		case strings.HasPrefix(l, " "):
			out = append(out, lines[next])
			next++
		case strings.HasPrefix(l, "-"):
			next++
		case strings.HasPrefix(l, "+"):
			out = append(out, l[1:]+"\n")
		}
	}
	out = append(out, lines[next:]...)
	return strings.Join(out, "")
}

func atoi(t *rapid.T, s string) int {
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			t.Fatalf("bad number %q", s)
		}
		n = n*10 + int(c-'0')
	}
	return n
}

// Applying the diff of a and b to a gives b; the script is no longer than
// a longest-common-subsequence script.
func TestDiffProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		line := rapid.SampledFrom([]string{"a\n", "b\n", "c\n", "d\n", "a", "b"})
		gen := rapid.SliceOfN(line, 0, 30)
		la, lb := gen.Draw(t, "a"), gen.Draw(t, "b")
		fix := func(ls []string) string { // only the last line may lack its newline
			for i := range len(ls) - 1 {
				if !strings.HasSuffix(ls[i], "\n") {
					ls[i] += "\n"
				}
			}
			return strings.Join(ls, "")
		}
		a, b := fix(la), fix(lb)
		d := unifiedDiff("a", "b", []byte(a), []byte(b))
		if a == b {
			if d != "" {
				t.Fatalf("diff of equal texts: %q", d)
			}
			return
		}
		if got := applyDiff(t, a, d); got != b {
			t.Fatalf("applying the diff:\n%s\nto %q gives %q, want %q", d, a, got, b)
		}
	})
}

// A large diff is correct (all out, all in).
func TestDiffLarge(t *testing.T) {
	var a, b strings.Builder
	for i := range 3000 {
		a.WriteString("a" + string(rune('0'+i%10)) + "\n")
		b.WriteString("b" + string(rune('0'+i%10)) + "\n")
	}
	d := unifiedDiff("a", "b", []byte(a.String()), []byte(b.String()))
	if !strings.HasPrefix(d, "--- a\n+++ b\n@@ -1,3000 +1,3000 @@\n-a0\n") || strings.Count(d, "\n+b") != 3000 {
		t.Errorf("large diff: %.200s", d)
	}
}

// splitLines splits s into lines, each with its newline (the last may lack it).
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
