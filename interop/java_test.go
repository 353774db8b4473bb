package interop

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// javaClasspath is the classpath of the Java build's jars (the library,
// its tests, the examples) and Debian's jars.
func javaClasspath(t *testing.T, jars ...string) string {
	t.Helper()
	cp, err := os.ReadFile(filepath.Join(javaBuild, "classpath"))
	if err != nil {
		t.Fatal(err)
	}
	parts := []string{filepath.Join(javaBuild, "sluice.jar")}
	for _, j := range jars {
		parts = append(parts, filepath.Join(javaBuild, j))
	}
	return strings.Join(append(parts, strings.TrimSpace(string(cp))), ":")
}

// The Java library's own tests (JUnit 5, clients/java/src/test, run by
// JUnit's console launcher) pass, against the sluice binary built here.
func TestJavaUnitTests(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("java", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC",
		"-Dsluice.vectors="+filepath.Join(root, "clients", "vectors"), // the *VectorsTest classes' data
		"-jar", "/usr/share/java/junit-platform-console-standalone.jar",
		"-cp", javaClasspath(t, "tests.jar"), "--select-package", "io.github.sluicerl.sluice",
		"--disable-banner", "--details=summary", "--fail-if-no-tests")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "SLUICE_BIN="+sluice)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("JUnit: %v\n%s", err, out)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "tests successful") || strings.Contains(l, "tests failed") {
			t.Log(strings.TrimSpace(l))
		}
	}
}

// The guide's examples (docs/java.md; clients/java/src/examples) run to
// the end against the server they document.
func TestJavaExamples(t *testing.T) {
	t.Parallel()
	cfg, err := os.ReadFile(filepath.Join(root, "clients/java/src/examples/config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, ex := range []string{"LeasesExample", "LimitsExample", "CopiesExample"} {
		t.Run(ex, func(t *testing.T) {
			t.Parallel()
			s := startServer(t, string(cfg)) // each its own: the examples assert what a fresh server answers
			cmd := exec.Command("java", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC",
				"-cp", javaClasspath(t, "examples.jar"), "io.github.sluicerl.sluice.examples."+ex, s.addr)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%s: %v\n%s", ex, err, out)
			}
			t.Logf("%s", out)
		})
	}
}
