// Package redistest runs a real redis-server for tests, on a free
// loopback port, as etcdtest runs an embedded etcd: a single server, a
// Redis Cluster or a master and replica watched by Sentinel, plain or,
// as managed services run Redis, secured by a Security (TLS, password,
// ACL users).
package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrSkip is returned by Start, StartCluster, StartSentinel and their
// variants when redis-server (or, for a cluster, redis-cli) is missing
// and SLUICE_SKIP_REDIS=1 asks to skip the tests that need it.
var ErrSkip = errors.New("redis-server not found and SLUICE_SKIP_REDIS=1")

// Server is a running redis-server.
type Server struct {
	// Addr is its host:port on 127.0.0.1 (its TLS port when secured with
	// TLS, its only one then).
	Addr string
	p    *proc
	args []string
	wait time.Duration
	opts *redis.Options // of the helper's clients, Addr set
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

// StartSecure is Start with the server secured by sec: it listens on
// TLS only when sec has TLS certificates, and wants a password or an ACL
// user as sec says. Start's wait (up to 10 s) and Restart log in as sec
// says too. It returns an error for an inconsistent sec (see Security)
// or unreadable certificates, and ErrSkip as Start.
func StartSecure(sec Security) (*Server, error) {
	return startSecure(nil, sec, "--save", "", "--appendonly", "no")
}

// StartSecureT is StartSecure for a test: it skips the test on ErrSkip,
// fails it on any other error, and stops the server when the test ends.
func StartSecureT(t testing.TB, sec Security) *Server {
	t.Helper()
	return forTest(t, func() (*Server, error) { return StartSecure(sec) })
}

func start(wrapper []string, opts ...string) (*Server, error) {
	return startSecure(wrapper, Security{}, opts...)
}

// startSecure starts redis-server, under wrapper, on a free loopback port
// secured by sec, with opts.
func startSecure(wrapper []string, sec Security, opts ...string) (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, missing("redis-server")
	}
	sec, err = sec.check()
	if err != nil {
		return nil, err
	}
	wait := 10 * time.Second
	if len(wrapper) > 0 {
		wait = 60 * time.Second
	}
	ports, err := freePorts(1)
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
	o, err := sec.Options(addr)
	if err != nil {
		return nil, err
	}
	s := &Server{Addr: addr, wait: wait, opts: o,
		args: slices.Concat(wrapper, []string{bin}, sec.serverArgs(ports[0]), []string{"--bind", "127.0.0.1"}, opts)}
	if err := s.run(); err != nil {
		return nil, err
	}
	return s, nil
}

// Client returns a new client of the server, logged in and over TLS as
// the server's Security says (a plain client for Start's servers); the
// caller closes it.
func (s *Server) Client() *redis.Client {
	o := *s.opts
	return redis.NewClient(&o)
}

// run starts the process and waits until it answers.
func (s *Server) run() error {
	wait := s.wait
	p, err := startProc(s.args)
	if err != nil {
		return err
	}
	s.p = p
	// Wait for the port first: go-redis logs every dial it retries.
	for deadline := time.Now().Add(wait); ; time.Sleep(20 * time.Millisecond) {
		if conn, err := net.DialTimeout("tcp", s.Addr, time.Second); err == nil {
			conn.Close()
			break
		}
		if p.exited() {
			return fmt.Errorf("redis-server on %s ended: %s", s.Addr, p.why())
		}
		if time.Now().After(deadline) {
			s.Stop()
			return fmt.Errorf("redis-server on %s did not listen within %v", s.Addr, wait)
		}
	}
	c := s.Client()
	defer c.Close()
	for deadline := time.Now().Add(wait); ; {
		err := c.Ping(context.Background()).Err()
		if err == nil {
			break
		}
		if time.Now().After(deadline) || p.exited() {
			s.Stop()
			return fmt.Errorf("redis-server on %s did not answer within %v: %v; %s", s.Addr, wait, err, p.why())
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
func (s *Server) PID() int { return s.p.cmd.Process.Pid }

// Stop kills the server (SIGKILL) and waits for it.
func (s *Server) Stop() { s.p.kill() }

// Pause stops the server's process (SIGSTOP) without closing its
// connections: Redis hangs, as on a stalled host, until Resume.
func (s *Server) Pause() { _ = s.p.cmd.Process.Signal(syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() { _ = s.p.cmd.Process.Signal(syscall.SIGCONT) }

// StartT is Start for a test: it skips the test on ErrSkip, fails it on
// any other error, and stops the server when the test ends.
func StartT(t testing.TB) *Server {
	t.Helper()
	return forTest(t, func() (*Server, error) { return Start() })
}

// forTest starts what start starts for t: it skips t on ErrSkip, fails it
// on any other error, and stops what started when t ends.
func forTest[T interface{ Stop() }](t testing.TB, start func() (T, error)) T {
	t.Helper()
	v, err := start()
	if errors.Is(err, ErrSkip) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Stop)
	return v
}
