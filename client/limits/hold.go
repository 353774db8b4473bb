package limits

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	sluicev1 "github.com/sluice-rl/sluice/api/sluice/v1"
)

// Reservation is the context of the service's answer to a reserve of
// copies, after the answer.
//
// Source: charon-paper.md, section 3.1 (reserve).
type Reservation struct {
	// DomainLimit is the domain's limit, in copies held at once.
	DomainLimit int64
	// GlobalLimit is the global limit when HasGlobalLimit (else
	// unbounded).
	GlobalLimit    int64
	HasGlobalLimit bool
	// DomainHolds and GlobalHolds are the copies held by the domain and by
	// every domain.
	DomainHolds, GlobalHolds int64
	// Groups are the domain's groups: name, limit, copies held across the
	// group's domains.
	Groups []GroupHolds
	// Unlimited reports copies granted without looking at the limits (the
	// resource's namespace ignores configured limits, or allows it
	// unconfigured); still counted. Source: charon-paper.md, section 4.3.
	Unlimited bool
}

// GroupHolds is one domain group's pool of a copy-limited resource.
type GroupHolds struct {
	Name         string
	Limit, Holds int64
}

// reservationOf is the context of a Reserve answer.
func reservationOf(r *sluicev1.ReserveResponse) Reservation {
	res := Reservation{
		DomainLimit: r.GetDomainLimit(), GlobalLimit: r.GetGlobalLimit(), HasGlobalLimit: r.GlobalLimit != nil,
		DomainHolds: r.GetDomainHolds(), GlobalHolds: r.GetGlobalHolds(), Unlimited: r.GetUnlimited(),
	}
	for _, g := range r.GetGroups() {
		res.Groups = append(res.Groups, GroupHolds{Name: g.GetName(), Limit: g.GetLimit(), Holds: g.GetHolds()})
	}
	return res
}

// OverLimitError is ReserveCopies' rejection: fewer than the minimum of
// copies were free under the domain, group and global limits, at the last
// of Attempts requests over Waited. Nothing is held.
type OverLimitError struct {
	Resource, Domain string
	// Copies and MinCopies are what was asked.
	Copies, MinCopies int64
	// Reservation is the context of the last answer.
	Reservation Reservation
	Waited      time.Duration
	Attempts    int
}

// Error returns a one-line description.
func (e *OverLimitError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "limits: %s/%s over limit: not even %d copies fit (domain holds %d of %d",
		e.Resource, e.Domain, e.MinCopies, e.Reservation.DomainHolds, e.Reservation.DomainLimit)
	if e.Reservation.HasGlobalLimit {
		fmt.Fprintf(&b, ", all domains %d of %d", e.Reservation.GlobalHolds, e.Reservation.GlobalLimit)
	}
	for _, g := range e.Reservation.Groups {
		fmt.Fprintf(&b, ", group %s %d of %d", g.Name, g.Holds, g.Limit)
	}
	fmt.Fprintf(&b, "); %d attempts in %v", e.Attempts, e.Waited)
	return b.String()
}

// Hold is copies of a copy-limited resource held for a domain, in the
// client's session (ReserveCopies, Seize), or granted by the client alone
// in a degraded mode (Source FromDegraded or FromKillSwitch: the service
// holds nothing for it). Release what you no longer use — Do releases
// what is left when its function returns or panics; what is not released
// is released by the service when the session ends (Close, or the client
// dies). A Hold is safe for concurrent use; Release and Transfer are
// serialised.
//
// Source: charon-paper.md, sections 3.1 (reserve, release, transfer,
// seize) and 3.2 (implicit release).
type Hold struct {
	c                *Client
	s                *session // nil: granted by the client alone
	resource, domain string
	groups           []string
	res              Reservation
	source           Source
	storeDegraded    bool // the answer's degraded flag
	waited           time.Duration
	attempts         int

	mu     sync.Mutex // serialises Release and Transfer
	copies atomic.Int64
}

// Resource returns the hold's resource.
func (h *Hold) Resource() string { return h.resource }

// Domain returns the hold's domain.
func (h *Hold) Domain() string { return h.domain }

// Copies returns the copies held now: granted or seized, less those
// released or transferred; 0 once the session has ended (Err).
func (h *Hold) Copies() int64 {
	if h.Err() != nil {
		return 0
	}
	return h.copies.Load()
}

// Groups returns the names of the groups the copies are counted in (the
// reservation's, or the seized transfer's), which Release and Transfer
// send; nil for none.
func (h *Hold) Groups() []string { return slices.Clone(h.groups) }

// Reservation returns the context of the answer that granted the copies
// (zero for a seized or degraded hold).
func (h *Hold) Reservation() Reservation {
	r := h.res
	r.Groups = slices.Clone(r.Groups)
	return r
}

// Source returns who granted the copies: FromService, FromDegraded or
// FromKillSwitch.
func (h *Hold) Source() Source { return h.source }

// Degraded reports a hold the client granted by itself (failing open, or
// the kill switch): the service holds nothing for it.
func (h *Hold) Degraded() bool { return h.s == nil }

// StoreDegraded reports a hold the service granted while its store (the
// copy log shared through Redis) could not be reached, on a resource
// configured on_store_error: open (the answer's degraded flag): the
// shared limit was not checked — the copies asked were granted without
// looking at the limits, and the Reservation's counts are that server's
// own. Unlike Degraded, the service holds the copies (Source FromService;
// Release and Transfer go to it, and it writes them back to the shared
// counts once its store answers). False for a seized hold (a seize's
// answer carries no such flag). Counted in
// sluice_quota_client_degraded_total{reason="store"}.
func (h *Hold) StoreDegraded() bool { return h.storeDegraded }

// Waited returns how long ReserveCopies took, retries included (the
// paper's res.waited; 0 for a seized hold).
func (h *Hold) Waited() time.Duration { return h.waited }

// Attempts returns how many reserves ReserveCopies sent.
func (h *Hold) Attempts() int { return h.attempts }

// Session returns the id of the session holding the copies ("" for a
// degraded hold). Whoever knows it may release them: keep it private.
func (h *Hold) Session() string {
	if h.s == nil {
		return ""
	}
	return h.s.id
}

// Err returns nil while the hold's session is live (always, for a
// degraded hold); once it has ended, an error wrapping ErrSessionLost
// (the copies are gone: see WithSessionLost) or ErrClosed (Close released
// them).
func (h *Hold) Err() error {
	if h.s == nil {
		return nil
	}
	return h.s.err()
}

// Release gives back n of the copies held (partial releases allowed),
// sending the hold's groups so the service knows which pools they return
// to; a degraded hold's copies are given back locally.
//
// Errors: one wrapping ErrInvalidRequest for n < 1; one wrapping
// ErrFailedPrecondition for n above Copies (nothing sent); Err's when the
// session has ended (or the service says it has); a *ClientError for the
// service's other client errors (releasing what the session does not
// hold is FailedPrecondition); one wrapping ErrUnavailable when the
// service did not answer, or failed — then whether it released is
// unknown, the copies stay counted here, and the service releases them
// at the latest when the session ends; one wrapping ctx.Err(). Safe for
// concurrent use.
//
// Source: charon-paper.md, section 3.1 (release).
func (h *Hold) Release(ctx context.Context, n int64) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.release(ctx, n)
}

// release is Release with h.mu held.
func (h *Hold) release(ctx context.Context, n int64) error {
	if err := h.check("release", n); err != nil {
		return err
	}
	if h.s == nil {
		h.copies.Add(-n)
		return nil
	}
	req := &sluicev1.ReleaseRequest{SessionId: h.s.id, Resource: h.resource, Domain: h.domain, Copies: n, Groups: h.groups}
	sent, timedOut, err := h.c.ch.call(ctx, func(rctx context.Context) error {
		_, err := h.c.stub.Release(rctx, connect.NewRequest(req))
		return err
	})
	if err != nil {
		return h.failed(ctx, callRelease, sent, timedOut, err)
	}
	h.c.m.rpc(callRelease, sent, resultOK)
	h.c.ch.answered()
	h.copies.Add(-n)
	return nil
}

// check validates a release or transfer of n copies (h.mu held).
func (h *Hold) check(op string, n int64) error {
	if n < 1 {
		return fmt.Errorf("%w: %s of %d copies of %s/%s; at least 1", ErrInvalidRequest, op, n, h.resource, h.domain)
	}
	if err := h.Err(); err != nil {
		return fmt.Errorf("limits: %s of %s/%s: %w", op, h.resource, h.domain, err)
	}
	if have := h.copies.Load(); n > have {
		return fmt.Errorf("%w: %s of %d copies of %s/%s; the hold has %d", ErrFailedPrecondition, op, n, h.resource, h.domain, have)
	}
	return nil
}

// failed is the error of a failed request of the hold (call, sent at
// sent).
func (h *Hold) failed(ctx context.Context, call string, sent time.Time, timedOut bool, err error) error {
	f, res := classify(ctx, timedOut, err)
	h.c.m.rpc(call, sent, res)
	switch f {
	case failCaller:
		return fmt.Errorf("limits: %s of %s/%s: %w", call, h.resource, h.domain, ctx.Err())
	case failClient:
		if sessionGone(err) {
			h.c.ch.loseSession(h.s, err)
			return fmt.Errorf("limits: %s of %s/%s: %w", call, h.resource, h.domain, h.Err())
		}
		return clientError(call, h.resource, h.domain, err)
	}
	return &unavailableError{op: call + " of " + h.resource + "/" + h.domain, res: res, addr: h.c.addr, cause: err}
}

// Transfer stages n of the copies held for another session to Seize
// (usually another process's: send it the id), and returns the transfer
// id. The copies leave this hold; the service keeps them counted, and
// releases them if nobody seizes them within ttl (0: the service's
// default, 30 s). Ending this session does not release staged copies.
//
// Errors: Release's (n above Copies, the session ended, client errors,
// ErrUnavailable, ctx's); ErrDegraded for a degraded hold; one wrapping
// ErrInvalidRequest for a negative ttl. Safe for concurrent use.
//
// Source: charon-paper.md, section 3.1 (transfer), Figure 6.
func (h *Hold) Transfer(ctx context.Context, n int64, ttl time.Duration) (string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ttl < 0 {
		return "", fmt.Errorf("%w: transfer ttl %v is negative", ErrInvalidRequest, ttl)
	}
	if h.s == nil {
		return "", fmt.Errorf("limits: transfer of %s/%s: %w: the service holds nothing to transfer", h.resource, h.domain, ErrDegraded)
	}
	if err := h.check("transfer", n); err != nil {
		return "", err
	}
	req := &sluicev1.TransferRequest{SessionId: h.s.id, Resource: h.resource, Domain: h.domain, Copies: n, Groups: h.groups}
	if ttl > 0 {
		req.Ttl = durationpb.New(ttl)
	}
	var resp *connect.Response[sluicev1.TransferResponse]
	sent, timedOut, err := h.c.ch.call(ctx, func(rctx context.Context) (err error) {
		resp, err = h.c.stub.Transfer(rctx, connect.NewRequest(req))
		return err
	})
	if err == nil && resp.Msg.GetTransferId() == "" {
		err = connect.NewError(connect.CodeInternal, errors.New("an answer without a transfer_id"))
	}
	if err != nil {
		return "", h.failed(ctx, callTransfer, sent, timedOut, err)
	}
	h.c.m.rpc(callTransfer, sent, resultOK)
	h.c.ch.answered()
	h.copies.Add(-n)
	return resp.Msg.GetTransferId(), nil
}

// Do runs f and then releases every copy still held, whether f returned
// or panicked (then Do panics again with the same value once the copies
// are released). f's context is ctx, cancelled when the hold's session
// ends (its cause, context.Cause, is Err's error): the copies are gone,
// and f should stop.
//
// Do returns f's error joined with the release's (errors.Join): Err's if
// the session ended while copies were held, ErrUnavailable if the
// service could not be told. The release runs even if ctx has ended
// (context.WithoutCancel), within the call timeout.
//
// Source: charon-paper.md, section 3.2 (implicit release: "invoke a
// release command for the remaining resources which have not been
// released explicitly by the user").
func (h *Hold) Do(ctx context.Context, f func(ctx context.Context) error) error {
	return doHolding(ctx, []*Hold{h}, h.releaseRest, f)
}

// doHolding is Hold.Do and Multi.Do: it runs f with a context cancelled
// when the session of any of holds ends, then release (also on a panic,
// which it then repeats), and returns f's error joined with release's.
func doHolding(ctx context.Context, holds []*Hold, release func(context.Context) error, f func(ctx context.Context) error) (err error) {
	fctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	for _, h := range holds {
		if h.s != nil {
			stop := context.AfterFunc(h.s.ctx, func() { cancel(h.s.err()) })
			defer stop()
		}
	}
	returned := false
	defer func() {
		rerr := release(context.WithoutCancel(ctx))
		if !returned {
			if r := recover(); r != nil {
				panic(r)
			}
		}
		err = errors.Join(err, rerr)
	}()
	err = f(fctx)
	returned = true
	return err
}

// releaseRest releases every copy still held; Err's error if the session
// ended while some were.
func (h *Hold) releaseRest(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := h.copies.Load()
	if n == 0 {
		return nil
	}
	return h.release(ctx, n)
}

// ReserveCopies holds copies of a copy-limited resource for domain in the
// client's session (opened on first use, kept alive in the background):
// the most in [minCopies, copies] (minCopies 0 means copies) that the
// domain's limit, each of its groups' limits and the global limit allow
// now, or none. On a rejection it asks again with Request's retry policy
// — after the i-th, sleep min(maxWait − elapsed, jitter(2^i)) backoff
// units; give up with the last rejection once that is ≤ 0 — so maxWait 0
// asks once.
//
// Degraded modes: when the service (or the session's opening) is
// unreachable or fails, ReserveCopies returns a hold of minCopies granted
// by the client alone (Source FromDegraded; WithFailOpen); with the kill
// switch on, a rejection is such a hold (FromKillSwitch). Both are
// counted.
//
// If the service no longer knows the session (it was lost), the client
// opens a new one and asks again, once.
//
// Errors: *OverLimitError for the last rejection; one wrapping
// ErrInvalidRequest for an invalid name or count; *ClientError for the
// service's client errors (an unknown resource is NotFound, a
// rate-limited one FailedPrecondition); one wrapping ErrUnavailable with
// WithFailOpen(false); ctx's (wrapped, with the last rejection), at once
// when a sleep would pass its deadline; ErrClosed. Safe for concurrent
// use.
//
// Source: charon-paper.md, sections 3.1 (reserve), 3.2 (the retry
// policy), 4.3 (degraded modes).
func (c *Client) ReserveCopies(ctx context.Context, resource, domain string, copies, minCopies int64, maxWait time.Duration) (*Hold, error) {
	if c.closed.Load() {
		return nil, ErrClosed
	}
	least, err := checkLeast("copies", resource, domain, copies, minCopies)
	if err != nil {
		c.m.decision(modeCopies, outcomeError)
		return nil, err
	}
	h, err := c.ch.reserve(ctx, resource, domain, copies, least, maxWait)
	switch {
	case err == nil && h.source == FromDegraded:
		c.m.decision(modeCopies, outcomeDegraded)
	case err == nil && h.source == FromKillSwitch:
		c.m.decision(modeCopies, outcomeKillSwitch)
	case err == nil:
		c.m.decision(modeCopies, outcomeAllowed)
	case errors.As(err, new(*OverLimitError)):
		c.m.decision(modeCopies, outcomeRejected)
	default:
		c.m.decision(modeCopies, outcomeError)
	}
	return h, err
}

// reserve is ReserveCopies after validation.
func (ch *charon) reserve(ctx context.Context, resource, domain string, copies, least int64, maxWait time.Duration) (*Hold, error) {
	c := ch.c
	start := c.now()
	var last error // the last rejection (an *OverLimitError)
	reopened := false
	for i := 1; ; i++ {
		if c.closed.Load() {
			return nil, ErrClosed
		}
		s, err := ch.session(ctx)
		var ue *unavailableError
		switch {
		case errors.As(err, &ue):
			return ch.reserveFailOpen(resource, domain, least, start, i, ue)
		case err != nil:
			return nil, joinLast(err, last)
		}
		req := &sluicev1.ReserveRequest{SessionId: s.id, Resource: resource, Domain: domain, Copies: copies, MinCopies: least, MaxWait: durationpb.New(0)}
		var resp *connect.Response[sluicev1.ReserveResponse]
		sent, timedOut, err := ch.call(ctx, func(rctx context.Context) (err error) {
			resp, err = c.stub.Reserve(rctx, connect.NewRequest(req))
			return err
		})
		if err != nil {
			f, res := classify(ctx, timedOut, err)
			c.m.rpc(callReserve, sent, res)
			switch f {
			case failCaller:
				return nil, joinLast(fmt.Errorf("limits: %s/%s: %w", resource, domain, ctx.Err()), last)
			case failClient:
				if sessionGone(err) && !reopened {
					ch.loseSession(s, err)
					reopened = true
					i--
					continue
				}
				return nil, clientError(callReserve, resource, domain, err)
			}
			return ch.reserveFailOpen(resource, domain, least, start, i, &unavailableError{op: "reserve", res: res, addr: c.addr, cause: err})
		}
		m := resp.Msg
		st := m.GetStatus()
		c.m.rpc(callReserve, sent, resultOfReserve(st))
		if st == sluicev1.ReserveResponse_OK && (m.GetGranted() < least || m.GetGranted() > copies) {
			st = sluicev1.ReserveResponse_STATUS_UNSPECIFIED
		}
		if st == sluicev1.ReserveResponse_STATUS_UNSPECIFIED {
			cause := fmt.Errorf("an answer with status %v granting %d of [%d, %d] copies", m.GetStatus(), m.GetGranted(), least, copies)
			return ch.reserveFailOpen(resource, domain, least, start, i, &unavailableError{op: "reserve", res: resultServerError, addr: c.addr, cause: cause})
		}
		ch.answered()
		waited := c.now().Sub(start)
		if st == sluicev1.ReserveResponse_OK {
			h := &Hold{c: c, s: s, resource: resource, domain: domain, res: reservationOf(m), source: FromService,
				storeDegraded: m.GetDegraded(), waited: waited, attempts: i}
			for _, g := range h.res.Groups {
				h.groups = append(h.groups, g.Name)
			}
			h.copies.Store(m.GetGranted())
			c.m.storeDegraded(callReserve, h.storeDegraded)
			return h, nil
		}
		rej := &OverLimitError{Resource: resource, Domain: domain, Copies: copies, MinCopies: least, Reservation: reservationOf(m), Waited: waited, Attempts: i}
		last = rej
		if ch.killSwitch.Load() {
			c.m.degraded.WithLabelValues(callReserve, reasonKillSwitch).Inc()
			return ch.localHold(resource, domain, least, FromKillSwitch, waited, i), nil
		}
		again, err := ch.backoff(ctx, i, start, maxWait)
		if err != nil {
			return nil, joinLast(err, rej)
		}
		if !again {
			return nil, rej
		}
	}
}

// reserveFailOpen is ReserveCopies' answer when the service (or the
// session) did not answer, on the i-th attempt.
func (ch *charon) reserveFailOpen(resource, domain string, least int64, start time.Time, i int, ue *unavailableError) (*Hold, error) {
	if ch.failClosed {
		return nil, ue
	}
	ch.failedOpen(callReserve, ue.res, ue.cause)
	return ch.localHold(resource, domain, least, FromDegraded, ch.c.now().Sub(start), i), nil
}

// localHold is a hold of n copies granted by the client alone.
func (ch *charon) localHold(resource, domain string, n int64, src Source, waited time.Duration, attempts int) *Hold {
	h := &Hold{c: ch.c, resource: resource, domain: domain, source: src, waited: waited, attempts: attempts}
	h.copies.Store(n)
	return h
}

// Seize takes the copies of a transfer staged by Hold.Transfer (usually
// in another process) into the client's session, once, and returns them
// as a Hold indistinguishable from a reserved one (its Reservation is
// zero). It is never failed open: the copies are the transfer's.
//
// Errors: one wrapping ErrInvalidRequest for an empty id; *ClientError
// wrapping ErrNotFound for a transfer that does not exist, was seized
// already or expired (indistinguishable); one wrapping ErrUnavailable
// when the service did not answer or failed; ctx's (wrapped); ErrClosed.
// Safe for concurrent use.
//
// Source: charon-paper.md, section 3.1 (seize), Figure 6.
func (c *Client) Seize(ctx context.Context, transferID string) (*Hold, error) {
	if c.closed.Load() {
		return nil, ErrClosed
	}
	if transferID == "" {
		return nil, fmt.Errorf("%w: empty transfer id", ErrInvalidRequest)
	}
	reopened := false
	for {
		s, err := c.ch.session(ctx)
		if err != nil {
			return nil, err
		}
		var resp *connect.Response[sluicev1.SeizeResponse]
		sent, timedOut, err := c.ch.call(ctx, func(rctx context.Context) (err error) {
			resp, err = c.stub.Seize(rctx, connect.NewRequest(&sluicev1.SeizeRequest{SessionId: s.id, TransferId: transferID}))
			return err
		})
		if err == nil && resp.Msg.GetCopies() < 1 {
			err = connect.NewError(connect.CodeInternal, fmt.Errorf("an answer seizing %d copies", resp.Msg.GetCopies()))
		}
		if err != nil {
			f, res := classify(ctx, timedOut, err)
			c.m.rpc(callSeize, sent, res)
			switch f {
			case failCaller:
				return nil, fmt.Errorf("limits: seize: %w", ctx.Err())
			case failClient:
				if sessionGone(err) && !reopened {
					c.ch.loseSession(s, err)
					reopened = true
					continue
				}
				return nil, clientError(callSeize, "", "", err)
			}
			return nil, &unavailableError{op: "seize", res: res, addr: c.addr, cause: err}
		}
		c.m.rpc(callSeize, sent, resultOK)
		c.ch.answered()
		m := resp.Msg
		h := &Hold{c: c, s: s, resource: m.GetResource(), domain: m.GetDomain(), groups: slices.Clone(m.GetGroups()), source: FromService}
		h.copies.Store(m.GetCopies())
		return h, nil
	}
}
