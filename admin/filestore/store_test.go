package filestore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-rl/sluice/admin"
	"github.com/sluice-rl/sluice/admin/filestore"
	"github.com/sluice-rl/sluice/resources"
)

// The file store under an admin.Service: a hand-written file is version 1; changes are new
// versions in the file and in FILE.history/; a hand edit is recorded as a
// version of its own and makes a change against the earlier one stale; a
// new store on the same file (a restart) sees every version; a rollback
// restores a version byte for byte; the history keeps the newest Keep.
func TestStore(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	original := "# hand written\nlimits:\n    resources:\n        api: {domains: {x: {size: 10, fill_rate: 1}}}\n"
	if err := os.WriteFile(path, []byte(original), 0o600); err != nil {
		t.Fatal(err)
	}
	clock := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	open := func() *admin.Service {
		fs, err := filestore.Open(path, filestore.Options{Keep: 5, Now: func() time.Time { return clock }})
		if err != nil {
			t.Fatal(err)
		}
		return admin.New(fs, admin.Options{Now: func() time.Time { return clock }})
	}
	s := open()
	cur, err := s.Config(ctx)
	if err != nil || cur.Version != 1 || cur.Document != original {
		t.Fatalf("Config: %+v %v; want version 1, the file", cur, err)
	}
	for i := 2; i <= 4; i++ {
		res, err := s.Apply(ctx, admin.Change{Op: admin.OpUpdate, Object: admin.Domain("api", "x"), Value: mustJSON(t, fmt.Sprintf(`{"size": %d, "fill_rate": 1}`, i*10)), IfVersion: int64(i - 1), User: "u"})
		if err != nil || res.Version != int64(i) {
			t.Fatalf("change %d: %+v %v", i, res, err)
		}
		if i == 2 && !res.Reformatted {
			t.Error("the first change of a file indented by 4 does not say it reformats it")
		}
	}
	fi, _ := os.Stat(path)
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("the file's mode became %v, want 0600 kept", fi.Mode().Perm())
	}
	// No temporary file is left behind.
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.Contains(e.Name(), ".tmp") {
			t.Errorf("left behind: %s", e.Name())
		}
	}
	// A hand edit: version 5, and a change against 4 is stale.
	edited := strings.Replace(mustRead(t, path), "size: 40", "size: 41", 1)
	if err := os.WriteFile(path, []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = s.Apply(ctx, admin.Change{Op: admin.OpDelete, Object: admin.Domain("api", "x"), IfVersion: 4})
	var ce *admin.ConflictError
	if !errors.As(err, &ce) || ce.Current != 5 {
		t.Fatalf("a change against the version before a hand edit: %v, want a conflict at version 5", err)
	}
	// A restart sees everything.
	s = open()
	h, err := s.History(ctx)
	if err != nil || len(h) != 5 || h[0].Version != 5 || h[0].Op != admin.OpImport || h[1].User != "u" || h[4].Op != admin.OpImport || !h[1].Time.Equal(clock) {
		t.Fatalf("history after a restart: %+v %v", h, err)
	}
	if !strings.Contains(h[0].Diff, "-    api: {domains: {x: {size: 40, fill_rate: 1}}}\n+    api: {domains: {x: {size: 41, fill_rate: 1}}}\n") {
		t.Errorf("the hand edit's diff: %s", h[0].Diff)
	}
	// Rollback to 1: the hand-written file, byte for byte.
	res, err := s.Rollback(ctx, 1, admin.Change{IfVersion: 5, User: "v"})
	if err != nil || res.Version != 6 || res.Op != admin.OpRollback || res.From != 1 {
		t.Fatalf("rollback: %+v %v", res, err)
	}
	if got := mustRead(t, path); got != original {
		t.Errorf("after the rollback the file is\n%s\nwant\n%s", got, original)
	}
	e, err := s.Version(ctx, 6)
	if err != nil || string(e.Document) != original || e.User != "v" || e.From != 1 {
		t.Errorf("version 6: %+v %v", e, err)
	}
	if d, err := s.DiffVersions(ctx, 4, 6); err != nil || !strings.Contains(d, "+        api: {domains: {x: {size: 10, fill_rate: 1}}}\n") {
		t.Errorf("diff 4 6: %q %v", d, err)
	}
	// Keep 5: versions 2 to 6.
	for i := 7; i <= 9; i++ {
		if _, err := s.Apply(ctx, admin.Change{Op: admin.OpUpdate, Object: admin.Domain("api", "x"), Value: mustJSON(t, fmt.Sprintf(`{"size": %d}`, i))}); err != nil {
			t.Fatal(err)
		}
	}
	h, _ = s.History(ctx)
	if len(h) != 5 || h[0].Version != 9 || h[4].Version != 5 {
		t.Errorf("kept: %d versions, %d to %d; want 5 to 9", len(h), h[len(h)-1].Version, h[0].Version)
	}
	if _, err := s.Version(ctx, 4); !errors.Is(err, admin.ErrNotFound) {
		t.Errorf("a dropped version: %v, want admin.ErrNotFound", err)
	}
	if _, err := resources.Load(path); err != nil {
		t.Errorf("the file does not load: %v", err)
	}
}

// A store on a file that does not exist yet: version 0, and a first write
// creates it.
func TestStoreNew(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "new.yaml")
	fs, err := filestore.Open(path, filestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := admin.New(fs, admin.Options{})
	if cur, err := s.Config(ctx); err != nil || cur.Version != 0 {
		t.Fatalf("Config: %+v %v", cur, err)
	}
	res, err := s.Apply(ctx, admin.Change{Op: admin.OpCreate, Object: admin.Resource("api"), Value: mustJSON(t, `{"default": {"size": 1, "fill_rate": 1}}`)})
	if err != nil || res.Version != 1 {
		t.Fatalf("create: %+v %v", res, err)
	}
	if got := mustRead(t, path); got != "limits:\n  resources:\n    api:\n      default:\n        size: 1\n        fill_rate: 1\n" {
		t.Errorf("the new file:\n%s", got)
	}
	link := filepath.Join(t.TempDir(), "link.yaml")
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	if _, err := filestore.Open(link, filestore.Options{}); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("Open of a symbolic link: %v", err)
	}
}

func mustJSON(t testing.TB, s string) *yaml.Node {
	t.Helper()
	n, err := admin.DecodeBody([]byte(s), "application/json")
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func mustRead(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
