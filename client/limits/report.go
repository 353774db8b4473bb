package limits

import (
	"context"
	"errors"
	"fmt"
	"sync"

	sluicev1 "github.com/sluice-rl/sluice/api/sluice/v1"
)

// ErrBacklog is returned by Report when it drops tokens: MaxTargets
// targets already wait to be flushed, or the target's batch holds
// MaxTokens.
var ErrBacklog = errors.New("limits: report backlog full")

// reports holds Report's batches: tokens not yet charged, per target.
type reports struct {
	mu      sync.Mutex
	pending map[key]int64
	closed  bool // the final flush has taken the batches
}

func (r *reports) init() { r.pending = map[key]int64{} }

// Report charges n tokens of (resource, domain) after the fact: the call
// they account for has happened (scenario 6, say one token per
// millisecond of work). It adds them to the target's batch and returns at
// once; it never blocks on the network. Every report interval
// (WithReportInterval), and at Close, each target's batch is sent as one
// request (tokens: the batch, min_tokens 1, the bucket's own max wait): the
// service charges what it can — into debt, so that later callers wait —
// and what it did not charge (a grant capped by the bucket's max tokens
// per request, a REJECTED_TIMEOUT, no answer) stays in the batch for the
// next flush. Tokens the service can never charge (REJECTED_NO_BUCKET,
// REJECTED_TOO_MANY_BUCKETS, REJECTED_TOO_MANY_TOKENS_REQUESTED, invalid)
// are dropped, as are those still batched after the flush at Close; both
// are counted (sluice_quota_client_report_dropped_tokens_total).
//
// Errors: one wrapping ErrInvalidRequest (see Allow), ErrBacklog (the
// tokens over the bound were dropped), ErrClosed. Safe for concurrent use.
//
// Source: quotaservice-design.md, "Use cases" ("After-the-fact quota
// consumption updates … could be batched"), scenario 6.
func (c *Client) Report(resource, domain string, n int64) error {
	if err := check(resource, domain, n); err != nil {
		if n > 0 {
			c.m.dropped.WithLabelValues("invalid").Add(float64(n))
		}
		return err
	}
	k := key{resource, domain}
	c.reports.mu.Lock()
	if c.reports.closed || c.closed.Load() {
		c.reports.mu.Unlock()
		return ErrClosed
	}
	kept := c.reports.add(k, n)
	c.reports.mu.Unlock()
	c.m.reported.Add(float64(kept))
	if kept < n {
		c.m.dropped.WithLabelValues("backlog").Add(float64(n - kept))
		return fmt.Errorf("%w: %d of %d tokens of %s/%s dropped", ErrBacklog, n-kept, n, resource, domain)
	}
	return nil
}

// add adds n tokens to k's batch (r.mu held) within the bounds and returns
// how many it kept.
func (r *reports) add(k key, n int64) int64 {
	p, ok := r.pending[k]
	if !ok && len(r.pending) >= MaxTargets {
		return 0
	}
	kept := min(n, MaxTokens-p)
	if kept > 0 || ok {
		r.pending[k] = p + kept
	}
	return kept
}

// take empties the batches and returns them; final marks the client's
// last flush (later additions fail).
func (r *reports) take(final bool) map[key]int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	batch := r.pending
	r.pending = map[key]int64{}
	r.closed = r.closed || final
	return batch
}

// flush sends every batch (one request per target, one after the other,
// each within the timeout) and puts back what was not charged.
func (c *Client) flush(ctx context.Context) {
	for k, n := range c.reports.take(false) {
		left := n
		if ctx.Err() == nil {
			left = c.charge(ctx, k, n)
		}
		if left > 0 {
			c.reports.mu.Lock()
			var kept int64
			if !c.reports.closed {
				kept = c.reports.add(k, left)
			}
			c.reports.mu.Unlock()
			if kept < left {
				c.m.dropped.WithLabelValues("backlog").Add(float64(left - kept))
			}
		}
	}
}

// flushFinal is Close's flush: what it cannot charge is dropped.
func (c *Client) flushFinal(ctx context.Context) {
	for k, n := range c.reports.take(true) {
		left := n
		if ctx.Err() == nil {
			left = c.charge(ctx, k, n)
		}
		if left > 0 {
			c.m.dropped.WithLabelValues("closed").Add(float64(left))
		}
	}
}

// charge sends one target's batch of n tokens and returns how many are
// still to charge.
func (c *Client) charge(ctx context.Context, k key, n int64) int64 {
	req := &sluicev1.AllowRequest{Resource: k.resource, Domain: k.domain, Tokens: n, MinTokens: 1}
	resp, why, err := c.ask(ctx, callReport, req)
	switch {
	case errors.Is(err, ErrInvalidRequest):
		c.m.dropped.WithLabelValues("invalid").Add(float64(n))
		c.log.Warn("limits: reported tokens dropped: invalid request", "resource", k.resource, "domain", k.domain, "tokens", n, "err", err)
		return 0
	case err != nil, why != reasonNone:
		return n
	}
	switch resp.GetStatus() {
	case sluicev1.AllowResponse_OK:
		g := min(max(resp.GetGranted(), 0), n)
		c.m.charged.Add(float64(g))
		return n - g
	case sluicev1.AllowResponse_REJECTED_TIMEOUT:
		if resp.GetRetryAfter() != nil {
			return n
		}
	}
	c.m.dropped.WithLabelValues("rejected").Add(float64(n))
	c.log.Warn("limits: reported tokens dropped: the service cannot charge them", "resource", k.resource, "domain", k.domain,
		"tokens", n, "status", resp.GetStatus().String())
	return 0
}
