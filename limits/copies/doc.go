// Package copies is Sluice's engine for Charon's copy-limited resources:
// things a domain (a tenant) holds for a while — sandboxes, connections,
// licences — counted per domain, per domain group and in total, and held
// by sessions that release what they hold when they end.
//
// Like packages lease and limits, it is deterministic: every method takes
// the current time, and nothing here reads a clock, starts a goroutine or
// does I/O (session and transfer ids come from crypto/rand, or from
// Options.Rand in tests). The server adds the transport, the keep-alive
// streams and a ticker calling Expire. Package limits embeds copy-limited
// resources in its configuration and answers the wrong-kind error; this
// package does not import it.
//
// # The model
//
// A Resource has a domain limit (overridable per domain), a global limit
// (Unbounded: none) and domain groups, each with a group limit; a domain
// may belong to several groups. Every limit counts copies held at once.
// The copy log keeps one count per domain, per group and per resource
// (global); each session keeps a hold set: the copies it holds per
// (resource, domain, groups), the groups being those the domain belonged
// to when the copies were reserved. Every count is, at every moment, the
// sum of the copies the open sessions hold and the staged transfers carry
// under it.
//
// Operations, each atomic (Source: charon-paper.md, section 3.1):
//
//	Open(ttl) → session            Close(session) → what it released
//	KeepAlive(session)             Expire() → sessions and transfers ended, what each released
//	Reserve(session, resource, domain, copies, min) → granted n ∈ {0} ∪ [min, copies], and the context
//	Release(session, resource, domain, copies, groups)
//	Transfer(session, resource, domain, copies, groups, ttl) → transfer id
//	Seize(session, transfer id) → resource, domain, groups, copies
//
// # The rules
//
//   - Reserve grants the most n in [min, copies] such that, after it, the
//     domain's count is within its limit, the count of each group the
//     domain belongs to now is within that group's limit — a domain in
//     several groups takes a copy from each pool — and the global count
//     is within the global limit; or nothing, changing nothing. Over-limit
//     is an answer (Granted 0), not an error. (§2.2, §3.1 reserve.)
//   - Every limit above the global limit is lowered to it, and
//     Normalize says which (§4.1). A Resource that ignores its limits
//     (Ignore), or an unconfigured resource under an AllowUnconfigured
//     prefix (Unlimited), grants every reserve, still counted (§4.3). No
//     count ever exceeds MaxCopies (2⁵³).
//   - Release returns copies under the groups the client names — those of
//     the reservation — in any order; partial releases are allowed, and
//     releasing more than the session holds there is ErrNotHeld (§3.1
//     release, client error 4).
//   - Reconfiguration keeps every hold where it is counted: a lowered
//     limit stops new reserves until enough copies are released; a domain
//     that leaves a group keeps its old copies counted there until they
//     are released, and its new copies count in its new groups, at once
//     (§2.3 Bulkheads, §3.1 release).
//   - A session lives until Close, or until its ttl passes without a
//     KeepAlive (10 s by default, 1 s to 1 h). When it ends, each of its
//     holds is released exactly once, one release per (resource, domain,
//     groups) (§4.2, §4.3.1). From its deadline on it is unusable
//     (ErrUnknownSession); its copies count until Expire runs, so the
//     server's Expire period bounds that delay.
//   - Transfer moves copies from the session into a staging area under an
//     unpredictable id, still counted (§3.1 transfer). A staged transfer
//     belongs to no session: the end of the session that staged it leaves
//     it staged, its ttl (30 s by default, at most 1 h) its only bound —
//     so a process may stage copies, hand the id over and exit, as in the
//     paper's Figure 6; once the ttl passes unseized, Expire releases it.
//     (The paper: staged copies "can no longer be explicitly released by
//     the client"; TestCharonProcesses in package server has the stager
//     killed.)
//   - Seize moves a staged transfer into a session, once; an unknown,
//     seized or expired id is ErrUnknownTransfer (§3.1 seize). The answer
//     names the groups the copies are counted in — what Release needs —
//     where the paper names the domain's current groups; they differ only
//     when the domain's groups changed since the reserve.
//
// # Errors
//
// Every client error is an *Error naming the request's field (its wire
// name: session_id, resource, domain, copies, min_copies, groups, ttl,
// transfer_id) and wrapping one sentinel; ClassOf maps it to the gRPC code
// the API edge answers with:
//
//	ErrInvalidArgument   InvalidArgument      malformed request (client error 1)
//	ErrUnknownResource   NotFound             resource not configured (client error 2)
//	ErrWrongKind         FailedPrecondition   a rate-limited resource (client error 3): the caller's, see WrongKind
//	ErrNotHeld           FailedPrecondition   release or transfer of what the session does not hold (client error 4)
//	ErrUnknownSession    NotFound             session never opened, closed, or its ttl passed
//	ErrUnknownTransfer   NotFound             transfer never staged, seized, or expired
//
// Anything else (the random source failing) is ClassInternal.
// Configuration errors are *ConfigError naming the field's path
// (resources.NAME.groups[0].limit), wrapping ErrInvalidConfig.
//
// # Cost and concurrency
//
// One mutex serialises the engine. Reserve and Release cost a few map
// operations plus one per group of the domain, whatever the number of
// domains, sessions and transfers (a Reserve+Release pair: 0.2 µs at one
// domain, 0.35–0.5 µs at 100 000, no allocation; with the domain in two
// groups 0.4 and 1 µs, one allocation for the answer's groups; see
// bench_test.go); Open,
// KeepAlive, Close, Transfer, Seize and each ending add O(log n) for a
// deadline heap; Expire costs only what it ends. Memory: a count per
// domain and group holding copies (none kept at zero), a hold per
// (session, resource, domain, groups), a record per session and transfer.
// Snapshot and Resource describe it all for a status page.
//
// Source: charon-paper.md, sections 2.2, 2.3 (Bulkheads), 3.1, 4.1, 4.2,
// 4.3 and 4.3.1; docs/charon.md.
package copies
