package redisstore

import (
	"context"
	"fmt"

	"github.com/sluice-rl/sluice/limits/rls"
)

// rlsResetScript deletes its keys (the counters of an RLS reset, all
// under one domain's hash tag) and returns how many existed: DEL, inside
// a script so that it goes through the store's batcher and breaker as the
// decisions do.
var rlsResetScript = newScript("rls_reset", "return redis.call('DEL', unpack(KEYS))")

// Reset implements rls.Store: one DEL of the buckets' counter keys under
// both algorithms (the domain's hash tag "{e<domain>}", then "t" for a
// token bucket, "w" for a fixed window, then the escaped bucket: as
// Decide writes them), in one script, one round trip, through the
// Store's batcher (the circuit breaker, Options.Timeout and ctx, as for
// Decide). The keys share the domain's hash tag, so on a Redis Cluster
// they are in one slot: one node answers. It returns how many keys
// existed (two for a bucket counted under both algorithms). Errors:
// Decide's (ErrUnavailable when Redis could not answer, ctx.Err()
// wrapped when ctx ended), more than rls.MaxHits buckets, or a malformed
// reply. No buckets: 0, no round trip.
//
// Source: envoyproxy/ratelimit issue #191 (reset one key); gubernator's
// Behavior RESET_REMAINING.
func (r *RLS) Reset(ctx context.Context, domain string, buckets []string) (int, error) {
	if len(buckets) == 0 {
		return 0, nil
	}
	if len(buckets) > rls.MaxHits {
		return 0, fmt.Errorf("limits/redis: reset: %d buckets, at most %d", len(buckets), rls.MaxHits)
	}
	base := r.domainBase(domain)
	keys := make([]string, 0, 2*len(buckets))
	for _, b := range buckets {
		eb := escape(b)
		keys = append(keys, base+"t"+eb, base+"w"+eb)
	}
	cmd, err := r.s.eval(ctx, rlsResetScript, keys)
	if err != nil {
		return 0, err
	}
	n, err := cmd.Int()
	if err != nil {
		return 0, scriptError(fmt.Errorf("reset: %w", err))
	}
	return n, nil
}
