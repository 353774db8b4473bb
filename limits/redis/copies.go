package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"

	"github.com/sluice-rl/sluice/limits/copies"
)

var (
	//go:embed copies_reserve.lua
	copiesReserveLua string
	//go:embed copies_move.lua
	copiesMoveLua string
	//go:embed copies_restore.lua
	copiesRestoreLua string
	//go:embed copies_learn.lua
	copiesLearnLua string

	copiesReserveScript = newScript("copies_reserve", copiesReserveLua)
	copiesMoveScript    = newScript("copies_move", copiesMoveLua)
	copiesRestoreScript = newScript("copies_restore", copiesRestoreLua)
	copiesLearnScript   = newScript("copies_learn", copiesLearnLua)
	// registerScript adds a resource to a server's set of resources,
	// unless the server is fenced (KEYS[1] its dead marker, KEYS[2] the
	// set; ARGV[1] the escaped resource): -1 fenced, else 1.
	registerScript = newScript("copies_register", `
if redis.call('EXISTS', KEYS[1]) == 1 then return -1 end
redis.call('SADD', KEYS[2], ARGV[1])
return 1`)
	// buryScript marks a server dead and returns its resources (KEYS[1]
	// its dead marker, KEYS[2] its set of resources; ARGV[1] the marker's
	// ttl in ms).
	buryScript = newScript("copies_bury", `
redis.call('SET', KEYS[1], '1', 'PX', ARGV[1])
return redis.call('SMEMBERS', KEYS[2])`)
)

// FenceTTL is how long Redis remembers that a server's epoch ended, so
// that the server cannot write under it again: 7 days, far beyond any
// partition a server survives without noticing that its etcd session
// ended.
const FenceTTL = 7 * 24 * time.Hour

// LearningPeriod is the longest a resource's reserves are refused
// (copies.ErrLearning) once a CopyLog finds that Redis has no record of
// the resource (restarted empty, FLUSHALL, a failover that lost writes,
// or a new fleet: Redis cannot tell) while servers may hold copies of it:
// 3 s, time for every live server to find its breaker closed again (a
// probe a second), notice the loss and write its holds back (a reconcile
// a second: server/sessions), with a second to spare. The period ends
// earlier, as soon as every member of the fleet live when it started
// (SetMembers) has written its holds back (Restore) or said it holds none
// (Learn): on a new fleet, as soon as each server's first Learn ran. A
// member that dies meanwhile never does, and the period runs out. Without
// it, the first reserves after the loss see counts of zero and grant what
// the live holds already use (measured: 10 holds against a domain limit
// of 8 after a Redis restart; see docs/accuracy.md). A server that cannot
// reach Redis for longer than the period while Redis loses its data has
// its holds written back late, and uncounted meanwhile.
//
// Source: doorman-design.md, "learning mode"; docs/accuracy.md,
// "Learning mode for copies"; docs/charon.md, "Readiness".
const LearningPeriod = 3 * time.Second

// CopyLog is a copies.Log on Redis or Redis Cluster: the copy log of
// copy-limited resources shared by every Sluice server using the same
// Redis, each count the sum of per-server contributions stored beside it,
// and the staged transfers. See the package documentation ("Copy log")
// for the keys and the fencing.
//
// A server's contributions are made under its epoch (SetEpoch: its fleet
// membership, an etcd lease), and Bury, run by the fleet's leader when an
// epoch ends, subtracts them and fences the epoch: every later write under
// it fails with copies.ErrFenced.
//
// Every method is safe for concurrent use, and copies.Engine calls them
// concurrently (outside its own lock). Errors wrap copies.ErrUnavailable (Redis unreachable, a
// timeout) or copies.ErrFenced.
//
// The zero CopyLog is not usable: use NewCopyLog.
type CopyLog struct {
	s       *Store
	c       redis.UniversalClient
	prefix  string
	timeout time.Duration

	mu         sync.Mutex
	epoch      string          // "" until SetEpoch
	registered map[string]bool // escaped resources in the epoch's set

	members  atomic.Pointer[[]string] // the fleet's members' epochs (SetMembers); nil unknown
	learning time.Duration            // LearningPeriod; this package's tests shorten it
}

var _ copies.Log = (*CopyLog)(nil)

// NewCopyLog returns a copy log on store's Redis, with its prefix: its
// scripts share the store's round trips, timeout and circuit breakers
// (so that while Redis is down its calls fail at once, wrapping
// ErrUnavailable and copies.ErrUnavailable), and its other commands are
// refused at once while the breaker of their node is open. Staged
// transfers' ttls run on Redis TIME, always.
// It has no epoch: every write fails with copies.ErrFenced until
// SetEpoch. It does not contact Redis.
func NewCopyLog(store *Store) *CopyLog {
	return &CopyLog{s: store, c: store.c, prefix: store.prefix, timeout: store.timeout, registered: map[string]bool{}, learning: LearningPeriod}
}

// SetMembers tells the log the epochs of the fleet's live members now
// (its own among them or not; nil: unknown, the state of a new CopyLog).
// A resource whose record Redis lost starts a learning period that waits
// for each other member to write its holds back (Restore, Learn), or runs
// out (LearningPeriod) when the members are unknown. When there is no
// other member and this server holds no copies of the resource, a missing
// record cannot hide anyone's holds: it is made again without a learning
// period (a resource's first reserve on a fresh Redis is not refused).
// Safe for concurrent use; the slice is not kept.
func (l *CopyLog) SetMembers(epochs []string) {
	if epochs == nil {
		l.members.Store(nil)
		return
	}
	c := slices.Clone(epochs)
	l.members.Store(&c)
}

// SetEpoch makes id (an etcd lease id in hex, unique per membership; any
// non-empty string of [A-Za-z0-9]) this server's epoch: its contributions
// are made under it from now on. A new epoch starts with no
// contributions: the caller drops every hold first (copies.Engine.Fence).
func (l *CopyLog) SetEpoch(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.epoch = id
	clear(l.registered)
}

// Epoch implements copies.Log: the epoch set by SetEpoch ("" before).
func (l *CopyLog) Epoch() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.epoch
}

// Key layout, prefix and names escaped (escape):
//
//	<prefix>{c<resource>}r              the resource's record: gone, Redis lost the counts
//	<prefix>{c<resource>}l              its learning marker: the epochs it waits for (set, ttl LearningPeriod)
//	<prefix>{c<resource>}n:a            global count (hash: '_' total, 's<epoch>' and 't<transfer>' contributions)
//	<prefix>{c<resource>}n:d:<domain>   a domain's count
//	<prefix>{c<resource>}n:g:<group>    a group's count
//	<prefix>{c<resource>}k:<epoch>      the count keys an epoch contributes to (set)
//	<prefix>{c<resource>}x:<epoch>      the epoch's fence in the resource's slot
//	<prefix>{c<resource>}t:<transfer>   a staged transfer (hash: n, dl, d, g, s)
//	<prefix>{s<epoch>}r                 the resources an epoch contributes to (set)
//	<prefix>{s<epoch>}x                 the epoch's dead marker
//	<prefix>{s}e                        the epochs that may have contributions (set)
//	<prefix>{t<transfer>}               a transfer's resource (string)
//	<prefix>{x}ts                       transfers by deadline, for expiry (sorted set)

func (l *CopyLog) tag(escRes string) string { return l.prefix + "{c" + escRes + "}" }

// counts returns the count keys of a hold: global, domain, groups.
func (l *CopyLog) counts(tag, domain string, groups []string) []string {
	keys := make([]string, 0, 2+len(groups))
	keys = append(keys, tag+"n:a", tag+"n:d:"+escape(domain))
	for _, g := range groups {
		keys = append(keys, tag+"n:g:"+escape(g))
	}
	return keys
}

// ctx returns the caller's ctx bounded by the log's timeout too: the
// context of the commands the log sends outside the store's batches (its
// scripts are bounded by the batches' round trips and the caller's ctx).
func (l *CopyLog) ctx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, l.timeout)
}

// guard refuses at once, for op, while the circuit breaker of the node
// holding key is open (the commands a CopyLog sends outside scripts do
// not queue behind a dead Redis).
func (l *CopyLog) guard(ctx context.Context, op, key string) error {
	b, err := l.s.batcherFor(ctx, key)
	if err != nil {
		return fail(op, unavailableError(err))
	}
	if gobreaker.State(b.state.Load()) == gobreaker.StateOpen {
		return fail(op, errBreakerOpen)
	}
	return nil
}

// fail wraps a Redis error in copies.ErrUnavailable.
func fail(op string, err error) error {
	return fmt.Errorf("limits/redis: copies %s: %w: %w", op, copies.ErrUnavailable, err)
}

var errFenced = fmt.Errorf("limits/redis: %w", copies.ErrFenced)

// current returns the epoch, and registers escRes in its set of
// resources the first time (so that Bury finds it), refusing when fenced.
func (l *CopyLog) current(ctx context.Context, escRes string, force bool) (string, error) {
	l.mu.Lock()
	epoch, done := l.epoch, l.registered[escRes]
	l.mu.Unlock()
	if epoch == "" {
		return "", errFenced
	}
	if done && !force {
		return epoch, nil
	}
	// The epoch goes into the set of epochs first, so that Epochs finds
	// every epoch that has a set of resources (and so contributions).
	if err := l.guard(ctx, "register", l.epochsKey()); err != nil {
		return "", err
	}
	actx, cancel := l.ctx(ctx)
	err := l.c.SAdd(actx, l.epochsKey(), epoch).Err()
	cancel()
	if err != nil {
		return "", fail("register", err)
	}
	s := l.prefix + "{s" + epoch + "}"
	cmd, err := l.s.eval(ctx, registerScript, []string{s + "x", s + "r"}, escRes)
	v := 0
	if err == nil {
		v, err = cmd.Int()
	}
	if err != nil {
		return "", fail("register", err)
	}
	if v < 0 {
		return "", errFenced
	}
	l.mu.Lock()
	if l.epoch == epoch {
		l.registered[escRes] = true
	}
	l.mu.Unlock()
	return epoch, nil
}

// Reserve implements copies.Log: one script over the resource's slot
// (sharing the store's round trips: ctx is as for Store.Take).
func (l *CopyLog) Reserve(ctx context.Context, q copies.LogReserve) (copies.LogCounts, error) {
	esc := escape(q.Resource)
	epoch, err := l.current(ctx, esc, false)
	if err != nil {
		return copies.LogCounts{}, err
	}
	tag := l.tag(esc)
	keys := append([]string{tag + "x:" + epoch, tag + "k:" + epoch, tag + "r", tag + "l"}, l.counts(tag, q.Domain, q.Groups)...)
	ignore := "0"
	if q.Ignore {
		ignore = "1"
	}
	args := make([]any, 0, 7+len(q.GroupLimits))
	args = append(args, "s"+epoch, q.Copies, q.Min, q.DomainLimit, q.GlobalLimit, ignore, int64(copies.MaxCopies))
	for _, g := range q.GroupLimits {
		args = append(args, g)
	}
	var v []int64
	for attempt := 0; ; attempt++ {
		cmd, err := l.s.eval(ctx, copiesReserveScript, keys, args...)
		if err == nil {
			v, err = cmd.Int64Slice()
		}
		if err != nil {
			return copies.LogCounts{}, fail("reserve", err)
		}
		if len(v) != 1 || v[0] != -3 {
			break
		}
		// The record is gone: make it again, starting the learning
		// period if servers may hold copies, and try again once.
		left, waiting, err := l.learn(ctx, esc, epoch, q.Holding)
		switch {
		case err != nil:
			return copies.LogCounts{}, err
		case left > 0:
			return copies.LogCounts{}, learningError(q.Resource, left, waiting)
		case attempt > 0:
			return copies.LogCounts{}, fail("reserve", errors.New("the resource's record vanished again (Redis losing data?)"))
		}
	}
	if len(v) == 1 && v[0] == -1 {
		return copies.LogCounts{}, errFenced
	}
	if len(v) == 3 && v[0] == -2 {
		return copies.LogCounts{}, learningError(q.Resource, time.Duration(v[1])*time.Millisecond, v[2])
	}
	if len(v) != 3+len(q.Groups) {
		return copies.LogCounts{}, fail("reserve", fmt.Errorf("reply of %d values", len(v)))
	}
	return copies.LogCounts{Granted: v[0], DomainHolds: v[1], GlobalHolds: v[2], GroupHolds: v[3:]}, nil
}

// learningError is Reserve's error while resource's learning period has
// left to run, waiting for waiting servers (0: unknown).
func learningError(resource string, left time.Duration, waiting int64) error {
	until := "at most"
	if waiting > 0 {
		until = fmt.Sprintf("at most, until %d more server(s) have written theirs back", waiting)
	}
	return fmt.Errorf("limits/redis: copies of %q: %w for %v more (%s): Redis has no record of their counts (lost, or never made) while servers may hold some, which they are writing back",
		resource, copies.ErrLearning, left, until)
}

// learn runs copies_learn.lua for the resource esc under epoch (see
// Learn): the learning period's time left and the servers it waits for.
func (l *CopyLog) learn(ctx context.Context, esc, epoch string, holding bool) (time.Duration, int64, error) {
	tag := l.tag(esc)
	h, known := "0", "0"
	if holding {
		h = "1"
	}
	args := []any{epoch, h, max(1, l.learning.Milliseconds())}
	if m := l.members.Load(); m != nil {
		known = "1"
		args = append(args, known)
		for _, e := range *m {
			args = append(args, e)
		}
	} else {
		args = append(args, known)
	}
	cmd, err := l.s.eval(ctx, copiesLearnScript, []string{tag + "x:" + epoch, tag + "r", tag + "l", tag + "k:" + epoch}, args...)
	var v []int64
	if err == nil {
		v, err = cmd.Int64Slice()
	}
	switch {
	case err != nil:
		return 0, 0, fail("learn", err)
	case len(v) == 1 && v[0] == -1:
		return 0, 0, errFenced
	case len(v) != 2:
		return 0, 0, fail("learn", fmt.Errorf("reply of %d values", len(v)))
	}
	return time.Duration(v[0]) * time.Millisecond, v[1], nil
}

// learnConcurrency bounds the scripts one Learn has in flight (they share
// the store's round trips).
const learnConcurrency = 64

// Learn implements copies.Log: one script (copies_learn.lua) per
// resource, in the resource's slot, run concurrently so that they share
// round trips. The resources need not be registered (a server that holds
// none of a resource writes nothing there). Errors: the first.
func (l *CopyLog) Learn(ctx context.Context, checks []copies.LearnCheck) ([]time.Duration, error) {
	l.mu.Lock()
	epoch := l.epoch
	l.mu.Unlock()
	if epoch == "" {
		return nil, errFenced
	}
	left := make([]time.Duration, len(checks))
	errs := make([]error, len(checks))
	sem := make(chan struct{}, learnConcurrency)
	var wg sync.WaitGroup
	for i, c := range checks {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			left[i], _, errs[i] = l.learn(ctx, escape(c.Resource), epoch, c.Holding)
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return left, nil
}

// moveArgs are copies_move.lua's arguments.
type moveArgs struct {
	src, dst       string
	copies         int64
	mode           string
	srcSet, dstSet bool
	ttl            time.Duration
	domain, groups string
	session        string
}

// move runs copies_move.lua: keys are the fence, source set, destination
// set, transfer hash, then the count keys. It returns the reply.
func (l *CopyLog) move(ctx context.Context, keys []string, a moveArgs) ([]any, error) {
	b := func(x bool) string {
		if x {
			return "1"
		}
		return "0"
	}
	cmd, err := l.s.eval(ctx, copiesMoveScript, keys, a.src, a.dst, a.copies, a.mode, b(a.srcSet), b(a.dstSet),
		a.ttl.Milliseconds(), a.domain, a.groups, a.session)
	var v []any
	if err == nil {
		v, err = cmd.Slice()
	}
	if err != nil {
		return nil, fail(a.mode, err)
	}
	if len(v) >= 1 && v[0] == int64(-1) {
		return nil, errFenced
	}
	return v, nil
}

// Release implements copies.Log: one script per hold.
func (l *CopyLog) Release(ctx context.Context, holds []copies.Hold) error {
	for _, h := range holds {
		esc := escape(h.Resource)
		epoch, err := l.current(ctx, esc, false)
		if err != nil {
			return err
		}
		tag := l.tag(esc)
		set := tag + "k:" + epoch
		keys := append([]string{tag + "x:" + epoch, set, set, set}, l.counts(tag, h.Domain, h.Groups)...)
		if _, err := l.move(ctx, keys, moveArgs{src: "s" + epoch, copies: h.Copies, mode: "release", srcSet: true}); err != nil {
			return err
		}
	}
	return nil
}

// sweepKey is the sorted set of transfers by deadline.
func (l *CopyLog) sweepKey() string { return l.prefix + "{x}ts" }

// Stage implements copies.Log: the transfer's indexes are written first
// (an index without its transfer is harmless), then one script moves the
// copies from this server's contribution to the transfer's.
func (l *CopyLog) Stage(ctx context.Context, id, session string, h copies.Hold, ttl time.Duration) (time.Time, error) {
	esc := escape(h.Resource)
	epoch, err := l.current(ctx, esc, false)
	if err != nil {
		return time.Time{}, err
	}
	tid := escape(id)
	if err := l.guard(ctx, "stage", l.prefix+"{t"+tid+"}"); err != nil {
		return time.Time{}, err
	}
	dctx, cancel := l.ctx(ctx)
	pipe := l.c.Pipeline()
	pipe.Set(dctx, l.prefix+"{t"+tid+"}", esc, ttl+time.Hour)
	pipe.ZAdd(dctx, l.sweepKey(), redis.Z{Score: float64(time.Now().Add(ttl).UnixMilli()), Member: esc + " " + tid})
	_, err = pipe.Exec(dctx)
	cancel()
	if err != nil {
		return time.Time{}, fail("stage", err)
	}
	tag := l.tag(esc)
	set := tag + "k:" + epoch
	keys := append([]string{tag + "x:" + epoch, set, set, tag + "t:" + tid}, l.counts(tag, h.Domain, h.Groups)...)
	v, err := l.move(ctx, keys, moveArgs{src: "s" + epoch, dst: "t" + tid, copies: h.Copies, mode: "stage", srcSet: true,
		ttl: ttl, domain: h.Domain, groups: strings.Join(h.Groups, ","), session: session})
	if err != nil {
		return time.Time{}, err
	}
	if v[0] != int64(1) {
		return time.Time{}, fail("stage", errors.New("this server's contributions are missing (Redis lost data?)"))
	}
	dl, _ := v[1].(int64)
	return time.UnixMilli(dl), nil
}

// transfer reads staged transfer tid (escaped): its resource (escaped),
// hold and staging session; ok false when there is none.
func (l *CopyLog) transfer(ctx context.Context, tid string) (esc string, h copies.Hold, session string, ok bool, err error) {
	if err := l.guard(ctx, "seize", l.prefix+"{t"+tid+"}"); err != nil {
		return "", h, "", false, err
	}
	dctx, cancel := l.ctx(ctx)
	esc, err = l.c.Get(dctx, l.prefix+"{t"+tid+"}").Result()
	cancel()
	if errors.Is(err, redis.Nil) {
		return "", h, "", false, nil
	}
	if err != nil {
		return "", h, "", false, fail("seize", err)
	}
	return l.transferIn(ctx, esc, tid)
}

// transferIn reads staged transfer tid of resource esc.
func (l *CopyLog) transferIn(ctx context.Context, esc, tid string) (string, copies.Hold, string, bool, error) {
	ctx, cancel := l.ctx(ctx)
	defer cancel()
	m, err := l.c.HGetAll(ctx, l.tag(esc)+"t:"+tid).Result()
	if err != nil {
		return "", copies.Hold{}, "", false, fail("transfer", err)
	}
	n, _ := strconv.ParseInt(m["n"], 10, 64)
	res, ok := unescape(esc)
	if len(m) == 0 || n <= 0 || !ok {
		return esc, copies.Hold{}, "", false, nil
	}
	h := copies.Hold{Resource: res, Domain: m["d"], Copies: n}
	if m["g"] != "" {
		h.Groups = strings.Split(m["g"], ",")
	}
	return esc, h, m["s"], true, nil
}

// Seize implements copies.Log: the transfer is read, then one script
// moves its copies to this server's contribution if it is still there,
// unexpired, with the same copies.
func (l *CopyLog) Seize(ctx context.Context, id string) (copies.Hold, error) {
	tid := escape(id)
	esc, h, _, ok, err := l.transfer(ctx, tid)
	if err != nil {
		return copies.Hold{}, err
	}
	unknown := fmt.Errorf("limits/redis: %w", copies.ErrUnknownTransfer)
	if !ok {
		return copies.Hold{}, unknown
	}
	epoch, err := l.current(ctx, esc, false)
	if err != nil {
		return copies.Hold{}, err
	}
	tag := l.tag(esc)
	set := tag + "k:" + epoch
	keys := append([]string{tag + "x:" + epoch, set, set, tag + "t:" + tid}, l.counts(tag, h.Domain, h.Groups)...)
	v, err := l.move(ctx, keys, moveArgs{src: "t" + tid, dst: "s" + epoch, copies: h.Copies, mode: "seize", dstSet: true})
	if err != nil {
		return copies.Hold{}, err
	}
	if v[0] != int64(1) {
		return copies.Hold{}, unknown
	}
	l.forget(ctx, esc, tid)
	return h, nil
}

// forget drops a finished transfer's indexes (best effort: an index left
// behind is dropped by the next sweep, or expires).
func (l *CopyLog) forget(ctx context.Context, esc, tid string) {
	ctx, cancel := l.ctx(ctx)
	defer cancel()
	pipe := l.c.Pipeline()
	pipe.Del(ctx, l.prefix+"{t"+tid+"}")
	pipe.ZRem(ctx, l.sweepKey(), esc+" "+tid)
	_, _ = pipe.Exec(ctx)
}

// sweepBatch is how many due transfers one ExpireTransfers call looks at.
const sweepBatch = 128

// ExpireTransfers implements copies.Log: it takes up to sweepBatch due
// transfers from the sorted set of deadlines and releases each with one
// script that checks, on Redis TIME, that it is still staged and expired
// (so that several servers sweeping at once release each once).
func (l *CopyLog) ExpireTransfers(ctx context.Context) ([]copies.Ended, error) {
	l.mu.Lock()
	epoch := l.epoch
	l.mu.Unlock()
	if epoch == "" {
		return nil, errFenced
	}
	if err := l.guard(ctx, "expire", l.sweepKey()); err != nil {
		return nil, err
	}
	dctx, cancel := l.ctx(ctx)
	due, err := l.c.ZRangeArgs(dctx, redis.ZRangeArgs{Key: l.sweepKey(), ByScore: true, Start: "-inf",
		Stop: strconv.FormatInt(time.Now().UnixMilli(), 10), Count: sweepBatch}).Result()
	cancel()
	if err != nil {
		return nil, fail("expire", err)
	}
	var out []copies.Ended
	for _, member := range due {
		esc, tid, ok := strings.Cut(member, " ")
		if !ok {
			dctx, cancel := l.ctx(ctx)
			_ = l.c.ZRem(dctx, l.sweepKey(), member).Err()
			cancel()
			continue
		}
		_, h, session, ok, err := l.transferIn(ctx, esc, tid)
		if err != nil {
			return out, err
		}
		if !ok {
			l.forget(ctx, esc, tid)
			continue
		}
		tag := l.tag(esc)
		fence := tag + "x:" + epoch
		keys := append([]string{fence, fence, fence, tag + "t:" + tid}, l.counts(tag, h.Domain, h.Groups)...)
		v, err := l.move(ctx, keys, moveArgs{src: "t" + tid, copies: h.Copies, mode: "expire"})
		if err != nil {
			return out, err
		}
		switch {
		case v[0] == int64(1):
			l.forget(ctx, esc, tid)
			id, _ := unescape(tid)
			out = append(out, copies.Ended{Session: session, Transfer: id, Reason: copies.Expired, Released: []copies.Hold{h}})
		case len(v) == 3 && v[1] == "early":
			dl, _ := v[2].(int64)
			dctx, cancel := l.ctx(ctx)
			_ = l.c.ZAdd(dctx, l.sweepKey(), redis.Z{Score: float64(dl), Member: member}).Err()
			cancel()
		default: // seized or gone meanwhile
			l.forget(ctx, esc, tid)
		}
	}
	return out, nil
}

// Restore implements copies.Log: it registers the resource again (Redis
// may have lost the set), reads the count keys this server contributes
// to, and one script sets each contribution to what holds add up to.
func (l *CopyLog) Restore(ctx context.Context, resource string, holds []copies.Hold) error {
	esc := escape(resource)
	epoch, err := l.current(ctx, esc, true)
	if err != nil {
		return err
	}
	tag := l.tag(esc)
	set := tag + "k:" + epoch
	if err := l.guard(ctx, "restore", set); err != nil {
		return err
	}
	dctx, cancel := l.ctx(ctx)
	have, err := l.c.SMembers(dctx, set).Result()
	cancel()
	if err != nil {
		return fail("restore", err)
	}
	want := map[string]int64{}
	for _, k := range have {
		if strings.HasPrefix(k, tag) {
			want[k] = 0
		}
	}
	for _, h := range holds {
		for _, k := range l.counts(tag, h.Domain, h.Groups) {
			want[k] += h.Copies
		}
	}
	keys := []string{tag + "x:" + epoch, set, tag + "r", tag + "l"}
	args := []any{"s" + epoch, epoch}
	for _, k := range slices.Sorted(maps.Keys(want)) {
		keys = append(keys, k)
		args = append(args, want[k])
	}
	for attempt := 0; ; attempt++ {
		cmd, err := l.s.eval(ctx, copiesRestoreScript, keys, args...)
		v := 0
		if err == nil {
			v, err = cmd.Int()
		}
		switch {
		case err != nil:
			return fail("restore", err)
		case v == -1:
			return errFenced
		case v != -3:
			return nil
		case attempt > 0:
			return fail("restore", errors.New("the resource's record vanished again (Redis losing data?)"))
		}
		// The record is gone: make it again (the learning period waits
		// for this server's restore too when it holds copies), then
		// write.
		if _, _, err := l.learn(ctx, esc, epoch, len(holds) > 0); err != nil {
			return err
		}
	}
}

// Lost implements copies.Log: a resource to which this server contributes
// has lost its record when the epoch's set of count keys is gone (one
// EXISTS each, pipelined). When the epoch's set of resources is gone too,
// the log forgets which resources it registered, so that each is
// registered again (for Bury) before its next write.
func (l *CopyLog) Lost(ctx context.Context, resources []string) ([]string, error) {
	l.mu.Lock()
	epoch := l.epoch
	l.mu.Unlock()
	if epoch == "" {
		return nil, errFenced
	}
	ctx, cancel := l.ctx(ctx)
	defer cancel()
	pipe := l.c.Pipeline()
	cmds := make([]*redis.IntCmd, len(resources))
	for i, r := range resources {
		key := l.tag(escape(r)) + "k:" + epoch
		if err := l.guard(ctx, "lost", key); err != nil {
			return nil, err
		}
		cmds[i] = pipe.Exists(ctx, key)
	}
	// The epoch's set of resources: gone, Redis lost it, and every
	// resource must be registered again before its next write.
	set := l.prefix + "{s" + epoch + "}r"
	if err := l.guard(ctx, "lost", set); err != nil {
		return nil, err
	}
	registered := pipe.Exists(ctx, set)
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fail("lost", err)
	}
	if registered.Val() == 0 {
		l.mu.Lock()
		if l.epoch == epoch {
			clear(l.registered)
		}
		l.mu.Unlock()
	}
	var lost []string
	for i, c := range cmds {
		if c.Val() == 0 {
			lost = append(lost, resources[i])
		}
	}
	return lost, nil
}

// Bury ends epoch: it marks it dead (for FenceTTL), then, in every
// resource it contributed to, fences it and subtracts its contributions
// from every count, and returns what it subtracted from each resource's
// global count (by resource name). Transfers the epoch staged stay staged (they belong to no
// server). The fleet's leader calls it when the epoch's etcd session
// ends; it is idempotent (burying twice subtracts once), and safe while
// the epoch's server still runs: from the fence on, its writes fail with
// copies.ErrFenced.
//
// Source: charon-paper.md, section 4.3.2 (the leader removes a failed
// server's contributions); docs/charon.md, "The fleet".
func (l *CopyLog) Bury(ctx context.Context, epoch string) (map[string]int64, error) {
	s := l.prefix + "{s" + epoch + "}"
	cmd, err := l.s.eval(ctx, buryScript, []string{s + "x", s + "r"}, FenceTTL.Milliseconds())
	var res []string
	if err == nil {
		res, err = cmd.StringSlice()
	}
	if err != nil {
		return nil, fail("bury", err)
	}
	out := map[string]int64{}
	for _, esc := range res {
		tag := l.tag(esc)
		fence, set := tag+"x:"+epoch, tag+"k:"+epoch
		keys := []string{fence, set, set, set}
		var before int64
		// Fence the epoch in the resource's slot, then subtract what it
		// contributes; keys it added between reading the set and the
		// fence are subtracted by the next round.
		for round := 0; round < 3; round++ {
			members, err := l.c.SMembers(ctx, set).Result()
			if err != nil {
				return out, fail("bury", err)
			}
			if round == 0 {
				before, _ = l.c.HGet(ctx, tag+"n:a", "s"+epoch).Int64()
			} else if len(members) == 0 {
				break
			}
			k := append(keys, members...)
			if _, err := l.move(ctx, k, moveArgs{src: "s" + epoch, mode: "fence", srcSet: true, ttl: FenceTTL}); err != nil {
				return out, err
			}
		}
		if r, ok := unescape(esc); ok {
			out[r] = before
		}
	}
	if err := l.c.Del(ctx, s+"r").Err(); err != nil {
		return out, fail("bury", err)
	}
	if err := l.c.SRem(ctx, l.epochsKey(), epoch).Err(); err != nil {
		return out, fail("bury", err)
	}
	return out, nil
}

// epochsKey is the set of the epochs that may have contributions: an
// epoch is added before its first resource is registered (current) and
// removed once Bury has subtracted them. Epochs reads it: one SMEMBERS,
// O(epochs), where a SCAN would cost O(keys) of the whole database.
func (l *CopyLog) epochsKey() string { return l.prefix + "{s}e" }

// Epochs returns every epoch that may hold contributions (one SMEMBERS of
// the set of epochs, never a SCAN: its cost does not grow with the
// database), sorted: the fleet's new leader buries those whose etcd
// session is gone. (Servers before 2026-11-27 kept no such set: their
// epochs are not listed. See docs/redis.md, "Upgrading".)
func (l *CopyLog) Epochs(ctx context.Context) ([]string, error) {
	if err := l.guard(ctx, "epochs", l.epochsKey()); err != nil {
		return nil, err
	}
	ctx, cancel := l.ctx(ctx)
	defer cancel()
	out, err := l.c.SMembers(ctx, l.epochsKey()).Result()
	if err != nil {
		return nil, fail("epochs", err)
	}
	slices.Sort(out)
	return out, nil
}
