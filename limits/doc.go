// Package limits is Sluice's server-side limits engine: token buckets and
// Charon's burst tiers per (resource, domain), looked up in a
// configuration of named, prefix, per-domain, shared and global buckets,
// answering each request for tokens (hits) with yes, yes after a wait, or
// no. It is the engine behind the quota service's Allow
// (quotaservice-design.md), Sluice's own Limits API, the keyed limiter of
// ratelimiting-in-150-lines.md, and Charon's rate-limited resources
// (charon-paper.md, section 2.1: Algorithm BurstTiers). A token bucket
// may also carry budgets (Bucket.Budgets: "100 000 tokens a calendar
// month"), counted with the arithmetic and stores of package limits/rls.
// Charon's copy-limited resources are package limits/copies.
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
//	Resource.Template          dynamic bucket template  —                          a bucket per key
//	  (a bucket per domain)      (max_dynamic_buckets)
//	Resource.Tiers, HardLimit  —                        default configuration      —
//	  (a state per domain)                                (burst tiers, H)
//	Resource.GlobalLimit       —                        global limit G             —
//	Resource.Buckets[domain],  named bucket             domain-specific config     special-case key
//	  TierDomains[domain]                                                            (rate_limit/192.168.11.3)
//	Resource.Default           namespace default bucket —                          —
//	  (one bucket shared)
//	Config.GlobalDefault       global default bucket    —                          —
//	Config.Namespaces          —                        namespace prefix: ignore   —
//	                                                      configured, allow
//	                                                      unconfigured
//	tokens, fill rate, size    tokens, fill_rate, size  hits (request), copies     amount, fillRatePerMs,
//	                                                      (min_copies)               maxBudget
//	Decision.Tiers             —                        request's response context —
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
// # Burst tiers
//
// A burst-tier resource (charon-paper.md, section 2.1) has a hard limit H
// (hits per second per domain), a global limit G (hits per second across
// its domains), each optional, and n ≥ 0 tiers (Lᵢ, Tᵢʷ, Tᵢᵃ, Tᵢᶜ, Sᵢ);
// n = 0 makes it inaccessible. A domain-specific configuration replaces
// the tiers and, in Sluice, may replace H; G is the resource's. StepTiers
// is the whole rule, a pure function of the domain's TierState, the
// resource's global HitLog and now:
//
//   - Window. A hit at t is in tier i's window while t ≥ now − Tᵢʷ (the
//     paper: "the next request can be granted only when now > t + Tᵢʷ"),
//     counted exactly from a log of (instant, hits) entries. "The last
//     second" of H and G is a window of one second, closed the same way.
//   - State. A tier entered at e (its first hit while inactive) is active
//     in [e, e + Tᵃ), in cooldown in [e + Tᵃ, e + Tᵃ + Tᶜ), then inactive,
//     evaluated lazily at now.
//   - The current tier is the highest active one, or the fake tier 0
//     (L = 0, Tʷ = Tᵃ = ∞): fallback, when the current tier's active
//     period ends, may drop several tiers at once.
//   - How a hit counts (our reading of "apply n hits to the access log"
//     and "a burst tier describes a specific subset of a domain's access
//     history"): each hit is logged in exactly one tier, the one it is
//     granted in. The current tier takes hits while its window holds fewer
//     than L; "when a sliding window of the current burst tier at index i
//     is at capacity, the next request may cause a burst into the next
//     tier", which enters its active period and takes the next hits. A
//     bulk request passes through as many tiers as it needs, atomically:
//     it gets exactly what its hits one at a time at the same instant
//     would (a property test checks it).
//   - A burst cannot go to a tier that does not exist, nor to one in
//     cooldown that is not skippable (it is blocked there); a skippable
//     tier "at capacity" is passed over — we read "at capacity" as in
//     cooldown or full, and since an inactive tier's window is empty
//     (below), that means in cooldown. Tier 0 is always at capacity, so
//     "a request while in burst tier at index zero will always burst": it
//     always tries, and a non-skippable tier 1 in cooldown blocks it
//     (which is what makes the paper's Batch Processing pattern work).
//   - A tier forgets its hits when its cooldown ends ("Keys associated
//     with a burst tier whose cooldown period has already ended are
//     removed from the access log"), so a tier entered anew starts with
//     an empty window — the over-limit risk section 4.1's normalization
//     guards against ("when crossing into the second instance of the
//     burst tier"). Its hits stop counting as soon as it leaves its active
//     period: a tier in cooldown takes none.
//   - A request of [MinTokens, Tokens] hits gets the most that H, G and
//     the tiers allow together, or nothing and no change at all; MinTokens
//     above min(H, G, Σ Lᵢ) always fails (RetryNever). RetryAfter is the
//     exact earliest instant the same request would succeed if no other
//     hit came (H and G only loosen with time; the tiers are followed
//     from one phase change to the next). Nothing waits (Wait is 0).
//   - Decision.Tiers is the paper's response context: H, G, the current
//     tier after the decision with its limit and hits, the domain's and
//     the resource's hits of the last second, whether the request entered
//     a tier (Burst; the first request from tier 0 does), and whether H or
//     G alone allowed fewer than Tokens (HardLimited, GlobalLimited).
//     Without G no global log is kept and its count is 0.
//
// Requests decided with instants out of order (concurrent callers) are
// recorded at the latest instant a log has seen, so hits leave windows
// late, never early.
//
// Memory per domain is bounded by its tiers' limits and H: each tier's
// window at most Lᵢ entries, the last second's log at most H entries, or
// without H at most Σᵢ Lᵢ·(⌊1 s ÷ Tᵢʷ⌋ + 2); 16 bytes an entry (see
// TierState); a global log at most G entries per resource. On the memory
// store a domain whose logs are small takes about 440 bytes (two tiers,
// BenchmarkMemoryPerTierDomain).
//
// Source: charon-paper.md, sections 2.1, 2.3 (the table tests play
// Figures 2 and 3 and the Penalties, Punishment and Batch Processing
// patterns), 3.1 (request) and 4.2 ("Access Log").
//
// # Namespaces
//
// Config.Namespaces configures resource-name prefixes (the longest
// matching one decides). IgnoreConfigured grants every request for a
// resource configured under the prefix in full, at once, still recording
// it: a burst-tier domain's tiers take what they can (bursting as usual),
// its one-second logs take all; a token bucket gives what it holds
// (never going into debt, so it refills from empty when the namespace is
// changed back). AllowUnconfigured answers a resource not configured
// under the prefix with the most permissive configuration,
// UnconfiguredTiers (no H or G, one tier of 2⁵³ hits a second), each
// (resource, domain) with its own state, every request granted in full
// and recorded, before the global default bucket is tried. Either way
// Decision.Unlimited is set. Source: charon-paper.md, section 4.3.
//
// # State, stores and concurrency
//
// The buckets live in a Store. The engine hands Store.Take the bucket's
// key, its configuration (a *Limit) and the request's limits; the store
// does the find-or-create, the dynamic-bucket count and Step atomically,
// so a Redis store (one Lua script per operation) gives the engine's
// answers unchanged. Burst-tier domains go through Store.TakeHits, which
// runs StepTiers on the domain's state and, for a resource with a global
// limit, the resource's global log in one atomic step (on Redis, one
// script over the domain's keys and the resource's). MemoryStore shards
// its buckets over 256 locks with an open-addressing table per shard: no
// lock is engine-wide, a decision does not allocate, and a bucket takes
// about 140 bytes; a resource with a global limit adds one lock of its
// own, taken after the domain's shard lock, that serialises its domains'
// decisions (and only theirs).
//
// Idle buckets go with Reap once unused for their MaxIdle and full again,
// so a reaped bucket comes back exactly as it went; a burst-tier domain
// goes once it is fresh again (no tier active or in cooldown, no hit in
// the last second). SetConfig keeps each bucket whose configuration
// still applies (its fill fraction when its size or rate changed;
// untouched otherwise; a burst-tier domain keeps its one-second log and
// its tiers by index) and removes the others.
//
// When the store fails (a Redis outage), a resource answers as its
// OnStoreError says: FailClosed (the default) is StatusServerError;
// FailOpen grants the tokens asked at once, flagged Decision.Degraded
// and reported as EventDegraded, recording nothing.
//
// Allow takes the request's context, and so does every store call made
// for it: on Redis its deadline and cancellation reach the round trip. A
// request whose context is done before the store sees it takes no
// tokens; one whose context ends while it waits gets StatusServerError
// with ctx.Err() wrapped at once — never a degraded grant: the caller gave
// up, the store did not fail. EstimateLen, which metrics read, costs O(1)
// per store node (exact in memory, an estimate on Redis); Walk and Query
// cost a pass over the buckets.
//
// # Events and introspection
//
// A Listener hears of tokens served (with the wait), timeouts, too many
// tokens, bucket misses, buckets created and removed, invalid requests,
// store errors and degraded grants, synchronously; with no listener, nothing is built. Walk
// and Query describe the buckets (resource, domain, fill rate, size,
// tokens now, fraction, last use, grants, rejections; for a burst-tier
// domain its current tier, the tier's phase and time left, the hits in
// its window and in the last second, and the highest tier in cooldown
// with its time left) for a status page; TierStatuses gives every tier.
//
// # Configuration
//
// A Config is built in Go or read from a file: package limits/limitsyaml
// reads Sluice's own limits section (durations as Go strings, fractional
// fill rates, burst tiers, namespaces; `limits:` in Sluice's configuration
// file) and the quota service's configuration file as it is (token
// buckets only). Whatever its source, a configuration passes Validate
// (ValidateIn names the fields in the terms of the format it came from)
// before the engine takes it. Package limits reads no file format.
//
// The engine normalizes its own copy of every configuration as Charon's
// configuration API does (section 4.1): tiers with an active time of 0
// removed, a window longer than its active time shortened to it, an
// active time trimmed to a whole number of windows. Config.Normalize
// returns a note for each change, for `sluice config validate`.
//
// Source: quotaservice-design.md, "Tokens and Token Buckets" through
// "Filling tokens", "Listeners", "Configuration"; quotaservice-wire.md;
// ratelimiting-in-150-lines.md; charon-paper.md, sections 2, 3.1 and 4.
package limits
