package redisstore_test

import redisstore "github.com/sluice-rl/sluice/limits/redis"

func exampleAddr() string { return redisstore.ExampleAddr() }
