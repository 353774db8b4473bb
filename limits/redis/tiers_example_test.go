package redisstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/limits"
	redisstore "github.com/sluice-rl/sluice/limits/redis"
)

// Charon's burst tiers in Redis: servers built this way on one Redis share
// each domain's access log. A tenant may make 3 requests an hour, and
// burst once to 2 more.
func Example_burstTiers() {
	c := redis.NewClient(&redis.Options{Addr: exampleAddr()})
	defer c.Close()
	cfg := &limits.Config{Resources: map[string]*limits.Resource{
		"reports": {Algorithm: limits.BurstTiers, Tiers: []limits.Tier{
			{Limit: 3, Window: time.Hour, Active: time.Hour},
			{Limit: 2, Window: time.Hour, Active: time.Hour, Cooldown: 24 * time.Hour},
		}},
	}}
	e, err := limits.New(cfg, limits.Options{Store: redisstore.New(c, redisstore.Options{Prefix: "example-tiers:"})})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, hits := range []int64{4, 2, 1} {
		d := e.Allow(context.Background(), time.Now(), limits.Request{Resource: "reports", Domain: "acme", Tokens: hits, MinTokens: 1})
		fmt.Printf("%d asked: %s, %d granted, tier %d (%d of %d)\n", hits, d.Status, d.Granted, d.Tiers.Tier, d.Tiers.TierHits, d.Tiers.TierLimit)
	}
	// Output:
	// 4 asked: OK, 4 granted, tier 2 (1 of 2)
	// 2 asked: OK, 1 granted, tier 2 (2 of 2)
	// 1 asked: TIMEOUT, 0 granted, tier 2 (2 of 2)
}
