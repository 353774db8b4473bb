package redistest

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
)

// ForEachNode runs fn on the single Redis behind c, or on every master of
// a cluster (one at a time), failing t on the first error.
func ForEachNode(t testing.TB, c redis.UniversalClient, fn func(ctx context.Context, c redis.UniversalClient) error) {
	t.Helper()
	var err error
	if cc, ok := c.(*redis.ClusterClient); ok {
		var mu sync.Mutex
		err = cc.ForEachMaster(t.Context(), func(ctx context.Context, m *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			return fn(ctx, m)
		})
	} else {
		err = fn(t.Context(), c)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// InfoSum returns the sum over every node of c (see ForEachNode) of the
// integer field of INFO section that follows prefix at the start of a
// line, e.g. InfoSum(t, c, "memory", "used_memory:") or
// InfoSum(t, c, "commandstats", "cmdstat_scan:calls="); 0 where a node
// has no such line.
func InfoSum(t testing.TB, c redis.UniversalClient, section, prefix string) int64 {
	t.Helper()
	var n int64
	ForEachNode(t, c, func(ctx context.Context, c redis.UniversalClient) error {
		info, err := c.Info(ctx, section).Result()
		for line := range strings.Lines(info) {
			if rest, ok := strings.CutPrefix(line, prefix); ok {
				v, _, _ := strings.Cut(strings.TrimSpace(rest), ",")
				k, _ := strconv.ParseInt(v, 10, 64)
				n += k
			}
		}
		return err
	})
	return n
}

// CommandCalls returns how many times Redis ran cmd (lower case, e.g.
// "scan") since it started or its statistics were last reset, summed
// over every node of c: INFO commandstats' cmdstat_<cmd> calls.
func CommandCalls(t testing.TB, c redis.UniversalClient, cmd string) int64 {
	t.Helper()
	return InfoSum(t, c, "commandstats", "cmdstat_"+cmd+":calls=")
}
