package copies

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"
)

// The engine's side of a shared Log (Options.Log). The engine keeps the
// sessions and their hold sets; the Log keeps the counts (every server's
// contributions) and the staged transfers. Each operation calls the Log
// once, outside the engine's lock: the hold set changes before the call
// (a release, a transfer: the copies leave the session first) or after it
// (a reserve, a seize: they join it once granted), so one server's
// operations run concurrently and share Redis round trips, and a failing
// Redis holds up only the requests that need it. While a Log call is in
// flight its resource is left alone by Reconcile; a session that ended
// meanwhile leaves its resource dirty.
//
// What the Log said is what happened; when its outcome is unknown (an
// error), the engine marks the resource dirty and Reconcile later makes
// this server's contributions equal its hold sets again (Log.Restore),
// as it does for resources whose shared record vanished (Log.Lost): the
// Doorman learning-mode idea applied to holds, the servers' memory being
// the truth about what their sessions hold.
//
// Source: charon-paper.md, sections 4.2 and 4.3.2; docs/charon.md, "The
// fleet".

// errFenced answers every session operation while the engine is fenced.
var errFenced = fmt.Errorf("copies: %w: this server is rejoining its fleet (its membership ended); retry, here or through another server", ErrUnavailable)

// unavailable wraps a Log error for the client.
func unavailable(op string, err error) error {
	return fmt.Errorf("copies: %s: shared copy log: %w (%w)", op, ErrUnavailable, err)
}

// logFailed handles a Log error: a fenced Log fences the engine.
func (e *Engine) logFailed(err error) {
	if errors.Is(err, ErrFenced) {
		e.fenceLocked()
	}
}

// unlocked runs f, a call of the Log, outside the engine's lock (held by
// the caller, and held again when unlocked returns), with resources marked
// in flight meanwhile: Reconcile leaves them alone, since their
// contributions are changing.
func (e *Engine) unlocked(resources []string, f func()) {
	for _, r := range resources {
		e.inflight[r]++
	}
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		for _, r := range resources {
			if e.inflight[r]--; e.inflight[r] == 0 {
				delete(e.inflight, r)
			}
		}
	}()
	f()
}

// after checks, once the lock is held again after a Log call for session
// s on resource, that the engine was not fenced and that s did not end
// meanwhile. When it did, changed says whether the Log changed this
// server's contributions for it, which Reconcile then makes right (the
// resource is marked dirty).
func (e *Engine) after(s *session, resource string, changed bool) error {
	if e.fenced {
		return errFenced
	}
	if e.sessions[s.id] != s {
		if changed {
			e.dirty[resource] = true
		}
		return fail("session_id", "session "+short(s.id)+" ended during the request", ErrUnknownSession)
	}
	return nil
}

// reserveShared is Reserve's decision on the Log, for session s; the Log
// is called outside the engine's lock.
func (e *Engine) reserveShared(ctx context.Context, s *session, st *resState, resource, domain string, copies, minCopies int64) (Reservation, error) {
	c := st.c
	m := c.member[domain]
	q := LogReserve{Resource: resource, Domain: domain, Copies: copies, Min: minCopies,
		DomainLimit: c.limitOf(domain), GlobalLimit: c.global, Ignore: c.ignore || c.unlimited, Holding: st.global > 0}
	if m != nil {
		q.Groups, q.GroupLimits = m.names, m.limits
	}
	r := Reservation{DomainLimit: q.DomainLimit, GlobalLimit: c.global, Unlimited: q.Ignore}
	var got LogCounts
	var err error
	e.unlocked([]string{resource}, func() { got, err = e.o.Log.Reserve(ctx, q) })
	if !errors.Is(err, ErrFenced) {
		if err := e.after(s, resource, err != nil || got.Granted > 0); err != nil {
			return Reservation{}, err
		}
	}
	st = e.counts.state(resource)
	switch {
	case err != nil && (!c.failOpen || errors.Is(err, ErrFenced) || errors.Is(err, ErrLearning) || ctx.Err() != nil):
		// (A request whose ctx ended is no outage, nor is a Log that
		// answered that it is learning: not granted fail-open.)
		e.logFailed(err)
		if !e.fenced {
			e.dirty[resource] = true // the outcome is unknown
			if errors.Is(err, ErrLearning) {
				e.learning.resources[resource] = true
			}
		}
		if st.global == 0 && c.unlimited {
			delete(e.counts.res, resource)
		}
		return Reservation{}, unavailable("reserve", err)
	case err != nil:
		// Fail open: grant in full, counted here, written back later.
		e.dirty[resource] = true
		e.stats.Granted++
		e.stats.Degraded++
		st.hold(s, resource, domain, m, copies)
		r.Granted, r.Degraded = copies, true
		r.DomainHolds, r.GlobalHolds = st.domains[domain], st.global
		got.GroupHolds = make([]int64, len(q.Groups))
		for i, g := range q.Groups {
			got.GroupHolds[i] = st.groups[g]
		}
	case got.Granted == 0:
		e.learning.answered(resource, q.Ignore)
		e.stats.Rejected++
		if st.global == 0 && c.unlimited {
			delete(e.counts.res, resource)
		}
		r.DomainHolds, r.GlobalHolds = got.DomainHolds, got.GlobalHolds
	default:
		e.learning.answered(resource, q.Ignore)
		e.stats.Granted++
		st.hold(s, resource, domain, m, got.Granted)
		r.Granted, r.DomainHolds, r.GlobalHolds = got.Granted, got.DomainHolds, got.GlobalHolds
	}
	if m != nil {
		r.Groups = make([]GroupHolds, len(m.names))
		for i, g := range m.names {
			r.Groups[i] = GroupHolds{Name: g, Limit: m.limits[i]}
			if i < len(got.GroupHolds) {
				r.Groups[i].Holds = got.GroupHolds[i]
			}
		}
	}
	return r, nil
}

// release gives holds, already gone from the hold sets, back to the Log
// (outside the engine's lock; ctx bounds the call); on failure their
// resources are dirty (the hold sets are right; Reconcile writes them
// back).
func (e *Engine) release(ctx context.Context, holds []Hold) {
	if e.fenced {
		return
	}
	res := make([]string, 0, len(holds))
	for _, h := range holds {
		if !slices.Contains(res, h.Resource) {
			res = append(res, h.Resource)
		}
	}
	var err error
	e.unlocked(res, func() { err = e.o.Log.Release(ctx, holds) })
	if err != nil {
		if e.logFailed(err); e.fenced {
			return
		}
		for _, r := range res {
			e.dirty[r] = true
		}
	}
}

// stageShared is Transfer on the Log: copies of k leave session s for
// staged transfer id. They leave the hold set first (so that no other
// operation uses them meanwhile) and come back if the Log fails.
func (e *Engine) stageShared(ctx context.Context, s *session, k holdKey, copies int64, id string, ttl time.Duration) (Staged, error) {
	h := Hold{Resource: k.res, Domain: k.dom, Groups: splitGroups(k.groups), Copies: copies}
	s.take(k, copies)
	e.counts.drop(k, copies)
	var deadline time.Time
	var err error
	e.unlocked([]string{k.res}, func() { deadline, err = e.o.Log.Stage(ctx, id, s.id, h, ttl) })
	if err != nil {
		if e.logFailed(err); !e.fenced {
			e.dirty[k.res] = true // staged or not: Restore counts the hold
			if e.sessions[s.id] == s {
				e.counts.restore(s, k, copies)
			}
		}
		return Staged{}, unavailable("transfer", err)
	}
	e.stats.Staged++
	return Staged{ID: id, TTL: ttl, Expires: deadline}, nil
}

// seizeShared is Seize on the Log: staged transfer id joins session s.
func (e *Engine) seizeShared(ctx context.Context, s *session, id string) (Seized, error) {
	var h Hold
	var err error
	e.unlocked(nil, func() { h, err = e.o.Log.Seize(ctx, id) })
	switch {
	case errors.Is(err, ErrUnknownTransfer):
		return Seized{}, fail("transfer_id", "no staged transfer "+short(id)+" (never staged, seized already, or expired)", ErrUnknownTransfer)
	case err != nil:
		e.logFailed(err)
		return Seized{}, unavailable("seize", err)
	}
	if err := e.after(s, h.Resource, true); err != nil {
		return Seized{}, err
	}
	k := holdKey{res: h.Resource, dom: h.Domain, groups: e.counts.groupsKey(h.Resource, h.Domain, h.Groups)}
	e.counts.restore(s, k, h.Copies)
	e.stats.Seized++
	return Seized{Resource: h.Resource, Domain: h.Domain, Groups: splitGroups(k.groups), Copies: h.Copies}, nil
}

// Fence drops every session and hold at once, without releasing them in
// the Log, and makes every session operation fail with ErrUnavailable
// (class Unavailable) until Unfence. A server calls it when its fleet
// membership ends (its etcd session expired): the fleet's leader then
// subtracts this server's contributions from the shared counts, and a
// server that went on serving its holds could release what is no longer
// counted (the paper's server that "resigns"). Fencing twice is fencing
// once; it returns the number of sessions dropped.
//
// Source: charon-paper.md, section 4.3.2; docs/charon.md, "The fleet".
func (e *Engine) Fence() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.fenceLocked()
}

func (e *Engine) fenceLocked() int {
	n := len(e.sessions)
	e.fenced = true
	e.sessions = map[string]*session{}
	e.stimers = nil
	e.counts.zero()
	clear(e.dirty)
	e.learning.forget()
	e.learning.fences++
	e.stats.Fenced++
	return n
}

// Unfence ends Fence: sessions may be opened again (the Log must first
// have a new epoch, which is the caller's job). Until the next Reconcile,
// the learning mode of every configured resource is unknown (Learning).
func (e *Engine) Unfence() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.fenced && e.o.Log != nil {
		for name, st := range e.counts.res {
			if watched(st) {
				e.learning.unchecked[name] = true
			}
		}
	}
	e.fenced = false
}

// Fenced reports whether the engine is fenced.
func (e *Engine) Fenced() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.fenced
}

// Reconcile makes this server's contributions in the Log equal its hold
// sets again, for every resource whose contributions are in doubt: those
// marked dirty (a Log error left the outcome unknown, or a fail-open
// reserve counted copies here only) and those whose shared record the Log
// reports lost (Log.Lost: Redis came back empty). Then it asks the Log
// about the learning mode of every configured resource and every resource
// held here (Log.Learn), which tells the Log that this server's holds are
// written back, and records which resources are learning (Learning). It
// returns the resources restored, and the first error (those resources
// stay dirty for the next call). Without a Log, or fenced, it does
// nothing. Call it periodically, with the context of the loop that calls
// it (it bounds the Log's calls): its period bounds how long counts stay
// wrong after Redis loses its data, and how long a learning period waits
// for this server (call it more often while Learning lists anything).
//
// Source: docs/charon.md, "The fleet" (live holds are written back from
// the servers' in-memory hold sets).
func (e *Engine) Reconcile(ctx context.Context) ([]string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.o.Log == nil || e.fenced {
		return nil, nil
	}
	var held []string
	for name, st := range e.counts.res {
		if st.global > 0 {
			held = append(held, name)
		}
	}
	todo := maps.Clone(e.dirty)
	slices.Sort(held)
	lost, err := e.o.Log.Lost(ctx, held) // also when nothing is held: the Log checks its own records
	if err != nil {
		e.logFailed(err)
		e.learning.forget()
		return nil, unavailable("reconcile", err)
	}
	for _, r := range lost {
		todo[r] = true
	}
	for r := range e.inflight { // changing now: the next call
		delete(todo, r)
	}
	if len(todo) == 0 {
		return nil, e.learn(ctx)
	}
	sum := map[holdKey]int64{}
	for _, s := range e.sessions {
		for k, n := range s.holds {
			if todo[k.res] {
				sum[k] += n
			}
		}
	}
	by := map[string][]Hold{}
	for _, h := range sortedHolds(sum) {
		by[h.Resource] = append(by[h.Resource], h)
	}
	var done []string
	for _, r := range slices.Sorted(maps.Keys(todo)) {
		if err := e.o.Log.Restore(ctx, r, by[r]); err != nil {
			e.logFailed(err)
			e.learning.forget()
			return done, unavailable("reconcile", err)
		}
		delete(e.dirty, r)
		done = append(done, r)
	}
	return done, e.learn(ctx)
}

// watched reports whether a resource's learning mode decides whether
// this server may be ready: it is configured and keeps its limits (a
// resource that ignores them does not wait for the learning period).
func watched(st *resState) bool { return st.c != nil && !st.c.unlimited && !st.c.ignore }

// learn is Reconcile's last step (the lock held, the engine unfenced):
// Log.Learn, outside the lock, for every configured resource that keeps
// its limits and every resource this server holds copies of, but those
// whose contributions are in doubt (dirty) or changing (in flight), which
// the next call checks; then it records which are learning.
func (e *Engine) learn(ctx context.Context) error {
	var checks []LearnCheck
	for _, name := range slices.Sorted(maps.Keys(e.counts.res)) {
		st := e.counts.res[name]
		if (watched(st) || st.global > 0) && !e.dirty[name] && e.inflight[name] == 0 {
			checks = append(checks, LearnCheck{Resource: name, Holding: st.global > 0})
		}
	}
	if len(checks) == 0 {
		return nil
	}
	fences := e.learning.fences
	var left []time.Duration
	var err error
	e.unlocked(nil, func() { left, err = e.o.Log.Learn(ctx, checks) })
	if e.fenced || e.learning.fences != fences { // an answer for an epoch gone
		return nil
	}
	if err == nil && len(left) != len(checks) {
		err = fmt.Errorf("%d answers to %d resources", len(left), len(checks))
	}
	if err != nil {
		e.logFailed(err)
		e.learning.forget()
		return unavailable("learn", err)
	}
	for i, c := range checks {
		delete(e.learning.unchecked, c.Resource)
		if st := e.counts.res[c.Resource]; left[i] > 0 && st != nil && watched(st) {
			e.learning.resources[c.Resource] = true
		} else {
			delete(e.learning.resources, c.Resource)
		}
	}
	return nil
}

// Learning reports what this engine knows of its shared Log's learning
// mode (Log.Learn, Log.Reserve): learning, the resources the Log last
// said are learning, whose Reserves are refused (ErrLearning, class
// Unavailable); unchecked, the configured resources it has not asked
// about yet since it was unfenced or they were configured (Reconcile
// asks, and a Reserve answered tells). Both are sorted; both are empty
// without a Log. A server is not ready while either is not empty: every
// Reserve of a learning resource is refused. Resources that ignore their
// limits are never listed (they do not wait for the period). A Reconcile
// that cannot reach the Log empties both: what the engine knew is stale,
// and readiness does not follow Redis's health (while Redis is down,
// reserves fail closed or are granted fail-open, as configured). Safe for
// concurrent use.
//
// Source: docs/charon.md, "Readiness".
func (e *Engine) Learning() (learning, unchecked []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Sorted(maps.Keys(e.learning.resources)), slices.Sorted(maps.Keys(e.learning.unchecked))
}

// learningState is what an engine with a shared Log knows of the Log's
// learning mode: resources, the resources the Log last said are learning
// (Log.Learn, or a Reserve refused with ErrLearning); unchecked, the
// configured resources it has not been asked about since the engine was
// unfenced or they were configured; fences, the Fence calls so far, so
// that a Learn answered across one is dropped. See Engine.Learning. It is
// not safe for concurrent use: the Engine's mu guards it (Reconcile's
// learn reads fences before its Log call and again after, the lock
// released in between).
//
// Source: docs/charon.md, "Readiness".
type learningState struct {
	resources map[string]bool
	unchecked map[string]bool
	fences    uint64
}

// forget forgets what the engine knew of learning mode: when the engine
// is fenced, and when the Log cannot be reached (readiness does not wait
// for Redis: while it is down, reserves fail closed or are granted
// fail-open, as configured, learning or not; the next look that reaches
// it tells again).
func (l *learningState) forget() {
	clear(l.resources)
	clear(l.unchecked)
}

// answered records that a Reserve of resource was answered (not refused
// as learning): unless it ignored the limits, the resource is not
// learning.
func (l *learningState) answered(resource string, ignore bool) {
	if !ignore {
		delete(l.resources, resource)
		delete(l.unchecked, resource)
	}
}

// keepConfigured forgets the resources no longer configured (confs is
// the new configuration's).
func (l *learningState) keepConfigured(confs map[string]*rconf) {
	for name := range l.unchecked {
		if _, ok := confs[name]; !ok {
			delete(l.unchecked, name)
		}
	}
	for name := range l.resources {
		if _, ok := confs[name]; !ok {
			delete(l.resources, name)
		}
	}
}
