// Package redisstore is a limits.Store on Redis or Redis Cluster, so that
// several Sluice servers sharing one Redis give the answers one server
// would: token-bucket resources (Take) and Charon's burst tiers
// (TakeHits: each domain's access log and each resource's global log);
// and CopyLog, the copy log of Charon's copy-limited resources shared by
// a fleet of servers (package fleet).
//
// # One script per operation
//
// Take is one Lua script (EVALSHA, and EVAL when Redis answers NOSCRIPT)
// that mirrors limits.Step exactly: the same IEEE double arithmetic in the
// same order, the fraction of a token kept. The state is bucket.go's one
// number, the instant the bucket is empty, stored as decimal Unix
// nanoseconds; the script splits instants into seconds and nanoseconds
// and computes relative to now, so every difference is exact (below
// 2⁵³). Hence the bound MaxSpan (2⁵² ns, 52 days) on a bucket's span and
// on a request's wait.
//
// TakeHits is one Lua script (tiers.lua) that mirrors limits.StepTiers
// exactly: the same steps in the same order over the same state (the
// domain's one-second log and, per tier, its entry instant and window log;
// the resource's global log when its global limit G > 0), so every field
// of the HitOutcome is the memory store's (a differential property test
// checks it, on Redis and on Redis Cluster). StepTiers is integer
// arithmetic on int64s (instants, durations up to MaxDuration, hit counts
// up to a log's 2⁶¹, sums of tier limits past 2⁵³); Lua's numbers are
// doubles, so the script keeps every int64 as two doubles (the high and
// low 32 bits) and computes on them exactly, saturating where Go does:
// no bound like MaxSpan applies to burst tiers.
//
// # Time
//
// The script reads Redis TIME: servers whose clocks disagree still share
// one clock. The now passed to Take is ignored (but by this package's
// own tests, which run the scripts on virtual time through an unexported
// option).
//
// # Writes and expiry
//
// A rejected request writes nothing (so Snapshot.Rejections is always 0
// and LastUsed is the last grant), nor does one refused for
// max_dynamic_buckets. A grant writes a token bucket's string (its
// state, last use, grants, generation and key expiry as packed doubles,
// then the configuration it was granted under, "size rate span dynamic
// kind name"; see take.lua): its numbers in place (SETRANGE, which keeps
// the TTL), or, new or reconfigured, whole (SET); or a burst-tier
// domain's hash (and PEXPIRE). A token bucket's key lives until the
// bucket is full again, or MaxIdle when longer, plus one to four seconds
// (a grant that needs it to live longer sets its TTL four seconds past
// that, PEXPIRE; the others keep it: a busy bucket's TTL is set at most
// once in three seconds), so that a key that expires comes back
// full, as a bucket the store never had does; a
// burst-tier domain's to the time until it would be fresh again (no tier
// active or in cooldown, no hit in the last second: limits.TierState's
// Fresh) plus one second, so that it comes back fresh; the global log's
// to the time until it holds no hit of the last second plus one second.
// Reap therefore removes nothing.
//
// # The cost of a token-bucket decision
//
// Redis's CPU is what a cluster of Sluice servers shares, so the take
// script spends as little of it as it can. A round trip's requests on
// one resource are one script (see batch.go). It reads all their buckets
// with one MGET and writes each once, after its last request (SETRANGE
// of 40 or 56 bytes; PEXPIRE at most once in three seconds a bucket). Its
// arguments beside the keys are four strings: the numbers of its limits
// and asks packed as doubles (one struct.unpack a limit or ask: a
// decimal argument would cost Redis a Lua string and the script a
// tonumber), the limit's two stored configurations, and the requests, 4
// bytes each. Its answer is four packed doubles a request. It makes few
// Lua objects (a bucket's row is one array of 13), since the garbage
// collector's work grows with them.
//
// Measured (2-core VM, redis-server 7.0; the script before these changes,
// 2026-11-25 at bf1ea01, in runs alternating with it):
//
//   - instructions Redis executes in its command processing per request,
//     counted, not timed, so the same from run to run (BenchmarkTakeInstructions:
//     redis-server under valgrind's callgrind, 10 000 existing buckets,
//     each request on another, caller time):
//
//     go test -run '^$' -bench TakeInstructions -benchtime 500x ./limits/redis
//
//     41 000 at 12 requests a script, before 55 800; 39 200 at 15, before
//     53 300. Of those (from runs of the script with parts removed), about
//     3 300 are EVALSHA's own, 3 500 the read (MGET, and the Lua string of
//     its value), 7 000 the write (SETRANGE, and packing the numbers),
//     8 000 the row and 10 000 the decision;
//
//   - Redis's CPU a request with 50 callers through the engine, no load
//     generator beside it (go test -run '^$' -bench AllowRedisCPU
//     -benchtime 200000x ./limits/redis; 25 requests a round trip): 10 000
//     buckets 4.9 to 5.5 µs, before 6.1 to 7.7; one hot bucket 2.9 to 3.2
//     µs, before 3.3 to 4.3;
//
//   - under quota-bench (see docs/performance.md; 15 runs alternating with the
//     script before, in a slow phase of the machine): 10 000 buckets 8.2
//     to 11.0 µs, median 10.0, before 11.2 to 16.8, median 13.2; one hot
//     bucket 5.2 to 7.8 µs, before 7.2 to 10.5.
//
// # Keys and Redis Cluster
//
// A resource's keys share the hash tag {r<resource>}, so every script
// touches one slot ("one slot per resource"):
//
//	<prefix>{r<resource>}s:<domain>   a token bucket (string)
//	<prefix>{r<resource>}b:<domain>   a burst-tier domain (hash)
//	<prefix>{r<resource>}d            the resource's dynamic buckets (sorted set)
//	<prefix>{r<resource>}g            a burst-tier resource's global log (string)
//
// The prefix (Options.Prefix, default "sluice:"), the resource and the
// domain are escaped: every byte outside [A-Za-z0-9/_\-.:] becomes %XX, so
// '{', '}' and '%' never appear raw, a name can neither end nor move the
// hash tag, and different names never share a key ("a_b" and "a"+"b"
// differ, as do "a}"+"x" and "a"+"}x"). The tag is never empty (the global
// default bucket's resource "" gives {r}).
//
// One slot per resource is also what makes a global limit exact: the
// resource's global log and all its domains live in one slot, so TakeHits
// checks and records a hit against the domain's limits and the global
// limit in one atomic script, with no two-step check and no refund (a
// domain in another slot could not be read by the same script). The
// price: all of a resource's traffic goes to the one master holding its
// slot; resources, not domains, spread over a cluster's masters.
//
// # Burst tiers
//
// A burst-tier domain's hash holds s, its TierState packed as
// little-endian int64s: a header (the number of tier runs; the one-second
// log's base and length; per run its entry instant, in use 0/1, its
// window log's base and length) and then the logs' entries in that order;
// l, n, g, dy, k and nm as a token bucket's; and c, the configuration it
// was last granted under in one string (dy, k, nm's length and nm, then
// the parameters: H, G, unlimited, Most, and per tier Lᵢ, Tᵢʷ, Tᵢᵃ, Tᵢᶜ,
// Sᵢ), so that a decision reads three fields (s, c, n) and notices a
// change in one, and Walk finds the parameters there (in tp for a hash
// last granted before c existed). A log entry is 16 bytes:
// an instant and the log's cumulative count of hits (as limits.HitLog
// keeps them, so a window's hits are one binary search away). Memory is
// bounded as in the memory store, since a rejection writes nothing and
// every grant prunes: a tier's window at most Lᵢ entries, the one-second
// log at most H (without H, Σᵢ Lᵢ·(⌊1 s ÷ Tᵢʷ⌋ + 2)), 16 bytes each, plus
// about 40 bytes per tier and the hash's fields.
//
// The global log is a string: a 16-byte header (head, the entries dropped
// from the front but not yet cut; the base) and then the entries, the
// live ones from head on: at most G of them (hits of the last second at
// its last grant), and a dead prefix at most as long. TakeHits reads and writes it
// in place (GETRANGE, SETRANGE, APPEND: O(log G) small reads and O(1)
// writes a decision) and cuts the dead prefix when it is as long as the
// live part (O(1) bytes a decision, amortized): its cost does not grow
// with the resource's traffic. A domain's logs, bounded by its own limits,
// are read and written whole with its hash (O(its entries) bytes copied
// inside Redis; binary searches in Lua).
//
// Measured (BenchmarkTakeHits: 50 callers through the engine, local
// redis-server 7.0, on a 2-core VM shared with other work; Redis's own
// CPU a decision, INFO cpu, of which the script's EVALSHA is all but 2 to
// 3 µs):
//
//	go test -run '^$' -bench TakeHits -benchtime 100000x ./limits/redis
//
// 41 to 47 µs over 1000 domains, 55 to 62 µs with the global limit's
// log, 34 to 40 µs on a hot domain whose hard limit rejects most requests
// (the script before its last revision, in runs alternating with it: 51
// to 70, 69 to 83 and 49 to 60 µs). The script unpacks its arguments and a
// state's header with one struct.unpack each, reads a domain's logs in
// place in its state and copies each once when it writes it, and reads
// three fields of its hash. What remains is spread thin: EVALSHA itself
// (about 5 µs), defining the script's functions (about 4 µs: they are
// closures made anew each call), its four Redis calls (TIME, HMGET, HSET,
// PEXPIRE) and the global log's seven more (STRLEN, three GETRANGEs,
// SETRANGE, APPEND, PEXPIRE), and the state's bytes, read and written
// whole (about 3 µs a KB: a domain taking 200 hits a second costs about a
// third more than one taking 20).
//
// # Dynamic buckets
//
// max_dynamic_buckets is counted per resource in the resource's slot,
// atomically in the same script: the sorted set holds each dynamic bucket
// of the resource with its expiry (ms) as score; creating a dynamic bucket
// drops the expired members and compares the count with the limit. Unlike
// the memory store, which counts a dynamic bucket until Reap removes it
// (after MaxIdle), a dynamic bucket that is full again (and idle for
// MaxIdle) is forgotten on Redis and no longer counts; so is a burst-tier
// domain fresh again (the memory store's Reap removes it then too). A
// resource without max_dynamic_buckets keeps no sorted set (one write
// less per decision); when a bound is configured later, its existing
// dynamic buckets count from their next grant on, so the resource may
// hold up to that many more than the bound meanwhile.
//
// # Reconfiguration
//
// Reconfigure costs one command, whatever Redis holds: it records the new
// generation and its instant (Redis TIME), and leaves every bucket to the
// script of its next request (lazily, as limits.Store allows); it never
// sends SCAN or KEYS, so a start or a reload costs the same with ten
// million keys in Redis as with ten. Take rescales a bucket whose stored
// parameters differ from its Limit's at that recorded instant.
// Generations are per engine, so Redis stores none: a Limit older
// than the last Reconfigure on this Store gets ErrStaleConfig locally. A
// bucket not granted between two changes of its parameters is rescaled
// once, from the first to the last (the memory store rescales twice).
//
// A burst-tier domain under a new Limit keeps its one-second log and its
// tiers by index (limits.Store.TakeHits), at its next grant: until then
// Redis keeps the old state and Walk shows the domain under the Limit of
// its last grant, and a dynamic count moves only then (the memory store
// moves it at once). A domain that changes algorithm changes at its next
// grant too: the script that finds no key of the new kind reads the old
// one (a token bucket's string, a burst-tier domain's hash, under the
// same hash tag), starts the domain fresh under the new algorithm (a
// fresh burst-tier domain, a full token bucket) keeping its grants, and
// deletes the old key; a rejection writes nothing, and the domain keeps
// its one place in the dynamic count. limits.Engine.Walk shows it so
// meanwhile, as the memory store makes it at once. A bucket whose key no
// longer has a bucket of its own (its configuration vanished, or its
// domain now falls to a shared bucket) is touched by no request again:
// Redis expires it by its TTL, the engine's walk no longer shows it, and
// no EventBucketRemoved is reported; if the same key has a bucket of its
// own again before its TTL ends, it goes on from its stored state
// (rescaled), where the memory store would start it full. A key's TTL
// follows the Limit of its last grant: a change
// that lengthens a domain's tiers may let its key expire before it is
// fresh under the new ones (it comes back fresh).
//
// # Round trips and Redis failures
//
// Concurrent scripts share round trips: each node (one Redis, or each
// master of a cluster) has one pipeline in flight, and the calls arriving
// meanwhile go out together when it returns (batch.go); the Takes of one
// round trip on one resource are one script, deciding them in order, each
// exactly as if alone. No call waits for a timer. Every round trip has a
// timeout (Options.Timeout, 200 ms; sluice server --redis-timeout) and
// passes the node's circuit breaker: after Options.BreakerFailures (3)
// failed round trips in a row it opens, and calls fail at once with
// ErrUnavailable, until the node's probe finds Redis again. The probe is a
// goroutine of the store, off the request path: it PINGs the node every
// Options.BreakerProbe (1 s), bounded by the timeout, and closes the
// breaker when Redis answers; on a cluster, a probe whose PING fails also
// stops when its node is no longer a master (after a failover), and the
// node's batcher is dropped. Close stops every probe. Calls queued
// behind a round trip that fails for want of Redis fail with it.
//
// So while Redis hangs, a call waits at most the timeout, and only during
// the first BreakerFailures round trips to a node (the calls arriving
// meanwhile fail with them); after that calls fail at once.
//
// A call also waits no longer than its context allows: the request's
// deadline and cancellation reach Redis. A call whose context is done
// before its round trip leaves is not sent (it takes no tokens); a caller
// whose context ends while it waits returns at once, its error wrapping
// ctx.Err() (not ErrUnavailable), without waiting for anyone's round
// trip. A round trip ends at the store's timeout, or sooner at the latest
// deadline of its callers when all have one, and its context is
// cancelled once every caller left; cut short so, it is no failure of
// Redis: the breaker does not count it. A fail-open
// token bucket's answers are then granted, flagged degraded, within about
// the timeout: with a timeout of 40 ms, 50 clients on one fail-open
// bucket through sluice server saw every answer within 50 ms over 5 s of
// a SIGSTOPped Redis (in three runs the slowest took 44–49.8 ms, the
// answers of the first three round trips; p99.9 41.6–47.4 ms); a
// copy-limited resource's fail-open reserves too (its engine calls the
// CopyLog outside its lock). A lower timeout bounds the wait tighter but
// counts as failures the Redis stalls longer than it (a fork for a
// snapshot: tens of milliseconds). When Redis is slow but answers, a call
// queued behind a round trip waits for it and then for its own: at most
// about twice the timeout. Health reports the state, the counters, the
// probes and the round trips' latency, as a limits.StoreHealth (plain
// data: a status page shows it without importing this package or
// go-redis); Collector exports it to Prometheus as sluice_redis_*.
//
// # Copy log
//
// CopyLog keeps the counts of copy-limited resources (copies.Log): per
// domain, per group and global, each a hash holding its total ('_') and
// one field per contributor — a server's epoch ('s<epoch>') or a staged
// transfer ('t<id>') — so that every count is the sum of the
// contributions stored beside it (charon-paper.md §4.3.2). Each epoch
// keeps, per resource, the set of count keys it contributes to, and the
// set of resources it contributes to. Keys, with the prefix and names
// escaped:
//
//	<prefix>{c<resource>}r              the resource's record (gone: Redis lost the counts)
//	<prefix>{c<resource>}l              its learning marker: the epochs it waits for (set, ttl LearningPeriod)
//	<prefix>{c<resource>}n:a            the global count
//	<prefix>{c<resource>}n:d:<domain>   a domain's count
//	<prefix>{c<resource>}n:g:<group>    a group's count
//	<prefix>{c<resource>}k:<epoch>      the count keys an epoch contributes to (set)
//	<prefix>{c<resource>}x:<epoch>      the epoch's fence in the resource's slot
//	<prefix>{c<resource>}t:<transfer>   a staged transfer (hash: copies, deadline, domain, groups)
//	<prefix>{s<epoch>}r                 the resources an epoch contributes to (set)
//	<prefix>{s<epoch>}x                 the epoch's dead marker
//	<prefix>{t<transfer>}               a staged transfer's resource
//	<prefix>{x}ts                       staged transfers by deadline, for expiry (sorted set)
//
// Every operation on counts is one script in the resource's slot
// (copies_reserve.lua, copies_move.lua, copies_restore.lua): a reserve
// checks the domain, group and global limits against the totals and adds
// its copies to its epoch's contribution, or writes nothing; a release
// subtracts at most what the epoch contributed, so no count goes
// negative. Bury, run by the fleet's leader when an epoch's etcd session
// ended, marks the epoch dead, fences it in every resource it touched
// (every later script under it answers fenced: copies.ErrFenced) and
// subtracts its contributions. An epoch registers a resource in its set
// before its first write there, by a script that refuses a dead epoch, so
// Bury finds every resource an epoch could write. Transfers belong to no
// epoch: a server that dies leaves its staged transfers to their ttl,
// which any server's ExpireTransfers enforces on Redis TIME, once each.
//
// Redis losing its data (a restart without persistence, FLUSHALL, a
// failover that lost writes) loses the contributions and the staged
// transfers: Lost notices an epoch's missing set of count keys, and
// Restore writes the epoch's contributions back from its engine's hold
// sets (copies.Engine.Reconcile). Until every server has, the counts are
// too low, so the first script to find a resource's record gone
// (copies_learn.lua, run by a reserve, a restore or Learn) recreates it
// and starts the resource's learning period: reserves that keep the
// limits answer copies.ErrLearning until it ends, and then see every live
// hold again. Its marker is the set of the epochs it waits for — the
// fleet's other members (CopyLog.SetMembers), and this server if it holds
// copies — each member's Restore, or its Learn when it holds none,
// removes its own, and the period ends when the set is empty or after
// LearningPeriod, whichever comes first (a member that died is waited for
// until then). It is skipped when no server can hold copies of the
// resource (this server holds none and has no other member), so a fresh
// Redis does not refuse a lone server's first reserve; and since every
// server's engine asks Learn about every configured resource once it
// joins, a new fleet's periods end within a reconcile of the last
// member's join. Staged transfers are not rebuilt (their copies come back
// free), and a dead epoch's fence is lost with the rest.
//
// # Introspection
//
// Walk SCANs the prefix (on every master of a cluster), for a status page
// that asked for it, and only that: at most WalkScanCalls SCANs a node
// (about 100 000 keys of the keyspace, whatever they hold), then
// limits.ErrWalkBudget, which the page reports as partial.
// EstimateLen, which a metrics scrape reads, is one DBSIZE per node,
// O(1): the keys of the database, an estimate of the buckets (see there
// what it counts). A snapshot's Limit is rebuilt from the
// bucket's string (its MaxDynamic and the Bucket's other fields are zero);
// a burst-tier domain's has Tiers (limits.NewTierParams from tp) and the
// snapshot its TierState (Snapshot.Tiers), so that limits.Describe shows
// its tier, phases and hits.
package redisstore
