package limits

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-rl/sluice/internal/names"
	"github.com/sluice-rl/sluice/limits/rls"
)

// Status is the outcome of a decision. The zero value is
// StatusUnspecified, never a decision's status, so that a zero Decision is
// not mistaken for a grant. The names are those of the wire enums without
// their REJECTED_ prefix.
//
// Source: quotaservice-wire.md, AllowResponse.Status.
type Status uint8

// The statuses.
const (
	StatusUnspecified Status = iota
	// StatusOK: tokens granted (Decision.Granted, after Decision.Wait).
	StatusOK
	// StatusTimeout: not enough tokens within the request's maximum wait.
	StatusTimeout
	// StatusNoBucket: no configuration answers for the request.
	StatusNoBucket
	// StatusTooManyBuckets: the resource may create no more dynamic
	// buckets.
	StatusTooManyBuckets
	// StatusTooManyTokensRequested: the request's minimum is above the
	// bucket's max tokens per request.
	StatusTooManyTokensRequested
	// StatusInvalidRequest: a field of the request is invalid
	// (Decision.Err, a *RequestError, names it).
	StatusInvalidRequest
	// StatusServerError: the store failed (Decision.Err).
	StatusServerError
)

var statusNames = [...]string{
	StatusUnspecified:            "UNSPECIFIED",
	StatusOK:                     "OK",
	StatusTimeout:                "TIMEOUT",
	StatusNoBucket:               "NO_BUCKET",
	StatusTooManyBuckets:         "TOO_MANY_BUCKETS",
	StatusTooManyTokensRequested: "TOO_MANY_TOKENS_REQUESTED",
	StatusInvalidRequest:         "INVALID_REQUEST",
	StatusServerError:            "SERVER_ERROR",
}

// String returns the status's name, for example "TOO_MANY_BUCKETS".
func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return fmt.Sprintf("Status(%d)", uint8(s))
}

// Request is one request for tokens.
type Request struct {
	// Resource is the resource (the quota service's namespace). Required:
	// 1 to MaxNameLen bytes of NameChars.
	Resource string
	// Domain is the domain within the resource (the quota service's bucket
	// name; the rest of a keyed limiter's key). Required, as Resource.
	Domain string
	// Tokens is the most tokens wanted (≤ MaxTokens). 0 means 1, the
	// default of both wire APIs (whose proto3 int64 cannot tell an absent
	// field from 0; a wire layer that can must reject an explicit 0
	// itself). Negative is invalid.
	Tokens int64
	// MinTokens is the fewest tokens accepted: the engine grants the most
	// in [MinTokens, Tokens] that fits (a partial grant). 0 means Tokens
	// (all or nothing). Negative, or above Tokens, is invalid.
	MinTokens int64
	// MaxWait, when HasMaxWait, is the longest the caller will wait for
	// its tokens (≥ 0): it may lower the bucket's wait timeout, never
	// raise it (a larger value is clamped to the bucket's). Without
	// HasMaxWait the bucket's wait timeout applies.
	MaxWait    time.Duration
	HasMaxWait bool
}

// Decision is the engine's answer to a Request.
type Decision struct {
	Status Status
	// Granted is the number of tokens granted (StatusOK), in [MinTokens,
	// Tokens]; 0 otherwise.
	Granted int64
	// Wait is how long the caller must wait before using the granted
	// tokens (StatusOK; 0 when they exist now).
	Wait time.Duration
	// RetryAfter is, for StatusTimeout, how long from now until the
	// request's MinTokens would fit within its maximum wait, if nobody
	// else takes tokens meanwhile. RetryNever is set instead when no
	// time can make the request succeed as asked: for StatusTimeout when
	// MinTokens exceed what the bucket holds plus what it may owe within
	// the maximum wait (size + fill rate × min(max wait, max debt)), and
	// for every other rejection (no bucket, too many buckets, too many
	// tokens, invalid request, server error), whose outcome no wait
	// changes.
	RetryAfter time.Duration
	RetryNever bool
	// Remaining is the tokens left in the bucket after the decision, at
	// now (fractional, in [0, Limit]; 0 while the bucket is in debt); for
	// a bucket with budgets, the least of that and what its budgets have
	// left (only the budgets' when a budget refused). For a burst-tier
	// resource: the most hits a request could be granted now, after the
	// decision (TierResult.Available).
	Remaining float64
	// Limit is the bucket's size (0 when no bucket answered). For a
	// burst-tier resource: the most hits one request can ever be granted,
	// min(H, G, Σ Lᵢ) (TierParams.Most).
	Limit int64
	// Bucket is the configuration that answered.
	Bucket BucketRef
	// Err is, for StatusInvalidRequest, a *RequestError naming the field;
	// for StatusServerError and a Degraded grant, the store's error; else
	// nil.
	Err error
	// Algorithm is the answering configuration's algorithm (TokenBucket
	// when none answered). With BurstTiers, Tiers holds the context.
	Algorithm Algorithm
	// Unlimited reports a request granted in full without limits, still
	// recorded: its resource's namespace ignores configured limits, or it
	// is not configured and its namespace allows that (Namespace).
	Unlimited bool
	// Tiers is, for a burst-tier resource, the paper's context of the
	// decision (zero otherwise).
	Tiers TierContext
	// Degraded reports a grant made without a decision: the store failed
	// (Err) and the resource fails open (OnStoreError FailOpen). Status is
	// StatusOK, Granted the tokens asked, Wait and Remaining 0; nothing
	// was recorded.
	Degraded bool
}

// ErrInvalidRequest is wrapped by every *RequestError.
var ErrInvalidRequest = errors.New("invalid request")

// RequestError is an invalid request: it names the field in the terms of
// Sluice's API (resource, domain, tokens, min_tokens, max_wait). It wraps
// ErrInvalidRequest.
type RequestError struct {
	Field  string
	Reason string
}

// Error returns "field: reason".
func (e *RequestError) Error() string { return e.Field + ": " + e.Reason }

// Unwrap returns ErrInvalidRequest.
func (e *RequestError) Unwrap() error { return ErrInvalidRequest }

// Options configure an Engine.
type Options struct {
	// Store holds the buckets (nil: a new MemoryStore).
	Store Store
	// Listener receives events (nil: none, at no cost).
	Listener Listener
	// Budgets holds the counters of the buckets' budgets (Bucket.Budgets):
	// Envoy's rate limit service's counters (rls.Store), which it may
	// share, the two never colliding (BudgetCounter). nil: a new
	// rls.MemoryStore, this process's alone. Servers that share the
	// buckets (a limits/redis Store) share the budgets too
	// (limits/redis.NewRLS on the same Store).
	Budgets rls.Store
}

// Engine decides requests for tokens against a configuration of
// resources, domains and buckets. It is safe for concurrent use: Allow
// takes no engine-wide lock (the configuration is an atomic pointer, and
// the store locks per bucket), SetConfig is serialised with itself.
// Every method takes the current time; nothing reads a clock.
//
// The zero Engine is not usable: use New.
type Engine struct {
	cfg      atomic.Pointer[compiled]
	store    Store
	listener Listener
	budgets  rls.Store
	// budgetsExact: the budgets' store decides on the engine's now (the
	// memory store), so that a refund always lands in its charge's window.
	budgetsExact bool
	mu           sync.Mutex // serialises SetConfig
}

// New returns an engine with configuration cfg (validated: the error is
// Config.Validate's; a nil cfg configures nothing, and every request gets
// StatusNoBucket).
func New(cfg *Config, o Options) (*Engine, error) {
	c, err := compile(cfg, 1)
	if err != nil {
		return nil, err
	}
	e := &Engine{store: o.Store, listener: o.Listener, budgets: o.Budgets}
	if e.store == nil {
		e.store = NewMemoryStore()
	}
	if e.budgets == nil {
		e.budgets = rls.NewMemoryStore()
	}
	_, e.budgetsExact = e.budgets.(*rls.MemoryStore)
	e.cfg.Store(c)
	return e, nil
}

// Config returns a copy of the current configuration.
func (e *Engine) Config() *Config { return e.cfg.Load().cfg.Clone() }

// Store returns the engine's store.
func (e *Engine) Store() Store { return e.store }

// Budgets returns the store of the budgets' counters (Options.Budgets).
func (e *Engine) Budgets() rls.Store { return e.budgets }

// SetConfig replaces the configuration at now. On error (Config.Validate's)
// the old configuration stays. Otherwise every bucket is looked up again
// under cfg: a bucket whose configuration vanished, or whose domain now
// falls to a shared bucket, is removed (EventBucketRemoved); a bucket whose
// size or fill rate changed keeps its fill fraction (tokens ÷ size; debt
// stays debt, in tokens); every other bucket is untouched. It costs one
// pass over the buckets. Requests decided concurrently are decided under
// the old or the new configuration, never a mix.
//
// The store's pass (Store.Reconfigure) runs under a context of its own
// that nothing cancels (a reconfiguration is background work: the Redis
// store bounds each of its round trips by its Options.Timeout); its error
// is returned, the new configuration applied nonetheless.
//
// Source: docs/departures.md, "The quota service" (a configuration change
// keeps every unchanged bucket untouched and each changed bucket's fill
// fraction; the reference resets every bucket on any change:
// quotaservice-wire.md, "Known weaknesses").
func (e *Engine) SetConfig(now time.Time, cfg *Config) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	old := e.cfg.Load()
	c, err := compile(cfg, old.gen+1)
	if err != nil {
		return err
	}
	e.cfg.Store(c)
	return e.store.Reconfigure(context.Background(), now.UnixNano(), c.gen, c.resolveKey, e.removed)
}

// removed reports a removed bucket to the listener.
func (e *Engine) removed(r Removed) {
	if e.listener == nil {
		return
	}
	ev := Event{Type: EventBucketRemoved, Resource: r.Key.Resource, Domain: r.Key.Domain, Removed: r.Reason}
	if r.Limit != nil {
		ev.Bucket = r.Limit.Ref(r.Key.Domain)
		ev.Dynamic = r.Limit.Dynamic(r.Key.Domain)
	}
	e.listener.OnEvent(ev)
}

// Reap removes the buckets that have been idle for at least their MaxIdle
// (> 0) at now and are full (so a reaped bucket comes back exactly as it
// went: full), reporting each (EventBucketRemoved). It returns how many
// it removed. Call it periodically (the server does), with the context
// of the loop that calls it; it costs one pass over the buckets.
//
// The same pass drops the budgets' counters that are over (a window
// ended, a token bucket full again) from a budgets' store that has a
// Reap(now µs) method (rls.MemoryStore; Redis expires them itself); they
// are not counted in the result.
//
// Source: quotaservice-design.md, "Deleting buckets" ("If a bucket is
// removed and subsequently accessed, it is recreated and filled");
// ratelimiting-in-150-lines.md discards full buckets.
func (e *Engine) Reap(ctx context.Context, now time.Time) (int, error) {
	if r, ok := e.budgets.(interface{ Reap(now int64) int }); ok {
		r.Reap(now.UnixMicro())
	}
	return e.store.Reap(ctx, now.UnixNano(), e.removed)
}

// EstimateLen returns the number of buckets, or the store's estimate of
// it (Store.EstimateLen: exact on the memory store; on Redis, the keys of
// its database), at a cost that does not grow with the buckets: what a
// metrics scrape reads. ctx is the caller's.
func (e *Engine) EstimateLen(ctx context.Context) (int, error) { return e.store.EstimateLen(ctx) }

// Allow decides req at now. It never blocks beyond the store's per-bucket
// lock (and, for a resource with a global limit, the resource's) and, on
// the memory store, does not allocate (except to create a bucket, and
// for a bucket with budgets). A rejected request changes no bucket and
// creates none.
//
// ctx is the request's: its deadline and cancellation reach the store
// (on Redis, the round trip; see Store). When it ends before the store
// answers, the decision is StatusServerError with Err wrapping ctx.Err()
// (EventServerError), never a degraded grant: the caller gave up, the
// store did not fail. A request whose ctx is done before the store sees
// it takes no tokens.
//
// Lookup, in order: the domain's own configuration (a named bucket); for a
// domain with '/', the longest configured prefix (a bucket of its own with
// the prefix's configuration); a bucket of its own from the resource's
// template (StatusTooManyBuckets past MaxDynamicBuckets); the resource's
// shared default bucket; the global default bucket (also for resources
// not configured); else StatusNoBucket. Then: MinTokens above the
// bucket's max tokens per request is StatusTooManyTokensRequested (Tokens
// above it, with MinTokens within, is lowered to it); the wait is capped
// by min(the request's max wait, the bucket's wait timeout, its max
// debt); Step decides.
//
// On a burst-tier resource (BurstTiers), StepTiers decides at once (no
// wait: MaxWait is not used, and Decision.Wait is 0): the most hits in
// [MinTokens, Tokens] the hard limit, the global limit and the tiers
// allow, or StatusTimeout with RetryAfter the time until the same request
// would succeed if no other hit came, or RetryNever when MinTokens is
// above min(H, G, Σ Lᵢ). Decision.Tiers holds the paper's context.
//
// A bucket with budgets (Bucket.Budgets) decides them first, in one
// atomic step of the budgets' store (rls.Store.Decide, all or nothing)
// at now, for the tokens the request would get: Tokens (lowered to the
// bucket's max tokens per request and to the least budget's depth when
// MinTokens stays within it) or, when that does not fit and MinTokens is
// lower, the least any budget has left, if at least MinTokens (a second
// step). Then the token bucket decides as above, for at most what the
// budgets granted and at least MinTokens, and may make the caller wait
// (its debt); budgets never wait. When the token bucket grants less
// than the budgets took, or refuses, or its store fails, the difference
// is given back to the budgets (refund hits), so that they count only
// what was granted. No budget ever admits more than its limit (it is
// charged before the bucket grants); a concurrent request may find a
// budget spent a moment early, before a refund (conservative). On a store that decides on its own
// clock (Redis), a fixed window's tokens are not given back when its
// window ends within a second of the charge (the refund could land in
// the next window), nor after a store's error: they stay spent. A
// budget that refuses is StatusTimeout (as a token bucket without wait)
// with RetryAfter the time until MinTokens fit every budget (a window's
// end; a token bucket's refill), or RetryNever when MinTokens exceed a
// budget's Limit (a token bucket's Burst). Decision.Remaining is then
// the least any budget has left, and after a grant the least of that and
// the bucket's tokens. A budgets' store that fails is the resource's
// OnStoreError, as the bucket's store. The budgets count at the
// decision's instant, even for tokens granted after a wait.
//
// Under a namespace that ignores configured limits, or for an
// unconfigured resource under one that allows them, every request is
// granted its Tokens at once, and Decision.Unlimited is set (see
// Namespace for what is recorded; a bucket's budgets count what they
// have room for and refuse nothing).
//
// Source: quotaservice-design.md, "Tokens and Token Buckets",
// "Hierarchies and bucket search order", "Filling tokens";
// charon-paper.md, sections 2.1, 3.1 and 4.3; budgets: envoyproxy/ratelimit's
// limits and calendar month (docs/references.md), limits/rls.
func (e *Engine) Allow(ctx context.Context, now time.Time, req Request) Decision {
	tokens, lo, maxWait, rerr := check(&req)
	if rerr != nil {
		e.event(Event{Type: EventInvalidRequest, Resource: req.Resource, Domain: req.Domain, Tokens: req.Tokens, Status: StatusInvalidRequest})
		return Decision{Status: StatusInvalidRequest, RetryNever: true, Err: rerr}
	}
	ns := now.UnixNano()
	var br *budgetRun // a bucket's budgets, built once
	for range 8 {
		c := e.cfg.Load()
		k, l := c.resolve(req.Resource, req.Domain)
		if l == nil {
			e.event(Event{Type: EventBucketMiss, Resource: req.Resource, Domain: req.Domain, Tokens: tokens, Status: StatusNoBucket})
			return Decision{Status: StatusNoBucket, RetryNever: true}
		}
		if l.slow {
			d, again := e.allowSlow(ctx, now, &req, tokens, lo, k, l)
			if again {
				continue
			}
			return d
		}
		ref := l.Ref(req.Domain)
		if lo > l.maxPerRequest {
			e.event(Event{Type: EventTooManyTokensRequested, Resource: req.Resource, Domain: req.Domain, Bucket: ref, Tokens: tokens, Status: StatusTooManyTokensRequested})
			return Decision{Status: StatusTooManyTokensRequested, RetryNever: true, Limit: l.Params.Size, Bucket: ref}
		}
		a := Ask{Tokens: min(tokens, l.maxPerRequest), Min: lo, MaxWait: l.maxWait}
		if maxWait >= 0 {
			a.MaxWait = min(a.MaxWait, maxWait)
		}
		if len(l.Bucket.Budgets) > 0 {
			if br == nil {
				br = new(budgetRun)
			}
			d, again := e.allowBudgets(ctx, now, &req, tokens, k, l, a, br)
			if again {
				continue
			}
			return d
		}
		out, err := e.store.Take(ctx, ns, k, l, a)
		if err == nil && out.Granted > 0 {
			// The common case, kept in line.
			d := Decision{Status: StatusOK, Granted: out.Granted, Wait: time.Duration(out.Wait), Remaining: out.Tokens, Limit: l.Params.Size, Bucket: ref}
			if e.listener != nil {
				e.served(&req, k, l, &d, out.Created)
			}
			return d
		}
		if err != nil && errors.Is(err, ErrStaleConfig) {
			continue
		}
		return e.reject(ctx, &req, tokens, l, ref, &out, err)
	}
	err := fmt.Errorf("limits: the configuration kept changing during the request: %w", ErrStaleConfig)
	e.event(Event{Type: EventServerError, Resource: req.Resource, Domain: req.Domain, Tokens: tokens, Status: StatusServerError})
	return Decision{Status: StatusServerError, RetryNever: true, Err: err}
}

// allowSlow decides req on a burst-tier resource, or on a resource under
// a namespace that ignores configured limits; again reports a stale
// configuration (look it up again).
func (e *Engine) allowSlow(ctx context.Context, now time.Time, req *Request, tokens, lo int64, k Key, l *Limit) (d Decision, again bool) {
	ns := now.UnixNano()
	ref := l.Ref(req.Domain)
	if l.Tiers == nil { // an unlimited token bucket
		out, err := e.store.Take(ctx, ns, k, l, Ask{Tokens: min(tokens, l.maxPerRequest), Min: 1})
		if err != nil && errors.Is(err, ErrStaleConfig) {
			return d, true
		}
		if err != nil {
			return e.reject(ctx, req, tokens, l, ref, &out, err), false
		}
		if len(l.Bucket.Budgets) > 0 {
			var br budgetRun
			br.init(k, l.Bucket.Budgets)
			e.recordBudgets(ctx, now.UnixMicro(), k, &br, tokens)
		}
		d = Decision{Status: StatusOK, Granted: tokens, Remaining: out.Tokens, Limit: l.Params.Size, Bucket: ref, Unlimited: true}
		if e.listener != nil {
			e.served(req, k, l, &d, out.Created)
		}
		return d, false
	}
	out, err := e.store.TakeHits(ctx, ns, k, l, Ask{Tokens: tokens, Min: lo})
	if err != nil && errors.Is(err, ErrStaleConfig) {
		return d, true
	}
	p := l.Tiers
	d = Decision{Limit: p.Most(), Bucket: ref, Algorithm: BurstTiers, Unlimited: l.Unlimited}
	switch {
	case err != nil && l.failOpen && ctx.Err() == nil:
		e.degrade(req, tokens, l, &d, err)
	case err != nil:
		d.Status, d.RetryNever, d.Err = StatusServerError, true, err
		e.event(Event{Type: EventServerError, Resource: req.Resource, Domain: req.Domain, Bucket: ref, Tokens: tokens, Status: d.Status})
	case out.TooManyBuckets && !l.Unlimited:
		d.Status, d.RetryNever = StatusTooManyBuckets, true
		d.Tiers = TierContext{HardLimit: p.HardLimit, GlobalLimit: p.GlobalLimit}
		e.event(Event{Type: EventBucketMiss, Resource: req.Resource, Domain: req.Domain, Bucket: ref, Dynamic: true, Tokens: tokens, Status: d.Status})
	case out.Granted > 0 || l.Unlimited:
		// (An unlimited request past max_dynamic_buckets is granted, not
		// recorded.)
		d.Status, d.Granted, d.Remaining, d.Tiers = StatusOK, max(out.Granted, tokens*b2i(l.Unlimited)), float64(out.Available), out.TierContext
		if out.TooManyBuckets {
			d.Tiers = TierContext{HardLimit: p.HardLimit, GlobalLimit: p.GlobalLimit}
		}
		if e.listener != nil {
			e.served(req, k, l, &d, out.Created)
		}
	default:
		d.Remaining, d.Tiers = float64(out.Available), out.TierContext
		e.timeout(req, tokens, l, &d, out.RetryAfter)
	}
	return d, false
}

// allowBudgets decides req on token bucket k, l, which has budgets,
// with a (Tokens and MaxWait lowered as Allow says); again reports a
// stale configuration (look it up again). br is the request's scratch
// space. See Allow.
func (e *Engine) allowBudgets(ctx context.Context, now time.Time, req *Request, tokens int64, k Key, l *Limit, a Ask, br *budgetRun) (d Decision, again bool) {
	ref := l.Ref(req.Domain)
	us := now.UnixMicro()
	bs := l.Bucket.Budgets
	br.init(k, bs)
	g := a.Tokens
	if most := leastDepth(bs); most >= a.Min {
		g = min(g, most)
	}
	ok, err := e.decideBudgets(ctx, us, k, br, g)
	if err == nil && !ok && a.Min < g {
		if fit := br.least(); fit >= a.Min && fit < g {
			g = fit
			ok, err = e.decideBudgets(ctx, us, k, br, g)
		}
	}
	switch {
	case err != nil:
		return e.reject(ctx, req, tokens, l, ref, &Outcome{}, err), false
	case !ok:
		d = Decision{Limit: l.Params.Size, Bucket: ref, Remaining: float64(br.least())}
		e.timeout(req, tokens, l, &d, br.retryAfter(bs, a.Min))
		return d, false
	}
	a.Tokens = g
	out, err := e.store.Take(ctx, now.UnixNano(), k, l, a)
	if err == nil && out.Granted > 0 {
		back := g - out.Granted
		if back > 0 {
			e.refundBudgets(ctx, us, k, l, br, back)
		}
		d = Decision{Status: StatusOK, Granted: out.Granted, Wait: time.Duration(out.Wait), Remaining: min(out.Tokens, float64(br.least()+back)), Limit: l.Params.Size, Bucket: ref}
		if e.listener != nil {
			e.served(req, k, l, &d, out.Created)
		}
		return d, false
	}
	e.refundBudgets(ctx, us, k, l, br, g)
	if err != nil && errors.Is(err, ErrStaleConfig) {
		return d, true
	}
	d = e.reject(ctx, req, tokens, l, ref, &out, err)
	if d.Status == StatusTimeout {
		d.Remaining = min(d.Remaining, float64(br.least()+g))
	}
	return d, false
}

// b2i returns 1 for true, 0 for false.
func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// served reports a grant (and the bucket's creation) to the listener.
func (e *Engine) served(req *Request, k Key, l *Limit, d *Decision, created bool) {
	if created {
		e.listener.OnEvent(Event{Type: EventBucketCreated, Resource: k.Resource, Domain: k.Domain, Bucket: d.Bucket, Dynamic: l.Dynamic(k.Domain)})
	}
	e.listener.OnEvent(Event{Type: EventTokensServed, Resource: req.Resource, Domain: req.Domain, Bucket: d.Bucket, Dynamic: l.Dynamic(req.Domain), Tokens: d.Granted, Wait: d.Wait, Status: d.Status})
}

// reject turns a store's refusal or error into a decision and its event:
// a store's error is a degraded grant on a resource that fails open,
// unless the request's ctx ended (the error is then the caller's, not the
// store's).
func (e *Engine) reject(ctx context.Context, req *Request, tokens int64, l *Limit, ref BucketRef, out *Outcome, err error) Decision {
	d := Decision{Limit: l.Params.Size, Bucket: ref}
	switch {
	case err != nil && l.failOpen && ctx.Err() == nil:
		e.degrade(req, min(tokens, l.maxPerRequest), l, &d, err)
		return d
	case err != nil:
		d.Status, d.RetryNever, d.Err = StatusServerError, true, err
		e.event(Event{Type: EventServerError, Resource: req.Resource, Domain: req.Domain, Bucket: ref, Tokens: tokens, Status: d.Status})
		return d
	case out.TooManyBuckets:
		d.Status, d.RetryNever = StatusTooManyBuckets, true
		e.event(Event{Type: EventBucketMiss, Resource: req.Resource, Domain: req.Domain, Bucket: ref, Dynamic: true, Tokens: tokens, Status: d.Status})
		return d
	}
	d.Remaining = out.Tokens
	e.timeout(req, tokens, l, &d, out.RetryAfter)
	return d
}

// degrade makes d (whose Bucket is set) a Degraded grant of granted
// tokens after the store's error err, and reports it (EventDegraded).
func (e *Engine) degrade(req *Request, granted int64, l *Limit, d *Decision, err error) {
	d.Status, d.Granted, d.Degraded, d.Err = StatusOK, granted, true, err
	e.event(Event{Type: EventDegraded, Resource: req.Resource, Domain: req.Domain, Bucket: d.Bucket, Dynamic: l.Dynamic(req.Domain), Tokens: granted, Status: StatusOK})
}

// timeout makes d (whose Bucket is set) a StatusTimeout with the store's
// retryAfter (ns; < 0: never) and reports it.
func (e *Engine) timeout(req *Request, tokens int64, l *Limit, d *Decision, retryAfter int64) {
	d.Status = StatusTimeout
	if retryAfter < 0 {
		d.RetryNever = true
	} else {
		d.RetryAfter = time.Duration(retryAfter)
	}
	e.event(Event{Type: EventTimeout, Resource: req.Resource, Domain: req.Domain, Bucket: d.Bucket, Dynamic: l.Dynamic(req.Domain), Tokens: tokens, Status: d.Status})
}

// event reports ev when there is a listener.
func (e *Engine) event(ev Event) {
	if e.listener != nil {
		e.listener.OnEvent(ev)
	}
}

// Request validation errors that need no formatting.
var (
	errTokensNegative  = &RequestError{Field: "tokens", Reason: "negative; want ≥ 1 (0 means 1)"}
	errTokensTooMany   = &RequestError{Field: "tokens", Reason: fmt.Sprintf("more than %d (2^53)", int64(MaxTokens))}
	errMinNegative     = &RequestError{Field: "min_tokens", Reason: "negative; want 1 to tokens (0 means tokens)"}
	errMinAboveTokens  = &RequestError{Field: "min_tokens", Reason: "above tokens; want 1 to tokens (0 means tokens)"}
	errMaxWaitNegative = &RequestError{Field: "max_wait", Reason: "negative; want ≥ 0"}
	errResourceEmpty   = &RequestError{Field: "resource", Reason: "empty"}
	errDomainEmpty     = &RequestError{Field: "domain", Reason: "empty"}
	errResourceTooLong = &RequestError{Field: "resource", Reason: fmt.Sprintf("longer than %d bytes", MaxNameLen)}
	errDomainTooLong   = &RequestError{Field: "domain", Reason: fmt.Sprintf("longer than %d bytes", MaxNameLen)}
)

// badChar formats a name's disallowed byte.
const badChar = "has %q at byte %d; allowed: " + NameChars

// check validates req and returns its tokens (0 → 1), minimum tokens
// (0 → tokens) and max wait in nanoseconds (-1: none given), or the first
// invalid field.
func check(req *Request) (tokens, lo, maxWait int64, err *RequestError) {
	if err := checkRequestName("resource", req.Resource, errResourceEmpty, errResourceTooLong); err != nil {
		return 0, 0, 0, err
	}
	if err := checkRequestName("domain", req.Domain, errDomainEmpty, errDomainTooLong); err != nil {
		return 0, 0, 0, err
	}
	tokens = req.Tokens
	switch {
	case tokens == 0:
		tokens = 1
	case tokens < 0:
		return 0, 0, 0, errTokensNegative
	case tokens > MaxTokens:
		return 0, 0, 0, errTokensTooMany
	}
	lo = req.MinTokens
	switch {
	case lo == 0:
		lo = tokens
	case lo < 0:
		return 0, 0, 0, errMinNegative
	case lo > tokens:
		return 0, 0, 0, errMinAboveTokens
	}
	maxWait = -1
	if req.HasMaxWait {
		if req.MaxWait < 0 {
			return 0, 0, 0, errMaxWaitNegative
		}
		maxWait = int64(req.MaxWait)
	}
	return tokens, lo, maxWait, nil
}

// checkRequestName validates a request's name field without allocating
// unless it is invalid.
func checkRequestName(field, s string, empty, tooLong *RequestError) *RequestError {
	if s == "" {
		return empty
	}
	if len(s) > MaxNameLen {
		return tooLong
	}
	for i := 0; i < len(s); i++ {
		if !names.Allowed[s[i]] {
			return &RequestError{Field: field, Reason: fmt.Sprintf(badChar, s[i], i)}
		}
	}
	return nil
}

// BucketInfo describes one bucket for a status page.
//
// Source: ratelimiting-in-150-lines.md, "Introspection" (bucket key, fill
// rate, current budget, maximum budget, time since last use, budget
// fraction).
type BucketInfo struct {
	// Resource and Domain are the bucket's key: Domain "" is a resource's
	// shared default bucket, both "" the global default bucket.
	Resource, Domain string
	// Bucket is the configuration the bucket runs under.
	Bucket BucketRef
	// Dynamic reports a bucket created on demand (template or prefix).
	Dynamic bool
	// Size is the most tokens it holds; FillRate its tokens per second.
	Size     int64
	FillRate float64
	// Tokens is what it holds at the walk's now (fractional, [0, Size]);
	// Fraction is Tokens ÷ Size.
	Tokens, Fraction float64
	// Debt is how long the bucket owes tokens: a request now would wait at
	// least this long (0 when it holds tokens).
	Debt time.Duration
	// LastUsed is the bucket's last request, granted or rejected.
	LastUsed time.Time
	// Grants and Rejections count its granted and rejected (TIMEOUT)
	// requests.
	Grants, Rejections uint64

	// Algorithm is the bucket's algorithm. A burst-tier domain
	// (BurstTiers) has no fill rate or debt; its Size is the most one
	// request can be granted under its hard limit and tiers, min(H, Σ Lᵢ)
	// (the resource's global limit aside), Tokens the most a request
	// could be granted now (global limit aside), Fraction Tokens ÷ Size (0
	// when Size is 0), and:
	Algorithm Algorithm
	// HardLimit is the domain's hard limit (0: unbounded).
	HardLimit int64
	// Tier is the domain's current tier (1-based; 0: the fake tier, none
	// active); TierPhase its phase (PhaseActive, or PhaseInactive for
	// tier 0) and TierLeft the time left in it (until its cooldown; 0 for
	// tier 0); TierLimit its limit and TierHits the hits in its window.
	Tier      int
	TierPhase Phase
	TierLeft  time.Duration
	TierLimit int64
	TierHits  int64
	// HitsLastSecond is the domain's hits in the last second.
	HitsLastSecond int64
	// CooldownTier is the highest tier in cooldown (0: none) and
	// CooldownLeft the time until it is inactive again: while it is not
	// skippable, no burst goes past it. TierStatuses has every tier.
	CooldownTier int
	CooldownLeft time.Duration
}

// TierStatuses describes every burst tier of a store's snapshot of a
// burst-tier domain at now (Unix nanoseconds), tier 1 first; nil for a
// token bucket.
func TierStatuses(s Snapshot, now int64) []TierStatus {
	if s.Limit == nil || s.Limit.Tiers == nil {
		return nil
	}
	st := s.Tiers
	if st == nil {
		st = &TierState{}
	}
	p := s.Limit.Tiers
	out := make([]TierStatus, len(p.Tiers))
	for i := range p.Tiers {
		ph, left, hits := st.status(p, i+1, now)
		out[i] = TierStatus{Phase: ph, Left: left, Hits: hits}
	}
	return out
}

// TierStatus describes one burst tier of a domain at an instant.
type TierStatus struct {
	// Phase is the tier's phase; Left the time left in it (0 when
	// inactive).
	Phase Phase
	Left  time.Duration
	// Hits is the hits in its window (0 unless active).
	Hits int64
}

// Walk calls fn for every bucket, described at now, in no particular
// order, until fn returns false. fn runs outside the store's locks and may
// be slow; the walk of a million buckets on the memory store takes about
// 80 ms plus fn's time (BenchmarkWalk). ctx is the request's (a status
// page): the walk stops with an error wrapping ctx.Err() when it ends.
// For a sorted, filtered page, see Query.
//
// Buckets are shown as the current configuration sees them, whatever a
// store that applies SetConfig lazily (limits/redis) still holds: a
// bucket whose key has no bucket of its own any more is not shown (it
// is gone for every request; such a store drops it by its TTL), and one
// whose resource changed algorithm is shown as it will be when next
// touched, fresh under the new Limit with its use and grants kept (as
// the memory store makes it at once).
func (e *Engine) Walk(ctx context.Context, now time.Time, fn func(BucketInfo) bool) error {
	ns := now.UnixNano()
	c := e.cfg.Load()
	return e.store.Walk(ctx, func(s Snapshot) bool {
		s, ok := c.current(s)
		if !ok {
			return true
		}
		return fn(Describe(s, ns))
	})
}

// current returns snapshot s as configuration c sees it (see Walk), and
// false for a bucket c no longer has.
func (c *compiled) current(s Snapshot) (Snapshot, bool) {
	l := c.resolveKey(s.Key)
	if l == nil {
		return s, false
	}
	if was := s.Limit != nil && s.Limit.Algorithm == BurstTiers; was != (l.Algorithm == BurstTiers) {
		s.Limit = l
		if was {
			s.State, s.Tiers = FullState, nil
		} else {
			s.State, s.Tiers = State{}, new(TierState)
		}
	}
	return s, true
}

// Describe returns the BucketInfo of a store's snapshot at now (Unix
// nanoseconds).
func Describe(s Snapshot, now int64) BucketInfo {
	info := BucketInfo{
		Resource: s.Key.Resource, Domain: s.Key.Domain,
		LastUsed: time.Unix(0, s.LastUsed), Grants: s.Grants, Rejections: s.Rejections,
	}
	if l := s.Limit; l != nil && l.Tiers != nil {
		info.Bucket, info.Dynamic = l.Ref(s.Key.Domain), l.Dynamic(s.Key.Domain)
		describeTiers(&info, l.Tiers, s.Tiers, now)
		return info
	}
	if l := s.Limit; l != nil {
		info.Bucket, info.Dynamic = l.Ref(s.Key.Domain), l.Dynamic(s.Key.Domain)
		info.Size, info.FillRate = l.Params.Size, l.Params.Rate
		info.Tokens = Level(s.State, l.Params, now)
		info.Fraction = info.Tokens / float64(l.Params.Size)
	}
	if s.State.Empty > now {
		info.Debt = time.Duration(s.State.Empty - now)
	}
	return info
}

// describeTiers fills info for a burst-tier domain with state st (nil:
// fresh) under p at now.
func describeTiers(info *BucketInfo, p *TierParams, st *TierState, now int64) {
	if st == nil {
		st = &TierState{}
	}
	pl := p.plan(st, now)
	info.Algorithm, info.HardLimit = BurstTiers, p.HardLimit
	info.Tier, info.TierHits = pl.cur, pl.count
	info.HitsLastSecond = st.Second.Since(subSat(now, second))
	most, avail := p.sum, pl.total
	if p.HardLimit > 0 {
		most, avail = min(most, p.HardLimit), min(avail, max(0, p.HardLimit-info.HitsLastSecond))
	}
	info.Size, info.Tokens = most, float64(avail)
	if most > 0 {
		info.Fraction = info.Tokens / float64(most)
	}
	for i := len(p.Tiers); i > 0; i-- {
		ph, left, _ := st.status(p, i, now)
		switch {
		case i == pl.cur:
			info.TierLimit, info.TierPhase, info.TierLeft = p.Tiers[i-1].Limit, ph, left
		case ph == PhaseCooldown && info.CooldownTier == 0:
			info.CooldownTier, info.CooldownLeft = i, left
		}
	}
}
