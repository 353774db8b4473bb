package redistest

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestStartCluster: three masters owning all 16384 slots; Stop kills
// them and removes their directory.
func TestStartCluster(t *testing.T) {
	t.Parallel() // real processes that mostly wait: beside the others
	c, err := StartCluster(3)
	if errors.Is(err, ErrSkip) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			c.Stop()
		}
	}()
	if len(c.Addrs()) != 3 {
		t.Fatalf("addrs %v", c.Addrs())
	}
	cc := c.Client()
	defer cc.Close()
	ctx := context.Background()
	shards, err := cc.ClusterShards(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	owned, masters := int64(0), map[int64]bool{}
	for _, sh := range shards {
		for _, r := range sh.Slots {
			owned += r.End - r.Start + 1
		}
		for _, n := range sh.Nodes {
			if n.Role == "master" {
				masters[n.Port] = true
			}
		}
	}
	if owned != 16384 || len(masters) != 3 {
		t.Fatalf("%d slots owned by %v", owned, masters)
	}
	dir, addr := c.dir, c.Addrs()[0]
	c.Stop()
	stopped = true
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s left behind: %v", dir, err)
	}
	n := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer n.Close()
	if n.Ping(ctx).Err() == nil {
		t.Errorf("%s still answers after Stop", addr)
	}
}
