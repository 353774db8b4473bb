package filestore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	udiff "github.com/aymanbagabas/go-udiff"

	"github.com/sluice-rl/sluice/admin"
)

// Store is the admin.Store of a file: it keeps the resource repository's
// document in the file (what `sluice server --config FILE` reads and
// watches) and its history in the sibling directory FILE.history/:
// version N is N.yaml (the document, byte for byte) and N.json (its
// admin.Audit record).
//
// Every write is atomic: the new content goes to a temporary file in the
// same directory, is synced, and is renamed over the old (then the
// directory is synced), so a server reloading the file sees the old
// document or the new one, never a part. History entries are written the
// same way, before the file.
//
// The version is the newest N in FILE.history/. When the file's content
// is not that version's (the first time the store meets a file, or after
// someone edited it by hand), Read records the file as it is as a new
// version (admin.OpImport, user ""): so every content the file ever had
// through the store can be rolled back to, and a change made against the
// version before a hand edit is refused.
//
// Compare-and-swap is a mutex in this process: a Store is safe for
// concurrent use, but several processes (two servers) must not write one
// file through Stores, or a change can be lost. Share a repository
// between servers with etcd (etcdstore.Store) instead. FILE must be a
// regular file, not a symbolic link (a rename would replace the link).
type Store struct {
	path string
	dir  string
	keep int
	now  func() time.Time

	mu sync.Mutex
}

// Options configures a Store.
type Options struct {
	// Keep is how many versions the history keeps (the newest); ≤ 0:
	// admin.DefaultKeep (100).
	Keep int
	// Now is the clock of the import records; nil: time.Now.
	Now func() time.Time
}

// Open returns the store of the document in file path. The file may not
// exist yet (version 0: the first write creates it); it must not be a
// symbolic link or a directory (an error saying which).
func Open(path string, o Options) (*Store, error) {
	if o.Keep <= 0 {
		o.Keep = admin.DefaultKeep
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("admin: %s: %w", path, err)
	}
	if fi, err := os.Lstat(abs); err == nil {
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			return nil, fmt.Errorf("admin: %s is a symbolic link; the admin API writes a regular file (atomically, by rename)", path)
		case !fi.Mode().IsRegular():
			return nil, fmt.Errorf("admin: %s is not a regular file", path)
		}
	}
	return &Store{path: abs, dir: abs + ".history", keep: o.Keep, now: o.Now}, nil
}

// String returns "file PATH" (PATH absolute).
func (s *Store) String() string { return "file " + s.path }

// HistoryDir returns the directory of the history, FILE.history.
func (s *Store) HistoryDir() string { return s.dir }

// Read returns the file and its version, recording the file as a new
// version first if it is not the newest kept one (see Store).
func (s *Store) Read(ctx context.Context) (admin.Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.read()
}

func (s *Store) read() (admin.Snapshot, error) {
	doc, err := os.ReadFile(s.path)
	exists := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return admin.Snapshot{}, fmt.Errorf("admin: %w", err)
	}
	vs, err := s.versions()
	if err != nil {
		return admin.Snapshot{}, err
	}
	if len(vs) == 0 {
		if !exists {
			return admin.Snapshot{}, nil
		}
		return s.adopt(1, nil, doc)
	}
	latest := vs[len(vs)-1]
	if !exists {
		return admin.Snapshot{}, fmt.Errorf("admin: %s: the file is missing (its history is at version %d in %s)", s.path, latest, s.dir)
	}
	prev, err := os.ReadFile(s.entryPath(latest, "yaml"))
	if err != nil {
		return admin.Snapshot{}, fmt.Errorf("admin: %w", err)
	}
	if !bytes.Equal(prev, doc) {
		return s.adopt(latest+1, prev, doc)
	}
	return admin.Snapshot{Version: latest, Document: doc}, nil
}

// adopt records doc, found in the file, as version n.
func (s *Store) adopt(n int64, prev, doc []byte) (admin.Snapshot, error) {
	a := admin.Audit{Version: n, Time: s.now().UTC(), Op: admin.OpImport, Object: "config", Hash: admin.Hash(doc),
		Diff: diff(fmt.Sprintf("version %d", n-1), fmt.Sprintf("version %d (the file as found)", n), prev, doc)}
	if err := s.writeEntry(a, doc); err != nil {
		return admin.Snapshot{}, err
	}
	s.prune(n)
	return admin.Snapshot{Version: n, Document: doc}, nil
}

// Write stores doc in the file as the next version if the current one is
// expected (see admin.Store): an *admin.ConflictError when it is not.
func (s *Store) Write(ctx context.Context, expected int64, doc []byte, a admin.Audit) (admin.Audit, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, err := s.read()
	if err != nil {
		return admin.Audit{}, err
	}
	if cur.Version != expected {
		return admin.Audit{}, &admin.ConflictError{Current: cur.Version}
	}
	a.Version, a.Hash, a.Time = expected+1, admin.Hash(doc), a.Time.UTC()
	if err := s.writeEntry(a, doc); err != nil {
		return admin.Audit{}, err
	}
	mode := fs.FileMode(0o644)
	if fi, err := os.Stat(s.path); err == nil {
		mode = fi.Mode().Perm()
	}
	if err := writeAtomic(s.path, doc, mode); err != nil {
		// The entry names a version the file never had: take it back.
		_ = os.Remove(s.entryPath(a.Version, "yaml"))
		_ = os.Remove(s.entryPath(a.Version, "json"))
		return admin.Audit{}, err
	}
	s.prune(a.Version)
	return a, nil
}

func (s *Store) writeEntry(a admin.Audit, doc []byte) error {
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return fmt.Errorf("admin: %w", err)
	}
	j, err := json.MarshalIndent(a, "", "  ")
	if err != nil {
		return err
	}
	if err := writeAtomic(s.entryPath(a.Version, "json"), append(j, '\n'), 0o644); err != nil {
		return err
	}
	return writeAtomic(s.entryPath(a.Version, "yaml"), doc, 0o644)
}

func (s *Store) entryPath(n int64, ext string) string {
	return filepath.Join(s.dir, strconv.FormatInt(n, 10)+"."+ext)
}

// versions returns the kept versions, oldest first.
func (s *Store) versions() ([]int64, error) {
	ents, err := os.ReadDir(s.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("admin: %w", err)
	}
	var out []int64
	for _, e := range ents {
		num, ok := strings.CutSuffix(e.Name(), ".yaml")
		if !ok {
			continue
		}
		if n, err := strconv.ParseInt(num, 10, 64); err == nil && n > 0 {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out, nil
}

// prune removes the versions older than the newest keep before newest.
func (s *Store) prune(newest int64) {
	vs, err := s.versions()
	if err != nil {
		return
	}
	for _, n := range vs {
		if n <= newest-int64(s.keep) {
			_ = os.Remove(s.entryPath(n, "yaml"))
			_ = os.Remove(s.entryPath(n, "json"))
		}
	}
}

// History returns the kept versions' audit records, newest first.
func (s *Store) History(ctx context.Context) ([]admin.Audit, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.read(); err != nil {
		return nil, err
	}
	vs, err := s.versions()
	if err != nil {
		return nil, err
	}
	out := make([]admin.Audit, 0, len(vs))
	for i := len(vs) - 1; i >= 0; i-- {
		out = append(out, s.audit(vs[i]))
	}
	return out, nil
}

// audit reads version n's record; an unreadable one is reported in it.
func (s *Store) audit(n int64) admin.Audit {
	b, err := os.ReadFile(s.entryPath(n, "json"))
	var a admin.Audit
	if err == nil {
		err = json.Unmarshal(b, &a)
	}
	if err != nil {
		return admin.Audit{Version: n, Object: fmt.Sprintf("(the audit record is unreadable: %v)", err)}
	}
	a.Version = n
	return a
}

// Entry returns version n. Errors wrap admin.ErrNotFound.
func (s *Store) Entry(ctx context.Context, n int64) (admin.Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.read(); err != nil {
		return admin.Entry{}, err
	}
	doc, err := os.ReadFile(s.entryPath(n, "yaml"))
	if errors.Is(err, fs.ErrNotExist) {
		return admin.Entry{}, fmt.Errorf("version %d: %w (kept: the last %d)", n, admin.ErrNotFound, s.keep)
	}
	if err != nil {
		return admin.Entry{}, fmt.Errorf("admin: %w", err)
	}
	return admin.Entry{Audit: s.audit(n), Document: doc}, nil
}

// writeAtomic replaces path with data: a temporary file in the same
// directory, written, synced and renamed over path, then the directory
// synced.
func writeAtomic(path string, data []byte, mode fs.FileMode) error {
	dir, base := filepath.Split(path)
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("admin: %w", err)
	}
	tmp := f.Name()
	fail := func(err error) error {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("admin: writing %s: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		return fail(err)
	}
	if err := f.Chmod(mode); err != nil {
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("admin: writing %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("admin: writing %s: %w", path, err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// diff returns the unified diff of a and b ("" when equal), as the
// admin.Service writes its diffs (github.com/aymanbagabas/go-udiff).
func diff(aName, bName string, a, b []byte) string {
	if bytes.Equal(a, b) {
		return ""
	}
	return udiff.Unified(aName, bName, string(a), string(b))
}
