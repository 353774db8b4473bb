package interop

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// cppBuild is the C++ client's build directory (clients/cpp/build.sh),
// built once by prepareCpp.
var cppBuild string

// prepareCpp builds the C++ client once per version of its sources (the
// library, its GoogleTest suite, the examples and the interop driver) and
// points scripts/interop-driver at the driver built.
func prepareCpp() error {
	cmd := exec.Command(filepath.Join(root, "clients", "cpp", "build.sh"))
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("clients/cpp/build.sh: %v\n%s\nrun scripts/test: it installs Debian's cmake, libgrpc++-dev, protobuf-compiler-grpc, libgtest-dev and nlohmann-json3-dev", err, stderr.Bytes())
	}
	cppBuild = strings.TrimSpace(string(out))
	return os.Setenv("SLUICE_INTEROP_CPP_DRIVER", filepath.Join(cppBuild, "sluice-interop-driver"))
}

// The C++ library's own tests (GoogleTest, clients/cpp/tests) pass,
// against the sluice binary built here.
func TestCppUnitTests(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(filepath.Join(cppBuild, "sluice_tests"), "--gtest_brief=1")
	cmd.Env = append(os.Environ(), "SLUICE_BIN="+sluice)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("sluice_tests: %v\n%s", err, out)
	}
	if !bytes.Contains(out, []byte("[  PASSED  ]")) || bytes.Contains(out, []byte("[  SKIPPED ]")) {
		t.Fatalf("sluice_tests: not every test ran and passed\n%s", out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	t.Log(lines[len(lines)-1])
}

// The guide's examples (docs/cpp.md; clients/cpp/examples) run to the end
// against the server they document.
func TestCppExamples(t *testing.T) {
	t.Parallel()
	cfg, err := os.ReadFile(filepath.Join(root, "clients/cpp/examples/config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, ex := range []string{"leases", "limits", "copies"} {
		t.Run(ex, func(t *testing.T) {
			t.Parallel()
			s := startServer(t, string(cfg)) // each its own: the examples assert what a fresh server answers
			out, err := exec.Command(filepath.Join(cppBuild, "example_"+ex), s.addr).CombinedOutput()
			if err != nil {
				t.Fatalf("example_%s: %v\n%s", ex, err, out)
			}
			t.Logf("%s", out)
		})
	}
}
