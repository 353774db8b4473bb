// Package limits is Sluice's server-side limits engine: token buckets per
// (resource, domain), looked up in a configuration of named, prefix,
// per-domain, shared and global buckets, answering each request for tokens
// with yes, yes after a wait, or no. It is the engine behind the quota
// service's Allow (quotaservice-design.md), Sluice's own Limits API, and
// the keyed limiter of ratelimiting-in-150-lines.md; Charon's rate-limited
// resources (charon-paper.md) are to be another Algorithm of the same
// engine.
//
// Like package lease, it is deterministic: every method takes the current
// time, and nothing here reads a clock, starts a goroutine or does I/O.
// The server adds transport and a reaping ticker; the simulator drives the
// same code on virtual time.
//
// # Vocabulary
//
//	Sluice                     quota service            Charon                     keyed limiter
//	resource                   namespace                resource                   key prefix
//	domain                     bucket name              domain (tenant)            rest of the key
//	Resource.Template          dynamic bucket template  default configuration,     a bucket per key
//	  (a bucket per domain)      (max_dynamic_buckets)    per domain
//	Resource.Buckets[domain]   named bucket             domain-specific config     special-case key
//	                                                                                 (rate_limit/192.168.11.3)
//	Resource.Default           namespace default bucket —                          —
//	  (one bucket shared)
//	Config.GlobalDefault       global default bucket    "allow unconfigured"       —
//	tokens, fill rate, size    tokens, fill_rate, size  permits, rate, burst       amount, fillRatePerMs,
//	                                                                                 maxBudget
//
// # Lookup
//
// A request names a resource and a domain. In order: the domain's own
// configuration (named); for a domain with '/', the longest configured
// prefix ("a/b/c" → "a/b" → "a"), the full domain still being a bucket of
// its own with the prefix's configuration (prefix); a bucket of the
// domain's own from the resource's template, while the resource holds
// fewer than MaxDynamicBuckets such buckets, else StatusTooManyBuckets
// (dynamic); the resource's one shared default bucket (default); the
// global default bucket, also for resources not configured (global
// default); else StatusNoBucket. The Decision says which answered
// (Decision.Bucket).
//
// # Token buckets
//
// Step is the whole arithmetic, a pure function over one int64 of state
// (the instant the bucket is empty), so that a Redis Lua script can mirror
// it exactly: lazy fill, the size caps the tokens held, a request may take
// future tokens and wait for them up to min(its max wait, the bucket's
// wait timeout, its max debt), partial grants (the most in [MinTokens,
// Tokens] that fits), and a rejected request changes nothing. Fractions
// of tokens are kept to the nanosecond of fill (the reference loses them
// on every refill). A request's wait is the time until the last of its own
// tokens exists, so that over any interval T the tokens a bucket grants
// within it and that are usable within it (granted at t with wait w:
// usable from t + w) are at most size + fill rate × T; the reference's
// "next caller pays" serves up to size + fill rate × max debt at once. See
// bucket.go for the derivation.
//
// Decision.RetryAfter says, for StatusTimeout, when the request's minimum
// would fit if nobody else took tokens meanwhile; RetryNever is set when
// no wait can make it succeed (it asks for more than the bucket holds plus
// what it may owe within the wait), and for every other rejection.
//
// # State, stores and concurrency
//
// The buckets live in a Store. The engine hands Store.Take the bucket's
// key, its configuration (a *Limit) and the request's limits; the store
// does the find-or-create, the dynamic-bucket count and Step atomically,
// so a Redis store (one Lua script per operation) gives the engine's
// answers unchanged. MemoryStore shards its buckets over 256 locks with an
// open-addressing table per shard: no lock is engine-wide, a decision does
// not allocate, and a bucket takes about 128 bytes.
//
// Idle buckets go with Reap once unused for their MaxIdle and full again,
// so a reaped bucket comes back exactly as it went. SetConfig keeps each
// bucket whose configuration still applies (its fill fraction when its
// size or rate changed; untouched otherwise) and removes the others.
//
// # Events and introspection
//
// A Listener hears of tokens served (with the wait), timeouts, too many
// tokens, bucket misses, buckets created and removed, invalid requests and
// store errors, synchronously; with no listener, nothing is built. Walk
// and Query describe the buckets (resource, domain, fill rate, size,
// tokens now, fraction, last use, grants, rejections) for a status page.
//
// # Configuration
//
// ParseQuotaServiceYAML reads the quota service's configuration file as it
// is; Section is Sluice's own limits section (durations as Go strings,
// fractional fill rates), decoded under `limits:` in Sluice's configuration
// file. testdata/limits.yaml and testdata/quotaservice.yaml express the
// design's naming examples and the keyed limiter's rate_limit example in
// each.
//
// Source: quotaservice-design.md, "Tokens and Token Buckets" through
// "Filling tokens", "Listeners", "Configuration"; quotaservice-wire.md;
// ratelimiting-in-150-lines.md.
package limits
