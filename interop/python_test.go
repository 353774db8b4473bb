package interop

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The Python library's own tests (pytest, clients/python/tests) pass,
// against the sluice binary built here.
func TestPythonUnitTests(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "clients/python/tests")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "SLUICE_BIN="+sluice, "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("pytest: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	t.Log(lines[len(lines)-1])
}

// The guide's examples (docs/python.md; clients/python/examples) run to
// the end against the server they document.
func TestPythonExamples(t *testing.T) {
	t.Parallel()
	cfg, err := os.ReadFile(filepath.Join(root, "clients/python/examples/config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	examples, err := filepath.Glob(filepath.Join(root, "clients/python/examples/*.py"))
	if err != nil || len(examples) < 3 {
		t.Fatalf("examples: %v %v", examples, err)
	}
	for _, ex := range examples {
		t.Run(filepath.Base(ex), func(t *testing.T) {
			t.Parallel()
			s := startServer(t, string(cfg)) // each its own: the examples assert what a fresh server answers
			cmd := exec.Command(python, ex, s.addr)
			cmd.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(root, "clients/python/src"), "PYTHONDONTWRITEBYTECODE=1")
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%s: %v\n%s", filepath.Base(ex), err, out)
			}
			t.Logf("%s", out)
		})
	}
}
