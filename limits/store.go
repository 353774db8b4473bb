package limits

import (
	"context"
	"errors"
)

// Key identifies one bucket in a Store. A domain's own bucket (named, below
// a prefix, or from the template) is {resource, domain}; a resource's
// shared default bucket is {resource, ""}; the global default bucket is
// {"", ""}. Requests cannot name the empty string, so the keys never
// collide.
type Key struct {
	Resource, Domain string
}

// Outcome is what Store.Take did.
type Outcome struct {
	// Result is the step's result (zero when TooManyBuckets).
	Result
	// Created reports that the bucket did not exist and this call created
	// it (only when the request was granted: a rejected request creates
	// nothing).
	Created bool
	// TooManyBuckets reports that the bucket did not exist and could not
	// be created: it is dynamic (Limit.Dynamic) and the resource already
	// has Limit.MaxDynamic dynamic buckets.
	TooManyBuckets bool
}

// HitOutcome is what Store.TakeHits did.
type HitOutcome struct {
	// TierResult is StepTiers' result (zero when TooManyBuckets).
	TierResult
	// Created and TooManyBuckets are as in Outcome.
	Created        bool
	TooManyBuckets bool
}

// RemoveReason says why a bucket was removed.
type RemoveReason uint8

// The reasons.
const (
	// RemovedIdle: unused for its MaxIdle and full again, or, for a
	// burst-tier domain, fresh again (Reap).
	RemovedIdle RemoveReason = iota + 1
	// RemovedReconfigured: its configuration vanished (SetConfig).
	RemovedReconfigured
)

// String returns "idle" or "reconfigured".
func (r RemoveReason) String() string {
	switch r {
	case RemovedIdle:
		return "idle"
	case RemovedReconfigured:
		return "reconfigured"
	}
	return ""
}

// Removed describes one bucket a Store removed.
type Removed struct {
	Key    Key
	Limit  *Limit
	Reason RemoveReason
}

// Snapshot is one bucket as a Store holds it, for introspection.
type Snapshot struct {
	Key   Key
	Limit *Limit
	// State is a token bucket's state (TokenBucket).
	State State
	// Tiers is a copy of a burst-tier domain's state (BurstTiers; nil
	// otherwise).
	Tiers *TierState
	// LastUsed is the instant of the bucket's last request, granted or
	// rejected, in Unix nanoseconds.
	LastUsed int64
	// Grants and Rejections count the requests the bucket granted and
	// rejected (TIMEOUT) since it was created.
	Grants, Rejections uint64
}

// ErrStaleConfig is returned by Store.Take when the Limit it was given is
// older than the configuration the store has already applied to the
// bucket: the engine looks the request up again in its current
// configuration and retries.
var ErrStaleConfig = errors.New("limits: stale configuration")

// Store holds the buckets' state. Every method is safe for concurrent use.
// The engine's answers depend only on what Take returns, so a store on
// Redis (one Lua script per operation, mirroring Step) answers exactly as
// the memory store does.
//
// Every method takes the context of the work it serves: the request's,
// for Take and TakeHits (an RPC), Walk (a status page) and EstimateLen (a
// scrape); the caller's own for Reap and Reconfigure (background work).
// A store that does I/O bounds it by ctx's deadline and
// cancellation: a call whose ctx is done before the store acts on it
// changes nothing and returns an error wrapping ctx.Err() (checked with
// errors.Is against context.Canceled or context.DeadlineExceeded); one
// whose ctx ends while Redis holds its request in flight returns at once
// with such an error, its outcome unknown. The memory store checks ctx
// once, at the start of each call, and never blocks on I/O.
type Store interface {
	// Take is one atomic decision on bucket k with configuration l at now
	// (Unix nanoseconds): it finds the bucket, or, when it does not exist,
	// starts it full (FullState) — unless l.Dynamic(k.Domain) and the
	// resource already holds l.MaxDynamic > 0 dynamic buckets: then
	// TooManyBuckets (whatever the request asks) and nothing else. It runs l.Step (the resource's
	// algorithm) with a,
	// stores the new state if granted (a bucket that did not exist is
	// created only then), records the use (last used, grants or
	// rejections) and returns the outcome.
	//
	// A bucket last configured under another Limit first has its state
	// rescaled (Rescale) to l.Params at now, if l is newer (Gen); if l is
	// older than what the store has applied, Take returns ErrStaleConfig.
	// An error wrapping ctx.Err() means the request's context ended (see
	// above). Any other error is the store's own (a Redis outage): the
	// engine answers StatusServerError.
	Take(ctx context.Context, now int64, k Key, l *Limit, a Ask) (Outcome, error)

	// TakeHits is one atomic decision on the burst-tier domain k with
	// configuration l (l.Algorithm BurstTiers) at now: as Take, with the
	// domain's TierState (a zero TierState when it does not exist) and,
	// when l.Tiers.GlobalLimit > 0, the resource's global HitLog (one per
	// l.Resource, shared by all its domains), running StepTiers on both
	// under one atomic step — in memory, the domain's shard lock and then
	// the resource's lock; on Redis, one script over the domain's keys and
	// the resource's (on Redis Cluster, under one hash tag of the
	// resource). A rejection writes nothing. The dynamic count,
	// Created, TooManyBuckets, ErrStaleConfig and errors are as for Take.
	// A domain last configured under another Limit keeps its one-second
	// log and its tiers by index (extra ones dropped, missing ones
	// inactive); one that was a token bucket starts fresh.
	TakeHits(ctx context.Context, now int64, k Key, l *Limit, a Ask) (HitOutcome, error)

	// Reap removes every bucket whose Limit has Bucket.MaxIdle > 0, unused
	// for at least MaxIdle at now, and full at now (so that it comes back
	// exactly as it went: full), and every burst-tier domain whose state
	// is Fresh at now, and calls removed for each (outside the store's
	// locks); it drops the global logs with no hit in the last second. It
	// returns how many buckets it removed. A store that expires
	// keys itself (Redis: a TTL of max(MaxIdle, the time until full) set on
	// every write) may remove nothing here.
	Reap(ctx context.Context, now int64, removed func(Removed)) (int, error)

	// Reconfigure applies configuration generation gen at now: for every
	// bucket, resolve returns its new Limit, or nil to remove it (calling
	// removed, outside the store's locks). A bucket whose Params change is
	// rescaled (Rescale); one whose Params do not keeps its state. Dynamic
	// counts follow. Afterwards Take refuses Limits older than gen with
	// ErrStaleConfig. A store may apply it lazily in Take instead (Take
	// rescales any bucket under an older Limit), provided it rescales at
	// the instant of the change.
	Reconfigure(ctx context.Context, now int64, gen uint64, resolve func(Key) *Limit, removed func(Removed)) error

	// Walk calls fn for every bucket, in no particular order, until fn
	// returns false. fn runs outside the store's locks; buckets changed
	// during the walk may be seen before or after the change. It costs
	// O(buckets): for a status page that asked for it, never for a
	// scrape. A store may bound it: it then returns ErrWalkBudget after
	// the buckets it did call fn with (limits/redis: WalkScanCalls SCANs
	// a node).
	Walk(ctx context.Context, fn func(Snapshot) bool) error

	// EstimateLen returns the number of buckets (token buckets and
	// burst-tier domains), or an estimate of it, at a cost that does not
	// grow with them: O(1) work per store node, what a metrics scrape may
	// read. The memory store's is exact; a store that cannot count its
	// buckets so cheaply says what its number counts (limits/redis: the
	// keys of its Redis databases, DBSIZE).
	EstimateLen(ctx context.Context) (int, error)

	// Reset forgets bucket k (the key a request resolves to: Engine.Reset
	// finds it), whatever its algorithm: a token bucket is full again, a
	// burst-tier domain fresh (its TierState, its one-second log and its
	// tiers' windows gone; the resource's global log, which its other
	// domains share, stays). Its counts (grants, rejections, last use)
	// go with it, and a dynamic bucket no longer counts against
	// MaxDynamic; the next request on k creates it again (Created), as
	// for a bucket the store never held. It reports whether the store
	// held k (false: it was full or fresh already, or never used). It is
	// atomic with the decisions on k: one decided after it sees the
	// bucket anew. Errors: an error wrapping ctx.Err() (see above), or
	// the store's own (a Redis outage).
	//
	// Source: envoyproxy/ratelimit issue #191 (reset one key);
	// gubernator's Behavior RESET_REMAINING.
	Reset(ctx context.Context, k Key) (bool, error)
}
