package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-rl/sluice/internal/tracing"
	"github.com/sluice-rl/sluice/limits"
)

// DefaultPrefix is Options.Prefix's default.
const DefaultPrefix = "sluice:"

// MaxSpan is the longest span (the time an empty bucket takes to fill) and
// the longest wait the Redis store handles, in nanoseconds: 2⁵² ns, about
// 52 days. The script computes in IEEE doubles relative to now, exact below
// 2⁵³. Take returns ErrSpan for a bucket with a longer span; a request's
// maximum wait above it is lowered to it (a wait longer than 52 days is
// never granted).
const MaxSpan = 1 << 52

// ErrSpan is returned by Take for a bucket whose span exceeds MaxSpan.
var ErrSpan = errors.New("limits/redis: bucket takes longer than 2^52 ns (52 days) to fill")

// errTiers answers Take with a burst-tier Limit.
var errTiers = errors.New("limits/redis: Take on a limit with burst tiers (use TakeHits)")

//go:embed take.lua
var takeLua string

var takeScript = newScript("take", takeLua)

// Options configures a Store.
type Options struct {
	// Prefix starts every key ("": DefaultPrefix). It is escaped like a
	// name, so braces in it cannot make a hash tag.
	Prefix string
	// Timeout bounds each round trip to Redis (0: DefaultTimeout, 200
	// ms; see there why), and the breakers' probes' PINGs. A call's own
	// context (Take's ctx) may end it sooner for that call: the call
	// returns then, and a round trip whose callers all have earlier
	// deadlines ends at the latest of them (see batch.go); a call queued
	// behind a round trip in flight waits for it first, and fails with
	// it if Redis did not answer within Timeout: while Redis hangs, no
	// call waits longer than Timeout, and only the first BreakerFailures
	// round trips to a node wait at all before its breaker opens. A Redis
	// stall longer than Timeout counts as a failure; a round trip its
	// callers' deadlines cut short does not. The client must respect
	// context deadlines for them to bound a round trip that Redis does
	// not answer: go-redis's ContextTimeoutEnabled, or a ReadTimeout and
	// WriteTimeout no longer than Timeout (otherwise its own timeouts, 3 s
	// by default, apply). go-redis honours a deadline while it waits for
	// a reply, a cancellation only before it sends: a round trip whose
	// callers all left by cancellation still occupies the node's sender
	// until Redis answers or Timeout passes (its callers are gone). Its retries (MaxRetries, 3 by
	// default, with backoff) happen within a round trip: a client with
	// MaxRetries -1 and DialerRetries 1, as sluice server's, leaves them to
	// the breaker, so that a Redis that refuses connections fails calls in
	// microseconds (and no pipeline is sent twice).
	Timeout time.Duration
	// BreakerFailures consecutive round trips to a node that fail for want
	// of Redis open the node's circuit breaker (0: DefaultBreakerFailures,
	// 3): its calls then fail at once, with ErrUnavailable, until the
	// node's probe, a goroutine of the store off the request path, finds
	// Redis again with a PING every BreakerProbe (0: DefaultBreakerProbe,
	// 1 s) and closes the breaker. Close stops the probes.
	BreakerFailures int
	BreakerProbe    time.Duration
	// MaxBatch bounds the scripts sent in one round trip (0:
	// DefaultMaxBatch, 128; at most 65 534, which a larger value means:
	// the take script numbers a round trip's buckets in 16 bits).
	// Concurrent calls share round trips (see
	// batch.go): while one to a node is in flight, calls queue, and go out
	// together when it returns; no call waits for a timer.
	MaxBatch int
	// Observe, when set, is called after every round trip of scripts with
	// op "batch", its duration, and its error (nil, or one meaning Redis
	// could not answer): a hook for a latency histogram. It runs on the
	// caller's goroutine, before the batch's answers are handed out: keep
	// it fast.
	Observe func(op string, d time.Duration, err error)
	// TracerProvider, when set, makes spans of the calls of a traced
	// request and of the round trips carrying them (trace.go): nil, none,
	// at the cost of one comparison a call.
	TracerProvider trace.TracerProvider
	// Logger receives the store's rare messages: Redis refusing the
	// credentials or TLS, once per change, and accepting them again (nil:
	// slog.Default()).
	Logger *slog.Logger

	// callerTime makes the scripts use the now passed to Take instead of
	// Redis TIME: for this package's tests only (deterministic, virtual
	// time), which set it; servers sharing a Redis must not, since their
	// clocks may disagree. Key expiry (PEXPIRE) still runs on Redis's own
	// clock.
	callerTime bool
}

// Store is a limits.Store on Redis or Redis Cluster for token-bucket and
// burst-tier resources: see the package documentation for the key layout,
// the time source, expiry, round trips and failures. It is safe for concurrent use, by any number of
// processes sharing one Redis.
//
// The zero Store is not usable: use New (on a client of yours) or Open
// (on a client it makes), and Close when done (it stops the breakers'
// probes, and closes the client Open made).
type Store struct {
	c          redis.UniversalClient
	owned      redis.UniversalClient // the client Open made, closed by Close
	prefix     string
	callerTime bool
	timeout    time.Duration
	log        *slog.Logger

	// Batching and breaking (batch.go): one batcher for a single Redis,
	// one per master of a cluster.
	single         *batcher
	cluster        *redis.ClusterClient
	nodes          sync.Map // *redis.Client → *batcher
	maxBatch       int
	failuresToOpen uint32
	probe          time.Duration
	observe        func(op string, d time.Duration, err error)
	tracer         trace.Tracer // Options.TracerProvider's; nil: no spans
	stats

	// The breakers' probes (health.go's probeLoop): Close cancels
	// closing and waits for them.
	closing context.Context
	stop    context.CancelFunc
	probeMu sync.Mutex // orders startProbe's probeWG.Add before Close's Wait
	probeWG sync.WaitGroup
	running atomic.Int32 // probes running (for tests: one per open node at most)

	closeOnce sync.Once // closes owned
	closeErr  error

	args sync.Map // *limits.Limit → *limitArgs

	minGen atomic.Uint64          // Takes under an older Limit are stale
	change atomic.Pointer[change] // the last Reconfigure
}

// change is one Reconfigure: its generation and instant (known false:
// Redis did not tell its time; each bucket is rescaled at its next
// request).
type change struct {
	gen   uint64
	at    int64 // Unix ns
	known bool
}

// New returns a store on client (a *redis.Client, *redis.ClusterClient or
// any redis.UniversalClient). It does not contact Redis, and starts no
// goroutine until a breaker opens (see Close).
func New(client redis.UniversalClient, opts Options) *Store {
	p := opts.Prefix
	if p == "" {
		p = DefaultPrefix
	}
	s := &Store{c: client, prefix: escape(p), callerTime: opts.callerTime, timeout: opts.Timeout,
		maxBatch: opts.MaxBatch, failuresToOpen: uint32(max(opts.BreakerFailures, 0)), probe: opts.BreakerProbe,
		observe: opts.Observe, cluster: clusterOf(client), log: opts.Logger}
	if s.log == nil {
		s.log = slog.Default()
	}
	if opts.TracerProvider != nil {
		s.tracer = opts.TracerProvider.Tracer(tracing.ScopeName)
	}
	if s.timeout <= 0 {
		s.timeout = DefaultTimeout
	}
	if s.maxBatch <= 0 {
		s.maxBatch = DefaultMaxBatch
	}
	s.maxBatch = min(s.maxBatch, maxBatchLimit)
	if s.failuresToOpen == 0 {
		s.failuresToOpen = DefaultBreakerFailures
	}
	if s.probe <= 0 {
		s.probe = DefaultBreakerProbe
	}
	s.closing, s.stop = context.WithCancel(context.Background())
	if s.cluster == nil {
		addr := "redis"
		if rc, ok := client.(*redis.Client); ok {
			addr = rc.Options().Addr
		}
		s.single = s.newBatcher(client, addr)
	}
	return s
}

var _ limits.Store = (*Store)(nil)

// Close stops the probes of the store's open circuit breakers (their
// goroutines, cancelling a PING in flight) and waits for them to end.
// Ownership of the client: a store made by New does not close it (the
// caller owns it); the store still answers afterwards, but a breaker open
// then stays open: its calls fail with ErrUnavailable. A store made by
// Open owns its client and closes it then: its calls fail afterwards (a
// round trip in flight fails with the client). Close is idempotent and
// safe for concurrent use; it returns the error of closing the client
// (the first Close's), or nil.
func (s *Store) Close() error {
	s.probeMu.Lock()
	s.stop()
	s.probeMu.Unlock()
	s.probeWG.Wait()
	s.closeOnce.Do(func() {
		if s.owned != nil {
			s.closeErr = s.owned.Close()
		}
	})
	return s.closeErr
}

// Take implements limits.Store: one EVALSHA of the take script (EVAL when
// Redis does not have it yet), which reads Redis TIME (now is ignored,
// except in this package's own tests) and mirrors limits.Step exactly. A
// rejected request writes nothing: Snapshot.Rejections stays 0 and LastUsed is the
// last grant. A bucket whose stored parameters differ from l's is rescaled
// (limits.Rescale) at the instant of the last Reconfigure of l.Gen, or at
// now if this store has not seen it: Reconfigure is applied lazily.
// ErrStaleConfig is returned for an l older than the last Reconfigure on
// this Store (generations are per engine, so Redis keeps none).
//
// Concurrent Takes share round trips (Options.MaxBatch). When Redis cannot
// answer (Options.Timeout, the circuit breaker) the error wraps
// ErrUnavailable. ctx is the request's: a Take whose ctx is done before
// its round trip leaves is not sent (it takes no tokens), and one whose
// ctx ends while it waits returns at once (see batch.go); the error then
// wraps ctx.Err().
func (s *Store) Take(ctx context.Context, now int64, k limits.Key, l *limits.Limit, a limits.Ask) (limits.Outcome, error) {
	if l.Tiers != nil {
		return limits.Outcome{}, errTiers
	}
	if l.Gen < s.minGen.Load() {
		return limits.Outcome{}, limits.ErrStaleConfig
	}
	if l.Params.Span > MaxSpan {
		return limits.Outcome{}, ErrSpan
	}
	c := s.takeCall(now, k, l, a)
	err := s.run(ctx, c.key, c)
	var out limits.Outcome
	if err == nil {
		out, err = parseTake(c.res, l.Params)
	}
	putCall(c)
	return out, err
}

// takeCall returns Take's call (pooled: putCall it).
func (s *Store) takeCall(now int64, k limits.Key, l *limits.Limit, a limits.Ask) *call {
	la := s.limitArgs(l)
	c := getCall(takeScript)
	c.take, c.la = true, la
	c.member = escape(k.Domain)
	c.base, c.dynKey = la.base, la.dynKey
	if k.Resource != l.Resource { // not seen: Take's keys are l's resource's
		c.base = s.resourceKey(k.Resource)
		c.dynKey = s.dynKey(k.Resource)
	}
	c.key = c.base + "s:" + c.member
	c.tokens, c.min, c.maxWait = a.Tokens, a.Min, min(a.MaxWait, MaxSpan)
	c.nowNs, c.hasNow = 0, false
	if s.callerTime {
		c.nowNs, c.hasNow = now, true
	}
	c.at, c.hasAt = 0, false
	if ch := s.change.Load(); ch != nil && ch.gen == l.Gen && ch.known {
		c.at, c.hasAt = ch.at, true
	}
	c.dyn = la.dyn(k.Domain)
	return c
}

// limitArgs are the scripts' arguments that depend on the Limit only,
// made once per Limit (Take then boxes nothing): the take script's
// numbers of the Limit, packed (nums); the configuration a bucket under
// it stores, "size rate span dynamic kind name", for a static (config[0])
// and a dynamic bucket (config[1]); and
// for a burst-tier Limit, the tiers script's packed parameters (tp) and
// configuration (tierConfig, by dynamic flag likewise).
type limitArgs struct {
	base       string // resourceKey(l.Resource)
	dynKey     any    // base + "d"
	nums       []byte // the take script's numbers of l: gen, size, rate, span, max dynamic, max idle (ns)
	config     [2]string
	tp         string
	tierConfig [2]string
	l          *limits.Limit
}

// limitArgs returns l's cached arguments. Reconfigure drops the cache.
func (s *Store) limitArgs(l *limits.Limit) *limitArgs {
	if v, ok := s.args.Load(l); ok {
		return v.(*limitArgs)
	}
	p := l.Params
	base := s.resourceKey(l.Resource)
	rate := strconv.FormatFloat(p.Rate, 'g', -1, 64)
	la := &limitArgs{
		l: l, base: base, dynKey: base + "d",
		nums: appendDoubles(nil, float64(l.Gen), float64(p.Size), p.Rate, float64(p.Span), float64(l.MaxDynamic),
			float64(max(int64(l.Bucket.MaxIdle), 0))),
	}
	for i := range la.config {
		la.config[i] = fmt.Sprintf("%d %s %d %d %d %s", p.Size, rate, p.Span, i, int(l.Kind), l.Name)
	}
	if l.Tiers != nil {
		la.tp = packTierParams(l.Tiers)
		for i := range la.tierConfig {
			la.tierConfig[i] = tierConfig(dynArg[i].(string), int(l.Kind), l.Name, la.tp)
		}
	}
	v, _ := s.args.LoadOrStore(l, la)
	return v.(*limitArgs)
}

// dyn returns the scripts' dynamic flag for domain: 1 for a dynamic
// bucket of a resource that bounds them (max_dynamic_buckets > 0), which
// the scripts count in the resource's sorted set; else 0 (a resource with
// no bound keeps no count: one sorted-set write less per decision). It
// indexes config, tierConfig and dynArg.
func (la *limitArgs) dyn(domain string) int {
	if la.l.MaxDynamic > 0 && la.l.Dynamic(domain) {
		return 1
	}
	return 0
}

// dynArg holds the tiers script's dynamic argument ("0", "1") boxed once.
var dynArg = [2]any{"0", "1"}

// takeReply is the length of a take request's reply: four little-endian
// doubles; bucketHead the length of a token bucket's numbers, seven (see
// take.lua; the scripts of Reconfigure read them too).
const (
	takeReply  = 4 * 8
	bucketHead = 7 * 8
)

// The codes of a take request's reply (see take.lua).
const (
	takeGranted        = 0
	takeGrantedCreated = 1
	takeRejected       = 2
	takeTooManyBuckets = 3
)

// parseTake decodes a take request's reply (see take.lua): the tokens
// left come as the bucket's fill in ns, turned into tokens with
// limits.Level's arithmetic under p, so that they are the memory store's
// to the bit.
func parseTake(v string, p limits.Params) (limits.Outcome, error) {
	if len(v) != takeReply {
		return limits.Outcome{}, fmt.Errorf("limits/redis: take: reply of %d bytes", len(v))
	}
	code, n, t, fill := doubleAt(v, 0), doubleAt(v, 1), doubleAt(v, 2), doubleAt(v, 3)
	// limits.Level at now with Empty = now − fill.
	tokens := limits.Level(limits.State{Empty: -fill}, p, 0)
	switch code {
	case takeGranted, takeGrantedCreated:
		return limits.Outcome{Result: limits.Result{Granted: n, Wait: t, Tokens: tokens}, Created: code == takeGrantedCreated}, nil
	case takeRejected:
		return limits.Outcome{Result: limits.Result{RetryAfter: t, Tokens: tokens}}, nil
	case takeTooManyBuckets:
		return limits.Outcome{TooManyBuckets: true}, nil
	}
	return limits.Outcome{}, fmt.Errorf("limits/redis: take: reply code %d", code)
}

// Reap implements limits.Store: Redis expires the keys itself (a token
// bucket's one to four seconds after max(MaxIdle, the time until full),
// kept so by every grant; a burst-tier domain's once fresh), so Reap
// removes nothing and returns 0.
func (s *Store) Reap(context.Context, int64, func(limits.Removed)) (int, error) { return 0, nil }

// Reconfigure implements limits.Store, lazily: it reads Redis TIME
// (now in this package's tests) and records gen and that instant, so
// that each bucket is brought under its new Limit by the script of its
// next request, atomically, rescaled at that instant; from then on it
// answers ErrStaleConfig to Limits older than gen. It sends one command
// (TIME) whatever Redis holds, never SCAN or KEYS: a start or a reload
// costs the same with ten million keys as with ten. When Redis does not
// answer the TIME (away at start, or during a reload), the change is
// recorded all the same, without its instant: each bucket is then
// rescaled at its own next request, as for a Limit this store has not
// seen; Reconfigure does not fail for want of Redis, so a server starts
// and reloads while Redis is away. resolve and removed are not called. What a bucket becomes:
//
//   - new size or fill rate: rescaled by take.lua on its next request
//     (limits.Rescale at the instant recorded here), burst tiers by
//     tiers.lua (the one-second log and tiers by index);
//   - another algorithm (token bucket ↔ burst tiers): its next grant
//     starts it fresh under the new one, keeping its grants, and deletes
//     its key under the old one (the keys differ: a string, a hash);
//   - no bucket of its own any more (its configuration vanished, or its
//     domain falls to a shared bucket): no request touches it again, and
//     Redis expires it by its TTL (when it would be full again, plus one
//     to four seconds, or its MaxIdle; a dynamic bucket's place in the
//     resource's count ends then too). limits.Engine.Walk no longer shows
//     it. If the same key has a bucket again before then, it goes on from
//     what it stored (rescaled) rather than full, and no
//     EventBucketRemoved is reported for it.
//
// ctx and Options.Timeout bound the TIME. It returns no error.
func (s *Store) Reconfigure(ctx context.Context, now int64, gen uint64, _ func(limits.Key) *limits.Limit, _ func(limits.Removed)) error {
	known := true
	if !s.callerTime {
		tctx, cancel := context.WithTimeout(ctx, s.timeout)
		t, err := s.c.Time(tctx).Result()
		cancel()
		now, known = t.UnixNano(), err == nil
	}
	s.change.Store(&change{gen: gen, at: now, known: known})
	s.args.Clear() // the old Limits' arguments
	for {
		old := s.minGen.Load()
		if gen <= old || s.minGen.CompareAndSwap(old, gen) {
			break
		}
	}
	return nil
}

// Walk implements limits.Store with SCAN over the prefix (on every master
// of a cluster) and a GET per token bucket, an HGETALL per burst-tier
// domain. A snapshot's Limit is rebuilt from
// what the bucket stores (resource, kind, name, size, fill rate, the
// generation that last wrote it): the Bucket's other fields are zero.
// ctx (the status page's request) bounds the walk.
func (s *Store) Walk(ctx context.Context, fn func(limits.Snapshot) bool) error {
	return s.walk(ctx, fn)
}

// EstimateLen implements limits.Store with one DBSIZE per Redis node (the
// single Redis, or every master of a cluster, in parallel): O(1) work per
// node, however many buckets there are. (It replaces a SCAN of the
// prefix, which took about a second and 1 952 SCANs a call at 1 000 000
// buckets: see BenchmarkBucketCount.)
//
// The number is an estimate: the keys of the Redis database the client
// uses (on a cluster, database 0 of every master). It counts every token
// bucket and burst-tier domain, under every prefix, and also each
// resource's dynamic set (resources with max_dynamic_buckets) and global
// log (burst tiers with a global limit), the copy log's keys (CopyLog),
// keys that have expired but that Redis has not reclaimed yet (it does so
// lazily and in a background cycle), and any other key of the database.
// So it is about the buckets when the database is this store's alone,
// and an upper bound on them whatever else shares it.
//
// ctx and Options.Timeout bound the call; while the breaker of a node is
// open it fails at once, wrapping ErrUnavailable.
func (s *Store) EstimateLen(ctx context.Context) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	one := func(ctx context.Context, b *batcher, c redis.UniversalClient) (int64, error) {
		if b != nil && gobreaker.State(b.state.Load()) != gobreaker.StateClosed {
			return 0, errBreakerOpen
		}
		n, err := c.DBSize(ctx).Result()
		if err != nil {
			return 0, scriptError(fmt.Errorf("DBSIZE: %w", err)) // ErrUnavailable when Redis cannot answer
		}
		return n, nil
	}
	if s.cluster == nil {
		n, err := one(ctx, s.single, s.c)
		return int(n), err
	}
	var total atomic.Int64
	err := s.cluster.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		var b *batcher
		if v, ok := s.nodes.Load(c); ok {
			b = v.(*batcher)
		}
		n, err := one(ctx, b, c)
		total.Add(n)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("limits/redis: estimate len: %w", err)
	}
	return int(total.Load()), nil
}

// scanMatch is the SCAN pattern of the bucket and burst-tier domain
// keys.
func (s *Store) scanMatch() string { return s.prefix + "{r*}[sb]:*" }

// WalkScanCalls is the most SCAN calls one walk (Walk of the buckets or
// of Envoy's counters: a status page's) sends to a node, each looking at
// about 512 keys of the keyspace whatever they hold: about 100 000 keys,
// so that a status page costs the same with ten million keys as with a
// hundred thousand. A walk stopped by it returns limits.ErrWalkBudget.
const WalkScanCalls = 200

// scanKeys calls fn with batches of the keys matching match, on every
// master of a cluster (fn is serialised). With maxCalls > 0 it sends at
// most that many SCANs to a node and then returns limits.ErrWalkBudget.
func scanKeys(ctx context.Context, c redis.UniversalClient, match string, maxCalls int, fn func(keys []string) error) error {
	var mu sync.Mutex
	one := func(ctx context.Context, c redis.UniversalClient) error {
		var batch []string
		flush := func() error {
			mu.Lock()
			defer mu.Unlock()
			err := fn(batch)
			batch = batch[:0]
			return err
		}
		var cursor uint64
		for calls := 1; ; calls++ {
			keys, next, err := c.Scan(ctx, cursor, match, 512).Result()
			if err != nil {
				return err
			}
			for _, k := range keys {
				batch = append(batch, k)
				if len(batch) == 256 {
					if err := flush(); err != nil {
						return err
					}
				}
			}
			if cursor = next; cursor == 0 {
				return flush()
			}
			if maxCalls > 0 && calls == maxCalls {
				if err := flush(); err != nil {
					return err
				}
				return limits.ErrWalkBudget
			}
		}
	}
	if cc, ok := c.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return one(ctx, c) })
	}
	return one(ctx, c)
}

// errStop ends a walk early.
var errStop = errors.New("stop")

// walkKeys is scanKeys for a walk, at most WalkScanCalls SCANs a node: fn
// returns false to end it early, which is no error.
func walkKeys(ctx context.Context, c redis.UniversalClient, match string, fn func(keys []string) (bool, error)) error {
	err := scanKeys(ctx, c, match, WalkScanCalls, func(keys []string) error {
		more, err := fn(keys)
		if err == nil && !more {
			return errStop
		}
		return err
	})
	if errors.Is(err, errStop) {
		return nil
	}
	return err
}

func (s *Store) walk(ctx context.Context, fn func(limits.Snapshot) bool) error {
	return walkKeys(ctx, s.c, s.scanMatch(), func(keys []string) (bool, error) {
		pipe := s.c.Pipeline()
		buckets := make([]*redis.StringCmd, len(keys))
		domains := make([]*redis.MapStringStringCmd, len(keys))
		for i, key := range keys {
			if s.isBucketKey(key) {
				buckets[i] = pipe.Get(ctx, key)
			} else {
				domains[i] = pipe.HGetAll(ctx, key)
			}
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return false, err
		}
		for i, key := range keys {
			var snap limits.Snapshot
			var ok bool
			if buckets[i] != nil {
				v, err := buckets[i].Result()
				if err != nil { // expired meanwhile
					continue
				}
				snap, ok = s.bucketSnapshot(key, v)
			} else {
				h, err := domains[i].Result()
				if err != nil || len(h) == 0 { // expired meanwhile
					continue
				}
				var k limits.Key
				if k, ok = s.parseKey(key); ok {
					snap, ok = tierSnapshot(k, h)
				}
			}
			if ok && !fn(snap) {
				return false, nil
			}
		}
		return true, nil
	})
}

// bucketSnapshot decodes one token bucket's string (see take.lua): seven
// little-endian doubles (empty at, last use, each as seconds and ns;
// grants; generation; the key's expiry) and its configuration, "size rate
// span dynamic kind name".
func (s *Store) bucketSnapshot(key, v string) (limits.Snapshot, bool) {
	k, ok := s.parseKey(key)
	if !ok || len(v) < bucketHead {
		return limits.Snapshot{}, false
	}
	var h [6]int64
	for i := range h {
		h[i] = doubleAt(v, i)
	}
	c := strings.SplitN(v[bucketHead:], " ", 6)
	if len(c) != 6 {
		return limits.Snapshot{}, false
	}
	num := func(s string) int64 { n, _ := strconv.ParseInt(s, 10, 64); return n }
	rate, _ := strconv.ParseFloat(c[1], 64)
	size := num(c[0])
	l := &limits.Limit{Resource: k.Resource, Name: c[5], Kind: limits.Kind(num(c[4])), Algorithm: limits.TokenBucket,
		Bucket: limits.Bucket{Size: size, FillRate: rate},
		Params: limits.Params{Size: size, Rate: rate, Span: num(c[2])}, Gen: uint64(h[5])}
	return limits.Snapshot{Key: k, Limit: l, State: limits.State{Empty: h[0]*1e9 + h[1]}, LastUsed: h[2]*1e9 + h[3], Grants: uint64(h[4])}, true
}

// Key layout: prefix "{r" resource "}" then "s:" domain for a token
// bucket (a string), "b:" domain for a burst-tier domain (a hash), or "d"
// for the resource's dynamic buckets (a sorted set), with the prefix,
// resource and domain escaped.

// resourceKey returns the prefix and hash tag of resource (escaped),
// braces included: what its bucket keys and dynamic key start with.
func (s *Store) resourceKey(resource string) string { return s.prefix + "{r" + escape(resource) + "}" }

// bucketKey returns the key of a token bucket.
func (s *Store) bucketKey(resource, escDomain string) string {
	return s.resourceKey(resource) + "s:" + escDomain
}

// domainKey returns the key of a burst-tier domain.
func (s *Store) domainKey(resource, escDomain string) string {
	return s.resourceKey(resource) + "b:" + escDomain
}

func (s *Store) dynKey(resource string) string { return s.resourceKey(resource) + "d" }

// isBucketKey reports whether key, from scan, is a token bucket's (not a
// burst-tier domain's).
func (s *Store) isBucketKey(key string) bool {
	_, rest, _ := strings.Cut(key[len(s.prefix):], "}")
	return strings.HasPrefix(rest, "s:")
}

// parseKey returns the Key of a token bucket's or burst-tier domain's key.
func (s *Store) parseKey(key string) (limits.Key, bool) {
	rest, ok := strings.CutPrefix(key, s.prefix+"{r")
	if !ok {
		return limits.Key{}, false
	}
	res, dom, ok := strings.Cut(rest, "}")
	if !ok || len(dom) < 2 || dom[1] != ':' || dom[0] != 's' && dom[0] != 'b' {
		return limits.Key{}, false
	}
	r, ok1 := unescape(res)
	d, ok2 := unescape(dom[2:])
	return limits.Key{Resource: r, Domain: d}, ok1 && ok2
}

// escape returns s with every byte outside [A-Za-z0-9/_\-.:] written as
// %XX (so '%', '{' and '}' never appear raw): injective, so two different
// names never give one key, and a name cannot end or move a hash tag.
func escape(s string) string {
	n := 0
	for i := 0; i < len(s); i++ {
		if !plain(s[i]) {
			n++
		}
	}
	if n == 0 {
		return s
	}
	const hex = "0123456789ABCDEF"
	b := make([]byte, 0, len(s)+2*n)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if plain(c) {
			b = append(b, c)
		} else {
			b = append(b, '%', hex[c>>4], hex[c&15])
		}
	}
	return string(b)
}

func plain(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '/' || c == '_' || c == '-' || c == '.' || c == ':'
}

// unescape inverts escape.
func unescape(s string) (string, bool) {
	if !strings.Contains(s, "%") {
		return s, true
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b = append(b, s[i])
			continue
		}
		if i+3 > len(s) {
			return "", false
		}
		v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
		if err != nil {
			return "", false
		}
		b = append(b, byte(v))
		i += 2
	}
	return string(b), true
}
