package redisstore

import (
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/testutil/redistest"
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
	srv, err := redistest.Start()
	if errors.Is(err, redistest.ErrSkip) {
		fmt.Println("limits/redis:", err, "- skipping the package's tests")
		return 0
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "limits/redis:", err)
		return 1
	}
	defer srv.Stop()
	redisAddr = srv.Addr
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
