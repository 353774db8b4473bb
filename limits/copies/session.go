package copies

import (
	"container/heap"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"time"
)

// Session is an open session: its id, its ttl, and when it ends unless
// kept alive.
type Session struct {
	// ID identifies the session: 32 hex digits, unpredictable; with a
	// shared Log, prefixed by the server's epoch and '-' (SessionEpoch).
	ID string
	// TTL is the ttl applied (after Open's defaults and bounds).
	TTL time.Duration
	// Expires is when the session ends unless kept alive: the last Open or
	// KeepAlive plus TTL.
	Expires time.Time
	// Owner is who opened it (OpenOwned; "" for Open).
	Owner string
}

// session is the hold set of one client session: the copies it holds per
// (resource, domain, groups).
//
// Source: charon-paper.md, section 4.2 ("Limiting servers associate a
// hold set with each client session").
type session struct {
	timer
	ttl   int64
	holds map[holdKey]int64
	owner string // OpenOwned's
}

// take removes copies from the session's hold k, and reports whether it
// held that many (when it did not, nothing changes).
func (s *session) take(k holdKey, copies int64) bool {
	h := s.holds[k]
	if h < copies {
		return false
	}
	if h == copies {
		delete(s.holds, k)
	} else {
		s.holds[k] = h - copies
	}
	return true
}

// transfer is a staged transfer.
type transfer struct {
	timer
	from   string // the session that staged it
	k      holdKey
	copies int64
}

// Open opens a session at now with ttl: 0 means Options.DefaultSessionTTL
// (10 s); other ttls are clamped to [Options.MinSessionTTL,
// Options.MaxSessionTTL] (1 s to 1 h), and the answer says the ttl
// applied. The session lives until Close, or until ttl passes without a
// KeepAlive (then Expire ends it).
//
// Errors: ErrInvalidArgument (*Error on "ttl") for a negative ttl; the
// random source's error (class Internal), which crypto/rand never returns.
//
// Source: charon-paper.md, sections 3.1 and 4.2 (client sessions); the
// session ttl is Sluice's: its clients are not bound to one connection.
func (e *Engine) Open(now time.Time, ttl time.Duration) (Session, error) {
	return e.OpenOwned(now, ttl, "")
}

// OpenOwned is Open for a session that belongs to owner (a client's
// identity, which server/sessions checks on every later use of the
// session): Owner returns it while the session lives. The engine itself
// does not check owners.
func (e *Engine) OpenOwned(now time.Time, ttl time.Duration, owner string) (Session, error) {
	switch {
	case ttl < 0:
		return Session{}, fail("ttl", fmt.Sprintf("%v is negative", ttl), ErrInvalidArgument)
	case ttl == 0:
		ttl = e.o.DefaultSessionTTL
	}
	ttl = max(e.o.MinSessionTTL, min(ttl, e.o.MaxSessionTTL))
	ns := now.UnixNano()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.fenced {
		return Session{}, errFenced
	}
	id, err := e.newID(func(id string) bool { return e.sessions[id] != nil })
	if err != nil {
		return Session{}, err
	}
	if e.o.Log != nil {
		if ep := e.o.Log.Epoch(); ep != "" {
			id = ep + "-" + id
		}
	}
	s := &session{timer: timer{deadline: ns + int64(ttl), id: id}, ttl: int64(ttl), holds: map[holdKey]int64{}, owner: owner}
	e.sessions[id] = s
	e.stimers.push(&s.timer)
	e.stats.Opened++
	return Session{ID: id, TTL: ttl, Expires: time.Unix(0, s.deadline), Owner: owner}, nil
}

// Owner returns the owner of session id (OpenOwned's; "" for a session
// Open opened), and ok false when no such session is open (never opened,
// ended, or the engine fenced). O(1); safe for concurrent use.
func (e *Engine) Owner(id string) (owner string, ok bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.sessions[id]
	if s == nil {
		return "", false
	}
	return s.owner, true
}

// KeepAlive renews session id at now: it now ends ttl after now unless
// renewed again (a now earlier than a previous renewal's does not shorten
// it).
//
// Errors (*Error): ErrInvalidArgument (empty id), ErrUnknownSession (no
// such session, or its ttl passed: it has ended, and its holds are
// released, or will be by the next Expire).
func (e *Engine) KeepAlive(now time.Time, id string) (Session, error) {
	if id == "" {
		return Session{}, fail("session_id", "is empty", ErrInvalidArgument)
	}
	ns := now.UnixNano()
	e.mu.Lock()
	defer e.mu.Unlock()
	s, err := e.live(ns, id)
	if err != nil {
		return Session{}, err
	}
	if d := ns + s.ttl; d > s.deadline {
		s.deadline = d
		heap.Fix(&e.stimers, s.idx)
	}
	return Session{ID: id, TTL: time.Duration(s.ttl), Expires: time.Unix(0, s.deadline), Owner: s.owner}, nil
}

// Hold is copies of a resource held for a domain, counted in groups.
type Hold struct {
	Resource, Domain string
	// Groups are the groups the copies are counted in (sorted; nil: none).
	Groups []string
	Copies int64
}

// EndReason says why a session or transfer ended.
type EndReason uint8

// The reasons.
const (
	// Closed: Close ended the session before its ttl passed.
	Closed EndReason = iota + 1
	// Expired: its ttl passed (a session without a keep-alive, a transfer
	// unseized).
	Expired
)

// String returns "closed" or "expired".
func (r EndReason) String() string {
	switch r {
	case Closed:
		return "closed"
	case Expired:
		return "expired"
	}
	return fmt.Sprintf("EndReason(%d)", uint8(r))
}

// Ended is a session or staged transfer that ended, and what its end
// released: one Hold per (resource, domain, groups), each released
// exactly once.
//
// Source: charon-paper.md, section 4.3.1 ("The server performs one release
// operation for each unique resource, domain, and domain group hold").
type Ended struct {
	// Session is the session's id; for a transfer, the session that staged
	// it (which may have ended).
	Session string
	// Transfer is the transfer's id; "" when a session ended.
	Transfer string
	Reason   EndReason
	// Released lists what was released, in (resource, domain, groups)
	// order. A transfer releases one Hold; a session none or more.
	Released []Hold
}

// Close ends session id at now and releases every copy it holds, once.
// Transfers it staged stay staged (see Transfer). Closing a session whose
// ttl passed before Expire ended it ends it as Expired.
//
// Errors (*Error): ErrInvalidArgument (empty id), ErrUnknownSession (no
// such session: never opened, closed already, or ended by Expire).
// ctx is the request's: with a shared Log it bounds the release of the
// holds there, which, when it fails (ctx ended, Redis down), leaves them
// to Reconcile; the session is closed either way.
//
// Source: charon-paper.md, section 4.3.1.
func (e *Engine) Close(ctx context.Context, now time.Time, id string) (Ended, error) {
	if id == "" {
		return Ended{}, fail("session_id", "is empty", ErrInvalidArgument)
	}
	ns := now.UnixNano()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.fenced {
		return Ended{}, errFenced
	}
	s := e.sessions[id]
	if s == nil {
		return Ended{}, fail("session_id", "no session "+short(id)+" (never opened, or ended)", ErrUnknownSession)
	}
	why := Closed
	if ns >= s.deadline {
		why = Expired
	}
	e.stimers.remove(s.idx)
	return e.end(ctx, s, why), nil
}

// Expire ends, at now, every session whose ttl has passed without a
// keep-alive (deadline ≤ now) and every staged transfer whose ttl has
// passed unseized, releasing what each held exactly once, and returns
// them in order of deadline (sessions, then transfers); nil when none. It
// costs O(log n) per ended session or transfer and nothing else: call it
// periodically, with the context of the loop that calls it (with a
// shared Log, it bounds the Log's calls).
//
// Source: charon-paper.md, sections 3.1 (transfer: "released implicitly
// after ttl seconds") and 4.3.1; OpenSession in api/sluice/v1/limits.proto
// (a session ends when its ttl passes without a keep-alive).
func (e *Engine) Expire(ctx context.Context, now time.Time) []Ended {
	ns := now.UnixNano()
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []Ended
	for len(e.stimers) > 0 && e.stimers[0].deadline <= ns {
		t := heap.Pop(&e.stimers).(*timer)
		out = append(out, e.end(ctx, e.sessions[t.id], Expired))
	}
	for len(e.ttimers) > 0 && e.ttimers[0].deadline <= ns {
		t := e.transfers[heap.Pop(&e.ttimers).(*timer).id]
		delete(e.transfers, t.id)
		e.counts.drop(t.k, t.copies)
		e.stats.TransfersExpired++
		e.stats.Released += uint64(t.copies)
		out = append(out, Ended{Session: t.from, Transfer: t.id, Reason: Expired, Released: []Hold{{Resource: t.k.res, Domain: t.k.dom, Groups: splitGroups(t.k.groups), Copies: t.copies}}})
	}
	if e.o.Log != nil && !e.fenced {
		// Staged transfers live in the Log; one that fails to expire now
		// is expired by a later call (of this server or another).
		var ended []Ended
		var err error
		e.unlocked(nil, func() { ended, err = e.o.Log.ExpireTransfers(ctx) })
		if err == nil {
			for _, t := range ended {
				e.stats.TransfersExpired++
				for _, h := range t.Released {
					e.stats.Released += uint64(h.Copies)
				}
			}
			out = append(out, ended...)
		}
	}
	return out
}

// end removes s (its timer already gone) and releases its holds (with a
// Log, under ctx).
func (e *Engine) end(ctx context.Context, s *session, why EndReason) Ended {
	delete(e.sessions, s.id)
	if why == Closed {
		e.stats.Closed++
	} else {
		e.stats.Expired++
	}
	held := sortedHolds(s.holds)
	for k, n := range s.holds {
		e.counts.drop(k, n)
		e.stats.Released += uint64(n)
	}
	s.holds = nil
	if e.o.Log != nil && len(held) > 0 {
		e.release(ctx, held)
	}
	return Ended{Session: s.id, Reason: why, Released: held}
}

// live returns session id if it is live at ns.
func (e *Engine) live(ns int64, id string) (*session, error) {
	if e.fenced {
		return nil, errFenced
	}
	s := e.sessions[id]
	if s == nil {
		return nil, fail("session_id", "no session "+short(id)+" (never opened, or ended)", ErrUnknownSession)
	}
	if ns >= s.deadline {
		return nil, fail("session_id", fmt.Sprintf("session %s ended: its ttl (%v) passed without a keep-alive", short(id), time.Duration(s.ttl)), ErrUnknownSession)
	}
	return s, nil
}

// newID returns a fresh id from the random source, one that taken does
// not report as in use.
func (e *Engine) newID(taken func(string) bool) (string, error) {
	for range 4 {
		if _, err := io.ReadFull(e.o.Rand, e.idBuf[:]); err != nil {
			return "", fmt.Errorf("copies: reading a random id: %w", err)
		}
		if id := hex.EncodeToString(e.idBuf[:]); !taken(id) {
			return id, nil
		}
	}
	return "", errors.New("copies: the random source keeps repeating ids")
}

// timer is a deadline in a heap of timers.
type timer struct {
	deadline int64 // Unix ns
	id       string
	idx      int
}

// timers is a min-heap of timers by (deadline, id) (container/heap).
type timers []*timer

func (h timers) Len() int { return len(h) }
func (h timers) Less(i, j int) bool {
	if h[i].deadline != h[j].deadline {
		return h[i].deadline < h[j].deadline
	}
	return h[i].id < h[j].id
}
func (h timers) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *timers) Push(x any) {
	t := x.(*timer)
	t.idx = len(*h)
	*h = append(*h, t)
}
func (h *timers) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	t.idx = -1
	return t
}
func (h *timers) push(t *timer) { heap.Push(h, t) }
func (h *timers) remove(i int)  { heap.Remove(h, i) }
