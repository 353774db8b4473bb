// Package election decides which task of a Sluice node is its master.
//
// Each node of the server tree runs several tasks; exactly one of them, the
// master, hands out capacity, and the others answer every capacity RPC with a
// mastership redirect to it (doorman-design.md, "Master Election"). Standalone
// makes a single task the master forever; Etcd elects one master among the
// tasks campaigning on the same etcd key, with go.etcd.io/etcd/client/v3's
// concurrency package.
package election

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/sluice-rl/sluice/internal/refresh"
	"github.com/sluice-rl/sluice/internal/retry"
)

// Status is one task's view of its node's election.
type Status struct {
	// IsMaster is true while this task is the master.
	IsMaster bool
	// Master is the advertised address of the current master ("host:port"),
	// this task's own when IsMaster; "" when no master is known.
	Master string
	// LeasesEndBy, reported with IsMaster, is when every lease the node's
	// previous master granted has ended, by the lease horizon it kept
	// (EtcdOptions.LongestLease): in the past when it lapsed before this
	// task won. Zero when unknown (no horizon kept, or Standalone): the
	// new master learns for its full learning period
	// (capacity.Service.SetLeasesEndBy).
	LeasesEndBy time.Time
}

// Election is one task's participation in its node's election.
type Election interface {
	// Run campaigns until ctx is done or Resign is called, calling report
	// with every change of Status, from one goroutine at a time (the first
	// call may come before Run returns, never after). It returns nil after
	// Resign or ctx's end, and an error only for a misconfiguration it
	// cannot recover from. Run must be called at most once.
	Run(ctx context.Context, report func(Status)) error
	// Resign gives up mastership (or candidacy) at once, so that another
	// task takes over without waiting for a session to expire. Run then
	// returns (Standalone), or only follows who the master is, reporting
	// it, until its ctx ends (Etcd). It
	// is for a graceful stop; it is safe to call at any time, from any
	// goroutine, more than once.
	Resign(ctx context.Context) error
}

// Horizon is implemented by Etcd's Election and by LeaseHorizon (the one
// given to it, EtcdOptions.Horizon): a master that keeps a lease
// horizon (EtcdOptions.LongestLease) must call KeepHorizon before it hands
// out its first lease of more than 0 in a term, and may hand it out only
// if KeepHorizon returned nil. A master that grants nothing keeps no
// horizon, so that its successor does not wait for leases that were never
// granted. Safe for concurrent use.
type Horizon interface {
	// KeepHorizon makes the horizon cover every lease this master grants
	// from now until its term ends. Cheap once it has succeeded in a
	// term. Without EtcdOptions.LongestLease it returns nil.
	KeepHorizon(ctx context.Context) error
}

// Standalone returns an Election in which this task, at address addr, is
// always the master: the default for a node with a single task.
func Standalone(addr string) Election { return &standalone{addr: addr, stop: make(chan struct{})} }

type standalone struct {
	addr string
	once sync.Once
	stop chan struct{}
}

func (s *standalone) Run(ctx context.Context, report func(Status)) error {
	report(Status{IsMaster: true, Master: s.addr})
	select {
	case <-ctx.Done():
	case <-s.stop:
	}
	return nil
}

func (s *standalone) Resign(context.Context) error {
	s.once.Do(func() { close(s.stop) })
	return nil
}

// EtcdOptions configures an etcd election.
type EtcdOptions struct {
	// Key is the election's key prefix in etcd, e.g. "/sluice/root"; all
	// tasks of one node use the same key. Required.
	Key string
	// Address is this task's advertised address, stored as its candidacy's
	// value so that the others can redirect to it. Required.
	Address string
	// TTL is the etcd session (lease) TTL, rounded up to whole seconds; a
	// master that cannot renew its session for this long loses mastership.
	// Default 10 s; at least 1 s.
	TTL time.Duration
	// Logger receives the election's logs; nil means slog.Default().
	Logger *slog.Logger
	// LongestLease, if set, returns the longest lease the master may grant
	// (the longest lease_length of its configuration); the master then
	// keeps a lease horizon in etcd once it grants something (Horizon),
	// KEY.leases: a key whose etcd lease lapses no sooner than every
	// lease this master granted (HorizonTTL after its last renewal,
	// renewed as often as the session), so that its successor learns when
	// they have all ended (Status.LeasesEndBy). KEY.horizon-kept marks
	// that masters of this node keep one, so that an absent horizon means
	// "all ended", not "unknown". nil: no horizon is kept or read.
	LongestLease func() time.Duration
	// Horizon, with LongestLease, is the LeaseHorizon whose terms this
	// election opens and closes: the one the granting service was built
	// with (capacity.Options.Horizon), which exists before the election
	// does. nil: the Election's own, kept with its KeepHorizon. A
	// LeaseHorizon belongs to one election.
	Horizon *LeaseHorizon
}

// HorizonTTL is the lease horizon's TTL for a master whose longest lease
// is longest and whose session TTL is session: a master grants leases
// until its session has expired, session after its last renewal, and the
// horizon's renewal may lag the session's by a third of session (both are
// renewed every third of session); 5 s more for the clocks' rates and the
// master's reaction. Rounded up to whole seconds.
func HorizonTTL(longest, session time.Duration) time.Duration {
	d := longest + session + session/3 + 5*time.Second
	return (d + time.Second - 1).Truncate(time.Second)
}

// Etcd returns an Election on etcd through cli, which the caller owns and
// closes after Run has returned.
//
// The task campaigns under opts.Key with an etcd session of opts.TTL. It is
// the master from the moment its campaign wins until its session is truly
// gone: a failed renewal or a lost connection alone does not end
// mastership, only the session's expiry does (the client library retries the
// keep-alive until the lease's TTL has passed). It then reports non-master at
// once, and campaigns again on a new session, backing off while etcd is
// unreachable. Non-masters follow the current master's address with the
// election's Observe. The Election is a Horizon too.
//
// Errors: an empty Key or Address; a Horizon without LongestLease, or
// one that another election has.
func Etcd(cli *clientv3.Client, opts EtcdOptions) (Election, error) {
	if opts.Key == "" {
		return nil, errors.New("election: empty key")
	}
	if opts.Address == "" {
		return nil, errors.New("election: empty address")
	}
	if opts.Horizon != nil && opts.LongestLease == nil {
		return nil, errors.New("election: a Horizon needs LongestLease (the horizon's TTL)")
	}
	if opts.TTL <= 0 {
		opts.TTL = 10 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	e := &etcdElection{cli: cli, opts: opts, stop: make(chan struct{}), lh: opts.Horizon}
	if e.lh == nil {
		e.lh = new(LeaseHorizon)
	}
	e.lh.mu.Lock()
	defer e.lh.mu.Unlock()
	if e.lh.e != nil {
		return nil, errors.New("election: the Horizon belongs to another election")
	}
	e.lh.e = e
	return e, nil
}

type etcdElection struct {
	cli  *clientv3.Client
	opts EtcdOptions

	once sync.Once
	stop chan struct{} // closed by Resign

	lh *LeaseHorizon // opts.Horizon, or its own

	mu      sync.Mutex
	session *concurrency.Session // current session, nil between sessions
	leader  bool
	report  func(Status)
	last    Status
	started bool
}

// LeaseHorizon is a master's lease horizon (see Horizon and
// EtcdOptions.LongestLease) as a value of its own, so that the service
// that grants leases can be built with it before the election exists: the
// service keeps it (KeepHorizon, before its first grant of more than 0 in
// a term), and the Etcd election it is given to (EtcdOptions.Horizon)
// opens its terms as it wins mastership and closes them as it loses it.
// The zero value is ready; KeepHorizon fails while no term is open
// (before the election's first win, between terms, without an election).
// Safe for concurrent use.
type LeaseHorizon struct {
	mu   sync.Mutex
	e    *etcdElection // the election it belongs to; nil: none yet
	term *horizonTerm  // the open term; nil when not the master
}

// open makes t the open term (nil: none).
func (lh *LeaseHorizon) open(t *horizonTerm) {
	lh.mu.Lock()
	lh.term = t
	lh.mu.Unlock()
}

// horizonTerm is one term's lease horizon (see KeepHorizon).
type horizonTerm struct {
	term  context.Context       // ends with the term; so do the renewals
	el    *concurrency.Election // the campaign that won the term
	endBy time.Time             // the previous master's leases end by then (zero: unknown)

	turn chan struct{} // a one-slot semaphore: one KeepHorizon at a time, the others wait on it or their ctx
	kept bool          // this master's horizon is put and renewed (under turn)
}

// ttlSeconds is the session TTL in whole seconds, rounded up, at least 1.
func (e *etcdElection) ttlSeconds() int {
	s := int((e.opts.TTL + time.Second - 1) / time.Second)
	return max(s, 1)
}

// setLeader records whether this task's campaign holds mastership and
// reports the new status (with endBy, the previous master's lease
// horizon, when it does).
func (e *etcdElection) setLeader(leader bool, endBy time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.leader = leader
	if leader {
		e.setLocked(Status{IsMaster: true, Master: e.opts.Address, LeasesEndBy: endBy})
	} else {
		e.setLocked(Status{})
	}
}

// setLocked records a new status and reports it if it changed. Holding mu
// makes reports one at a time and in order.
func (e *etcdElection) setLocked(st Status) {
	if e.started && st == e.last {
		return
	}
	e.started = true
	e.last = st
	e.report(st)
}

// observed records the master's address seen by Observe, unless this task
// is the master or the address is its own (its own campaign is the source
// of truth for those).
func (e *etcdElection) observed(addr string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.leader || addr == e.opts.Address {
		return
	}
	e.setLocked(Status{Master: addr})
}

func (e *etcdElection) Run(parent context.Context, report func(Status)) error {
	e.report = report
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	go func() {
		select {
		case <-e.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	e.setLeader(false, time.Time{})
	failures := 0
	for ctx.Err() == nil {
		won, err := e.term(ctx)
		if ctx.Err() != nil {
			break
		}
		if won {
			failures = 0
		}
		failures++
		backoff := retry.Backoff(failures, 100*time.Millisecond, 5*time.Second, nil)
		if err != nil {
			e.opts.Logger.Warn("election: etcd session failed; retrying", "key", e.opts.Key, "err", err, "backoff", backoff)
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
	}
	e.setLeader(false, time.Time{})
	if parent.Err() == nil {
		// Resigned: no longer a candidate, but keep following the master
		// so that a draining server redirects to its successor.
		e.follow(parent)
	}
	return nil
}

// follow reports the master's address until ctx ends, without campaigning.
// Observe needs a session; this one holds no candidacy.
func (e *etcdElection) follow(ctx context.Context) {
	for ctx.Err() == nil {
		sess, err := concurrency.NewSession(e.cli, concurrency.WithTTL(e.ttlSeconds()), concurrency.WithContext(ctx))
		if err == nil {
			e.observe(ctx, concurrency.NewElection(sess, e.opts.Key))
			rctx, rcancel := context.WithTimeout(e.cli.Ctx(), time.Second) // closing the client ends it too
			_, _ = e.cli.Revoke(rctx, sess.Lease())
			rcancel()
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// term runs one etcd session: campaign, be master until the session ends,
// and report non-master when it does. It reports whether it won.
func (e *etcdElection) term(ctx context.Context) (won bool, err error) {
	sess, err := concurrency.NewSession(e.cli, concurrency.WithTTL(e.ttlSeconds()), concurrency.WithContext(ctx))
	if err != nil {
		return false, fmt.Errorf("new session: %w", err)
	}
	el := concurrency.NewElection(sess, e.opts.Key)
	e.mu.Lock()
	e.session = sess
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		e.session = nil
		e.mu.Unlock()
		// Revoke the lease if the session may still live (Run's ctx ended
		// without Resign, or campaigning failed), so that no stale
		// candidacy blocks the others. Bounded: etcd may be gone.
		rctx, rcancel := context.WithTimeout(e.cli.Ctx(), time.Second) // closing the client ends it too
		_, _ = e.cli.Revoke(rctx, sess.Lease())
		rcancel()
	}()

	tctx, tcancel := context.WithCancel(ctx)
	defer tcancel()
	go func() {
		select {
		case <-sess.Done():
			tcancel()
		case <-tctx.Done():
		}
	}()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer tcancel()
	wg.Add(1)
	go func() {
		defer wg.Done()
		e.observe(tctx, el)
	}()

	if err := el.Campaign(tctx, e.opts.Address); err != nil {
		return false, fmt.Errorf("campaign: %w", err)
	}
	var endBy time.Time
	if e.opts.LongestLease != nil {
		if endBy, err = e.readHorizon(tctx, el); err != nil {
			return false, fmt.Errorf("lease horizon: %w", err)
		}
	}
	e.lh.open(&horizonTerm{term: tctx, el: el, endBy: endBy, turn: make(chan struct{}, 1)})
	defer e.lh.open(nil)
	e.opts.Logger.Info("election: won mastership", "key", e.opts.Key, "addr", e.opts.Address, "previous_leases_end_by", endBy)
	e.setLeader(true, endBy)
	select {
	case <-sess.Done():
		e.setLeader(false, time.Time{})
		e.opts.Logger.Warn("election: etcd session expired; mastership lost", "key", e.opts.Key)
		return true, errors.New("session expired")
	case <-ctx.Done():
		e.setLeader(false, time.Time{})
		return true, nil
	}
}

// readHorizon reads, as this master's term begins, when the previous
// master's leases end (Status.LeasesEndBy) from the lease horizon it kept.
// When no master of this node has kept one (KEY.horizon-kept is absent),
// the end is unknown (zero): this master learns for a full learning
// period, and it writes a horizon that covers whatever an unknown
// predecessor granted (KEY.leases on an etcd lease of HorizonTTL, not
// renewed, and KEY.horizon-kept), so that a successor elected before that
// ends learns as long. Otherwise it writes nothing: the horizon it read
// lapses by itself, and this master keeps one only once it grants
// something (KeepHorizon). Errors: etcd's, before this master may grant
// anything.
func (e *etcdElection) readHorizon(ctx context.Context, el *concurrency.Election) (time.Time, error) {
	horizon, kept := e.opts.Key+".leases", e.opts.Key+".horizon-kept"
	resp, err := e.cli.Txn(ctx).Then(clientv3.OpGet(horizon), clientv3.OpGet(kept)).Commit()
	if err != nil {
		return time.Time{}, err
	}
	now := time.Now()
	hr, kr := resp.Responses[0].GetResponseRange(), resp.Responses[1].GetResponseRange()
	switch {
	case len(hr.Kvs) > 0:
		ttl, err := e.cli.TimeToLive(ctx, clientv3.LeaseID(hr.Kvs[0].Lease))
		if err != nil {
			return time.Time{}, err
		}
		// TTL is whole seconds left (rounded down), -1 once expired.
		return now.Add(time.Duration(max(ttl.TTL+1, 0)) * time.Second), nil
	case len(kr.Kvs) > 0:
		return now, nil // kept, and lapsed: every lease has ended
	}
	if _, err := e.putHorizon(ctx, el, HorizonTTL(e.opts.LongestLease(), e.opts.TTL)); err != nil {
		return time.Time{}, err
	}
	return time.Time{}, nil
}

// putHorizon puts KEY.leases on a new etcd lease of ttl, and
// KEY.horizon-kept, and returns the etcd lease, if el's campaign still
// holds mastership: a successor reads the horizon only after it has won,
// so after this master's campaign key is gone, and a put that etcd
// ordered after that would be a horizon the successor never saw. Errors:
// etcd's, or errNotMaster.
func (e *etcdElection) putHorizon(ctx context.Context, el *concurrency.Election, ttl time.Duration) (clientv3.LeaseID, error) {
	g, err := e.cli.Grant(ctx, int64(ttl/time.Second))
	if err != nil {
		return 0, err
	}
	resp, err := e.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(el.Key()), "=", el.Rev())).Then(
		clientv3.OpPut(e.opts.Key+".leases", e.opts.Address, clientv3.WithLease(g.ID)),
		clientv3.OpPut(e.opts.Key+".horizon-kept", "1"),
	).Commit()
	if err == nil && !resp.Succeeded {
		err = errNotMaster
	}
	return g.ID, err
}

// errNotMaster: this task's campaign does not hold mastership.
var errNotMaster = errors.New("election: not the master")

// KeepHorizon implements Horizon: it keeps the election's LeaseHorizon
// (EtcdOptions.Horizon, or its own), or returns nil at once without
// EtcdOptions.LongestLease.
func (e *etcdElection) KeepHorizon(ctx context.Context) error {
	if e.opts.LongestLease == nil {
		return nil
	}
	return e.lh.KeepHorizon(ctx)
}

// KeepHorizon keeps the horizon (Horizon): the first call of a term puts
// this master's horizon, KEY.leases on an etcd lease of HorizonTTL (at
// least what remained of the previous master's), renewed every third of
// the session TTL until the term ends and never revoked, so that it lapses
// no sooner than any lease this master grants; a longer longest lease (a
// new configuration) moves the key to a lease of the longer TTL. Later
// calls in the term return nil at once; concurrent first calls wait, until
// their ctx ends, for the one that puts it. Errors: etcd's (ctx bounds the
// put), or that this task is not the master (no term is open, or its
// campaign key is gone: the put is conditional on it).
func (lh *LeaseHorizon) KeepHorizon(ctx context.Context) error {
	lh.mu.Lock()
	e, h := lh.e, lh.term
	lh.mu.Unlock()
	if h == nil {
		return errNotMaster
	}
	select {
	case h.turn <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-h.turn }()
	if h.kept {
		return nil
	}
	if h.term.Err() != nil {
		return errors.New("election: the term has ended")
	}
	ttl := HorizonTTL(e.opts.LongestLease(), e.opts.TTL)
	if left := time.Until(h.endBy); left > ttl {
		ttl = (left + time.Second - 1).Truncate(time.Second)
	}
	id, err := e.putHorizon(ctx, h.el, ttl)
	if err != nil {
		return err
	}
	h.kept = true
	go refresh.Every(h.term, max(e.opts.TTL/3, 100*time.Millisecond), func(ctx context.Context) {
		if longer := HorizonTTL(e.opts.LongestLease(), e.opts.TTL); longer > ttl {
			if nid, err := e.putHorizon(ctx, h.el, longer); err == nil {
				id, ttl = nid, longer
			}
		}
		if _, err := e.cli.KeepAliveOnce(ctx, id); err != nil && ctx.Err() == nil {
			e.opts.Logger.Debug("election: lease horizon renewal failed", "key", e.opts.Key+".leases", "err", err)
		}
	})
	return nil
}

// observe follows the master's address until ctx ends, restarting Observe
// (whose channel closes on any etcd error) with a short pause.
func (e *etcdElection) observe(ctx context.Context, el *concurrency.Election) {
	for ctx.Err() == nil {
		for resp := range el.Observe(ctx) {
			if len(resp.Kvs) > 0 {
				e.observed(string(resp.Kvs[0].Value))
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (e *etcdElection) Resign(ctx context.Context) error {
	e.once.Do(func() { close(e.stop) })
	e.mu.Lock()
	sess := e.session
	e.mu.Unlock()
	if sess == nil {
		return nil
	}
	// Revoking the session's lease deletes this task's candidacy key, as
	// Election.Resign would, and also ends a campaign still waiting.
	// Run's ending may have revoked it first: not found means done.
	if _, err := e.cli.Revoke(ctx, sess.Lease()); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return fmt.Errorf("election: resign: %w", err)
	}
	return nil
}
