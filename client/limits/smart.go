package limits

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	sluicev1 "github.com/sluice-rl/sluice/api/sluice/v1"
)

// Defaults of Smart.
const (
	// DefaultBatch is the tokens one top-up asks for: scenario 5's 10.
	DefaultBatch = 10
	// DefaultTTL is how long a fetched token stays usable.
	DefaultTTL = time.Second
	// DefaultRetry is how long after a failed top-up the next may start.
	DefaultRetry = time.Second
)

// Smart configures the smart mode (WithSmart): a local bucket per target
// (resource, domain), topped up by batched requests in the background.
// Zero fields take their defaults.
//
// Source: quotaservice-design.md, "Smart clients", scenario 5.
type Smart struct {
	// Batch is the most tokens one top-up asks for (default DefaultBatch,
	// 10; at most MaxTokens). A top-up is one Allow for Batch tokens (or,
	// for a call wanting more than the bucket holds, the shortfall if
	// larger) with min_tokens 1 and max_wait 0: the service grants the
	// most it holds now, from 1 up, never with a wait and never in debt,
	// and at most the bucket's max tokens per request.
	Batch int64
	// LowWater is the low-water mark, in tokens (default Batch/2; below
	// Batch): when a call leaves the local bucket holding LowWater tokens
	// or fewer, a top-up starts in the background, so that in the steady
	// state the next calls find tokens and never wait on the network.
	// That holds while LowWater ≥ the target's calls per second × the
	// service's latency (the tokens used while the top-up is on its way)
	// and the service grants them.
	LowWater int64
	// TTL is how long a fetched token stays usable (default DefaultTTL,
	// 1 s): tokens unused TTL after the answer that brought them expire,
	// oldest first, and are lost (the service has counted them spent;
	// there is no giving back). Over any interval, a client so uses at
	// most the tokens granted to it during that interval and the TTL
	// before it: the TTL bounds how far hoarded tokens can bunch up.
	// Keep Batch ≤ the calls a target makes in a TTL, or tokens expire
	// unused while others wait for them.
	TTL time.Duration
	// Retry is how long after a top-up that failed (no answer within the
	// timeout, a transport error, the breaker open, REJECTED_NO_BUCKET)
	// the next may start (default DefaultRetry, 1 s). Meanwhile calls take
	// the tokens the bucket still holds, then the fallback limiter
	// decides, without waiting on the network.
	Retry time.Duration
}

// WithSmart turns the client's automatic mode (Acquire, the interceptors,
// the RoundTripper) from naive to smart, configured by s (see Smart). New
// returns an error for a field out of range.
func WithSmart(s Smart) Option { return func(c *Client) { c.smart = &s } }

// normalize applies the defaults and checks the ranges.
func (s *Smart) normalize() error {
	if s.Batch == 0 {
		s.Batch = DefaultBatch
	}
	if s.Batch < 1 || s.Batch > MaxTokens {
		return fmt.Errorf("limits: Smart.Batch %d outside [1, 2^53]", s.Batch)
	}
	if s.LowWater == 0 {
		s.LowWater = s.Batch / 2
	}
	if s.LowWater < 0 || s.LowWater >= s.Batch && s.Batch > 1 {
		return fmt.Errorf("limits: Smart.LowWater %d outside [0, Batch %d)", s.LowWater, s.Batch)
	}
	if s.TTL == 0 {
		s.TTL = DefaultTTL
	}
	if s.Retry == 0 {
		s.Retry = DefaultRetry
	}
	if s.TTL < 0 || s.Retry < 0 {
		return fmt.Errorf("limits: Smart.TTL %v and Smart.Retry %v must be ≥ 0", s.TTL, s.Retry)
	}
	return nil
}

// bucketState is what the last top-up of a local bucket came to.
type bucketState uint8

const (
	stateOK       bucketState = iota // granted (or none yet)
	stateRejected                    // the service rejected it: calls are rejected until notBefore
	stateDown                        // no answer: calls go to the fallback limiter
	stateError                       // the request was invalid: calls get err
)

// localBucket is the smart mode's bucket of one target.
type localBucket struct {
	mu        sync.Mutex
	lots      []lot // fetched tokens, oldest first
	tokens    int64 // their sum
	inflight  bool
	done      chan struct{} // closed when the top-up in flight ends
	state     bucketState
	why       reason         // stateDown: why
	rejected  *RejectedError // stateRejected: the service's rejection
	err       error          // stateError
	notBefore time.Time      // no top-up starts before
	used      time.Time
}

// lot is the tokens of one top-up.
type lot struct {
	n       int64
	expires time.Time
	store   bool // granted while the service's store was down (degraded)
}

// expire drops the lots expired at now and returns how many tokens went.
func (b *localBucket) expire(now time.Time) int64 {
	var gone int64
	i := 0
	for ; i < len(b.lots) && !now.Before(b.lots[i].expires); i++ {
		gone += b.lots[i].n
	}
	if i > 0 {
		b.lots = append(b.lots[:0], b.lots[i:]...)
		b.tokens -= gone
	}
	return gone
}

// add adds n > 0 tokens expiring at expires (no earlier than the lots
// already held: every lot has the same TTL and arrives later); store
// marks tokens the service granted while its store was down.
func (b *localBucket) add(n int64, expires time.Time, store bool) {
	b.lots = append(b.lots, lot{n: n, expires: expires, store: store})
	b.tokens += n
}

// take removes n ≤ b.tokens tokens, oldest first, and reports whether any
// of them came from a lot granted while the service's store was down.
func (b *localBucket) take(n int64) (store bool) {
	b.tokens -= n
	for n > 0 {
		store = store || b.lots[0].store
		if b.lots[0].n > n {
			b.lots[0].n -= n
			return store
		}
		n -= b.lots[0].n
		b.lots = b.lots[1:]
	}
	return store
}

// locals holds the local buckets, per target.
type locals struct {
	mu sync.Mutex
	m  map[key]*localBucket
}

func (l *locals) init() { l.m = map[key]*localBucket{} }

// get returns the target's bucket, made on first use; nil past MaxTargets.
func (l *locals) get(k key) *localBucket {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.m[k]
	if b == nil && len(l.m) < MaxTargets {
		b = &localBucket{}
		l.m[k] = b
	}
	return b
}

// sweep expires tokens and forgets the buckets that are empty, idle for
// targetIdle, and free to top up (with nothing in flight).
func (c *Client) sweepLocals(now time.Time) {
	if c.smart == nil {
		return
	}
	l := &c.locals
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, b := range l.m {
		b.mu.Lock()
		if gone := b.expire(now); gone > 0 {
			c.m.localGone.Add(float64(gone))
		}
		if b.tokens == 0 && !b.inflight && now.Sub(b.used) >= targetIdle && !now.Before(b.notBefore) {
			delete(l.m, k)
		}
		b.mu.Unlock()
	}
}

// acquireSmart is Acquire's smart mode; until is WithRejectWait's bound.
func (c *Client) acquireSmart(ctx context.Context, k key, n int64, until time.Time) (Grant, error) {
	b := c.locals.get(k)
	if b == nil {
		return c.acquireNaive(ctx, k, n, until)
	}
	for {
		if c.closed.Load() {
			return Grant{}, ErrClosed
		}
		now := c.now()
		b.mu.Lock()
		if gone := b.expire(now); gone > 0 {
			c.m.localGone.Add(float64(gone))
		}
		b.used = now
		if b.tokens >= n {
			store := b.take(n)
			left := b.tokens
			c.topUp(b, k, now, 0)
			b.mu.Unlock()
			c.m.localUsed.Add(float64(n))
			return Grant{Granted: n, Remaining: float64(left), Source: FromLocalBucket, StoreDegraded: store}, nil
		}
		c.topUp(b, k, now, n)
		switch {
		case b.state == stateDown:
			why := b.why
			b.mu.Unlock()
			return c.fallback(ctx, k, n, why, until)
		case b.state == stateError && !b.inflight:
			err := b.err
			b.mu.Unlock()
			return Grant{}, err
		case b.state == stateRejected && !b.inflight:
			rej := *b.rejected
			if !rej.RetryNever {
				rej.RetryAfter = max(b.notBefore.Sub(now), 0)
			}
			b.mu.Unlock()
			again, err := c.waitRejected(ctx, until, &rej)
			if err != nil {
				return Grant{}, err
			}
			if again {
				continue
			}
			return Grant{}, &rej
		case !b.inflight:
			// No top-up could start: the client is closing.
			b.mu.Unlock()
			return Grant{}, ErrClosed
		}
		// The first call of a target, or calls faster than the top-ups:
		// wait for the one in flight (bounded by the timeout).
		done := b.done
		b.mu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
			return Grant{}, fmt.Errorf("limits: %s/%s: %w", k.resource, k.domain, ctx.Err())
		}
	}
}

// topUp starts a top-up of b (locked) at now unless one is in flight or
// not yet allowed: for need > 0, a call that found too few tokens; for
// need 0, when b is at or below the low-water mark.
func (c *Client) topUp(b *localBucket, k key, now time.Time, need int64) {
	if b.inflight || now.Before(b.notBefore) {
		return
	}
	if need == 0 && b.tokens > c.smart.LowWater {
		return
	}
	ask := c.smart.Batch
	if need > b.tokens {
		ask = min(max(ask, need-b.tokens), MaxTokens)
	}
	done := make(chan struct{})
	if !c.background(func() { c.fetch(b, k, ask, done) }) {
		return
	}
	b.inflight, b.done = true, done
	if b.state == stateRejected || b.state == stateError {
		b.state, b.rejected, b.err = stateOK, nil, nil
	}
}

// fetch is one top-up of b: ask tokens with min_tokens 1 and max_wait 0.
func (c *Client) fetch(b *localBucket, k key, ask int64, done chan struct{}) {
	req := &sluicev1.AllowRequest{Resource: k.resource, Domain: k.domain, Tokens: ask, MinTokens: 1, MaxWait: durationpb.New(0)}
	resp, why, err := c.ask(c.ctx, callTopUp, req)
	now := c.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	defer close(done)
	b.inflight = false
	if why == reasonNone && err == nil && resp.GetStatus() == sluicev1.AllowResponse_REJECTED_NO_BUCKET {
		why = reasonNoBucket
	}
	switch {
	case errors.Is(err, ErrInvalidRequest):
		b.state, b.err = stateError, err
		b.notBefore = now.Add(c.smart.Retry)
	case err != nil: // the client is closing
		b.state, b.why = stateDown, reasonUnavailable
	case why != reasonNone:
		b.state, b.why = stateDown, why
		b.notBefore = now.Add(c.smart.Retry)
	case resp.GetStatus() == sluicev1.AllowResponse_OK && resp.GetGranted() > 0:
		g := resp.GetGranted()
		b.add(g, now.Add(c.smart.TTL), resp.GetDegraded())
		b.state = stateOK
		c.m.localFetched.Add(float64(g))
	default:
		_, aerr := answer(k.resource, k.domain, resp)
		var rej *RejectedError
		if !errors.As(aerr, &rej) {
			rej = &RejectedError{Resource: k.resource, Domain: k.domain, Status: resp.GetStatus(), RetryNever: true, Detail: "no tokens granted"}
		}
		b.state, b.rejected = stateRejected, rej
		if rej.RetryNever {
			b.notBefore = now.Add(c.smart.Retry)
		} else {
			b.notBefore = now.Add(rej.RetryAfter)
		}
	}
}
