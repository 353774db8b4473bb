package copies

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Session ttl and transfer ttl bounds, the defaults of Options.
//
// Source: api/sluice/v1/limits.proto, OpenSessionRequest's ttl ("unset:
// the server's default (10 s). Bounded by the server (1 s to 1 h)") and
// TransferRequest's ("unset: the server's default (30 s)").
const (
	DefaultSessionTTL  = 10 * time.Second
	MinSessionTTL      = time.Second
	MaxSessionTTL      = time.Hour
	DefaultTransferTTL = 30 * time.Second
	MaxTransferTTL     = time.Hour
)

// Options configure an Engine. The zero value takes every default.
type Options struct {
	// Rand is the source of session and transfer ids: 16 bytes each,
	// unpredictable, since an id is a capability (whoever knows a session
	// id may release its holds; whoever knows a transfer id may seize it).
	// nil: crypto/rand. Tests inject a seeded source; it is read under the
	// engine's lock, so it needs no locking of its own.
	Rand io.Reader
	// DefaultSessionTTL is the ttl of a session opened with ttl 0 (0:
	// DefaultSessionTTL). Open clamps other ttls to [MinSessionTTL,
	// MaxSessionTTL] (0: the package's constants).
	DefaultSessionTTL, MinSessionTTL, MaxSessionTTL time.Duration
	// DefaultTransferTTL is the ttl of a transfer staged with ttl 0 (0:
	// DefaultTransferTTL); Transfer lowers longer ttls to MaxTransferTTL
	// (0: the package's constant).
	DefaultTransferTTL, MaxTransferTTL time.Duration
	// Log, when set, is the copy log shared with other servers (Redis):
	// every count and staged transfer lives there, and this engine keeps
	// its sessions and hold sets (see Log). nil: the counts and transfers
	// are this engine's own.
	Log Log
}

// resolve fills o's zero fields with the defaults and checks them.
func (o Options) resolve() (Options, error) {
	def := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.DefaultSessionTTL, DefaultSessionTTL)
	def(&o.MinSessionTTL, MinSessionTTL)
	def(&o.MaxSessionTTL, MaxSessionTTL)
	def(&o.DefaultTransferTTL, DefaultTransferTTL)
	def(&o.MaxTransferTTL, MaxTransferTTL)
	if o.Rand == nil {
		o.Rand = rand.Reader
	}
	if o.MinSessionTTL < 0 || o.MinSessionTTL > o.DefaultSessionTTL || o.DefaultSessionTTL > o.MaxSessionTTL {
		return o, fmt.Errorf("copies: session ttls must satisfy 0 < min (%v) ≤ default (%v) ≤ max (%v)", o.MinSessionTTL, o.DefaultSessionTTL, o.MaxSessionTTL)
	}
	if o.DefaultTransferTTL < 0 || o.DefaultTransferTTL > o.MaxTransferTTL {
		return o, fmt.Errorf("copies: transfer ttls must satisfy 0 < default (%v) ≤ max (%v)", o.DefaultTransferTTL, o.MaxTransferTTL)
	}
	return o, nil
}

// Engine holds the copy log of copy-limited resources — counts per
// domain, per group and in total — and the sessions and staged transfers
// whose holds make up those counts. Every count is, at every moment, the
// sum of the copies held by live sessions and staged in transfers under
// it.
//
// It is deterministic: every method takes the current time, and nothing
// here reads a clock, starts a goroutine or does I/O (ids come from
// Options.Rand). Sessions and transfers end when Close or Expire says so;
// until Expire runs, a session or transfer whose ttl has passed still
// counts but can no longer be used (ErrUnknownSession,
// ErrUnknownTransfer), so the server calls Expire periodically (its
// period bounds how long a dead session's copies stay counted).
//
// It is safe for concurrent use: one mutex serialises every method. A
// decision costs O(groups of the domain) map operations, whatever the
// number of domains, sessions and transfers; opening, renewing and ending
// a session or transfer adds O(log n) for its timer.
//
// The zero Engine is not usable: use New.
type Engine struct {
	mu        sync.Mutex
	o         Options
	cfg       *Config // normalized, private
	counts    counts  // the copy log: counts per resource
	sessions  map[string]*session
	transfers map[string]*transfer
	stimers   timers // sessions by deadline
	ttimers   timers // transfers by deadline
	stats     Stats
	idBuf     [16]byte

	// With a Log: fenced is set between Fence and Unfence; dirty holds the
	// resources whose contributions in the Log may differ from the hold
	// sets (a failed release, a fail-open reserve), which Reconcile
	// writes back.
	fenced   bool
	dirty    map[string]bool
	inflight map[string]int // resources with a Log call in flight (unlocked)

	// With a Log: what the engine knows of the Log's learning mode.
	learning learningState
}

// counts is the engine's copy log: the counts of every resource that is
// configured or holds copies, by name. It keeps them in step with the
// sessions' hold sets (every count is the sum of the copies held under it
// and staged in transfers): resState.hold and restore count copies into a
// hold set and the counts together, and drop takes copies out of the
// counts once they have left a hold set or a staged transfer. With a
// shared Log, the counts are this server's contributions to the Log's. It
// is not safe for concurrent use: the Engine's mu guards it.
type counts struct {
	res map[string]*resState
}

// resState is the copy log of one resource.
type resState struct {
	c       *rconf // nil: no longer configured (holds remain; no reserve)
	domains map[string]int64
	groups  map[string]int64 // by group name, configured or not
	global  int64
}

// rconf is a resource's configuration, compiled.
type rconf struct {
	domainLimit int64
	overrides   map[string]int64
	global      int64
	groups      map[string]int64 // configured group limits
	member      map[string]*membership
	ignore      bool
	unlimited   bool // unconfigured, under an AllowUnconfigured prefix
	failOpen    bool // OnStoreError FailOpen
}

// membership is the set of groups a domain belongs to.
type membership struct {
	key    string   // the names, sorted, joined by ','
	names  []string // sorted
	limits []int64
}

// unlimitedConf configures unconfigured resources under an
// AllowUnconfigured prefix.
var unlimitedConf = func() *rconf { c := compile(Unlimited()); c.unlimited = true; return c }()

func compile(r Resource) *rconf {
	c := &rconf{domainLimit: r.DomainLimit, overrides: r.DomainLimits, global: r.GlobalLimit, ignore: r.Ignore, failOpen: r.OnStoreError == FailOpen}
	c.groups = make(map[string]int64, len(r.Groups))
	names := map[string][]string{}
	for _, g := range r.Groups {
		c.groups[g.Name] = g.Limit
		for _, d := range g.Domains {
			names[d] = append(names[d], g.Name)
		}
	}
	c.member = make(map[string]*membership, len(names))
	interned := map[string]*membership{}
	for d, ns := range names {
		slices.Sort(ns)
		k := strings.Join(ns, ",")
		m := interned[k]
		if m == nil {
			m = &membership{key: k, names: ns}
			for _, n := range ns {
				m.limits = append(m.limits, c.groups[n])
			}
			interned[k] = m
		}
		c.member[d] = m
	}
	return c
}

// domainLimit returns the limit of domain d.
func (c *rconf) limitOf(d string) int64 {
	if v, ok := c.overrides[d]; ok {
		return v
	}
	return c.domainLimit
}

// holdKey names what a session holds: copies of a resource for a domain,
// counted in the groups whose names (sorted, joined by ',') it carries.
type holdKey struct {
	res, dom, groups string
}

// New returns an engine configured with cfg (validated: the error is
// Config.Validate's, or an Options error; normalized as Config.Normalize
// does).
func New(cfg *Config, o Options) (*Engine, error) {
	o, err := o.resolve()
	if err != nil {
		return nil, err
	}
	e := &Engine{o: o, counts: counts{res: map[string]*resState{}}, sessions: map[string]*session{}, transfers: map[string]*transfer{}, dirty: map[string]bool{}, inflight: map[string]int{},
		learning: learningState{resources: map[string]bool{}, unchecked: map[string]bool{}}}
	if err := e.SetConfig(cfg); err != nil {
		return nil, err
	}
	return e, nil
}

// SetConfig replaces the configuration. On error (Config.Validate's) the
// old configuration stays. Every hold and staged transfer stays, counted
// where it was (its domain, the groups it was reserved under, globally):
// new limits apply to new reserves only, so a count may stay above a
// lowered limit until enough copies are released; a domain that left a
// group keeps counting its old copies in that group until they are
// released, and its new copies count in its new groups. A resource removed
// from the configuration keeps its holds (they may be released,
// transferred and seized) but answers ErrUnknownResource to reserves,
// unless an AllowUnconfigured prefix covers it.
//
// Source: charon-paper.md, section 3.1 (release: "a domain can be added
// or removed from a domain group while it is actively holding
// resources"), section 2.3 (Bulkheads: "their limiting behavior changes
// immediately").
func (e *Engine) SetConfig(cfg *Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	cfg, _ = cfg.Normalize()
	if cfg == nil {
		cfg = &Config{}
	}
	confs := make(map[string]*rconf, len(cfg.Resources))
	for name, r := range cfg.Resources {
		confs[name] = compile(r)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	old := e.cfg
	e.cfg = cfg
	e.learning.keepConfigured(confs)
	if e.o.Log != nil && !e.fenced {
		for name, c := range confs {
			had := false
			if old != nil {
				_, had = old.Resources[name]
			}
			if !had && !c.ignore {
				e.learning.unchecked[name] = true // its learning mode unknown until Reconcile
			}
		}
	}
	for name, st := range e.counts.res {
		if _, ok := confs[name]; ok {
			continue
		}
		st.c = nil
		if cfg.allowsUnconfigured(name) {
			st.c = unlimitedConf
		}
		if st.global == 0 {
			delete(e.counts.res, name)
		}
	}
	for name, c := range confs {
		if st := e.counts.res[name]; st != nil {
			st.c = c
		} else {
			e.counts.res[name] = &resState{c: c, domains: map[string]int64{}, groups: map[string]int64{}}
		}
	}
	return nil
}

// Config returns a copy of the configuration in force (normalized).
func (e *Engine) Config() *Config {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.cfg.Clone()
}

// Reservation is the answer to Reserve: the copies granted and the
// paper's context, after the answer.
//
// Source: charon-paper.md, section 3.1, reserve.
type Reservation struct {
	// Granted is the number of copies now held by the session, in
	// [min, copies]; 0 when fewer than min fit (over limit: a normal
	// answer; nothing changed).
	Granted int64
	// DomainLimit is the domain's limit (its override, or the resource's
	// domain limit; MaxCopies on an unconfigured resource).
	DomainLimit int64
	// GlobalLimit is the global limit; Unbounded (0): none.
	GlobalLimit int64
	// DomainHolds is the copies held by this domain, in every group and
	// session; GlobalHolds by every domain.
	DomainHolds, GlobalHolds int64
	// Groups are the domain's groups now, by name, each with its limit and
	// the copies held across its domains. The granted copies are counted
	// in each; their names go with the copies' Release and Transfer.
	Groups []GroupHolds
	// Unlimited is set when the resource ignores its limits
	// (Resource.Ignore) or is unconfigured under an AllowUnconfigured
	// prefix: the copies were granted without looking at the limits.
	Unlimited bool
	// Degraded is set when the shared Log failed and the resource fails
	// open (OnStoreError FailOpen): the copies were granted without
	// looking at the limits, and the counts above are this server's own.
	Degraded bool
}

// GroupHolds is one domain group's pool.
type GroupHolds struct {
	Name  string
	Limit int64
	// Holds is the copies held across every domain of the group.
	Holds int64
}

// Reserve holds copies of resource for domain in session at now: the
// most n in [minCopies, copies] such that the domain's holds plus n are within
// its limit, the holds of each group the domain currently belongs to plus
// n within that group's limit (a domain in several groups takes a copy
// from each pool), and all holds plus n within the global limit; or none,
// changing nothing, when fewer than minCopies fit. copies 0 means 1; minCopies 0 means
// copies (all or nothing). A resource that ignores its limits, or is
// unconfigured under an AllowUnconfigured prefix, grants copies. No count
// ever exceeds MaxCopies.
//
// The copies are counted under the domain's current groups, which the
// answer names; the session holds them until it releases or transfers
// them, or ends.
//
// Errors (*Error): ErrInvalidArgument (an empty or invalid session_id,
// resource or domain; copies or minCopies negative or above MaxCopies; minCopies
// above copies), ErrUnknownSession (no such session, or its ttl passed),
// ErrUnknownResource.
//
// With a shared Log (Options.Log), ctx is the request's: it bounds the
// Log's call (see Log), and a request whose ctx ends is never granted
// fail-open. Without one, ctx is not used.
//
// Source: charon-paper.md, sections 2.2 and 3.1 (reserve).
func (e *Engine) Reserve(ctx context.Context, now time.Time, session, resource, domain string, copies, minCopies int64) (Reservation, error) {
	if err := checkNames(session, resource, domain); err != nil {
		return Reservation{}, err
	}
	switch {
	case copies < 0:
		return Reservation{}, fail("copies", fmt.Sprintf("%d is negative", copies), ErrInvalidArgument)
	case copies > MaxCopies:
		return Reservation{}, fail("copies", fmt.Sprintf("%d exceeds %d (2^53)", copies, int64(MaxCopies)), ErrInvalidArgument)
	case copies == 0:
		copies = 1
	}
	switch {
	case minCopies < 0:
		return Reservation{}, fail("min_copies", fmt.Sprintf("%d is negative", minCopies), ErrInvalidArgument)
	case minCopies > copies:
		return Reservation{}, fail("min_copies", fmt.Sprintf("%d is above copies (%d)", minCopies, copies), ErrInvalidArgument)
	case minCopies == 0:
		minCopies = copies
	}
	ns := now.UnixNano()
	e.mu.Lock()
	defer e.mu.Unlock()
	s, err := e.live(ns, session)
	if err != nil {
		return Reservation{}, err
	}
	st := e.counts.res[resource]
	if st == nil || st.c == nil {
		if !e.cfg.allowsUnconfigured(resource) {
			return Reservation{}, unknownResource(resource)
		}
		st = e.counts.state(resource)
		st.c = unlimitedConf
	}
	c := st.c
	m := c.member[domain]
	dl := c.limitOf(domain)
	if e.o.Log != nil {
		return e.reserveShared(ctx, s, st, resource, domain, copies, minCopies)
	}
	dh := st.domains[domain]
	free := min(MaxCopies-dh, MaxCopies-st.global)
	if !c.ignore {
		free = min(free, dl-dh)
		if c.global != Unbounded {
			free = min(free, c.global-st.global)
		}
	}
	if m != nil {
		for i, g := range m.names {
			gh := st.groups[g]
			free = min(free, MaxCopies-gh)
			if !c.ignore {
				free = min(free, m.limits[i]-gh)
			}
		}
	}
	n := min(copies, free)
	if n < minCopies {
		n = 0
		e.stats.Rejected++
		if st.global == 0 && c.unlimited {
			delete(e.counts.res, resource)
		}
	} else {
		e.stats.Granted++
		st.hold(s, resource, domain, m, n)
		dh = st.domains[domain]
	}
	r := Reservation{Granted: n, DomainLimit: dl, GlobalLimit: c.global, DomainHolds: dh, GlobalHolds: st.global, Unlimited: c.ignore || c.unlimited}
	if m != nil {
		r.Groups = make([]GroupHolds, len(m.names))
		for i, g := range m.names {
			r.Groups[i] = GroupHolds{Name: g, Limit: m.limits[i], Holds: st.groups[g]}
		}
	}
	return r, nil
}

// hold adds n copies of resource (st's) for domain, in the groups of m,
// to session s and to st's counts (with a Log: this server's
// contributions).
func (st *resState) hold(s *session, resource, domain string, m *membership, n int64) {
	st.domains[domain] += n
	st.global += n
	k := holdKey{res: resource, dom: domain}
	if m != nil {
		k.groups = m.key
		for _, g := range m.names {
			st.groups[g] += n
		}
	}
	s.holds[k] += n
}

// Release gives back copies of resource that session holds for domain
// under groups (the group names of the Reservation — or Seized — that
// brought them, in any order), at now. Partial releases are allowed: a
// reservation may be released over several calls.
//
// Errors (*Error): ErrInvalidArgument (invalid names; copies < 1 or above
// MaxCopies; a group named twice), ErrUnknownSession, ErrNotHeld (the
// session holds fewer than copies under resource, domain and groups;
// nothing is released), ErrUnknownResource (the session holds nothing of
// a resource that is not configured). ctx is as for Reserve; the copies
// leave the session even when the Log's release fails (Reconcile writes
// them back).
//
// Source: charon-paper.md, section 3.1 (release; client error 4).
func (e *Engine) Release(ctx context.Context, now time.Time, session, resource, domain string, copies int64, groups []string) error {
	k, err := checkHold(session, resource, domain, copies, groups)
	if err != nil {
		return err
	}
	ns := now.UnixNano()
	e.mu.Lock()
	defer e.mu.Unlock()
	s, err := e.live(ns, session)
	if err != nil {
		return err
	}
	k.groups = e.counts.groupsKey(resource, domain, groups)
	if !s.take(k, copies) {
		return e.notHeld(s, k, copies, "release")
	}
	e.counts.drop(k, copies)
	e.stats.Released += uint64(copies)
	if e.o.Log != nil {
		e.release(ctx, []Hold{{Resource: resource, Domain: domain, Groups: splitGroups(k.groups), Copies: copies}})
	}
	return nil
}

// Staged is a transfer staged by Transfer.
type Staged struct {
	// ID identifies the transfer for Seize: 32 hex digits, unpredictable.
	ID string
	// TTL is the ttl applied; Expires is now + TTL, when Expire releases
	// the copies if nobody seized them.
	TTL     time.Duration
	Expires time.Time
}

// Transfer moves copies that session holds for domain under groups out
// of the session into a staging area at now, where they stay counted
// until Seize moves them into a session or, once ttl has passed unseized,
// Expire releases them. ttl 0 means Options.DefaultTransferTTL; a ttl
// above Options.MaxTransferTTL is lowered to it.
//
// A staged transfer no longer belongs to the session: ending the session
// leaves it staged (its ttl is its only bound), so a process may stage
// copies, hand the id to another and exit.
//
// Errors: Release's, and ErrInvalidArgument for a negative ttl; with a
// shared Log, ErrUnavailable when it failed (ctx is as for Reserve).
//
// Source: charon-paper.md, section 3.1 (transfer: "Resources staged for
// transfer are still implicitly held ... but can no longer be explicitly
// released by the client"), Figure 6.
func (e *Engine) Transfer(ctx context.Context, now time.Time, session, resource, domain string, copies int64, groups []string, ttl time.Duration) (Staged, error) {
	k, err := checkHold(session, resource, domain, copies, groups)
	if err != nil {
		return Staged{}, err
	}
	switch {
	case ttl < 0:
		return Staged{}, fail("ttl", fmt.Sprintf("%v is negative", ttl), ErrInvalidArgument)
	case ttl == 0:
		ttl = e.o.DefaultTransferTTL
	case ttl > e.o.MaxTransferTTL:
		ttl = e.o.MaxTransferTTL
	}
	ns := now.UnixNano()
	e.mu.Lock()
	defer e.mu.Unlock()
	s, err := e.live(ns, session)
	if err != nil {
		return Staged{}, err
	}
	k.groups = e.counts.groupsKey(resource, domain, groups)
	if s.holds[k] < copies {
		return Staged{}, e.notHeld(s, k, copies, "transfer")
	}
	id, err := e.newID(func(id string) bool { return e.transfers[id] != nil })
	if err != nil {
		return Staged{}, err
	}
	if e.o.Log != nil {
		return e.stageShared(ctx, s, k, copies, id, ttl)
	}
	s.take(k, copies)
	t := &transfer{timer: timer{deadline: ns + int64(ttl), id: id}, from: s.id, k: k, copies: copies}
	e.transfers[id] = t
	e.ttimers.push(&t.timer)
	e.stats.Staged++
	return Staged{ID: id, TTL: ttl, Expires: time.Unix(0, t.deadline)}, nil
}

// Seized is what Seize moved into a session: enough to hold, release and
// transfer the copies as if the session had reserved them.
type Seized struct {
	Resource, Domain string
	// Groups are the groups the copies are counted in — those of the
	// reservation they came from — which Release and Transfer take.
	Groups []string
	Copies int64
}

// Seize moves the copies of staged transfer id into session at now, once:
// the transfer is gone afterwards. Counts do not change (the copies were
// held all along). The copies keep the groups they were reserved under,
// which the answer names.
//
// Errors (*Error): ErrInvalidArgument (an empty session_id or
// transfer_id), ErrUnknownSession, ErrUnknownTransfer (no such transfer,
// seized already, or its ttl passed).
//
// Source: charon-paper.md, section 3.1 (seize). The paper's answer names
// "the groups to which the domain currently belongs"; this one names the
// groups the copies are counted in, which a later Release needs (the
// same, unless the domain's groups changed since the reserve). ctx is as
// for Reserve.
func (e *Engine) Seize(ctx context.Context, now time.Time, session, id string) (Seized, error) {
	if session == "" {
		return Seized{}, fail("session_id", "is empty", ErrInvalidArgument)
	}
	if id == "" {
		return Seized{}, fail("transfer_id", "is empty", ErrInvalidArgument)
	}
	ns := now.UnixNano()
	e.mu.Lock()
	defer e.mu.Unlock()
	s, err := e.live(ns, session)
	if err != nil {
		return Seized{}, err
	}
	if e.o.Log != nil {
		return e.seizeShared(ctx, s, id)
	}
	t := e.transfers[id]
	if t == nil {
		return Seized{}, fail("transfer_id", "no staged transfer "+short(id)+" (never staged, seized already, or expired)", ErrUnknownTransfer)
	}
	if ns >= t.deadline {
		return Seized{}, fail("transfer_id", "transfer "+short(id)+" expired: its ttl passed unseized", ErrUnknownTransfer)
	}
	delete(e.transfers, id)
	e.ttimers.remove(t.idx)
	s.holds[t.k] += t.copies
	e.stats.Seized++
	return Seized{Resource: t.k.res, Domain: t.k.dom, Groups: splitGroups(t.k.groups), Copies: t.copies}, nil
}

// notHeld is the error for an op of copies under k that s does not hold.
func (e *Engine) notHeld(s *session, k holdKey, copies int64, op string) error {
	if s.holds[k] == 0 {
		if st := e.counts.res[k.res]; (st == nil || st.c == nil) && !e.cfg.allowsUnconfigured(k.res) {
			return unknownResource(k.res)
		}
	}
	where := strconv.Quote(k.res) + " for domain " + strconv.Quote(k.dom)
	if k.groups == "" {
		where += " in no group"
	} else {
		where += " in groups [" + k.groups + "]"
	}
	msg := fmt.Sprintf("%s of %d copies of %s; the session holds %d", op, copies, where, s.holds[k])
	var other []string
	for hk, n := range s.holds {
		if hk.res == k.res && hk.dom == k.dom && hk.groups != k.groups {
			other = append(other, fmt.Sprintf("%d in [%s]", n, hk.groups))
		}
	}
	if len(other) > 0 {
		slices.Sort(other)
		msg += " (and " + strings.Join(other, ", ") + ")"
	}
	return fail("copies", msg, ErrNotHeld)
}

// drop subtracts n released copies held under k from the counts.
func (c *counts) drop(k holdKey, n int64) {
	st := c.res[k.res]
	st.global -= n
	dec(st.domains, k.dom, n)
	for g := range eachGroup(k.groups) {
		dec(st.groups, g, n)
	}
	if st.global == 0 && (st.c == nil || st.c.unlimited) {
		delete(c.res, k.res)
	}
}

// restore puts copies of k back into session s and the counts (creating
// k's resource state if it is gone).
func (c *counts) restore(s *session, k holdKey, copies int64) {
	st := c.state(k.res)
	st.domains[k.dom] += copies
	st.global += copies
	for g := range eachGroup(k.groups) {
		st.groups[g] += copies
	}
	s.holds[k] += copies
}

// zero forgets every count, as when every hold is dropped at once (Fence):
// configured resources keep a copy log with nothing held, others have
// none.
func (c *counts) zero() {
	for name, st := range c.res {
		if st.c == nil || st.c.unlimited {
			delete(c.res, name)
			continue
		}
		clear(st.domains)
		clear(st.groups)
		st.global = 0
	}
}

// state returns resource's copy log, creating it.
func (c *counts) state(resource string) *resState {
	st := c.res[resource]
	if st == nil {
		st = &resState{domains: map[string]int64{}, groups: map[string]int64{}}
		c.res[resource] = st
	}
	return st
}

// dec subtracts n from m[k], deleting it at zero.
func dec(m map[string]int64, k string, n int64) {
	if v := m[k] - n; v == 0 {
		delete(m, k)
	} else {
		m[k] = v
	}
}

// eachGroup yields the names of a canonical groups key.
func eachGroup(key string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for key != "" {
			i := strings.IndexByte(key, ',')
			if i < 0 {
				yield(key)
				return
			}
			if !yield(key[:i]) {
				return
			}
			key = key[i+1:]
		}
	}
}

// splitGroups returns the names of a canonical groups key (nil for none).
func splitGroups(key string) []string {
	if key == "" {
		return nil
	}
	return strings.Split(key, ",")
}

// groupsKey returns the canonical key of groups (valid, without
// duplicates: checkHold checked), without allocating when they are the
// domain's current groups (in any order), or fewer than two.
func (c *counts) groupsKey(resource, domain string, groups []string) string {
	switch len(groups) {
	case 0:
		return ""
	case 1:
		return groups[0]
	}
	if st := c.res[resource]; st != nil && st.c != nil {
		if m := st.c.member[domain]; m != nil && len(m.names) == len(groups) && len(groups) <= 16 && subset(groups, m.names) {
			return m.key
		}
	}
	if !slices.IsSorted(groups) {
		groups = slices.Sorted(slices.Values(groups))
	}
	return strings.Join(groups, ",")
}

// subset reports whether every element of a is in b.
func subset(a, b []string) bool {
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}

// checkHold checks the fields of a release or transfer.
func checkHold(session, resource, domain string, copies int64, groups []string) (holdKey, error) {
	if err := checkNames(session, resource, domain); err != nil {
		return holdKey{}, err
	}
	switch {
	case copies < 1:
		return holdKey{}, fail("copies", fmt.Sprintf("%d; at least 1", copies), ErrInvalidArgument)
	case copies > MaxCopies:
		return holdKey{}, fail("copies", fmt.Sprintf("%d exceeds %d (2^53)", copies, int64(MaxCopies)), ErrInvalidArgument)
	}
	for i, g := range groups {
		if msg := checkName(g); msg != "" {
			return holdKey{}, fail("groups", fmt.Sprintf("[%d]: group name %s", i, msg), ErrInvalidArgument)
		}
		if len(groups) > 16 {
			continue
		}
		for j := range i {
			if groups[j] == g {
				return holdKey{}, fail("groups", fmt.Sprintf("[%d]: %q is also [%d]", i, g, j), ErrInvalidArgument)
			}
		}
	}
	if len(groups) > 16 {
		sorted := slices.Sorted(slices.Values(groups))
		for i := 1; i < len(sorted); i++ {
			if sorted[i] == sorted[i-1] {
				return holdKey{}, fail("groups", fmt.Sprintf("%q is named twice", sorted[i]), ErrInvalidArgument)
			}
		}
	}
	return holdKey{res: resource, dom: domain}, nil
}

// checkNames checks a request's session, resource and domain.
func checkNames(session, resource, domain string) error {
	if session == "" {
		return fail("session_id", "is empty", ErrInvalidArgument)
	}
	if msg := checkName(resource); msg != "" {
		return fail("resource", msg, ErrInvalidArgument)
	}
	if msg := checkName(domain); msg != "" {
		return fail("domain", msg, ErrInvalidArgument)
	}
	return nil
}

func unknownResource(name string) error {
	return fail("resource", "no copy-limited resource "+strconv.Quote(name)+" is configured", ErrUnknownResource)
}

// short abbreviates an id for messages (ids are capabilities: messages
// end up in logs).
func short(id string) string {
	if len(id) > 8 {
		id = id[:8] + "…"
	}
	return strconv.Quote(id)
}

// sortedHolds lists holds in key order.
func sortedHolds(m map[holdKey]int64) []Hold {
	if len(m) == 0 {
		return nil
	}
	ks := slices.SortedFunc(maps.Keys(m), func(a, b holdKey) int {
		return strings.Compare(a.res+"\x00"+a.dom+"\x00"+a.groups, b.res+"\x00"+b.dom+"\x00"+b.groups)
	})
	out := make([]Hold, len(ks))
	for i, k := range ks {
		out[i] = Hold{Resource: k.res, Domain: k.dom, Groups: splitGroups(k.groups), Copies: m[k]}
	}
	return out
}
