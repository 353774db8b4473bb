package redisstore

import (
	"context"
	"fmt"

	"github.com/sluice-rl/sluice/limits"
)

// resetScript forgets one bucket of the limits engine: KEYS[1] its token
// bucket (a string), KEYS[2] its burst-tier domain (a hash), KEYS[3] the
// resource's dynamic buckets (a sorted set), ARGV[1] the escaped domain
// (its member there); all under the resource's hash tag. It returns how
// many of the two bucket keys existed. The resource's global log ("g")
// is not touched.
var resetScript = newScript("reset", `local n = redis.call('DEL', KEYS[1], KEYS[2])
redis.call('ZREM', KEYS[3], ARGV[1])
return n`)

// Reset implements limits.Store: one script (one round trip, through the
// Store's batcher: the circuit breaker, Options.Timeout and ctx, as for
// Take) that deletes k's token bucket and burst-tier domain keys (a
// domain is one or the other, or, between a change of algorithm and its
// next request, both) and its member of the resource's dynamic set, all
// under the resource's hash tag: one slot of a Redis Cluster. The
// resource's global log stays. It reports whether either bucket key
// existed. Errors: Take's (ErrUnavailable when Redis could not answer,
// ctx.Err() wrapped when ctx ended), or a malformed reply.
//
// Source: envoyproxy/ratelimit issue #191 (reset one key); gubernator's
// Behavior RESET_REMAINING.
func (s *Store) Reset(ctx context.Context, k limits.Key) (bool, error) {
	member := escape(k.Domain)
	keys := []string{s.bucketKey(k.Resource, member), s.domainKey(k.Resource, member), s.dynKey(k.Resource)}
	cmd, err := s.eval(ctx, resetScript, keys, member)
	if err != nil {
		return false, err
	}
	n, err := cmd.Int()
	if err != nil {
		return false, scriptError(fmt.Errorf("reset: %w", err))
	}
	return n > 0, nil
}
