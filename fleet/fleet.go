// Package fleet is the membership of the Sluice servers that share
// copy-limited resources through one Redis: each server is a member for
// as long as its etcd session lives, its epoch is that session's lease,
// and the fleet's leader (elected with package election) buries the
// epochs whose session ended — subtracting the dead server's contributions
// from the shared copy log and fencing it — so that a crashed server's
// copies come back within its session TTL.
//
// A member whose own session ends stops serving holds at once (its engine
// is fenced: every session operation answers Unavailable), because the
// leader is about to subtract them; it then joins again under a new epoch.
//
// A leader that starts (a lone first server after a restart of the whole
// fleet, or a successor) reconciles rather than wipes: it buries every
// epoch found in Redis whose member is not in etcd, and only those. A wipe
// would also erase the contributions of live servers whose membership it
// has not seen yet; burying exactly the dead epochs is exact, and until it
// is done stale counts can only make the limits stricter, never grant more
// than the limits.
//
// Each member also tells its copy log the epochs of the fleet's members
// (Log.SetMembers, followed with an etcd watch): a resource whose record
// Redis lost may hide their holds, so the log learns before it grants
// again, until each of those members has written its holds back (at most
// limits/redis.LearningPeriod; a member that dies meanwhile is waited for
// until then), which a lone server that holds nothing of the resource
// does not need.
//
// Source: charon-paper.md, section 4.3.2 (server failures: a leader
// removes a failed server's contributions; a server that loses its
// session resigns); docs/charon.md, "The fleet".
package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/sluice-rl/sluice/election"
	"github.com/sluice-rl/sluice/internal/retry"
	"github.com/sluice-rl/sluice/limits/copies"
)

// Log is the shared copy log as the fleet uses it
// (limits/redis.CopyLog).
type Log interface {
	// SetEpoch makes epoch this server's ("" while it has none: writes
	// fail as fenced).
	SetEpoch(epoch string)
	// Bury subtracts epoch's contributions and fences it; idempotent. It
	// returns what it subtracted per resource.
	Bury(ctx context.Context, epoch string) (map[string]int64, error)
	// Epochs lists the epochs with contributions.
	Epochs(ctx context.Context) ([]string, error)
	// SetMembers tells the log the epochs of the fleet's members now
	// (nil: unknown), which decides whether a lost record of a resource
	// may hide another server's holds, and whose holds its learning
	// period waits for.
	SetMembers(epochs []string)
}

// Engine is the copies engine as the fleet uses it (copies.Engine).
type Engine interface {
	Fence() int
	Unfence()
}

// Options configure a member.
type Options struct {
	// Prefix is the fleet's etcd key prefix ("/sluice/fleet" if empty):
	// members under Prefix/members/, the leader's election under
	// Prefix/leader.
	Prefix string
	// TTL is the etcd session TTL of the membership (whole seconds, at
	// least 1 s; 0: 10 s): a crashed server's copies come back this long
	// after its last keep-alive, plus the leader's reaction.
	TTL time.Duration
	// Address is this server's advertised address (the member's value and
	// the election candidate's).
	Address string
	// Logger receives the fleet's logs (nil: slog.Default()).
	Logger *slog.Logger
	// OnBury, if set, is called after every burial the leader made, with
	// the epoch and what was subtracted (for metrics and tests).
	OnBury func(epoch string, subtracted map[string]int64)
}

// Status is a member's view of the fleet, for a status page.
type Status struct {
	// Epoch is this server's epoch ("" while it has none: fenced).
	Epoch string
	// Leader is true while this server is the fleet's leader.
	Leader bool
	// Buried counts the epochs this server buried as leader.
	Buried int
}

// Member is one server's membership. Its methods are safe for concurrent
// use.
type Member struct {
	cli  *clientv3.Client
	log  Log
	eng  Engine
	opts Options

	mu    sync.Mutex
	st    Status
	homes map[string]string // epoch → address (Home's cache)
}

// New returns a member of the fleet on cli (owned by the caller), for a
// server whose copy log is log and whose engine is eng. The engine is
// fenced until Run has an epoch. Errors: an empty Address.
func New(cli *clientv3.Client, log Log, eng Engine, opts Options) (*Member, error) {
	if opts.Address == "" {
		return nil, fmt.Errorf("fleet: empty address")
	}
	if opts.Prefix == "" {
		opts.Prefix = "/sluice/fleet"
	}
	opts.Prefix = strings.TrimSuffix(opts.Prefix, "/")
	if opts.TTL <= 0 {
		opts.TTL = 10 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	eng.Fence()
	log.SetEpoch("")
	return &Member{cli: cli, log: log, eng: eng, opts: opts, homes: map[string]string{}}, nil
}

// ErrNoHome is returned by Home for a session whose server is no longer
// in the fleet (it left or crashed: the session and its holds are gone).
var ErrNoHome = errors.New("fleet: the session's server is no longer in the fleet")

// Home returns the advertised address of the server whose memory holds
// session id (named EPOCH-ID by its engine: copies.SessionEpoch), or here
// true when it is this server (or the id names no epoch). It reads the
// epoch's member key in etcd (cached while the epoch lives); ErrNoHome
// when there is none. Safe for concurrent use.
func (m *Member) Home(ctx context.Context, id string) (addr string, here bool, err error) {
	epoch := copies.SessionEpoch(id)
	m.mu.Lock()
	mine := m.st.Epoch
	addr, cached := m.homes[epoch]
	m.mu.Unlock()
	if epoch == "" || epoch == mine {
		return "", true, nil
	}
	if cached {
		return addr, false, nil
	}
	resp, err := m.cli.Get(ctx, m.members()+epoch)
	if err != nil {
		return "", false, fmt.Errorf("fleet: finding the server of epoch %s: %w", epoch, err)
	}
	if len(resp.Kvs) == 0 {
		return "", false, fmt.Errorf("%w (epoch %s)", ErrNoHome, epoch)
	}
	addr = string(resp.Kvs[0].Value)
	m.mu.Lock()
	if len(m.homes) >= maxHomes {
		clear(m.homes)
	}
	m.homes[epoch] = addr
	m.mu.Unlock()
	return addr, false, nil
}

// Forget drops the cached address of session id's epoch (its server did
// not answer: the next Home asks etcd again).
func (m *Member) Forget(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.homes, copies.SessionEpoch(id))
}

// maxHomes bounds Home's cache of epochs' addresses.
const maxHomes = 1024

// Status returns the member's status now.
func (m *Member) Status() Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.st
}

func (m *Member) ttlSeconds() int { return max(1, int((m.opts.TTL+time.Second-1)/time.Second)) }

func (m *Member) members() string { return m.opts.Prefix + "/members/" }

// Run is the membership until ctx ends: join (a new etcd session, its
// lease the epoch, a member key under it), serve, and when the session
// ends fence the engine at once and join again, backing off while etcd is
// unreachable; meanwhile it campaigns to lead the fleet, and leads while
// it wins. When ctx ends it leaves: the engine is fenced and the session
// revoked, so the leader buries this epoch at once. It returns nil.
func (m *Member) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	el, err := election.Etcd(m.cli, election.EtcdOptions{Key: m.opts.Prefix + "/leader", Address: m.opts.Address, TTL: m.opts.TTL, Logger: m.opts.Logger})
	if err != nil {
		return err
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		m.campaign(ctx, el)
	}()
	m.retrying(ctx, "membership", m.term)
	return nil
}

// retrying runs turn until ctx ends: again at once after a turn that
// returned nil, after a backoff (100 ms doubling to 5 s, jittered) after
// each failure in a row, logged as what failed.
func (m *Member) retrying(ctx context.Context, what string, turn func(context.Context) error) {
	failures := 0
	for ctx.Err() == nil {
		err := turn(ctx)
		if err == nil || ctx.Err() != nil {
			failures = 0
			continue
		}
		failures++
		backoff := retry.Backoff(failures, 100*time.Millisecond, 5*time.Second, nil)
		m.opts.Logger.Warn("fleet: "+what+" failed; retrying", "err", err, "backoff", backoff)
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
	}
}

// term is one membership: one etcd session, one epoch.
func (m *Member) term(ctx context.Context) error {
	sess, err := concurrency.NewSession(m.cli, concurrency.WithTTL(m.ttlSeconds()), concurrency.WithContext(ctx))
	if err != nil {
		return fmt.Errorf("new session: %w", err)
	}
	epoch := strconv.FormatInt(int64(sess.Lease()), 16)
	defer func() {
		m.eng.Fence()
		m.log.SetEpoch("")
		m.set(func(st *Status) { st.Epoch = "" })
		rctx, cancel := context.WithTimeout(m.cli.Ctx(), time.Second) // etcd may be gone
		_, _ = m.cli.Revoke(rctx, sess.Lease())
		cancel()
	}()
	// The member key first: an epoch with contributions in Redis always
	// has had its key in etcd (the leader relies on it).
	if _, err := m.cli.Put(ctx, m.members()+epoch, m.opts.Address, clientv3.WithLease(sess.Lease())); err != nil {
		return fmt.Errorf("member key: %w", err)
	}
	// The peers before the first write: a lone server's first reserve on
	// a fresh Redis needs no learning period.
	members, rev, err := m.readPeers(ctx)
	if err != nil {
		return err
	}
	pctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		m.peers(pctx, members, rev)
	}()
	defer wg.Wait()
	defer stop()
	m.log.SetEpoch(epoch)
	m.eng.Unfence()
	m.set(func(st *Status) { st.Epoch = epoch })
	m.opts.Logger.Info("fleet: joined", "epoch", epoch, "ttl", m.opts.TTL)
	select {
	case <-sess.Done():
		m.opts.Logger.Warn("fleet: etcd session ended: holds dropped, rejoining under a new epoch", "epoch", epoch)
		return fmt.Errorf("session of epoch %s ended", epoch)
	case <-ctx.Done():
		return nil
	}
}

// peers keeps the log's view of the fleet's members (Log.SetMembers)
// until ctx ends: it follows members, read at revision rev, with a watch,
// and reads them again when the watch ends (backing off while the read
// fails); unknown (nil) while etcd cannot say, and after ctx ends.
func (m *Member) peers(ctx context.Context, members map[string]bool, rev int64) {
	defer m.log.SetMembers(nil)
	m.retrying(ctx, "following the members", func(ctx context.Context) error {
		if members == nil {
			var err error
			if members, rev, err = m.readPeers(ctx); err != nil {
				m.log.SetMembers(nil)
				return err
			}
		}
		err := m.followPeers(ctx, members, rev)
		members = nil
		m.log.SetMembers(nil)
		if ctx.Err() == nil { // read again at once: a failing read backs off
			m.opts.Logger.Warn("fleet: the watch of the members ended; reading them again", "err", err)
		}
		return nil
	})
}

// readPeers reads the fleet's members, tells the log (setMembers), and
// returns the members' keys and the etcd revision read.
func (m *Member) readPeers(ctx context.Context) (map[string]bool, int64, error) {
	resp, err := m.cli.Get(ctx, m.members(), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, 0, fmt.Errorf("members: %w", err)
	}
	members := map[string]bool{}
	for _, kv := range resp.Kvs {
		members[string(kv.Key)] = true
	}
	m.setMembers(members)
	return members, resp.Header.Revision, nil
}

// setMembers tells the log the epochs of members (their keys).
func (m *Member) setMembers(members map[string]bool) {
	epochs := make([]string, 0, len(members))
	for k := range members {
		epochs = append(epochs, strings.TrimPrefix(k, m.members()))
	}
	slices.Sort(epochs)
	m.log.SetMembers(epochs)
}

// followPeers follows members, read at revision rev, with a watch,
// telling the log at each change, until the watch ends.
func (m *Member) followPeers(ctx context.Context, members map[string]bool, rev int64) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for wr := range m.cli.Watch(wctx, m.members(), clientv3.WithPrefix(), clientv3.WithRev(rev+1), clientv3.WithKeysOnly()) {
		if err := wr.Err(); err != nil {
			return fmt.Errorf("watch: %w", err)
		}
		for _, ev := range wr.Events {
			if ev.Type == clientv3.EventTypeDelete {
				delete(members, string(ev.Kv.Key))
			} else {
				members[string(ev.Kv.Key)] = true
			}
		}
		m.setMembers(members)
	}
	return errors.New("watch closed")
}

func (m *Member) set(f func(*Status)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f(&m.st)
}

// campaign runs the election and leads while this server wins it.
func (m *Member) campaign(ctx context.Context, el election.Election) {
	var mu sync.Mutex
	var stop context.CancelFunc
	var wg sync.WaitGroup
	_ = el.Run(ctx, func(s election.Status) {
		mu.Lock()
		defer mu.Unlock()
		if s.IsMaster && stop == nil {
			lctx, cancel := context.WithCancel(ctx)
			stop = cancel
			wg.Add(1)
			go func() {
				defer wg.Done()
				m.lead(lctx)
			}()
		} else if !s.IsMaster && stop != nil {
			stop()
			stop = nil
		}
		m.set(func(st *Status) { st.Leader = s.IsMaster })
	})
	mu.Lock()
	if stop != nil {
		stop()
	}
	mu.Unlock()
	wg.Wait()
	m.set(func(st *Status) { st.Leader = false })
}

// lead buries dead epochs until ctx ends: at once every epoch in Redis
// without a member key, then each member whose key is deleted (its
// session ended), and again every TTL in case a watch missed one.
func (m *Member) lead(ctx context.Context) {
	m.opts.Logger.Info("fleet: leading")
	for ctx.Err() == nil {
		rev, err := m.reconcile(ctx)
		if err == nil {
			err = m.watch(ctx, rev)
		}
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			m.opts.Logger.Warn("fleet: leader pass failed; retrying", "err", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// reconcile buries every epoch Redis holds contributions of whose member
// key is not in etcd. Redis is read first: an epoch there had its key put
// before, so a member that joins meanwhile is seen alive by the later
// read of etcd. It returns the etcd revision it read.
func (m *Member) reconcile(ctx context.Context) (int64, error) {
	epochs, err := m.log.Epochs(ctx)
	if err != nil {
		return 0, err
	}
	resp, err := m.cli.Get(ctx, m.members(), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return 0, fmt.Errorf("members: %w", err)
	}
	live := map[string]bool{}
	for _, kv := range resp.Kvs {
		live[strings.TrimPrefix(string(kv.Key), m.members())] = true
	}
	for _, e := range epochs {
		if !live[e] {
			if err := m.bury(ctx, e); err != nil {
				return 0, err
			}
		}
	}
	return resp.Header.Revision, nil
}

// watch buries each member whose key is deleted after revision rev, for
// one TTL (then the caller reconciles again).
func (m *Member) watch(ctx context.Context, rev int64) error {
	wctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(ctx), m.opts.TTL)
	defer cancel()
	for resp := range m.cli.Watch(wctx, m.members(), clientv3.WithPrefix(), clientv3.WithRev(rev+1), clientv3.WithFilterPut()) {
		if err := resp.Err(); err != nil {
			return fmt.Errorf("watch: %w", err)
		}
		for _, ev := range resp.Events {
			if err := m.bury(ctx, strings.TrimPrefix(string(ev.Kv.Key), m.members())); err != nil {
				return err
			}
		}
	}
	return nil
}

// bury buries one epoch.
func (m *Member) bury(ctx context.Context, epoch string) error {
	got, err := m.log.Bury(ctx, epoch)
	if err != nil {
		return fmt.Errorf("bury %s: %w", epoch, err)
	}
	m.set(func(st *Status) { st.Buried++ })
	var total int64
	for _, n := range got {
		total += n
	}
	m.opts.Logger.Info("fleet: buried a dead server's epoch", "epoch", epoch, "copies", total, "resources", slices.Sorted(maps.Keys(got)))
	if m.opts.OnBury != nil {
		m.opts.OnBury(epoch, got)
	}
	return nil
}
