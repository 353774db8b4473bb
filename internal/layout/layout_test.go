package layout

import (
	"bufio"
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	loadOnce sync.Once
	loaded   *Module
	loadErr  error
)

// module loads the module once for all tests.
func module(t *testing.T) *Module {
	t.Helper()
	loadOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		loaded, loadErr = Load(ctx, ".")
		if loadErr == nil {
			loadErr = statSources(loaded.Root)
		}
	})
	if loadErr != nil {
		t.Fatal(loadErr)
	}
	return loaded
}

// statSources stats go.mod and every Go file and directory of the module,
// so that go test's cache, which records what a test opens and stats but
// not what the go list it runs reads, reruns these tests when a package
// or an import changes.
func statSources(root string) error {
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (name[0] == '.' || name[0] == '_' || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, ".go") || name == "go.mod" {
			_, err = os.Stat(path)
		}
		return err
	})
}

func TestLoad(t *testing.T) {
	m := module(t)
	if m.Path != "github.com/sluice-rl/sluice" {
		t.Errorf("module path %q, want github.com/sluice-rl/sluice", m.Path)
	}
	var self *Package
	for i := range m.Packages {
		if m.Packages[i].Path == "internal/layout/gen" {
			self = &m.Packages[i]
		}
	}
	if self == nil {
		t.Fatalf("internal/layout/gen not among %d packages", len(m.Packages))
	}
	if want := []string{"internal/layout"}; !slices.Equal(self.Local, want) {
		t.Errorf("internal/layout/gen imports %v of the module, want %v", self.Local, want)
	}
	if !slices.Contains(self.Imports, "os") {
		t.Errorf("internal/layout/gen's imports %v lack os", self.Imports)
	}
}

// TestImportsCurrent fails when docs/imports.txt is not what the generator
// writes today.
func TestImportsCurrent(t *testing.T) {
	m := module(t)
	got, err := os.ReadFile(filepath.Join(m.Root, ImportsFile))
	if err != nil {
		t.Fatal(err)
	}
	want := m.Graph()
	if bytes.Equal(got, want) {
		return
	}
	old := map[string]bool{}
	for l := range strings.Lines(string(got)) {
		old[l] = true
	}
	for l := range strings.Lines(string(want)) {
		if !old[l] {
			t.Errorf("%s lacks the line %q", ImportsFile, strings.TrimSpace(l))
		}
		delete(old, l)
	}
	for l := range old {
		t.Errorf("%s has the stale line %q", ImportsFile, strings.TrimSpace(l))
	}
	t.Errorf("%s is stale: run go run ./internal/layout/gen", ImportsFile)
}

// documented returns the packages docs/architecture.md's layout names: the
// first word, less its trailing slash, of every line of a fenced block that
// starts with a path ending in "/".
func documented(t *testing.T, root string) map[string]bool {
	t.Helper()
	f, err := os.Open(filepath.Join(root, "docs/architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	named := map[string]bool{}
	fenced := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
			continue
		}
		if !fenced || line == "" || line[0] == ' ' {
			continue
		}
		word, _, _ := strings.Cut(line, " ")
		if p, ok := strings.CutSuffix(word, "/"); ok {
			if named[p] {
				t.Errorf("docs/architecture.md names %s/ twice", p)
			}
			named[p] = true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return named
}

// TestArchitectureNamesEveryPackage fails when a package has no line in
// docs/architecture.md's layout, or the layout names a package that is gone.
func TestArchitectureNamesEveryPackage(t *testing.T) {
	m := module(t)
	named := documented(t, m.Root)
	if len(named) == 0 {
		t.Fatal("docs/architecture.md's layout names no package")
	}
	for _, p := range m.Packages {
		if !named[p.Path] {
			t.Errorf("docs/architecture.md's layout has no line %q (the package and one line on its job)", p.Path+"/")
		}
		delete(named, p.Path)
	}
	for p := range named {
		t.Errorf("docs/architecture.md's layout names %s/, which go list ./... does not list", p)
	}
}

// cores are the deterministic packages the design keeps free of I/O: they
// take time as an input and reach no network, store or file.
var cores = []string{"algorithm", "lease", "limits", "limits/copies", "limits/rls", "ratelimit"}

// TestFlowIsOneWay checks the rules of docs/architecture.md's "Data flows
// one way" that imports show.
func TestFlowIsOneWay(t *testing.T) {
	m := module(t)
	byPath := map[string]Package{}
	for _, p := range m.Packages {
		byPath[p.Path] = p
	}
	for _, p := range m.Packages {
		for _, l := range p.Local {
			if strings.HasPrefix(l, "cmd/") {
				t.Errorf("%s imports the command %s", p.Path, l)
			}
		}
	}
	// What a core may import of the module: other cores and internal/names.
	mayImport := append([]string{"internal/names"}, cores...)
	// Standard and third-party packages of transports, stores and processes.
	banned := []string{"net", "os", "os/exec", "google.golang.org/grpc", "connectrpc.com/", "go.etcd.io/", "github.com/redis/", "github.com/prometheus/"}
	for _, c := range cores {
		p, ok := byPath[c]
		if !ok {
			t.Errorf("the core package %s is gone: update cores in this test and docs/architecture.md", c)
			continue
		}
		for _, l := range p.Local {
			if !slices.Contains(mayImport, l) {
				t.Errorf("the core %s imports %s; a core imports only %v", c, l, mayImport)
			}
		}
		for _, imp := range p.Imports {
			for _, b := range banned {
				if imp == b || strings.HasPrefix(imp, b+"/") || strings.HasSuffix(b, "/") && strings.HasPrefix(imp, b) {
					t.Errorf("the core %s imports %s (I/O stays at the edges)", c, imp)
				}
			}
		}
	}
}

// sideways are imports that would cross the layout sideways: the
// simulator drives the capacity service and the client directly, so it
// links neither the composition root (server) nor, through it, Envoy's
// types (but for sidewaysExcept's); the capacity service links neither the client-side limiters
// (it paces its logs with its own clock) nor the composition root that
// assembles it; the status site reads the services through views of its
// own over server/status/view's rows, so it links no service, and those
// rows, which the services build, link nothing of server/. A path ending
// in "/" stands for every package below it.
var sideways = map[string][]string{
	"sim":                {"server", "github.com/envoyproxy/go-control-plane/"},
	"server/capacity":    {"ratelimit", "server"},
	"server/status":      {"server/capacity", "server/envoyrls", "server/rlqs", "server/sessions", "server/limitsvc", "server/leases"},
	"server/status/view": {"server/"},
}

// sidewaysExcept are the packages under a banned prefix of sideways that
// the package may link all the same: the simulator runs the RLQS stream
// state and the model of Envoy's filter (server/rlqs/state,
// internal/rlqsfilter), whose blanket rules are Envoy's enum
// (envoy/type/v3's RateLimitStrategy_BlanketRule: a value, no message on
// a wire, no service).
var sidewaysExcept = map[string][]string{
	"sim": {"github.com/envoyproxy/go-control-plane/envoy/type/v3"},
}

// TestNoSidewaysImports: no package in sideways depends, directly or not,
// on what it lists, but for what sidewaysExcept lets it.
func TestNoSidewaysImports(t *testing.T) {
	m := module(t)
	for pkg, banned := range sideways {
		deps := m.Deps(pkg)
		if deps == nil {
			t.Errorf("%s is gone: update sideways in this test", pkg)
			continue
		}
		for _, d := range deps {
			if slices.Contains(sidewaysExcept[pkg], d) {
				continue
			}
			for _, b := range banned {
				if d == b || strings.HasSuffix(b, "/") && strings.HasPrefix(d, b) {
					t.Errorf("%s depends on %s", pkg, d)
				}
			}
		}
	}
}

// TestDeps: Deps follows the module's packages and lists others' without
// following them.
func TestDeps(t *testing.T) {
	m := &Module{Path: "x", Packages: []Package{
		{Path: "a", Imports: []string{"fmt", "x/b"}},
		{Path: "b", Imports: []string{"x/c", "y/z"}},
		{Path: "c"},
	}}
	if got := m.Deps("a"); !slices.Equal(got, []string{"b", "c", "fmt", "y/z"}) {
		t.Fatalf("Deps(a) = %v", got)
	}
	if got := m.Deps("gone"); got != nil {
		t.Fatalf("Deps(gone) = %v, want nil", got)
	}
}
