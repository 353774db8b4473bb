package interop

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/testutil"
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

// The interop driver on sluice.aio (--asyncio) beside a Go driver and a
// threaded Python one on one server: max-min fair shares, its limiter
// admitting what its lease allows, a release reaching the others, Allow
// exact across the three, copies under the domain limit, bad input
// answered with the same codes, and a clean close giving everything back.
// (SLUICE_PYTHON_ASYNCIO=1 runs every scenario of the suite with it.)
func TestPythonAsyncioDriver(t *testing.T) {
	t.Parallel()
	const id = "fair/asyncio"
	s := startServer(t, config)
	aio := startDriver(t, "python", s, "py-asyncio", "--asyncio")
	gd := startDriver(t, "go", s, "go-beside-asyncio")
	pd := startDriver(t, "python", s, "py-threaded-beside-asyncio")
	ds := []*driver{aio, gd, pd}
	for i, w := range []float64{80, 80, 10} {
		ds[i].must(map[string]any{"op": "resource", "id": id, "wants": w})
	}
	shares := func(ds []*driver, want []float64) {
		t.Helper()
		testutil.Eventually(t, 60*time.Second, fmt.Sprintf("the shares %v", want), func() bool {
			sum := 0.0
			for _, l := range s.leases(t, id) {
				sum += l.Has
			}
			if sum > 100+1e-9 {
				t.Fatalf("the server leased %v of %s's 100", sum, id)
			}
			for i, d := range ds {
				if !near(d.capacity(id), want[i]) {
					return false
				}
			}
			return true
		})
	}
	shares(ds, []float64{45, 45, 10})

	const seconds, burst, c = 2.0, 0.1, 45.0
	got := aio.num(aio.must(map[string]any{"op": "run", "id": id, "seconds": seconds}), "acquired")
	if most, least := c*(seconds+burst)+1, 0.8*c*seconds; got > most || got < least {
		t.Errorf("the asyncio limiter admitted %v in %v s on a lease of %v/s: outside [%v, %v]", got, seconds, c, least, most)
	}

	granted := 0.0
	for i := range 9 {
		d := ds[i%len(ds)]
		a := d.must(map[string]any{"op": "allow", "resource": "api", "domain": "exact", "tokens": 1})
		granted += d.num(a, "granted")
	}
	if granted != 7 {
		t.Errorf("Allow granted %v of a 7-token bucket across the three", granted)
	}

	if g, _ := reserve(t, aio, "d1", 2, 0); g != 2 {
		t.Fatalf("asyncio reserved %v of 2", g)
	}
	if g, _ := reserve(t, gd, "d1", 1, 0); g != 0 {
		t.Fatalf("over the domain limit Go got %v", g)
	}

	for _, tc := range []struct {
		cmd  map[string]any
		code string
	}{
		{map[string]any{"op": "resource", "id": "fair/bad", "wants": -1}, "INVALID_ARGUMENT"},
		{map[string]any{"op": "resource", "id": id, "wants": 1}, "ALREADY_EXISTS"},
		{map[string]any{"op": "allow", "resource": "api", "domain": "no spaces", "tokens": 1}, "INVALID_ARGUMENT"},
		{map[string]any{"op": "reserve", "resource": "nosuch", "domain": "d", "copies": 1, "min": 0}, "NOT_FOUND"},
		{map[string]any{"op": "reserve", "resource": "api", "domain": "exact", "copies": 1, "min": 0}, "FAILED_PRECONDITION"},
	} {
		if code := errorCode(aio.call(tc.cmd)); code != tc.code {
			t.Errorf("%v: code %q, want %s", tc.cmd, code, tc.code)
		}
	}

	aio.must(map[string]any{"op": "release", "id": id})
	shares([]*driver{gd, pd}, []float64{80, 10})

	aio.close() // closes its session: its copies come back
	if g, _ := reserve(t, gd, "d1", 2, 0); g != 2 {
		t.Errorf("after the asyncio driver closed, Go reserved %v of 2", g)
	}
	gd.close()
	pd.close()
	testutil.Eventually(t, 30*time.Second, "every lease given back", func() bool { return len(s.leases(t, id)) == 0 })
}
