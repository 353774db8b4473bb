// Package limits is the Go client of Sluice's limits service
// (sluice.v1.Limits over gRPC): a service asks before each call to a
// shared resource, and the answer is yes, yes after a wait, or no. It has
// the three kinds of client of the quota service's design, plus
// after-the-fact accounting, and Charon's client: rate-limited requests
// retried with backoff, copies of copy-limited resources held in a
// session, transfers between processes, and the degraded modes.
//
// The package is named for the service it calls. The engine behind that
// service is another package, github.com/sluice-rl/sluice/limits: a
// program using both imports that one under another name (this package's
// tests and package demo say limitsengine). "The quota service" below is
// Square's, whose design the three kinds of client follow; the metrics
// keep their earlier names, sluice_quota_client_*.
//
// Vocabulary: a target is a (resource, domain) pair — the quota service's
// namespace and bucket name, for example ("Pinky_TheBrain",
// "UserService/getUser") or ("TheBrain_userLogins", userID). Names are 1 to
// MaxNameLen (256) bytes of NameChars (A-Z a-z 0-9 / - . : _); SafeName
// makes any string one. Tokens are whole, 1 to MaxTokens (2⁵³) per
// request; what a token is (a call, a row, a millisecond of work) is the
// bucket's configuration's business. Durations are time.Duration; rates
// are tokens (permits) per second.
//
// # Three modes, and when to use which
//
// One Client (New) serves all of them, and all at once if need be.
//
// Manual (Allow, Reserve): one request per call, nothing hidden. Allow
// asks and waits the granted wait; Reserve returns the grant without
// waiting. Neither has a timeout but its context's, nor a fallback: if the
// service does not answer, the error wraps ErrUnavailable and the caller
// decides. Use it where the decision is the caller's business — a batch
// job that must not run over, a tool — or to build something else.
// Source: quotaservice-design.md, "Manual clients", scenarios 1, 2, 4.
//
// Naive (Acquire; UnaryClientInterceptor, StreamClientInterceptor,
// RoundTripper): one request per call, on the call's critical path, made
// safe to put in front of every RPC: the answer is awaited at most
// WithTimeout (50 ms by default); a circuit breaker (WithBreaker) stops
// asking after 5 consecutive failures and lets one probe through every
// 5 s; whenever the service does not answer, fails, is cut off by the
// breaker, or has no bucket for the target (REJECTED_NO_BUCKET, scenario
// 3), a per-target fallback limiter (ratelimit.NewLimiter, 100 permits per
// second with 1 s of burst unless WithFallbackRate or WithFallback say
// otherwise) decides instead. A rejection fails the call —
// codes.ResourceExhausted with RetryInfo from the interceptors, a 429
// response with Retry-After from the RoundTripper — or, with
// WithRejectWait, waits and asks again. The resource and domain of a call
// come from a function of the call: MethodTarget (gRPC: the method, as
// "pkg.Service/Method") and HostPathTarget (HTTP: host + path) are the
// defaults. Use it when the calls are few enough (say, under a few
// thousand per second per process) that a request each is affordable, and
// the service's per-call verdict and waits are wanted exactly.
// Source: quotaservice-design.md, "Naïve clients", "Failure scenarios".
//
// Smart (WithSmart; then the same Acquire, interceptors and RoundTripper):
// a local bucket per target, topped up in the background by batched
// requests — one Allow for Batch tokens (default 10) with min_tokens 1 and
// max_wait 0, so the service grants what it holds now, partially if need
// be, never a wait — started when a call leaves the bucket at or below
// the low-water mark (default Batch/2). In the steady state a call takes
// a local token and never waits on the network; only a target's first
// call, or calls outrunning the top-ups, wait for one (bounded by the
// timeout). Fetched tokens expire TTL (default 1 s) after they arrive, so
// hoarded tokens cannot bunch up into a burst the service never allowed;
// expired tokens are lost (counted). When the service rejects a top-up,
// calls that find the bucket empty are rejected locally with the
// service's retry-after, without asking again before it; when the service
// is unreachable, they go to the fallback limiter as in the naive mode,
// and top-ups are retried every Smart.Retry (1 s). Use it for hot targets,
// where a request per call would cost too much or add too much latency,
// and where decisions a little coarser than the service's (a client holds
// up to Batch + LowWater tokens for up to TTL) are acceptable.
// Source: quotaservice-design.md, "Smart clients", scenario 5.
//
// Post-accounting (Report): charges tokens after the fact, for costs known
// only once the call is done (scenario 6: a token per millisecond taken).
// Report adds to a per-target batch and returns at once; every
// WithReportInterval (1 s) each batch is sent as one request, charged
// into the bucket's debt so that later callers wait, and what the service
// did not charge stays for the next flush. Close sends the rest.
// Source: quotaservice-design.md, "Use cases", scenario 6.
//
// # Charon's calls: Request, ReserveCopies, Seize, ReserveMulti
//
// These follow charon-paper.md's client (sections 3.2, 3.3 and 4.3). Each
// request is answered at once by the service (max_wait 0 on the wire);
// the client retries rejections itself.
//
// Request (rate-limited resources: burst tiers, hard and global limits,
// or a token bucket) asks for the most hits in [min, n] available now.
// Use it for Charon's resources, where the answer's burst-tier context
// (Grant.Tier: the tier, its limit and hits, burst, hard_limited,
// global_limited; Grant.Unlimited) matters, or wherever a partial grant
// now beats a full one later. Use Allow instead on a token bucket whose
// grant may carry a wait: Allow lets the service schedule the tokens, and
// waits; Request takes only what is there now, and retries. Hits are
// spent once granted: there is no giving back.
//
// ReserveCopies (copy-limited resources: sandboxes, connections,
// licences; the wire's Reserve — the manual mode's Reserve is a token
// bucket's reservation of tokens) holds the most copies in [min, n] that the domain, group and
// global limits allow, as a *Hold: Release gives some back (partial
// releases allowed), Transfer stages some for another process, which
// Seizes them by id, and Do runs a function and releases what is left
// when it returns or panics (the paper's implicit release). Every hold
// belongs to the client's session: opened by the first call that needs
// it (OpenSession, ttl WithSessionTTL, 10 s by default), renewed every
// third of its ttl over a KeepAlive stream in the background, closed by
// Close. The service releases a session's copies when it ends — closed,
// its keep-alive stream broken, its ttl passed without a renewal — so a
// client that dies holds nothing for long. A broken stream is reopened at
// once, then with backoff within the ttl; a session the service no longer
// knows is lost: its holds' Err wraps ErrSessionLost, a Do running on one
// sees its context cancelled, WithSessionLost's function is told, and the
// next call opens a new session.
//
// ReserveMulti reserves several resources pseudo-atomically (section
// 3.3): the copy-limited ones first, each for the number the previous
// granted, releasing the extras of the earlier ones, then at most one
// rate-limited resource last (hits cannot be given back), all within one
// max wait; on any failure it releases everything it took.
//
// Retry policy (Request, ReserveCopies; source: charon-paper.md, section
// 3.2): after the i-th rejection (i = 1, 2, …) the call sleeps
// min(max_wait − elapsed, jitter(2^i)) seconds, where elapsed is the time
// since the call began and jitter(v) is uniform in [v − v/4, v + v/4),
// then asks again; when that sleep is ≤ 0 it returns the last rejection
// (*RejectedError, *OverLimitError, with Attempts and Waited). max_wait 0
// asks once; the last request goes out at most max_wait after the first.
// The unit (a second) and the jitter's source are options
// (WithBackoffUnit, WithJitterSource). Sluice's refinements: a rejection
// no wait can change (no bucket, too many tokens requested) is not
// retried, and a sleep that would pass ctx's deadline ends the call at
// once, with an error wrapping context.DeadlineExceeded and the last
// rejection.
//
// Degraded mode (source: charon-paper.md, section 4.3): when the service
// cannot be reached (no answer within WithCallTimeout, 1 s by default; a
// transport error) or answers a server error (Unavailable, Internal, an
// answer without a status), the client fails open: Request grants min
// hits and ReserveCopies a hold of min copies, by itself, at once and
// without retrying (the paper: do not re-issue to a failing server).
// Grants are flagged (Source FromDegraded, Grant.Degraded, Hold.Degraded)
// and counted (sluice_quota_client_degraded_total); a degraded hold is
// the client's alone (Release is local; Transfer fails with ErrDegraded).
// WithFailOpen(false) returns errors wrapping ErrUnavailable instead.
// Client errors — a malformed request, an unknown resource, session or
// transfer, the wrong kind of resource, releasing what is not held — are
// never failed open: they are *ClientError values wrapping
// ErrInvalidRequest, ErrNotFound or ErrFailedPrecondition. Seize is never
// failed open (the copies are the transfer's).
//
// Kill switch (source: charon-paper.md, section 4.3): WithKillSwitch or
// SetKillSwitch, at any time. While on, a rejection of Request or
// ReserveCopies is a grant of the minimum asked, at once (Source
// FromKillSwitch; counted as degraded with reason kill_switch): the
// service's limits are observed, not enforced — for trying a new
// configuration on live traffic, or riding out a misbehaving one.
//
// The service's own fail-open is another matter: a server whose store
// (Redis) cannot be reached grants, on a resource configured
// on_store_error: open, what is asked without checking the shared limit,
// and flags its answer degraded. Every call that reads such an answer
// says so — Grant.StoreDegraded (Allow, Reserve, Acquire in either mode,
// the smart mode's tokens from such a top-up, Request) and
// Hold.StoreDegraded (ReserveCopies) — and counts it
// (sluice_quota_client_degraded_total{reason="store"}). Such a grant is
// the service's (Source FromService or FromLocalBucket; a hold is held
// in the session), so Grant.Degraded and Hold.Degraded stay false.
//
// # Concurrency and goroutines
//
// A Client is safe for concurrent use. It runs one goroutine of its own
// (report flushes and forgetting idle targets, every report interval),
// one per smart top-up in flight (at most one per target), and, once a
// call opened a session, one keeping it alive (two while a keep-alive
// stream is open). Close closes the session and stops them all, and waits
// for them. Decisions take per-target locks only; the
// fallback limiters are lock-free in the common case (package ratelimit).
// A target unused for a minute is forgotten (its fallback limiter; its
// local bucket, once its tokens expired); at most MaxTargets (10 000)
// targets are tracked at once.
//
// # Time
//
// Decisions against deadlines, the fallback limiters, token expiry, the
// retry policy's elapsed time and the session's ttl read the client's
// clock (WithClock, default time.Now); waits and sleeps use timers, and
// the circuit breaker (github.com/sony/gobreaker/v2) reads time.Now:
// tests run the client under testing/synctest.
//
// # Metrics
//
// With WithRegisterer, all with bounded labels (never a resource or a
// domain):
//
//   - sluice_quota_client_decisions_total{mode, outcome}: every decision,
//     mode manual, naive, smart, request (Request) or copies
//     (ReserveCopies), outcome allowed, rejected, fallback_allowed,
//     fallback_rejected, error, degraded (failed open) or kill_switch;
//   - sluice_quota_client_fallbacks_total{reason}: decisions left to the
//     fallback limiter, by reason: timeout, unavailable (an RPC error),
//     server_error (an answer without a status), breaker_open or
//     no_bucket (the design's "client-side rate-limit usage frequency");
//   - sluice_quota_client_requests_total{call, result} and
//     sluice_quota_client_request_duration_seconds{call}: requests to the
//     service, call manual, decide, topup, report, request, reserve,
//     release, transfer, seize, open_session, keep_alive (a stream, when
//     it ends) or close_session, result ok, rejected, no_bucket, invalid,
//     not_found, failed_precondition, client_error (another client error
//     code), server_error, timeout (the design's "timeout rate"),
//     unavailable, canceled (the caller gave up) or breaker_open (not
//     sent);
//   - sluice_quota_client_breaker_state (0 closed, 1 half-open, 2 open) and
//     sluice_quota_client_breaker_trips_total;
//   - sluice_quota_client_local_tokens_total{event}: the smart mode's
//     tokens fetched, used and expired;
//   - sluice_quota_client_reported_tokens_total,
//     sluice_quota_client_report_charged_tokens_total and
//     sluice_quota_client_report_dropped_tokens_total{reason}: Report's
//     tokens accepted, charged, and dropped (invalid, rejected, backlog,
//     closed);
//   - sluice_quota_client_degraded_total{call, reason}: grants made in a
//     degraded mode: Charon's, call request or reserve, reason
//     unavailable, timeout or server_error (failed open) or kill_switch;
//     and the service's, reason store (granted while its store could not
//     be reached), call manual, decide, topup, report, request or reserve;
//   - sluice_quota_client_session_events_total{event}: the session
//     opened, reconnected (a keep-alive stream resumed), lost or closed.
//
// Source: quotaservice-design.md, "Eng Design: Clients"; charon-paper.md,
// sections 3.2 and 4.3.
package limits
