// Package redisstore is a limits.Store on Redis or Redis Cluster, so that
// several Sluice servers sharing one Redis give the answers one server
// would. This first slice holds token-bucket resources only: TakeHits
// (burst tiers) returns ErrTiersUnsupported ("not supported on Redis
// yet").
//
// # One script per operation
//
// Take is one Lua script (redis.NewScript: EVALSHA, and EVAL when Redis
// answers NOSCRIPT) that mirrors limits.Step exactly: the same IEEE double
// arithmetic in the same order, the fraction of a token kept. The state is
// bucket.go's one number, the instant the bucket is empty, stored as
// decimal Unix nanoseconds; the script splits instants into seconds and
// nanoseconds and computes relative to now, so every difference is exact
// (below 2⁵³). Hence the bound MaxSpan (2⁵² ns, 52 days) on a bucket's
// span and on a request's wait.
//
// # Time
//
// The script reads Redis TIME: servers whose clocks disagree still share
// one clock. The now passed to Take is ignored, unless Options.CallerTime,
// which exists for deterministic tests only.
//
// # Writes and expiry
//
// A rejected request writes nothing (so Snapshot.Rejections is always 0
// and LastUsed is the last grant). A grant writes the bucket's hash
// (state, last use, grants, and on creation or reconfiguration its
// parameters, kind and name) and sets its TTL to the time until it is
// full again, or MaxIdle when longer, plus one second (PEXPIRE): a key
// that expires comes back full, as a bucket the store never had does.
// Reap therefore removes nothing.
//
// # Keys and Redis Cluster
//
// A resource's keys share the hash tag {r<resource>}, so every script
// touches one slot ("one slot per resource"):
//
//	<prefix>{r<resource>}b:<domain>   a bucket (hash)
//	<prefix>{r<resource>}d            the resource's dynamic buckets (sorted set)
//
// The prefix (Options.Prefix, default "sluice:"), the resource and the
// domain are escaped: every byte outside [A-Za-z0-9/_\-.:] becomes %XX, so
// '{', '}' and '%' never appear raw, a name can neither end nor move the
// hash tag, and different names never share a key ("a_b" and "a"+"b"
// differ, as do "a}"+"x" and "a"+"}x"). The tag is never empty (the global
// default bucket's resource "" gives {r}).
//
// # Dynamic buckets
//
// max_dynamic_buckets is counted per resource in the resource's slot,
// atomically in the same script: the sorted set holds each dynamic bucket
// of the resource with its expiry (ms) as score; creating a dynamic bucket
// drops the expired members and compares the count with the limit. Unlike
// the memory store, which counts a dynamic bucket until Reap removes it
// (after MaxIdle), a dynamic bucket that is full again (and idle for
// MaxIdle) is forgotten on Redis and no longer counts.
//
// # Reconfiguration
//
// Reconfigure records the new generation and its instant (Redis TIME),
// deletes the buckets whose configuration vanished (SCAN), and leaves the
// rest to Take, which rescales a bucket whose stored parameters differ
// from its Limit's at that recorded instant (lazily, as limits.Store
// allows). Generations are per engine, so Redis stores none: a Limit older
// than the last Reconfigure on this Store gets ErrStaleConfig locally. A
// bucket not granted between two changes of its parameters is rescaled
// once, from the first to the last (the memory store rescales twice).
//
// # Introspection
//
// Walk and Len SCAN the prefix (on every master of a cluster): O(buckets).
// A snapshot's Limit is rebuilt from the bucket's hash.
package redisstore
