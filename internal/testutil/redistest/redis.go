// Package redistest runs a real redis-server for tests, on a free
// loopback port, as etcdtest runs an embedded etcd.
package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrSkip is returned by Start and StartCluster when redis-server (or,
// for a cluster, redis-cli) is missing and SLUICE_SKIP_REDIS=1 asks to
// skip the tests that need it.
var ErrSkip = errors.New("redis-server not found and SLUICE_SKIP_REDIS=1")

// Server is a running redis-server.
type Server struct {
	// Addr is its host:port on 127.0.0.1.
	Addr string
	cmd  *exec.Cmd
	args []string
	wait time.Duration
}

// Start starts redis-server (Debian's; scripts/test installs it) on a
// free loopback port without persistence and waits, up to 10 s, until it
// answers. Without redis-server it returns an error, or ErrSkip with
// SLUICE_SKIP_REDIS=1. Stop it with Stop.
func Start() (*Server, error) { return StartUnder() }

// StartUnder is Start with redis-server run under a wrapper: wrapper's
// first word is the program, the rest its arguments, followed by
// redis-server's path and arguments (valgrind --tool=callgrind, for one:
// the server then answers tens of times slower, and Start's wait is 60 s
// rather than 10). Without a wrapper it is Start.
func StartUnder(wrapper ...string) (*Server, error) {
	return start(wrapper, "--save", "", "--appendonly", "no")
}

// StartPersistent is Start with an append-only file in dir, written on
// every write (appendfsync always), so that Restart loses nothing.
func StartPersistent(dir string) (*Server, error) {
	return start(nil, "--save", "", "--appendonly", "yes", "--appendfsync", "always", "--dir", dir)
}

func start(wrapper []string, opts ...string) (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, missing("redis-server")
	}
	wait := 10 * time.Second
	if len(wrapper) > 0 {
		wait = 60 * time.Second
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), wait: wait,
		args: slices.Concat(wrapper, []string{bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1"}, opts)}
	if err := s.run(); err != nil {
		return nil, err
	}
	return s, nil
}

// run starts the process and waits until it answers.
func (s *Server) run() error {
	wait := s.wait
	s.cmd = exec.Command(s.args[0], s.args[1:]...)
	s.cmd.Stderr = os.Stderr
	if err := s.cmd.Start(); err != nil {
		return err
	}
	// Wait for the port first: go-redis logs every dial it retries.
	for deadline := time.Now().Add(wait); ; time.Sleep(20 * time.Millisecond) {
		if conn, err := net.DialTimeout("tcp", s.Addr, time.Second); err == nil {
			conn.Close()
			break
		}
		if time.Now().After(deadline) {
			s.Stop()
			return fmt.Errorf("redis-server on %s did not listen within %v", s.Addr, wait)
		}
	}
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer c.Close()
	for deadline := time.Now().Add(wait); c.Ping(context.Background()).Err() != nil; {
		if time.Now().After(deadline) {
			s.Stop()
			return fmt.Errorf("redis-server on %s did not answer within %v", s.Addr, wait)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// Restart kills the server (SIGKILL) and starts it again on the same
// port, with the same options: without persistence it comes back empty.
func (s *Server) Restart() error {
	s.Stop()
	return s.run()
}

// PID returns the process id of the server, or of its wrapper.
func (s *Server) PID() int { return s.cmd.Process.Pid }

// Stop kills the server and waits for it.
func (s *Server) Stop() {
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
}

// Pause stops the server's process (SIGSTOP) without closing its
// connections: Redis hangs, as on a stalled host, until Resume.
func (s *Server) Pause() { _ = s.cmd.Process.Signal(syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() { _ = s.cmd.Process.Signal(syscall.SIGCONT) }

// StartT is Start for a test: it skips the test on ErrSkip, fails it on
// any other error, and stops the server when the test ends.
func StartT(t testing.TB) *Server {
	t.Helper()
	s, err := Start()
	if errors.Is(err, ErrSkip) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}
