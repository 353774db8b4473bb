package redisstore

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisAddr is the address of the redis-server TestMain started.
var redisAddr string

// TestMain starts a real redis-server on a free loopback port. Without
// redis-server the tests fail, unless SLUICE_SKIP_REDIS=1 (then they are
// skipped).
func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("SLUICE_SKIP_REDIS") == "1" {
			fmt.Println("limits/redis: redis-server not found and SLUICE_SKIP_REDIS=1: skipping the package's tests")
			return 0
		}
		fmt.Fprintln(os.Stderr, "limits/redis: redis-server not found (install Debian's redis-server, or set SLUICE_SKIP_REDIS=1 to skip)")
		return 1
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	redisAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	c := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer c.Close()
	for deadline := time.Now().Add(10 * time.Second); ; {
		if c.Ping(context.Background()).Err() == nil {
			break
		}
		if time.Now().After(deadline) {
			fmt.Fprintln(os.Stderr, "limits/redis: redis-server did not answer")
			return 1
		}
		time.Sleep(20 * time.Millisecond)
	}
	return m.Run()
}

// client returns a client of the test server, closed with the test.
func client(t testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: redisAddr})
	t.Cleanup(func() { c.Close() })
	return c
}

// prefix returns a prefix of the test's own.
func prefix(t testing.TB) string { return "t:" + t.Name() + ":" }

// ExampleAddr gives the example the test server's address.
var ExampleAddr = func() string { return redisAddr }
