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
// library, its GoogleTest suite, the examples, the interop driver and the
// embedding check that TestCppEmbedding runs) and points
// scripts/interop-driver at the driver built.
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
	// The vectors of this checkout: the build is cached by a hash of the
	// sources, not of their path, so the directory compiled in may be
	// another checkout's, since removed.
	cmd.Env = append(os.Environ(), "SLUICE_BIN="+sluice, "SLUICE_VECTORS_DIR="+filepath.Join(root, "clients", "vectors"))
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

// The C++ client's CMake project works for an application that embeds it
// (docs/cpp.md, "Embedding"; clients/cpp/tests/embedding) and at top level:
//
//   - the application clients/cpp/build.sh built — the client taken in with
//     add_subdirectory, its own doorman.proto (package doorman) linked
//     beside Sluice's — starts (no clash in protobuf's descriptor pool),
//     calls GetCapacity with its own stub and takes a lease with Sluice's
//     client, against a server;
//   - embedded through add_subdirectory (static and BUILD_SHARED_LIBS=ON)
//     and through FetchContent, with GoogleTest, nlohmann_json and Google
//     Benchmark hidden, the client configures, defines its library only,
//     and makes it shared or static as BUILD_SHARED_LIBS says (the
//     application's CMakeLists.txt checks both);
//   - at top level it defines its tests, examples and interop driver.
//
// The configurations are cmake runs without a build (a few seconds each):
// build.sh's build is the one that compiles, once.
func TestCppEmbedding(t *testing.T) {
	t.Parallel()
	t.Run("run", func(t *testing.T) {
		t.Parallel()
		s := startServer(t, config)
		out, err := exec.Command(filepath.Join(cppBuild, "embedding"), s.addr).CombinedOutput()
		if err != nil || !bytes.Contains(out, []byte("\nPASS\n")) {
			t.Fatalf("embedding %s: %v\n%s", s.addr, err, out)
		}
		t.Logf("%s", out)
	})
	cpp := filepath.Join(root, "clients", "cpp")
	embedding := filepath.Join(cpp, "tests", "embedding")
	hidden := []string{"-DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON", "-DCMAKE_DISABLE_FIND_PACKAGE_nlohmann_json=ON",
		"-DCMAKE_DISABLE_FIND_PACKAGE_benchmark=ON", "--no-warn-unused-cli"}
	for _, tc := range []struct {
		name    string
		src     string
		args    []string
		targets []string // targets the configuration must define
		says    string   // what its output must say
	}{
		{name: "add_subdirectory static", src: embedding, args: append([]string{"-DBUILD_SHARED_LIBS=OFF"}, hidden...),
			says: "sluice is a STATIC_LIBRARY, alone"},
		{name: "add_subdirectory shared", src: embedding, args: append([]string{"-DBUILD_SHARED_LIBS=ON"}, hidden...),
			says: "sluice is a SHARED_LIBRARY, alone"},
		{name: "FetchContent", src: embedding, args: append([]string{"-DSLUICE_EMBED=fetchcontent",
			"-DFETCHCONTENT_SOURCE_DIR_SLUICE=" + root, "-DFETCHCONTENT_FULLY_DISCONNECTED=ON"}, hidden...),
			says: "sluice is a STATIC_LIBRARY, alone"},
		{name: "top level", src: cpp, targets: []string{"sluice", "sluice_tests", "sluice-interop-driver", "example_leases"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			cmd := exec.Command("cmake", append([]string{"-S", tc.src, "-B", dir}, tc.args...)...)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("cmake %s: %v\n%s", strings.Join(cmd.Args[1:], " "), err, out)
			}
			if tc.says != "" && !bytes.Contains(out, []byte(tc.says)) {
				t.Errorf("cmake's output does not say %q:\n%s", tc.says, out)
			}
			for _, target := range tc.targets {
				if _, err := os.Stat(filepath.Join(dir, "CMakeFiles", target+".dir")); err != nil {
					t.Errorf("the configuration defines no %s target: %v", target, err)
				}
			}
		})
	}
}
