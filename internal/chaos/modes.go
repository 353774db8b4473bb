package chaos

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluice-rl/sluice/api/doorman"
	quotapb "github.com/sluice-rl/sluice/api/quotaservice"
	v1 "github.com/sluice-rl/sluice/api/sluice/v1"
)

// The limits every mode's servers enforce.
const (
	// BucketSize and BucketRate are the token bucket's size (tokens) and
	// fill rate (tokens per second).
	BucketSize = 20
	BucketRate = 50
	// CopyLimit is the copy-limited resource's limit per domain, and
	// GlobalLimit across its domains: the load holds in one domain, a
	// killed client in another.
	CopyLimit   = 8
	GlobalLimit = 12
	// TierHardLimit is the burst-tier resource's hard limit (hits a second
	// per domain); its tiers (30 and 40 hits per 2 s) bind below it.
	TierHardLimit = 20
	// SessionTTL is the sessions' ttl: a client killed while holding
	// copies has them released within it.
	SessionTTL = 2 * time.Second
)

// limitsConfig is the servers' --config: one token bucket per on_store_error
// choice, a burst-tier resource and a copy-limited resource.
var limitsConfig = fmt.Sprintf(`
limits:
  resources:
    chaos:
      domains:
        closed: {size: %[1]d, fill_rate: %[2]d, wait_timeout: 0s}
    chaosopen:
      on_store_error: open
      domains:
        open: {size: %[1]d, fill_rate: %[2]d, wait_timeout: 0s}
    chaostiers:
      algorithm: burst_tiers
      hard_limit: %[5]d
      tiers:
        - {limit: 30, window: 2s, active: 6s, cooldown: 0s, skippable: false}
        - {limit: 40, window: 2s, active: 2s, cooldown: 4s, skippable: false}
    pool:
      algorithm: copies
      domain_limit: %[3]d
      global_limit: %[4]d
`, BucketSize, BucketRate, CopyLimit, GlobalLimit, TierHardLimit)

// Store is where a mode's servers keep the limits.
type Store string

const (
	Memory  Store = "memory"
	Redis   Store = "redis"
	Cluster Store = "cluster"
	// ClusterTLS is a Redis Cluster as managed services run one: 3
	// masters with a replica each, TLS only (on the cluster bus too)
	// with client certificates, a password; the servers reach it by a
	// rediss:// cluster URL with --redis-tls-ca, --redis-tls-cert,
	// --redis-tls-key, --redis-password-file and a --redis-key-prefix.
	ClusterTLS Store = "cluster-tls"
	// Sentinel is a master and a replica watched by three sentinels
	// (down-after 1 s), the servers ask by --redis-sentinel (go-redis's
	// failover URL) with the master's password in --redis-password-file.
	Sentinel Store = "sentinel"
)

// Mode is one way of using Sluice, with the load that exercises it.
type Mode struct {
	Name, Doc string
	// Store, and how many servers share it.
	Store   Store
	Servers int
	// Etcd: the servers form a fleet on etcd (copy-limited resources).
	Etcd bool
	// Tree: server 0 is a Doorman root, the others intermediates whose
	// parent it is, and the load's clients ask the intermediates (so that
	// a fault of server 0 is the intermediates losing their parent).
	Tree bool
	// load runs one worker until ctx ends, recording into log (and holds
	// into r).
	load func(ctx context.Context, r *runner, worker int, log Log)
	// Kind says which check applies: "bucket", "copies" or "leases".
	Kind string
	// resource, domain: the bucket asked for (for Envoy's rate limit
	// service, the domain and the user descriptor's value); size and rate
	// its size (tokens) and fill rate (tokens per second), zero:
	// BucketSize and BucketRate.
	resource, domain string
	size, rate       float64
	// envoy: the load is Envoy's rate limit service, whose counters are
	// under the Envoy domain's hash tag (see hashKey).
	envoy bool
}

// bound returns the mode's token bucket: size and fill rate.
func (m *Mode) bound() (size, rate float64) {
	if m.size == 0 {
		return BucketSize, BucketRate
	}
	return m.size, m.rate
}

// Modes are the modes the harness knows, by name.
var Modes = map[string]*Mode{
	"bucket-memory": {Doc: "sluice.v1.Limits/Allow on one server's token buckets in memory",
		Store: Memory, Servers: 1, Kind: "bucket", load: allowLoad, resource: "chaos", domain: "closed"},
	"bucket-memory-unshared": {Doc: "three servers, each with its own token buckets in memory: the fleet admits three times the limit (a control: the check must fail)",
		Store: Memory, Servers: 3, Kind: "bucket", load: allowLoad, resource: "chaos", domain: "closed"},
	"bucket-redis": {Doc: "sluice.v1.Limits/Allow, three servers sharing a token bucket on Redis (on_store_error: closed)",
		Store: Redis, Servers: 3, Kind: "bucket", load: allowLoad, resource: "chaos", domain: "closed"},
	"bucket-redis-open": {Doc: "as bucket-redis, on a bucket configured on_store_error: open (fail-open answers flagged degraded)",
		Store: Redis, Servers: 3, Kind: "bucket", load: allowLoad, resource: "chaosopen", domain: "open"},
	"tiers-redis": {Doc: "Charon's burst tiers on sluice.v1.Limits/Allow (hard limit 20 a second; tiers of 30 and 40 per 2 s), three servers on Redis; checked against the hard limit: a sliding window of H hits a second admits at most H + H × T in any T",
		Store: Redis, Servers: 3, Kind: "bucket", load: allowLoad, resource: "chaostiers", domain: "d", size: TierHardLimit, rate: TierHardLimit},
	"quota-redis": {Doc: "quotaservice.QuotaService/Allow (Square's API), three servers sharing a token bucket on Redis",
		Store: Redis, Servers: 3, Kind: "bucket", load: quotaLoad, resource: "chaos", domain: "closed"},
	"bucket-cluster": {Doc: "sluice.v1.Limits/Allow, three servers sharing a token bucket on a Redis Cluster (3 masters, 1 replica each)",
		Store: Cluster, Servers: 3, Kind: "bucket", load: allowLoad, resource: "chaos", domain: "closed"},
	"quota-cluster": {Doc: "quotaservice.QuotaService/Allow, three servers on a Redis Cluster (3 masters, 1 replica each)",
		Store: Cluster, Servers: 3, Kind: "bucket", load: quotaLoad, resource: "chaos", domain: "closed"},
	"rls-redis": {Doc: "Envoy's rate limit service (ShouldRateLimit), three servers sharing a 50-per-second rule on Redis (a token bucket: 50 tokens, 50 a second)",
		Store: Redis, Servers: 3, Kind: "bucket", load: rlsLoad, resource: "chaos", domain: "u", size: 50, rate: 50, envoy: true},
	"rls-cluster-tls": {Doc: "as rls-redis, on a Redis Cluster (3 masters, 1 replica each) over TLS with client certificates and a password (a rediss:// cluster URL, --redis-password-file, a --redis-key-prefix)",
		Store: ClusterTLS, Servers: 3, Kind: "bucket", load: rlsLoad, resource: "chaos", domain: "u", size: 50, rate: 50, envoy: true},
	"bucket-sentinel": {Doc: "as bucket-redis, on a Redis master and replica watched by three sentinels (--redis-sentinel, the master's password in --redis-password-file)",
		Store: Sentinel, Servers: 3, Kind: "bucket", load: allowLoad, resource: "chaos", domain: "closed"},
	"leases": {Doc: "Doorman leases: two root servers electing a master through etcd, 8 clients wanting 220 of a capacity of 100",
		Store: Memory, Servers: 2, Etcd: true, Kind: "leases", load: leaseLoad},
	"leases-tree": {Doc: "Doorman leases through a tree: a root and two intermediates (--parent), 8 clients of the intermediates wanting 220 of a capacity of 100; server-kill and server-stop hit the root, the intermediates' parent",
		Store: Memory, Servers: 3, Tree: true, Kind: "leases", load: leaseLoad},
	"copies-cluster": {Doc: "as copies-redis, on a Redis Cluster (3 masters, 1 replica each)",
		Store: Cluster, Servers: 3, Etcd: true, Kind: "copies", load: copiesLoad, resource: "pool", domain: "d"},
	"copies-redis": {Doc: "copy-limited resource held in sessions (Reserve/Release), three servers on Redis with their fleet on etcd",
		Store: Redis, Servers: 3, Etcd: true, Kind: "copies", load: copiesLoad, resource: "pool", domain: "d"},
}

func init() {
	for name, m := range Modes {
		m.Name = name
	}
}

// pace is the gap between a worker's requests: with 8 workers about
// 1 600 requests a second, far above the bucket's fill rate, so the
// bucket is always empty and the bound is tight.
const pace = 5 * time.Millisecond

// callTimeout bounds every request; an answer later than this is Failed
// (DeadlineExceeded).
const callTimeout = time.Second

func dial(addr string) (*grpc.ClientConn, error) {
	return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// code names an error for the report: its gRPC code.
func code(err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return "DeadlineExceeded"
	}
	return status.Code(err).String()
}

// every runs f every d until ctx ends, at a fixed rate (a ticker): the
// load's rate must not depend on how long the answers take, which
// refresh.Every (d after each step ends) would make it.
func every(ctx context.Context, d time.Duration, f func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f()
		}
	}
}

// askLoad is a worker asking for one token every pace: ask sends one
// request under a callTimeout deadline and fills op's answer (Outcome,
// N, Code, Degraded), or returns the request's error (op is then Failed
// with its code). A request the end of the run cut short is not recorded.
func askLoad(ctx context.Context, r *runner, worker int, log Log, ask func(ctx context.Context, op *Op) error) {
	every(ctx, pace, func() {
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		defer cancel()
		op := Op{Worker: worker, Key: r.mode.resource + "/" + r.mode.domain, N: 1, Start: r.hist.Since(time.Now())}
		err := ask(cctx, &op)
		op.End = r.hist.Since(time.Now())
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			op.Outcome, op.Code = Failed, code(err)
		}
		log.Add(op)
	})
}

// allowLoad asks Sluice's Allow for one token at a time.
func allowLoad(ctx context.Context, r *runner, worker int, log Log) {
	c := v1.NewLimitsClient(r.conn(worker))
	askLoad(ctx, r, worker, log, func(ctx context.Context, op *Op) error {
		resp, err := c.Allow(ctx, &v1.AllowRequest{Resource: r.mode.resource, Domain: r.mode.domain, Tokens: 1})
		switch {
		case err != nil:
			return err
		case resp.GetStatus() == v1.AllowResponse_OK:
			op.Outcome, op.N, op.Degraded = Granted, resp.GetGranted(), resp.GetDegraded()
		default:
			op.Outcome, op.Code = Rejected, resp.GetStatus().String()
		}
		return nil
	})
}

// quotaLoad asks the quota service's Allow for one token at a time, with
// no wait (max_wait_millis_override 0).
func quotaLoad(ctx context.Context, r *runner, worker int, log Log) {
	c := quotapb.NewQuotaServiceClient(r.conn(worker))
	askLoad(ctx, r, worker, log, func(ctx context.Context, op *Op) error {
		resp, err := c.Allow(ctx, &quotapb.AllowRequest{Namespace: r.mode.resource, BucketName: r.mode.domain, TokensRequested: 1,
			MaxWaitTimeOverride: true, MaxWaitMillisOverride: 0})
		switch {
		case err != nil:
			return err
		case resp.GetStatus() == quotapb.AllowResponse_OK && resp.GetWaitMillis() == 0:
			op.Outcome, op.N = Granted, resp.GetTokensGranted()
		case resp.GetStatus() == quotapb.AllowResponse_OK:
			// A grant due later: not this check's model (see CheckBucket).
			op.Outcome, op.Code = Failed, "OK with a wait"
		case resp.GetStatus() == quotapb.AllowResponse_REJECTED_SERVER_ERROR:
			op.Outcome, op.Code = Failed, resp.GetStatus().String()
		default:
			op.Outcome, op.Code = Rejected, resp.GetStatus().String()
		}
		return nil
	})
}

// envoyConfig is the servers' --envoy-ratelimit-config: 50 hits a second
// per user.
const envoyConfig = `
domain: chaos
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 50}
`

// rlsLoad asks Envoy's ShouldRateLimit for one hit of one user at a time.
func rlsLoad(ctx context.Context, r *runner, worker int, log Log) {
	c := rlsv3.NewRateLimitServiceClient(r.conn(worker))
	req := &rlsv3.RateLimitRequest{Domain: r.mode.resource, Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: r.mode.domain}}}}}
	askLoad(ctx, r, worker, log, func(ctx context.Context, op *Op) error {
		resp, err := c.ShouldRateLimit(ctx, req)
		switch {
		case err != nil:
			return err
		case resp.GetOverallCode() == rlsv3.RateLimitResponse_OK:
			op.Outcome = Granted
		default:
			op.Outcome, op.Code = Rejected, resp.GetOverallCode().String()
		}
		return nil
	})
}

// session is one open session and its keep-alive stream.
type session struct {
	id     string
	cancel context.CancelFunc
	done   chan struct{}
}

// openSession opens a session with ttl SessionTTL and keeps it alive on a
// stream, a message every third of the ttl, until close or ctx ends.
func openSession(ctx context.Context, c v1.LimitsClient) (*session, error) {
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	r, err := c.OpenSession(cctx, &v1.OpenSessionRequest{Ttl: durationpb.New(SessionTTL)})
	if err != nil {
		return nil, err
	}
	sctx, stop := context.WithCancel(ctx)
	s := &session{id: r.GetSessionId(), cancel: stop, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for sctx.Err() == nil {
			st, err := c.KeepAlive(sctx)
			if err == nil {
				for sctx.Err() == nil {
					if err = st.Send(&v1.KeepAliveRequest{SessionId: s.id}); err != nil {
						break
					}
					if _, err = st.Recv(); err != nil {
						break
					}
					select {
					case <-sctx.Done():
					case <-time.After(SessionTTL / 3):
					}
				}
			}
			select {
			case <-sctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return s, nil
}

func (s *session) close() {
	s.cancel()
	<-s.done
}

// copiesLoad holds copies in a session: reserve 1 or 2, hold 10–50 ms,
// release, again. A session the server no longer knows is replaced.
func copiesLoad(ctx context.Context, r *runner, worker int, log Log) {
	c := v1.NewLimitsClient(r.conn(worker))
	rng := rand.New(rand.NewPCG(uint64(worker), 7))
	var s *session
	defer func() {
		if s != nil {
			s.close()
			cctx, cancel := context.WithTimeout(context.Background(), callTimeout)
			_, _ = c.CloseSession(cctx, &v1.CloseSessionRequest{SessionId: s.id})
			cancel()
		}
	}()
	every(ctx, pace, func() {
		if s == nil {
			var err error
			if s, err = openSession(ctx, c); err != nil {
				log.Add(Op{Worker: worker, Key: "open", Start: r.hist.Since(time.Now()), End: r.hist.Since(time.Now()), Outcome: Failed, Code: code(err)})
				return
			}
		}
		n := int64(1 + rng.IntN(2))
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		defer cancel()
		op := Op{Worker: worker, Key: "reserve", N: n, Start: r.hist.Since(time.Now())}
		resp, err := c.Reserve(cctx, &v1.ReserveRequest{SessionId: s.id, Resource: r.mode.resource, Domain: r.mode.domain, Copies: n, MinCopies: n})
		op.End = r.hist.Since(time.Now())
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			op.Outcome, op.Code = Failed, code(err)
			if status.Code(err) == codes.NotFound {
				s.close()
				s = nil // lost with its server: open another
			}
			log.Add(op)
			return
		case resp.GetStatus() != v1.ReserveResponse_OK:
			op.Outcome, op.Code = Rejected, resp.GetStatus().String()
			log.Add(op)
			return
		}
		op.Outcome, op.N, op.Degraded = Granted, resp.GetGranted(), resp.GetDegraded()
		log.Add(op)
		h := Hold{Key: s.id, N: op.N, Acquired: op.End, Degraded: op.Degraded}
		select {
		case <-ctx.Done():
			r.addHold(h) // released by CloseSession, after the run
			return
		case <-time.After(time.Duration(10+rng.IntN(40)) * time.Millisecond):
		}
		h.Released = r.hist.Since(time.Now())
		rel := Op{Worker: worker, Key: "release", N: op.N, Start: h.Released}
		_, err = c.Release(cctx, &v1.ReleaseRequest{SessionId: s.id, Resource: r.mode.resource, Domain: r.mode.domain, Copies: op.N})
		rel.End = r.hist.Since(time.Now())
		r.addHold(h)
		if ctx.Err() != nil {
			return // the run ended under it: CloseSession releases it
		}
		if err != nil {
			rel.Outcome, rel.Code = Failed, code(err)
		} else {
			rel.Outcome = Granted
		}
		log.Add(rel)
	})
}

// holds collects the holds of a run.
type holds struct {
	mu sync.Mutex
	hs []Hold
}

func (r *runner) addHold(h Hold) {
	r.holds.mu.Lock()
	r.holds.hs = append(r.holds.hs, h)
	r.holds.mu.Unlock()
}

// reserve reserves copies (all or none) in session id, retrying for up to
// 10 s while they are not free, and returns how many it got.
func reserve(ctx context.Context, c v1.LimitsClient, id, resource, domain string, copies int64) (int64, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		resp, err := c.Reserve(cctx, &v1.ReserveRequest{SessionId: id, Resource: resource, Domain: domain, Copies: copies, MinCopies: copies})
		cancel()
		if err == nil && resp.GetStatus() == v1.ReserveResponse_OK {
			return resp.GetGranted(), nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("reserve %d of %s/%s: %v %v", copies, resource, domain, resp.GetStatus(), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// LeaseCapacity is the Doorman resource's capacity in the leases mode.
const LeaseCapacity = 100

// leaseConfig is the Doorman resource of the leases modes: leases of 6 s,
// refreshed every second, learning mode as long as a lease (a new master
// grants what its clients say they have for 6 s). The lease outlasts
// Doorman's 5 s between two decisions for a requester
// (doorman.MinRequestInterval): with leases of 4 s, an intermediate's
// fresh decision from the root came only once its own lease had run out,
// and so had its clients' leases (none outlives it) and with them their
// demand, which it reports to the root — the tree settled at 0.
const leaseConfig = `
resources:
  - identifier_glob: leases
    capacity: 100
    algorithm: {kind: FAIR_SHARE, lease_length: 6, refresh_interval: 1}
`

// leaseWants is what worker asks for in the leases modes: 10 + 5 × worker.
func leaseWants(worker int) float64 { return float64(10 + 5*worker) }

// leaseLoad is one Doorman client: it asks for its wants (leaseWants)
// every refresh interval, sending the lease it has, follows the
// mastership redirect, and records each lease as a hold from its answer
// until the next answer's request or its expiry, in thousandths (rounded
// down). The expiry is by the client's clock: worker 0's is skewed under
// a clock-skew fault (r.skew), and it holds its lease until its own clock
// reads the lease's expiry.
func leaseLoad(ctx context.Context, r *runner, worker int, log Log) {
	id := fmt.Sprintf("client-%d", worker)
	wants := leaseWants(worker)
	first := 0 // the servers the client may ask: from first on
	if r.mode.Tree {
		first = 1
	}
	target := first + worker%(len(r.conns)-first)
	var has *doorman.Lease
	var cur *Hold
	// expiry is the lease's (an offset of the run); held, when the client
	// stops holding it.
	var expiry time.Duration
	held := func(from time.Duration) time.Duration {
		if worker == 0 {
			return r.skew.until(from, expiry)
		}
		return expiry
	}
	end := func(at time.Duration) {
		if cur != nil {
			cur.Released = min(at, held(cur.Acquired))
			r.addHold(*cur)
			cur = nil
		}
	}
	defer func() { end(r.hist.Since(time.Now())) }()
	// Clients refresh each on its own phase, spread over the second, not
	// all at once: a lease freed early (a server's clock ahead of its
	// clients') goes to a client that asks while its holder still holds
	// it, as it would among clients that are not in step.
	select {
	case <-ctx.Done():
		return
	case <-time.After(time.Duration(worker) * time.Second / time.Duration(r.opts.Workers)):
	}
	every(ctx, time.Second, func() {
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		op := Op{Worker: worker, Key: id, Start: r.hist.Since(time.Now())}
		resp, err := doorman.NewCapacityClient(r.conns[target]).GetCapacity(cctx, &doorman.GetCapacityRequest{ClientId: proto.String(id),
			Resource: []*doorman.ResourceRequest{{ResourceId: proto.String("leases"), Priority: proto.Int64(0), Has: has, Wants: proto.Float64(wants)}}})
		cancel()
		op.End = r.hist.Since(time.Now())
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			op.Outcome, op.Code = Failed, code(err)
			target = first + (target+1-first)%(len(r.conns)-first) // try another
			log.Add(op)
			return
		}
		if m := resp.GetMastership(); m != nil && len(resp.GetResponse()) == 0 {
			op.Outcome, op.Code = Rejected, "redirect"
			for i, s := range r.env.Servers {
				if s.Addr == m.GetMasterAddress() {
					target = i
				}
			}
			log.Add(op)
			return
		}
		if len(resp.GetResponse()) == 0 {
			op.Outcome, op.Code = Failed, "empty answer"
			log.Add(op)
			return
		}
		gets := resp.GetResponse()[0].GetGets()
		end(op.Start)
		has = gets
		expiry = r.hist.Since(time.Unix(gets.GetExpiryTime(), 0))
		// Thousandths rounded down: a sum over the capacity is over it
		// (three leases of 100/3 are not 100.001).
		cur = &Hold{Key: id, N: int64(math.Floor(gets.GetCapacity() * 1000)), Acquired: op.End}
		op.Outcome, op.N, op.Lapsed = Granted, cur.N, held(op.End) <= op.End
		if op.Lapsed {
			r.leased[worker].Store(0)
		} else {
			r.leased[worker].Store(cur.N)
		}
		if r.mode.Tree && cur.N > 0 {
			r.addLeaseAnswer(leaseAnswer{Server: target, At: op.End, Expiry: gets.GetExpiryTime()})
		}
		log.Add(op)
	})
}
