package limits

import (
	"context"
	"errors"
	"fmt"
)

// ErrNotConfigured is wrapped by Engine.Reset's error for a resource that
// is not configured, or a domain for which no bucket of its resource
// answers (its requests draw from the global default bucket, or from
// nothing): the error is also a *RequestError naming the field
// ("resource", "domain"). The admin API answers it with 404.
var ErrNotConfigured = errors.New("not configured")

// notConfiguredError is a *RequestError that also wraps
// ErrNotConfigured.
type notConfiguredError struct{ req *RequestError }

// Error returns the RequestError's "field: reason".
func (e *notConfiguredError) Error() string { return e.req.Error() }

// Unwrap returns the RequestError and ErrNotConfigured.
func (e *notConfiguredError) Unwrap() []error { return []error{e.req, ErrNotConfigured} }

func notConfigured(field, format string, args ...any) error {
	return &notConfiguredError{req: &RequestError{Field: field, Reason: fmt.Sprintf(format, args...)}}
}

// Reset restores the bucket a request for (resource, domain) would draw
// from, found as Allow finds it: the domain's own bucket (named, below a
// configured '/'-prefix, or from the resource's template), or, when the
// domain has none, the resource's shared default bucket (then every
// domain sharing it is reset with it); for a resource not configured
// under a namespace that allows it, the (resource, domain) state. A token
// bucket is full again, with its budgets (Bucket.Budgets) whole, a
// burst-tier domain fresh (its tiers and hits forgotten; the resource's
// global log, shared by its domains, stays): see Store.Reset. It reports whether the store held the bucket (false:
// it was full or fresh already, which is no error). The quota service's
// buckets are the same: namespace = resource, bucket name = domain.
//
// Errors: a *RequestError naming the field for an invalid resource or
// domain (as Allow's: empty, too long, a character outside NameChars);
// one that also wraps ErrNotConfigured for a resource that is not
// configured, or a domain of one for which no bucket of it answers (the
// global default bucket, shared by every unconfigured resource, is never
// reset this way: a mistyped name must not empty it); else the store's
// error (wrapping ctx.Err() when ctx ended). It reads no clock, emits no
// event (the admin API audits resets), and is safe for concurrent use
// with Allow and SetConfig: it resets the bucket of the configuration in
// force when it starts.
//
// Source: envoyproxy/ratelimit issue #191 (reset one key); gubernator's
// Behavior RESET_REMAINING; the lookup is Allow's (quotaservice-design.md,
// "Hierarchies and bucket search order").
func (e *Engine) Reset(ctx context.Context, resource, domain string) (bool, error) {
	if err := checkRequestName("resource", resource, errResourceEmpty, errResourceTooLong); err != nil {
		return false, err
	}
	if err := checkRequestName("domain", domain, errDomainEmpty, errDomainTooLong); err != nil {
		return false, err
	}
	c := e.cfg.Load()
	k, l := c.resolve(resource, domain)
	if l != nil && l.Kind != KindGlobal {
		held, err := e.store.Reset(ctx, k)
		if err != nil {
			return held, err
		}
		spent, err := e.resetBudgets(ctx, k, l) // (the bucket's budgets, Bucket.Budgets)
		return held || spent, err
	}
	why := " (no bucket answers its requests)"
	if l != nil {
		why = ": its requests draw from the global default bucket, which a reset does not touch"
	}
	if c.resources[resource] != nil {
		return false, notConfigured("domain", "resource %q has no bucket for %q (no domain, prefix, template or default of it)%s", resource, domain, why)
	}
	return false, notConfigured("resource", "%q is not configured%s", resource, why)
}

// Reset implements Store: it removes k's slot under its shard's lock
// (and, for a dynamic bucket, its count against MaxDynamic). It checks
// ctx once, at the start, and never blocks on I/O; O(1).
func (s *MemoryStore) Reset(ctx context.Context, k Key) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, ctxError("reset", err)
	}
	h, sh := s.hash(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i := sh.t.index(h, k.Resource, k.Domain)
	if i < 0 {
		return false, nil
	}
	sl := &sh.t.slots[i]
	if sl.rec.limit.Dynamic(k.Domain) {
		s.counter(sl.res).Add(-1)
	}
	sh.t.removeAt(i)
	s.n.Add(-1)
	return true, nil
}

// index returns the slot of the key, or -1: find's probe.
func (t *table) index(h uint64, resource, domain string) int {
	n := len(t.slots)
	if n == 0 {
		return -1
	}
	for i := home(h, n); ; {
		s := &t.slots[i]
		if s.hash == 0 {
			return -1
		}
		if s.matches(h, resource, domain) {
			return i
		}
		if i++; i == n {
			i = 0
		}
	}
}
