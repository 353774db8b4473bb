package server

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestSettingPaths: every Config path a package names through
// Runtime.Setting (names.Setting(…, "Path") or an Auth's setting("Path"))
// is one of FieldNames, so that sluice server's flagOf (checked by
// cmd/sluice's TestFlagOf) has a flag for it.
func TestSettingPaths(t *testing.T) {
	call := regexp.MustCompile(`[sS]etting\((?:[^()"]*, )?"([A-Za-z.]+)"\)`)
	found := 0
	err := filepath.WalkDir("..", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && p != ".." || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range call.FindAllStringSubmatch(string(src), -1) {
			found++
			if !slices.Contains(FieldNames, m[1]) {
				t.Errorf("%s names Config field %q through Setting, but FieldNames lacks it", p, m[1])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found < 10 {
		t.Errorf("found %d Setting calls; the pattern no longer matches the code", found)
	}
}
