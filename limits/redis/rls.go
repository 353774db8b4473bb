package redisstore

import (
	"context"
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
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

// Walk implements rls.Store with SCAN over the prefix's counter keys (on
// every master of a cluster) and a GET for each, pipelined. A counter's
// State.Until is 0: its key expires then. ctx (the status page's request)
// bounds the walk.
func (r *RLS) Walk(ctx context.Context, fn func(rls.Counter) bool) error {
	prefix := r.s.prefix + "{e"
	return walkKeys(ctx, r.s.c, prefix+"*}[tw]*", func(keys []string) (bool, error) {
		pipe := r.s.c.Pipeline()
		gets := make([]*redis.StringCmd, len(keys))
		for i, key := range keys {
			gets[i] = pipe.Get(ctx, key)
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return false, err
		}
		for i, key := range keys {
			v, err := gets[i].Result()
			if err != nil || len(v) != 16 { // expired meanwhile
				continue
			}
			c, ok := rlsCounter(key[len(prefix):], v)
			if ok && !fn(c) {
				return false, nil
			}
		}
		return true, nil
	})
}

// rlsCounter decodes a counter's key after its prefix and "{e" (the
// escaped domain, "}", t or w, the escaped bucket) and its value (two
// little-endian doubles, as rls.lua writes them).
func rlsCounter(key, v string) (rls.Counter, bool) {
	end := strings.IndexByte(key, '}')
	if end < 0 || end+1 >= len(key) {
		return rls.Counter{}, false
	}
	bucket, ok := unescape(key[end+2:])
	if !ok {
		return rls.Counter{}, false
	}
	a := math.Float64frombits(binary.LittleEndian.Uint64([]byte(v[:8])))
	b := math.Float64frombits(binary.LittleEndian.Uint64([]byte(v[8:])))
	c := rls.Counter{Bucket: bucket, State: rls.State{Set: true, A: int64(a)}}
	switch key[end+1] {
	case 't':
		c.Algorithm, c.State.Level = rls.TokenBucket, b
	case 'w':
		c.Algorithm, c.State.N = rls.FixedWindow, int64(b)
	default:
		return rls.Counter{}, false
	}
	return c, true
}
