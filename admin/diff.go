package admin

import (
	"bytes"

	udiff "github.com/aymanbagabas/go-udiff"
)

// unifiedDiff returns the unified diff (diff -u, three lines of context) of a
// and b, line by line, headed "--- aName" and "+++ bName"; "" when they
// are equal. It is github.com/aymanbagabas/go-udiff's (the Go tools'
// diff): a text diff is not Sluice's to write.
func unifiedDiff(aName, bName string, a, b []byte) string {
	if bytes.Equal(a, b) {
		return ""
	}
	return udiff.Unified(aName, bName, string(a), string(b))
}
