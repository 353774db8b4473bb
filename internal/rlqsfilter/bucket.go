package rlqsfilter

import (
	"math"
	"time"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

// MinRate is the lowest rate (requests per second) a token bucket can
// carry to the filter: one request an hour, the longest fill interval
// Encode writes. A server sends a lower rate as a DENY_ALL blanket rule.
const MinRate = 1.0 / 3600

// TokenBucket is an envoy.type.v3.TokenBucket's fields: MaxTokens (the
// most it holds, and what a new one starts with), TokensPerFill and
// FillInterval (the proto's seconds and nanos as one duration, so
// FillInterval % time.Second is its nanos). The filter fills it
// continuously at Rate.
type TokenBucket struct {
	MaxTokens     uint32
	TokensPerFill uint32
	FillInterval  time.Duration
}

// Rate returns the rate (tokens per second) at which the filter fills
// tb: TokensPerFill ÷ FillInterval's whole seconds (truncated), +Inf when
// they are 0 and TokensPerFill is not (as Envoy's division does), NaN
// when both are.
//
// Source: Envoy's global_client_impl.cc, createTokenBucketFromAction.
func (tb TokenBucket) Rate() float64 {
	return float64(tb.TokensPerFill) / float64(int64(tb.FillInterval/time.Second))
}

// Same reports whether the filter takes a new assignment's token bucket o
// for tb, and keeps tb (its tokens, and its rate) rather than starting o
// full: MaxTokens, TokensPerFill and FillInterval's nanos equal. Nothing
// else is compared, so a server that writes buckets of different rates
// must make them differ in one of those (Encode does).
//
// Source: Envoy's global_client_impl.cc, protoTokenBucketsEq.
func (tb TokenBucket) Same(o TokenBucket) bool {
	return tb.MaxTokens == o.MaxTokens && tb.TokensPerFill == o.TokensPerFill &&
		tb.FillInterval%time.Second == o.FillInterval%time.Second
}

// Encode returns the token bucket that fills at rate (requests per
// second, at least MinRate) as the filter reads one, holding burst's
// worth of it. The filter takes the fill rate as TokensPerFill ÷ the
// whole seconds of FillInterval (an interval under a second would fill
// without limit), and keeps a bucket when a new one is the Same. So the
// fill interval is k whole seconds, k in [1, 3600] the least with rate ×
// k ≥ 1000 (a thousandth's precision) or 3600; TokensPerFill is ⌊rate ×
// k⌋ (never faster than rate, at least 1); k is written in the nanos too
// (k s + k ns), so that two buckets of different rates are never the
// Same. MaxTokens is max(1, ⌈rate × burst⌉): a new bucket starts full,
// so a proxy may admit up to MaxTokens at once on top of the rate, once
// per new assignment (docs/rlqs.md, "The bound"). Values beyond a
// uint32 are capped.
func Encode(rate float64, burst time.Duration) TokenBucket {
	k := math.Min(3600, math.Max(1, math.Ceil(1000/rate)))
	per := math.Min(math.Max(1, math.Floor(rate*k)), math.MaxUint32)
	return TokenBucket{
		MaxTokens:     uint32(math.Min(math.Max(1, math.Ceil(rate*burst.Seconds())), math.MaxUint32)),
		TokensPerFill: uint32(per),
		FillInterval:  time.Duration(k)*time.Second + time.Duration(k),
	}
}

// Strategy is an assignment's rate_limit_strategy: a token bucket when
// TokenBucket is not nil, else the blanket rule Blanket (ALLOW_ALL admits
// every request; DENY_ALL, or any other value, none).
// (requests_per_time_unit is not modelled: the filter does not enforce
// it, and Sluice never sends it.)
//
// Source: Envoy's api/envoy/type/v3/ratelimit_strategy.proto.
type Strategy struct {
	TokenBucket *TokenBucket
	Blanket     typev3.RateLimitStrategy_BlanketRule
}

// Assignment is a bucket's active assignment, as the filter enforces it.
type Assignment struct {
	// Rate is the token bucket's fill rate (requests per second); +Inf
	// for ALLOW_ALL, 0 for DENY_ALL.
	Rate float64
	// MaxTokens is the token bucket's (0 for a blanket rule).
	MaxTokens uint32
	// Expires is when its time to live ends.
	Expires time.Time
}

// Bucket is one bucket of the filter: its fallbacks, its active
// assignment and its token bucket. The zero value is a bucket without an
// assignment whose fallbacks allow (ALLOW_ALL, the blanket rule's zero
// value): set them to DENY_ALL for a bucket that admits nothing the
// server did not assign. Not safe for concurrent use; time is passed in
// and must not go backwards.
type Bucket struct {
	// NoAssignment is the no_assignment_behavior's blanket rule: what the
	// bucket does before its first assignment (or after an Abandon).
	NoAssignment typev3.RateLimitStrategy_BlanketRule
	// Expired is the expired_assignment_behavior's fallback blanket
	// rule: what it does once an assignment's time to live ended without
	// a new one.
	Expired typev3.RateLimitStrategy_BlanketRule

	assigned bool
	strategy Strategy  // the last assignment's (its token bucket is what a new one is compared with)
	expires  time.Time // its time to live's end
	// The token bucket enforced: kept from an earlier assignment when the
	// new one is the Same, so its rate may differ from strategy's.
	max, rate float64
	tokens    float64
	at        time.Time // when tokens was last filled
}

// Assign applies an assignment received at now: strategy for ttl (of
// which the filter reads the whole seconds only, so it may end up to a
// second early). A token bucket the Same as the active assignment's is
// kept, tokens and all (the assignment is extended); any other token
// bucket starts full. It returns whether a new token bucket started:
// the proxy may admit its MaxTokens at once.
//
// Source: Envoy's global_client_impl.cc, onQuotaResponseImpl,
// shouldReplaceTokenBucket and startActionExpirationTimer.
func (b *Bucket) Assign(now time.Time, s Strategy, ttl time.Duration) (fresh bool) {
	keep := b.active(now) && b.strategy.TokenBucket != nil && s.TokenBucket != nil && b.strategy.TokenBucket.Same(*s.TokenBucket)
	if s.TokenBucket != nil {
		tb := *s.TokenBucket
		s.TokenBucket = &tb // the caller's may change
	}
	b.assigned, b.strategy, b.expires = true, s, now.Add(ttl.Truncate(time.Second))
	switch {
	case keep:
		return false
	case s.TokenBucket == nil:
		b.max, b.rate, b.tokens = 0, 0, 0
		return false
	}
	b.max, b.rate = float64(s.TokenBucket.MaxTokens), s.TokenBucket.Rate()
	if !(b.rate > 0) {
		b.rate = 0 // NaN (0 ÷ 0) fills nothing
	}
	b.tokens, b.at = b.max, now // a new token bucket starts full
	return true
}

// Abandon forgets the bucket's assignment (an AbandonAction: the filter
// drops the bucket, and its next request starts it again without one).
func (b *Bucket) Abandon() {
	*b = Bucket{NoAssignment: b.NoAssignment, Expired: b.Expired}
}

// active reports whether an assignment applies at now.
func (b *Bucket) active(now time.Time) bool { return b.assigned && now.Before(b.expires) }

// Active returns the assignment that applies at now; ok is false when
// none does (none yet, or its time to live ended).
func (b *Bucket) Active(now time.Time) (a Assignment, ok bool) {
	if !b.active(now) {
		return Assignment{}, false
	}
	a.Expires = b.expires
	switch {
	case b.strategy.TokenBucket != nil:
		a.Rate, a.MaxTokens = b.rate, uint32(b.max)
	case b.strategy.Blanket == typev3.RateLimitStrategy_ALLOW_ALL:
		a.Rate = math.Inf(1)
	}
	return a, true
}

// Allow decides one request at now: by the fallbacks without an active
// assignment, by its blanket rule, or by its token bucket, which admits
// the request when it holds a whole token (and takes it).
//
// Source: Envoy's source/common/common/token_bucket_impl.cc
// (AtomicTokenBucketImpl::consume of one token, no partial consumption).
func (b *Bucket) Allow(now time.Time) bool { return b.take(now, 1, true) == 1 }

// Admit admits requests arriving as a fluid (the simulator's model): of
// n requests (n ≥ 0) at now, it returns how many the bucket admits — all
// or none by a blanket rule, else min(n, the tokens held), fractions
// included, which are taken. Over a run it admits what Allow would, to
// within a request.
func (b *Bucket) Admit(now time.Time, n float64) float64 { return b.take(now, n, false) }

// take admits up to n requests at now (whole: only whole tokens).
func (b *Bucket) take(now time.Time, n float64, whole bool) float64 {
	rule := b.strategy.Blanket
	switch {
	case !b.assigned:
		rule = b.NoAssignment
	case !now.Before(b.expires):
		rule = b.Expired
	case b.strategy.TokenBucket != nil:
		if now.After(b.at) {
			b.tokens = math.Min(b.max, b.tokens+b.rate*now.Sub(b.at).Seconds())
			b.at = now
		}
		held := b.tokens
		if whole {
			held = math.Floor(held)
		}
		got := math.Min(n, held)
		b.tokens -= got
		return got
	}
	if rule == typev3.RateLimitStrategy_ALLOW_ALL {
		return n
	}
	return 0
}
