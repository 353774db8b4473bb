package limits

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
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
	// now (fractional, in [0, Limit]; 0 while the bucket is in debt).
	Remaining float64
	// Limit is the bucket's size (0 when no bucket answered).
	Limit int64
	// Bucket is the configuration that answered.
	Bucket BucketRef
	// Err is, for StatusInvalidRequest, a *RequestError naming the field;
	// for StatusServerError, the store's error; else nil.
	Err error
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
	mu       sync.Mutex // serialises SetConfig
}

// New returns an engine with configuration cfg (validated: the error is
// Config.Validate's; a nil cfg configures nothing, and every request gets
// StatusNoBucket).
func New(cfg *Config, o Options) (*Engine, error) {
	c, err := compile(cfg, 1)
	if err != nil {
		return nil, err
	}
	e := &Engine{store: o.Store, listener: o.Listener}
	if e.store == nil {
		e.store = NewMemoryStore()
	}
	e.cfg.Store(c)
	return e, nil
}

// Config returns a copy of the current configuration.
func (e *Engine) Config() *Config { return e.cfg.Load().cfg.Clone() }

// Store returns the engine's store.
func (e *Engine) Store() Store { return e.store }

// SetConfig replaces the configuration at now. On error (Config.Validate's)
// the old configuration stays. Otherwise every bucket is looked up again
// under cfg: a bucket whose configuration vanished, or whose domain now
// falls to a shared bucket, is removed (EventBucketRemoved); a bucket whose
// size or fill rate changed keeps its fill fraction (tokens ÷ size; debt
// stays debt, in tokens); every other bucket is untouched. It costs one
// pass over the buckets. Requests decided concurrently are decided under
// the old or the new configuration, never a mix.
//
// Source: the issue's "A changed bucket keeps its fill fraction; unchanged
// buckets are untouched" (the reference resets every bucket on any
// change: quotaservice-wire.md, "Known weaknesses").
func (e *Engine) SetConfig(now time.Time, cfg *Config) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	old := e.cfg.Load()
	c, err := compile(cfg, old.gen+1)
	if err != nil {
		return err
	}
	e.cfg.Store(c)
	return e.store.Reconfigure(now.UnixNano(), c.gen, c.resolveKey, e.removed)
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
// it removed. Call it periodically (the server does); it costs one pass
// over the buckets.
//
// Source: quotaservice-design.md, "Deleting buckets" ("If a bucket is
// removed and subsequently accessed, it is recreated and filled");
// ratelimiting-in-150-lines.md discards full buckets.
func (e *Engine) Reap(now time.Time) (int, error) {
	return e.store.Reap(now.UnixNano(), e.removed)
}

// Len returns the number of buckets.
func (e *Engine) Len() int { return e.store.Len() }

// Allow decides req at now. It never blocks beyond the store's per-bucket
// lock and, on the memory store, does not allocate. A rejected request
// changes no bucket and creates none.
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
// Source: quotaservice-design.md, "Tokens and Token Buckets",
// "Hierarchies and bucket search order", "Filling tokens".
func (e *Engine) Allow(now time.Time, req Request) Decision {
	tokens, lo, maxWait, rerr := check(&req)
	if rerr != nil {
		e.event(Event{Type: EventInvalidRequest, Resource: req.Resource, Domain: req.Domain, Tokens: req.Tokens, Status: StatusInvalidRequest})
		return Decision{Status: StatusInvalidRequest, RetryNever: true, Err: rerr}
	}
	ns := now.UnixNano()
	for range 8 {
		c := e.cfg.Load()
		k, l := c.resolve(req.Resource, req.Domain)
		if l == nil {
			e.event(Event{Type: EventBucketMiss, Resource: req.Resource, Domain: req.Domain, Tokens: tokens, Status: StatusNoBucket})
			return Decision{Status: StatusNoBucket, RetryNever: true}
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
		out, err := e.store.Take(ns, k, l, a)
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
		return e.reject(&req, tokens, l, ref, &out, err)
	}
	err := fmt.Errorf("limits: the configuration kept changing during the request: %w", ErrStaleConfig)
	e.event(Event{Type: EventServerError, Resource: req.Resource, Domain: req.Domain, Tokens: tokens, Status: StatusServerError})
	return Decision{Status: StatusServerError, RetryNever: true, Err: err}
}

// served reports a grant (and the bucket's creation) to the listener.
func (e *Engine) served(req *Request, k Key, l *Limit, d *Decision, created bool) {
	if created {
		e.listener.OnEvent(Event{Type: EventBucketCreated, Resource: k.Resource, Domain: k.Domain, Bucket: d.Bucket, Dynamic: l.Dynamic(k.Domain)})
	}
	e.listener.OnEvent(Event{Type: EventTokensServed, Resource: req.Resource, Domain: req.Domain, Bucket: d.Bucket, Dynamic: l.Dynamic(req.Domain), Tokens: d.Granted, Wait: d.Wait, Status: d.Status})
}

// reject turns a store's refusal or error into a decision and its event.
func (e *Engine) reject(req *Request, tokens int64, l *Limit, ref BucketRef, out *Outcome, err error) Decision {
	d := Decision{Limit: l.Params.Size, Bucket: ref}
	switch {
	case err != nil:
		d.Status, d.RetryNever, d.Err = StatusServerError, true, err
		e.event(Event{Type: EventServerError, Resource: req.Resource, Domain: req.Domain, Bucket: ref, Tokens: tokens, Status: d.Status})
		return d
	case out.TooManyBuckets:
		d.Status, d.RetryNever = StatusTooManyBuckets, true
		e.event(Event{Type: EventBucketMiss, Resource: req.Resource, Domain: req.Domain, Bucket: ref, Dynamic: true, Tokens: tokens, Status: d.Status})
		return d
	}
	d.Status, d.Remaining = StatusTimeout, out.Tokens
	if out.RetryAfter < 0 {
		d.RetryNever = true
	} else {
		d.RetryAfter = time.Duration(out.RetryAfter)
	}
	e.event(Event{Type: EventTimeout, Resource: req.Resource, Domain: req.Domain, Bucket: ref, Dynamic: l.Dynamic(req.Domain), Tokens: tokens, Status: d.Status})
	return d
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
		if !nameChars[s[i]] {
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
}

// Walk calls fn for every bucket, described at now, in no particular
// order, until fn returns false. fn runs outside the store's locks and may
// be slow; the walk of a million buckets on the memory store takes about
// 80 ms plus fn's time (BenchmarkWalk). For a sorted, filtered page, see
// Query.
func (e *Engine) Walk(now time.Time, fn func(BucketInfo) bool) error {
	ns := now.UnixNano()
	return e.store.Walk(func(s Snapshot) bool {
		return fn(Describe(s, ns))
	})
}

// Describe returns the BucketInfo of a store's snapshot at now (Unix
// nanoseconds).
func Describe(s Snapshot, now int64) BucketInfo {
	info := BucketInfo{
		Resource: s.Key.Resource, Domain: s.Key.Domain,
		LastUsed: time.Unix(0, s.LastUsed), Grants: s.Grants, Rejections: s.Rejections,
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
