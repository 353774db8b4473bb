package redisstore_test

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/limits"
	redisstore "github.com/sluice-rl/sluice/limits/redis"
)

// An engine whose buckets live in Redis: any number of servers built this
// way on one Redis share the buckets.
func Example() {
	c := redis.NewClient(&redis.Options{Addr: exampleAddr()})
	defer c.Close()
	cfg := &limits.Config{Resources: map[string]*limits.Resource{
		"logins": {Template: &limits.Bucket{Size: 2, FillRate: 0.1}, MaxDynamicBuckets: 1000},
	}}
	e, err := limits.New(cfg, limits.Options{Store: redisstore.New(c, redisstore.Options{Prefix: "example:"})})
	if err != nil {
		fmt.Println(err)
		return
	}
	for range 3 {
		d := e.Allow(context.Background(), time.Now(), limits.Request{Resource: "logins", Domain: "user-42"})
		fmt.Println(d.Status)
	}
	// Output:
	// OK
	// OK
	// TIMEOUT
}
