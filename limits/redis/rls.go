package redisstore

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"

	"github.com/sluice-rl/sluice/limits/rls"
)

//go:embed rls.lua
var rlsLua string

var rlsScript = newScript(rlsLua)

// RLS is the counters of Envoy's rate limit service (rls.Store) in a
// Store's Redis: a request's hits in one script (rls.lua, a mirror of
// rls.Decide), one round trip shared with the Store's other calls
// (batching, the circuit breaker, Options.Timeout and the request's
// context, as for Take). Every counter of a domain is under the domain's
// hash tag, "{e<domain>}", so a request's keys are in one slot of a Redis
// Cluster (and a hot domain's counters on one master). Keys expire when
// their state is the same as none: a token bucket when full again, a
// window when it ends. Safe for concurrent use.
type RLS struct{ s *Store }

// NewRLS returns the rate limit service's counters in s's Redis.
func NewRLS(s *Store) *RLS { return &RLS{s: s} }

// Decide implements rls.Store. It reads Redis TIME (now is ignored,
// except in this package's tests); errors are Take's (ErrUnavailable
// when Redis could not answer, ctx.Err() wrapped when ctx ended) or a
// malformed reply.
func (r *RLS) Decide(ctx context.Context, now int64, domain string, hits []rls.Hit, results []rls.Result) (bool, error) {
	if len(hits) == 0 {
		return true, nil
	}
	if len(hits) > rls.MaxHits {
		return false, fmt.Errorf("limits/redis: decide: %d hits, at most %d", len(hits), rls.MaxHits)
	}
	tag := r.s.prefix + "{e" + escape(domain) + "}"
	keys := make([]string, 0, len(hits))
	packed := make([]byte, 0, 56*len(hits))
	nowArg, extraTTL := "", "0"
	if r.s.callerTime {
		// The tests' instants are not Redis's: keys must not expire by
		// Redis's clock before the tests' clock says they may.
		nowArg, extraTTL = strconv.FormatInt(now, 10), "3600000"
	}
	for _, h := range hits {
		alg, letter := 1, "t"
		if h.Policy.Algorithm == rls.FixedWindow {
			alg, letter = 2, "w"
		}
		key := tag + letter + escape(h.Bucket)
		ki := -1
		for j, k := range keys {
			if k == key {
				ki = j
				break
			}
		}
		if ki < 0 {
			ki = len(keys)
			keys = append(keys, key)
		}
		n := min(h.Hits, uint64(h.Policy.Limit)+1)
		packed = appendDoubles(packed, float64(ki+1), float64(alg), float64(h.Policy.Limit), float64(h.Policy.Period), float64(n),
			float64(b2i(h.Refund)), float64(b2i(h.Soft)))
	}
	cmd, err := r.s.eval(ctx, rlsScript, keys, nowArg, string(packed), extraTTL)
	if err != nil {
		return false, err
	}
	v, err := cmd.Int64Slice()
	if err != nil {
		return false, scriptError(err)
	}
	if len(v) != 1+4*len(hits) {
		return false, fmt.Errorf("limits/redis: decide: reply of %d numbers, want %d", len(v), 1+4*len(hits))
	}
	for i := range hits {
		o := v[1+4*i:]
		results[i] = rls.Result{Over: o[0] == 1, Remaining: uint32(o[1]), Reset: o[2], RetryAfter: o[3]}
	}
	return v[0] == 1, nil
}
