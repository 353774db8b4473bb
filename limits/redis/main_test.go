package redisstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/testutil/redistest"
	"github.com/sluice-rl/sluice/limits"
)

// redisAddr is the address of the redis-server TestMain started.
var redisAddr string

// cluster is the three-master Redis Cluster TestMain started.
var cluster *redistest.Cluster

// TestMain starts a real redis-server on a free loopback port and a real
// three-master Redis Cluster. Without redis-server (or redis-cli) the
// tests fail, unless SLUICE_SKIP_REDIS=1 (then they are skipped).
func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	srv, err := redistest.Start()
	if code, done := startFailed(err); done {
		return code
	}
	defer srv.Stop()
	redisAddr = srv.Addr
	cluster, err = redistest.StartCluster(3)
	if code, done := startFailed(err); done {
		return code
	}
	defer cluster.Stop()
	return m.Run()
}

// startFailed reports whether err (from starting Redis) ends the run, and
// its exit code: 0 to skip the tests (ErrSkip), 1 for a failure.
func startFailed(err error) (int, bool) {
	switch {
	case errors.Is(err, redistest.ErrSkip):
		fmt.Println("limits/redis:", err, "- skipping the package's tests")
		return 0, true
	case err != nil:
		fmt.Fprintln(os.Stderr, "limits/redis:", err)
		return 1, true
	}
	return 0, false
}

// client returns a client of the test server, closed with the test.
func client(t testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: redisAddr})
	t.Cleanup(func() { c.Close() })
	return c
}

// clusterClient returns a client of the test cluster, closed with the
// test.
func clusterClient(t testing.TB) *redis.ClusterClient {
	c := cluster.Client()
	t.Cleanup(func() { c.Close() })
	return c
}

// prefix returns a prefix of the test's own.
func prefix(t testing.TB) string { return "t:" + t.Name() + ":" }

// ExampleAddr gives the example the test server's address.
var ExampleAddr = func() string { return redisAddr }

// sendNow sends batch (calls not yet queued) as one round trip at once,
// on the test's goroutine, as the sender would with ctx as every call's
// context, and returns the round trip's error for the calls queued
// behind it.
func (b *batcher) sendNow(ctx context.Context, batch []*call) error {
	for _, c := range batch {
		c.ctx = ctx
	}
	t, sent := b.start(batch)
	if t == nil {
		return nil
	}
	defer finish(sent)
	defer t.cancel()
	return b.roundTrip(t, sent)
}

// walkLen counts st's buckets with a walk: those of its prefix only (the
// test Redis is shared, so EstimateLen counts other tests' keys too).
func walkLen(t testing.TB, st *Store) int {
	t.Helper()
	n := 0
	if err := st.Walk(t.Context(), func(limits.Snapshot) bool { n++; return true }); err != nil {
		t.Fatal(err)
	}
	return n
}
