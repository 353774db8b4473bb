package limits

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	sluicev1 "github.com/sluice-rl/sluice/api/sluice/v1"
)

// Defaults of Charon's calls (Request, ReserveCopies, Seize, Hold's
// methods, ReserveMulti, the session).
const (
	// DefaultCallTimeout bounds one request of Charon's calls to the
	// service (WithCallTimeout): a request unanswered by then counts as
	// the service unreachable (the call fails open).
	DefaultCallTimeout = time.Second
	// DefaultBackoffUnit is the unit of the retry policy's sleeps
	// (WithBackoffUnit): after the i-th rejection a retrying call sleeps
	// about 2^i units, the paper's 2^i seconds.
	DefaultBackoffUnit = time.Second
	// DefaultSessionTTL is the ttl the client asks for its session
	// (WithSessionTTL): the service ends the session, releasing its
	// holds, when that long passes without a keep-alive.
	DefaultSessionTTL = 10 * time.Second
)

// Errors of Charon's calls. Client errors the service answered are
// *ClientError values (errors.As), wrapping ErrInvalidRequest,
// ErrNotFound or ErrFailedPrecondition by their code.
var (
	// ErrNotFound is wrapped by the error for a request naming what the
	// service does not know: an unknown resource, session or transfer (a
	// transfer seized already or expired). Source: charon-paper.md,
	// section 3.1, client error 2.
	ErrNotFound = errors.New("limits: not found")
	// ErrFailedPrecondition is wrapped by the error for a request the
	// service's state does not allow: reserving a rate-limited resource or
	// requesting a copy-limited one (the wrong kind), releasing or
	// transferring more than is held. Source: charon-paper.md, section
	// 3.1, client errors 3 and 4.
	ErrFailedPrecondition = errors.New("limits: failed precondition")
	// ErrSessionLost is wrapped by Hold.Err (and the errors of a Hold's
	// methods) once the session holding its copies has ended without the
	// client closing it: its keep-alive stream broke and could not be
	// resumed, or its ttl passed without a keep-alive. The service has
	// released those copies (or will, within the ttl): they are gone.
	// Source: charon-paper.md, section 4.3.1.
	ErrSessionLost = errors.New("limits: session lost")
	// ErrDegraded is returned by Hold.Transfer on a hold the client
	// granted by itself (FromDegraded, FromKillSwitch): the service holds
	// nothing to transfer.
	ErrDegraded = errors.New("limits: degraded hold")
)

// ClientError is a client error answered by the service to one of
// Charon's calls (the paper's client errors: a malformed request, an
// unknown resource, session or transfer, the wrong kind of resource,
// releasing what is not held, and any other code that is the caller's to
// fix: Unimplemented, PermissionDenied, Unauthenticated, AlreadyExists,
// OutOfRange). It is never failed open.
//
// Source: charon-paper.md, section 3.1 ("A client error response
// indicates a problem with the request itself").
type ClientError struct {
	// Op is the call: request, reserve, release, transfer, seize,
	// open_session.
	Op string
	// Resource and Domain name the target ("" for seize and open_session).
	Resource, Domain string
	// Code is the service's gRPC code.
	Code connect.Code
	// Message is the service's message.
	Message string
}

// Error returns a one-line description.
func (e *ClientError) Error() string {
	var b strings.Builder
	b.WriteString("limits: " + e.Op)
	if e.Resource != "" {
		b.WriteString(" " + e.Resource + "/" + e.Domain)
	}
	fmt.Fprintf(&b, ": %s: %s", e.Code, e.Message)
	return b.String()
}

// Unwrap returns the sentinel of the code: ErrInvalidRequest
// (InvalidArgument), ErrNotFound (NotFound), ErrFailedPrecondition
// (FailedPrecondition); nil for the other codes.
func (e *ClientError) Unwrap() error {
	switch e.Code {
	case connect.CodeInvalidArgument:
		return ErrInvalidRequest
	case connect.CodeNotFound:
		return ErrNotFound
	case connect.CodeFailedPrecondition:
		return ErrFailedPrecondition
	}
	return nil
}

// Tier is the burst-tier context of the service's answer on a
// rate-limited resource with burst tiers. Limits count hits.
//
// Source: charon-paper.md, section 3.1 (the request operation's context).
type Tier struct {
	// Index is the domain's current tier: the highest active one, 0 for
	// the fake tier 0.
	Index int32
	// Limit is the current tier's limit L (hits in its window), and Hits
	// the hits in its window after the answer.
	Limit, Hits int64
	// HardLimit is the hard limit (hits per second per domain) when
	// HasHardLimit; GlobalLimit the global limit (hits per second across
	// domains) when HasGlobalLimit. Without them, unbounded.
	HardLimit, GlobalLimit       int64
	HasHardLimit, HasGlobalLimit bool
	// DomainHitsLastSecond and GlobalHitsLastSecond are the domain's and
	// every domain's hits in the last second.
	DomainHitsLastSecond, GlobalHitsLastSecond int64
	// Burst reports that the request burst into a higher tier.
	Burst bool
	// HardLimited and GlobalLimited report that the hard or the global
	// limit held the request back.
	HardLimited, GlobalLimited bool
}

// tierOf is the burst-tier context of an answer.
func tierOf(r *sluicev1.AllowResponse) Tier {
	return Tier{
		Index: r.GetTier(), Limit: r.GetTierLimit(), Hits: r.GetTierHits(),
		HardLimit: r.GetHardLimit(), HasHardLimit: r.HardLimit != nil,
		GlobalLimit: r.GetGlobalLimit(), HasGlobalLimit: r.GlobalLimit != nil,
		DomainHitsLastSecond: r.GetDomainHitsLastSecond(), GlobalHitsLastSecond: r.GetGlobalHitsLastSecond(),
		Burst: r.GetBurst(), HardLimited: r.GetHardLimited(), GlobalLimited: r.GetGlobalLimited(),
	}
}

// charon is the half of a Client that makes Charon's calls (Request,
// ReserveCopies, Seize, ReserveMulti, a Hold's Release and Transfer): it
// owns their options, the retry policy's jitter source, the degraded
// modes' state and the client's session, and holds the machinery over
// them (charon.go, hold.go, session.go). The quota service design's modes
// (manual, naive, smart, Report) use none of it. Both halves share the
// Client's connection, metrics, clock, logger and life (closed, ctx,
// background, sleep), through c.
type charon struct {
	c *Client

	callTimeout   time.Duration
	backoffUnit   time.Duration
	jitterMu      sync.Mutex
	jitter        rand.Source // nil: math/rand/v2's global source
	failClosed    bool        // WithFailOpen(false)
	killSwitch    atomic.Bool
	failingOpen   atomic.Bool // the last Charon call failed open (logs once)
	sessionTTL    time.Duration
	onSessionLost func(id string, err error)
	sess          sessions
}

// WithCallTimeout bounds each request of Charon's calls (Request,
// ReserveCopies, Seize, a Hold's Release and Transfer, the session's
// OpenSession and CloseSession) to d (default DefaultCallTimeout), within
// the call's context: unanswered by then, the service counts as
// unreachable. d ≤ 0 keeps the default.
func WithCallTimeout(d time.Duration) Option {
	return func(c *Client) {
		if d > 0 {
			c.ch.callTimeout = d
		}
	}
}

// WithBackoffUnit sets the unit of the retry policy (default
// DefaultBackoffUnit, the paper's second): after the i-th rejection
// Request and ReserveCopies sleep jitter(2^i) units, at most what is left
// of their max wait. d ≤ 0 keeps the default.
func WithBackoffUnit(d time.Duration) Option {
	return func(c *Client) {
		if d > 0 {
			c.ch.backoffUnit = d
		}
	}
}

// WithJitterSource sets the source of the retry policy's jitter (default:
// math/rand/v2's global source). Each sleep draws one value x from src and
// scales 2^i units by 3/4 + u/2, where u = (x >> 11) / 2^53 is uniform in
// [0, 1): a source that always answers 0 sleeps exactly 3/4 of 2^i units,
// one that answers 1<<63 exactly 2^i units. The client locks around src:
// it need not be safe for concurrent use.
func WithJitterSource(src rand.Source) Option { return func(c *Client) { c.ch.jitter = src } }

// WithFailOpen sets the degraded mode of Charon's calls (default on):
// when the service cannot be reached (no answer within the call timeout,
// a transport error) or answers a server error (Unavailable, Internal,
// Unknown, ResourceExhausted, Aborted, DataLoss, or an answer without a
// status), Request grants its minimum of hits and ReserveCopies a hold of
// its minimum of copies, by the client alone (Source FromDegraded;
// counted in sluice_quota_client_degraded_total). Off, those calls return
// an error wrapping ErrUnavailable instead. Client errors are never
// failed open.
//
// Source: charon-paper.md, section 4.3 ("If the client cannot reach a
// limiting server, or if the limiting server returns an (non-client)
// exceptional response, the client will fail-open ... forcibly grant the
// request, but for the minimum amount of copies or hits that will allow
// the process to continue").
func WithFailOpen(on bool) Option { return func(c *Client) { c.ch.failClosed = !on } }

// WithKillSwitch starts the client with the kill switch on or off
// (default off; see SetKillSwitch).
func WithKillSwitch(on bool) Option { return func(c *Client) { c.ch.killSwitch.Store(on) } }

// SetKillSwitch turns the kill switch on or off, at once, for every call
// in flight or to come. While on, a rejection of Request or
// ReserveCopies (any status other than OK) is turned into a grant of the
// minimum asked, at once and without retrying (Source FromKillSwitch;
// counted in sluice_quota_client_degraded_total{reason="kill_switch"}):
// the service still decides, and records what it granted, but the caller
// behaves as if it had granted everything. A hold so granted is the
// client's alone (the service holds nothing for it). Client errors are
// still errors. Safe for concurrent use.
//
// Source: charon-paper.md, section 4.3 ("a global kill switch that, when
// activated, will transform rejections from the limiting server to
// grants").
func (c *Client) SetKillSwitch(on bool) { c.ch.killSwitch.Store(on) }

// KillSwitch reports whether the kill switch is on.
func (c *Client) KillSwitch() bool { return c.ch.killSwitch.Load() }

// retryDelay is the paper's jitter(2^i) in backoff units: uniform in
// [v − v/4, v + v/4] for v = 2^i units (the upper end reached when the
// draw just under 1 rounds up; clients/vectors/retry.json).
func (ch *charon) retryDelay(i int) time.Duration {
	var x uint64
	if ch.jitter == nil {
		x = rand.Uint64()
	} else {
		ch.jitterMu.Lock()
		x = ch.jitter.Uint64()
		ch.jitterMu.Unlock()
	}
	u := float64(x>>11) / (1 << 53)
	v := math.Ldexp(float64(ch.backoffUnit), min(max(i, 0), 100))
	d := v*0.75 + u*v*0.5
	if d >= math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(d)
}

// backoff sleeps after the i-th rejection of a call started at start with
// maxWait: min(maxWait − elapsed, jitter(2^i)). It reports false when that
// is ≤ 0 (the call gives up, with its last rejection); an error when ctx
// ends first, or would (its deadline comes before the sleep's end: at
// once).
//
// Source: charon-paper.md, section 3.2.
func (ch *charon) backoff(ctx context.Context, i int, start time.Time, maxWait time.Duration) (bool, error) {
	d := min(maxWait-ch.c.now().Sub(start), ch.retryDelay(i))
	if d <= 0 {
		return false, nil
	}
	if err := ch.c.sleep(ctx, d); err != nil {
		return false, err
	}
	return true, nil
}

// rpcFailure classifies a failed request of Charon's calls.
type rpcFailure uint8

const (
	failCaller rpcFailure = iota // the caller's ctx ended
	failClient                   // a client error: *ClientError
	failServer                   // unreachable or a server error: fail open
)

// classify says what a failed request of Charon's calls was (ctx the
// caller's; timedOut: the request's call timeout passed), and its result
// for the metrics.
func classify(ctx context.Context, timedOut bool, err error) (rpcFailure, result) {
	if ctx.Err() != nil {
		return failCaller, resultCanceled
	}
	switch connect.CodeOf(err) {
	case connect.CodeInvalidArgument:
		return failClient, resultInvalid
	case connect.CodeNotFound:
		return failClient, resultNotFound
	case connect.CodeFailedPrecondition:
		return failClient, resultFailedPrecondition
	case connect.CodeUnimplemented, connect.CodePermissionDenied, connect.CodeUnauthenticated,
		connect.CodeAlreadyExists, connect.CodeOutOfRange:
		return failClient, resultClientError
	case connect.CodeInternal, connect.CodeDataLoss:
		return failServer, resultServerError
	case connect.CodeDeadlineExceeded:
		return failServer, resultTimeout
	}
	if timedOut {
		return failServer, resultTimeout
	}
	return failServer, resultUnavailable
}

// clientError is the *ClientError of a failed request.
func clientError(op, resource, domain string, err error) *ClientError {
	msg := err.Error()
	var ce *connect.Error
	if errors.As(err, &ce) {
		msg = ce.Message()
	}
	return &ClientError{Op: op, Resource: resource, Domain: domain, Code: connect.CodeOf(err), Message: msg}
}

// degradedReason is the label of a fail-open for result r.
func degradedReason(r result) string {
	switch r {
	case resultTimeout:
		return "timeout"
	case resultServerError:
		return "server_error"
	}
	return "unavailable"
}

// failedOpen counts a fail-open of call (request or reserve) for r and
// logs the first of a run.
func (ch *charon) failedOpen(call string, r result, cause error) {
	c := ch.c
	c.m.degraded.WithLabelValues(call, degradedReason(r)).Inc()
	if !ch.failingOpen.Swap(true) {
		c.log.Warn("limits: service unreachable or failing; Charon's calls fail open (granting their minimum) until it answers",
			"addr", c.addr, "reason", degradedReason(r), "err", cause)
	}
}

// answered notes an answer of the service to one of Charon's calls (it
// ends a run of fail-opens).
func (ch *charon) answered() {
	if ch.failingOpen.Load() && ch.failingOpen.Swap(false) {
		ch.c.log.Info("limits: service answering again; Charon's calls no longer fail open", "addr", ch.c.addr)
	}
}

// checkRange validates copies or hits and their minimum: n in [1, 2^53],
// least in [0, n]; it returns the effective minimum (0 means n).
func checkRange(what string, n, least int64) (int64, error) {
	if n < 1 || n > MaxTokens {
		return 0, fmt.Errorf("%w: %s %d outside [1, 2^53]", ErrInvalidRequest, what, n)
	}
	if least < 0 || least > n {
		return 0, fmt.Errorf("%w: min %s %d outside [0, %d]", ErrInvalidRequest, what, least, n)
	}
	if least == 0 {
		least = n
	}
	return least, nil
}

// checkLeast validates a request for n copies or hits (what) of
// (resource, domain), at least least, and returns its effective minimum
// (checkRange's).
func checkLeast(what, resource, domain string, n, least int64) (int64, error) {
	if err := checkName("resource", resource); err != nil {
		return 0, err
	}
	if err := checkName("domain", domain); err != nil {
		return 0, err
	}
	return checkRange(what, n, least)
}

// Request asks for hits of a rate-limited resource the way Charon's
// client does: the most in [minTokens, tokens] (minTokens 0 means tokens)
// that the resource's hard limit, global limit and burst tiers allow now,
// or none; on a rejection it asks again, with exponential backoff, until
// maxWait has passed. Each request carries max_wait 0, so the service
// answers at once and a grant is usable at once (Grant.Wait is 0 on a
// token-bucket resource too).
//
// Retry policy: after the i-th rejection (i from 1) Request sleeps
// min(maxWait − elapsed, jitter(2^i)) backoff units (WithBackoffUnit, a
// second by default), jitter(v) uniform in [v − v/4, v + v/4)
// (WithJitterSource), elapsed the time since Request began, and asks
// again; once the sleep would be ≤ 0 it returns the last rejection. So
// maxWait 0 (or less) asks once, and the last request goes out at most
// maxWait after the first. Only REJECTED_TIMEOUT (over the limits now) is
// retried; the other statuses (no bucket, too many buckets, too many
// tokens requested) no wait can change, and end Request at once.
//
// Degraded modes: when the service is unreachable or fails (see
// WithFailOpen), Request grants minTokens itself at once (Source
// FromDegraded, not retried: the paper's client does not re-issue to a
// failing server); when the kill switch is on (SetKillSwitch), a
// rejection is a grant of minTokens (FromKillSwitch). Both are counted.
//
// The grant carries the burst-tier context of the answer (Grant.Tier),
// Unlimited, Waited and Attempts. Errors: *RejectedError for the last
// rejection (with its Tier, Waited and Attempts); an error wrapping
// ErrInvalidRequest for an invalid name or count (found by the service:
// a *ClientError); *ClientError for the service's other client errors (a
// copy-limited resource is FailedPrecondition); one wrapping ErrUnavailable
// with WithFailOpen(false); one wrapping ctx.Err() (and the last
// rejection) when ctx ends first, or at once when a sleep would pass its
// deadline; ErrClosed. Safe for concurrent use.
//
// Use Allow instead for a token-bucket resource whose bucket may grant a
// wait: Allow lets the service schedule the tokens, Request only takes
// what is there now.
//
// Source: charon-paper.md, sections 3.1 (request), 3.2 (the retry policy)
// and 4.3 (degraded modes).
func (c *Client) Request(ctx context.Context, resource, domain string, tokens, minTokens int64, maxWait time.Duration) (Grant, error) {
	if c.closed.Load() {
		return Grant{}, ErrClosed
	}
	least, err := checkLeast("tokens", resource, domain, tokens, minTokens)
	if err != nil {
		c.m.decision(modeRequest, outcomeError)
		return Grant{}, err
	}
	g, err := c.ch.request(ctx, resource, domain, tokens, least, maxWait)
	switch {
	case err == nil && g.Source == FromDegraded:
		c.m.decision(modeRequest, outcomeDegraded)
	case err == nil && g.Source == FromKillSwitch:
		c.m.decision(modeRequest, outcomeKillSwitch)
	default:
		c.m.record(modeRequest, g, err)
	}
	return g, err
}

// request is Request after validation.
func (ch *charon) request(ctx context.Context, resource, domain string, tokens, least int64, maxWait time.Duration) (Grant, error) {
	c := ch.c
	start := c.now()
	req := &sluicev1.AllowRequest{Resource: resource, Domain: domain, Tokens: tokens, MinTokens: least, MaxWait: durationpb.New(0)}
	var last error // the last rejection (a *RejectedError)
	for i := 1; ; i++ {
		if c.closed.Load() {
			return Grant{}, ErrClosed
		}
		var resp *connect.Response[sluicev1.AllowResponse]
		sent, timedOut, err := ch.call(ctx, func(rctx context.Context) (err error) {
			resp, err = c.stub.Allow(rctx, connect.NewRequest(req))
			return err
		})
		if err != nil {
			f, res := classify(ctx, timedOut, err)
			c.m.rpc(callRequest, sent, res)
			switch f {
			case failCaller:
				return Grant{}, joinLast(fmt.Errorf("limits: %s/%s: %w", resource, domain, ctx.Err()), last)
			case failClient:
				return Grant{}, clientError(callRequest, resource, domain, err)
			}
			return ch.requestFailOpen(resource, domain, least, start, i, res, err)
		}
		st := resp.Msg.GetStatus()
		c.m.rpc(callRequest, sent, resultOfStatus(st))
		if st == sluicev1.AllowResponse_STATUS_UNSPECIFIED {
			return ch.requestFailOpen(resource, domain, least, start, i, resultServerError, errors.New("an answer without a status"))
		}
		ch.answered()
		g, err := answer(resource, domain, resp.Msg)
		var rej *RejectedError
		if err == nil {
			g.Wait = 0 // max_wait 0: the service grants no wait
			g.Waited, g.Attempts = c.now().Sub(start), i
			c.m.storeDegraded(callRequest, g.StoreDegraded)
			return g, nil
		}
		if !errors.As(err, &rej) {
			return Grant{}, err
		}
		rej.Waited, rej.Attempts = c.now().Sub(start), i
		last = rej
		if ch.killSwitch.Load() {
			c.m.degraded.WithLabelValues(callRequest, reasonKillSwitch).Inc()
			return Grant{Granted: least, Source: FromKillSwitch, Tier: rej.Tier, Waited: rej.Waited, Attempts: i}, nil
		}
		if st != sluicev1.AllowResponse_REJECTED_TIMEOUT {
			return Grant{}, rej
		}
		again, err := ch.backoff(ctx, i, start, maxWait)
		if err != nil {
			return Grant{}, joinLast(err, rej)
		}
		if !again {
			return Grant{}, rej
		}
	}
}

// call runs one request of Charon's calls within the call timeout (and
// ctx); it returns when the request was sent (for the latency metric),
// whether the call timeout passed, and the request's error.
func (ch *charon) call(ctx context.Context, f func(context.Context) error) (sent time.Time, timedOut bool, err error) {
	rctx, cancel := context.WithTimeout(ctx, ch.callTimeout)
	defer cancel()
	sent = time.Now()
	err = f(rctx)
	return sent, err != nil && rctx.Err() != nil && ctx.Err() == nil, err
}

// requestFailOpen is Request's answer when the service did not answer
// (result r, error cause) on the i-th attempt.
func (ch *charon) requestFailOpen(resource, domain string, least int64, start time.Time, i int, r result, cause error) (Grant, error) {
	if ch.failClosed {
		return Grant{}, fmt.Errorf("%w: %s: request %s/%s: %w", ErrUnavailable, ch.c.addr, resource, domain, cause)
	}
	ch.failedOpen(callRequest, r, cause)
	return Grant{Granted: least, Source: FromDegraded, Waited: ch.c.now().Sub(start), Attempts: i}, nil
}

// joinLast adds the last rejection, if any (nil: none), to err:
// errors.As finds it.
func joinLast(err, last error) error {
	if last == nil {
		return err
	}
	return fmt.Errorf("%w (last rejection: %w)", err, last)
}
