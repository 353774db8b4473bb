package redisstore

import (
	"context"
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"
	"github.com/sluice-rl/sluice/limits/rls"
)

//go:embed rls.lua
var rlsLua string

var rlsScript = newScript("rls", rlsLua)

// RLS is the counters of Envoy's rate limit service (rls.Store) in a
// Store's Redis: a request's hits decided together in one script
// (rls.lua, a mirror of rls.Decide), through the Store's batcher
// (batching, the circuit breaker, Options.Timeout and the request's
// context, as for Take): concurrent requests of one domain that share a
// round trip are one script, decided in order, each as if alone. Every
// counter of a domain is under the domain's hash tag, "{e<domain>}", so
// a request's keys are in one slot of a Redis Cluster (and a hot
// domain's counters on one master). Keys expire up to three seconds
// after their state is the same as none (a token bucket full again, a
// window over), so that a counter in use has its TTL set at most once in
// three seconds (see rls.lua).
// Safe for concurrent use.
type RLS struct{ s *Store }

// NewRLS returns the rate limit service's counters in s's Redis.
func NewRLS(s *Store) *RLS { return &RLS{s: s} }

// rlsHit is one hit of an RLS request as rls.lua takes it: its counter
// (an index in the call's rkeys), the algorithm (1 token bucket, 2 fixed
// window, 3 token bucket with a depth of its own, 4 calendar window), the
// limit, the period (µs), the hits (at most the depth + 1), refund + 2 ×
// soft (each 0/1), and x and y: for 3 the depth, for 4 the window's start
// and end (Unix µs, from the caller's now: Redis has no time zones).
type rlsHit struct {
	key                          int
	alg, limit, period, n, flags float64
	x, y                         float64
}

// rlsReply is the length of a request's reply with n hits: granted, then
// four numbers a hit, each a little-endian double (see rls.lua).
func rlsReply(n int) int { return 8 * (1 + 4*n) }

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
	c := r.call(now, domain, hits)
	err := r.s.run(ctx, c.base, c)
	granted := false
	if err == nil {
		granted = parseRLS(c.res, results[:len(hits)])
	}
	putCall(c)
	return granted, err
}

// call returns Decide's call (pooled: putCall it).
func (r *RLS) call(now int64, domain string, hits []rls.Hit) *call {
	c := getCall(rlsScript)
	c.rls = true
	c.base = r.domainBase(domain)
	c.nowNs = now // (µs; read when the store's callerTime is set)
	for _, h := range hits {
		alg, letter, depth := 1.0, "t", h.Policy.Limit
		var x, y float64
		switch {
		case h.Policy.Algorithm == rls.FixedWindow && !h.Policy.Calendar.IsZero():
			start, end := h.Policy.Calendar.Window(now)
			alg, letter, x, y = 4, "w", float64(start), float64(end)
		case h.Policy.Algorithm == rls.FixedWindow:
			alg, letter = 2, "w"
		case h.Policy.Burst != 0:
			alg, depth = 3, h.Policy.Burst
			x = float64(depth)
		}
		key := c.base + letter + escape(h.Bucket)
		ki := slices.Index(c.rkeys, key)
		if ki < 0 {
			ki = len(c.rkeys)
			c.rkeys = append(c.rkeys, key)
		}
		c.rhits = append(c.rhits, rlsHit{key: ki, alg: alg, limit: float64(h.Policy.Limit), period: float64(h.Policy.Period),
			n: float64(min(h.Hits, uint64(depth)+1)), flags: float64(b2i(h.Refund) + 2*b2i(h.Soft)), x: x, y: y})
	}
	return c
}

// domainBase begins the keys of domain's counters: the prefix and the
// domain's hash tag, "{e<domain>}"; then "t" (a token bucket) or "w" (a
// fixed window) and the escaped bucket.
func (r *RLS) domainBase(domain string) string { return r.s.prefix + "{e" + escape(domain) + "}" }

// parseRLS decodes a request's reply (rlsReply(len(results)) bytes: see
// rls.lua) into results and returns whether it was granted.
func parseRLS(v string, results []rls.Result) bool {
	for i := range results {
		o := 1 + 4*i
		results[i] = rls.Result{Over: doubleAt(v, o) == 1, Remaining: uint32(doubleAt(v, o+1)), Reset: doubleAt(v, o+2), RetryAfter: doubleAt(v, o+3)}
	}
	return doubleAt(v, 0) == 1
}

// rlsArgs builds an RLS command (see rls.lua): the counters of its
// requests, each once, then one string of packed numbers: the TTL's
// extra milliseconds and whether the requests bring their now, then per
// request its hits' count, its now if so, and its hits, each on its
// counter's index in KEYS.
func (b *batcher) rlsArgs(m *command) []any {
	clear(b.keyIx)
	nk, nh := 0, 0
	for _, c := range m.calls {
		for _, k := range c.rkeys {
			if _, ok := b.keyIx[k]; !ok {
				nk++
				b.keyIx[k] = nk
			}
		}
		nh += len(c.rhits)
	}
	args := make([]any, 0, 3+nk+1)
	args = append(args, argEvalSha, nil, nk)
	for _, c := range m.calls {
		for i := range c.rkeys {
			if b.keyIx[c.rkeys[i]] == len(args)-2 { // its first
				args = append(args, &c.rkeys[i])
			}
		}
	}
	extra, callerTime := 0.0, b.st.callerTime
	if callerTime {
		// The tests' instants are not Redis's: keys must not expire by
		// Redis's clock before the tests' clock says they may.
		extra = 3600000
	}
	nums := make([]byte, 0, 8*(2+2*len(m.calls)+8*nh))
	nums = appendDoubles(nums, extra, float64(b2i(callerTime)))
	for _, c := range m.calls {
		nums = appendDoubles(nums, float64(len(c.rhits)))
		if callerTime {
			nums = appendDoubles(nums, float64(c.nowNs))
		}
		for _, h := range c.rhits {
			nums = appendDoubles(nums, float64(b.keyIx[c.rkeys[h.key]]), h.alg, h.limit, h.period, h.n, h.flags)
			switch h.alg {
			case 3:
				nums = appendDoubles(nums, h.x)
			case 4:
				nums = appendDoubles(nums, h.x, h.y)
			}
		}
	}
	return append(args, nums)
}

// answerRLS hands an RLS command's reply to its calls, each its part.
func (m *command) answerRLS() {
	n := 0
	for _, c := range m.calls {
		n += rlsReply(len(c.rhits))
	}
	v, ok := m.cmd.Val().(string)
	if !ok || len(v) != n {
		err := fmt.Errorf("limits/redis: decide: reply %T of %d bytes for %d requests, want %d bytes", m.cmd.Val(), len(v), len(m.calls), n)
		for _, c := range m.calls {
			c.err = err
		}
		return
	}
	for _, c := range m.calls {
		n := rlsReply(len(c.rhits))
		c.res, v = v[:n], v[n:]
	}
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
			if err != nil || (len(v) != 16 && len(v) != 24) { // expired meanwhile
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
// little-endian doubles, A and B, as rls.lua writes them, and the key's
// expiry, unread).
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
