package testutil

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// ReadAddr reads the first line a `sluice server` child prints on stdout,
// "listening on HOST:PORT", returns the address, and drains the rest of
// stdout in the background. The test fails (t.Fatalf, naming name) when
// the process ends before printing it.
func ReadAddr(t testing.TB, name string, stdout io.Reader) string {
	t.Helper()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("%s: reading its address: %v", name, err)
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	return strings.TrimSpace(strings.TrimPrefix(line, "listening on "))
}

// StartServer runs the sluice binary bin as `server --config FILE
// --listen 127.0.0.1:0 flags…`, FILE holding cfg, its logs on this
// process's stderr at ChildLogLevel, and returns its address, the
// process and FILE's path. The process gets SIGTERM, and is waited for,
// at the end of the test.
func StartServer(t testing.TB, bin, cfg string, flags ...string) (addr string, cmd *exec.Cmd, path string) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"server", "--config", path, "--listen", "127.0.0.1:0", "--log-level", ChildLogLevel()}, flags...)
	cmd = exec.Command(bin, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	return ReadAddr(t, "sluice server", stdout), cmd, path
}
