package chaos

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/sluice-rl/sluice/algorithm"
	v1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/internal/hooks"
	"github.com/sluice-rl/sluice/internal/testutil/etcdtest"
	"github.com/sluice-rl/sluice/internal/testutil/redistest"
)

// Options says what to run.
type Options struct {
	// Mode and Fault name entries of Modes and Faults.
	Mode, Fault string
	// Sluice is the path of the sluice binary the servers run.
	Sluice string
	// Warm is how long the load runs before the fault, Hold how long the
	// fault lasts before it heals, Recover how long the load goes on
	// after. Zero: 3 s, 5 s and 6 s. A fault may last longer than Hold
	// (parent-cut: longer than a lease); in the leases modes, Warm counts
	// from when the division has settled (see settled).
	Warm, Hold, Recover time.Duration
	// Workers is how many clients send load (zero: 8), each through one
	// server in turn, one request every 5 ms.
	Workers int
	// Log receives the servers' logs and the run's progress (nil: none).
	Log io.Writer
}

// Report is what a run measured.
type Report struct {
	Mode, Fault string
	// FaultAt and HealAt are offsets from the start of the load.
	FaultAt, HealAt, End time.Duration
	// Requests counts every answered or failed request; Granted, Rejected
	// and Errors (by code) split them; Degraded counts grants flagged
	// fail-open.
	Requests, Granted, Rejected, Degraded int64
	Errors                                map[string]int64
	// Recovery is from the heal (or, for a fault with nothing to heal,
	// its start) to the end of the last failed or degraded answer; zero
	// when none came after it.
	Recovery time.Duration
	// Bucket is the token bucket check (bucket modes), against a bucket
	// of Size tokens filled at Rate tokens per second.
	Bucket     *BucketCheck `json:",omitempty"`
	Size, Rate float64      `json:",omitempty"`
	// Count is the most copies certainly held at once in the load's
	// domain (copies modes), and Limit what they may be (the domain
	// limit); Global and GlobalLimit the same across domains.
	Count       *CountCheck `json:",omitempty"`
	Limit       int64       `json:",omitempty"`
	Global      *CountCheck `json:",omitempty"`
	GlobalLimit int64       `json:",omitempty"`
	// Leases is Σ leases certainly held at once (in thousandths), and
	// Capacity what they may be (the leases modes). LeaseMean is the mean
	// of Σ leases certainly held from the fault to the end of the run.
	// Lapsed counts the answers, from the fault on, whose lease had
	// ended when it arrived, by the client's clock: the client is left
	// without a lease, on its safe capacity (Doorman's "no capacity").
	// Outlived is, in a tree, the check that no intermediate's lease
	// outlives its own lease from the root.
	Leases    *CountCheck    `json:",omitempty"`
	Capacity  float64        `json:",omitempty"`
	LeaseMean float64        `json:",omitempty"`
	Lapsed    int64          `json:",omitempty"`
	Outlived  *OutlivedCheck `json:",omitempty"`
	// Lost counts copies never given back (still counted once every
	// client closed and the session ttl passed), ReleasedTwice copies
	// counted free while held (a reserve of the whole limit and one more
	// succeeded); both must be 0. Settled is how long after the load
	// stopped the whole limit could be reserved again.
	Lost, ReleasedTwice int64
	Settled             time.Duration
	// Promoted, FirstOnNew and Demoted are, under a Sentinel fault, when
	// the replica reported role:master, when the first script reached
	// it as master (the first decision on the new master) and when the
	// old master reported role:slave (its data then replaced by the new
	// master's): offsets from the start of the load, zero when not seen
	// within the run. LostScripts counts the scripts the old master ran
	// after the promotion, whose writes the new master never saw (-1:
	// unknown, the old master did not answer after it: killed), and
	// LastOnOld is when the last of them was seen. Announced is when a
	// sentinel published the new master (+switch-master).
	Promoted, Announced, FirstOnNew, Demoted, LastOnOld time.Duration `json:",omitempty"`
	LostScripts                                         int64         `json:",omitempty"`
	// History is every operation of the load, ordered by Start.
	History []Op `json:"-"`
}

// OverLimit is what was admitted over the limit in the worst window, as
// a fraction of what the model allows in that window (size + rate × T
// for a token bucket, the copy limit): 0 when nothing was.
func (r *Report) OverLimit() float64 {
	switch {
	case r.Bucket != nil:
		return max(r.Bucket.Worst.Excess(), 0) / r.Bucket.Worst.Bound
	case r.Leases != nil:
		return max(float64(r.Leases.Max)/1000-r.Capacity, 0) / r.Capacity
	case r.Count != nil && r.Limit > 0:
		return float64(max(r.Count.Max-r.Limit, 0)) / float64(r.Limit)
	}
	return 0
}

// Violated reports whether the history broke the model outside flagged
// fail-open answers, or a hold was lost or released twice.
func (r *Report) Violated() bool {
	return (r.Bucket != nil && r.Bucket.Violated()) || (r.Count != nil && r.Count.Max > r.Limit) ||
		(r.Global != nil && r.Global.Max > r.GlobalLimit) || (r.Leases != nil && float64(r.Leases.Max) > 1000*r.Capacity) ||
		(r.Outlived != nil && r.Outlived.Outlived > 0) || r.Lost > 0 || r.ReleasedTwice > 0
}

// Print writes the report for a reader.
func (r *Report) Print(w io.Writer) {
	fmt.Fprintf(w, "mode %s, fault %s: fault at %v, healed at %v, end %v\n", r.Mode, r.Fault, r.FaultAt.Round(time.Millisecond), r.HealAt.Round(time.Millisecond), r.End.Round(time.Millisecond))
	fmt.Fprintf(w, "  requests %d: granted %d, rejected %d, degraded (flagged fail-open) %d, errors %s\n", r.Requests, r.Granted, r.Rejected, r.Degraded, r.errorsString())
	if b := r.Bucket; b != nil {
		fmt.Fprintf(w, "  token bucket (size %g, %g/s): worst window %v, over the bound by %.1f tokens (%.0f %%)\n", r.Size, r.Rate, b.Worst, max(b.Worst.Excess(), 0), 100*r.OverLimit())
		if b.Smallest != nil {
			fmt.Fprintf(w, "  VIOLATION: smallest window over the bound %v\n", b.Smallest)
		}
	}
	if c := r.Count; c != nil {
		fmt.Fprintf(w, "  copies: most certainly held at once %d of the domain limit %d (at %v; %d holds), %d of the global limit %d\n",
			c.Max, r.Limit, c.At.Round(time.Millisecond), c.Holds, r.Global.Max, r.GlobalLimit)
		fmt.Fprintf(w, "  after the run: lost %d, released twice %d; the whole limit reservable again %v after the load stopped\n", r.Lost, r.ReleasedTwice, r.Settled.Round(time.Millisecond))
	}
	if c := r.Leases; c != nil {
		fmt.Fprintf(w, "  leases: Σ certainly held at once at most %.1f of the capacity %g (at %v; %d leases), mean %.1f from the fault on; %d answers without a lease (lapsed) from the fault on\n",
			float64(c.Max)/1000, r.Capacity, c.At.Round(time.Millisecond), c.Holds, r.LeaseMean, r.Lapsed)
	}
	if o := r.Outlived; o != nil {
		fmt.Fprintf(w, "  leases: %d intermediates' leases outlived their lease from the root (%d answers not checked: the root's status not read)\n", o.Outlived, o.Unchecked)
		if o.First != nil {
			fmt.Fprintf(w, "  VIOLATION: server %d answered at %v a lease ending %v after its own\n", o.First.Server, o.First.At.Round(time.Millisecond), o.By)
		}
	}
	if r.Promoted != 0 {
		fmt.Fprintf(w, "  sentinel: replica promoted %v after the fault, announced (+switch-master) %s, first script on it %s, old master demoted %s\n",
			(r.Promoted - r.FaultAt).Round(time.Millisecond), r.sinceFault(r.Announced), r.sinceFault(r.FirstOnNew), r.sinceFault(r.Demoted))
		switch {
		case r.LostScripts < 0:
			fmt.Fprintln(w, "  sentinel: scripts the old master ran after the promotion (lost): unknown, it did not answer (killed)")
		case r.LostScripts == 0:
			fmt.Fprintln(w, "  sentinel: scripts the old master ran after the promotion (lost): 0")
		default:
			fmt.Fprintf(w, "  sentinel: scripts the old master ran after the promotion (lost): %d, the last %s\n", r.LostScripts, r.sinceFault(r.LastOnOld))
		}
	}
	fmt.Fprintf(w, "  recovery (heal to the last failed or degraded answer): %v\n", r.Recovery.Round(time.Millisecond))
	if r.Violated() {
		fmt.Fprintln(w, "  RESULT: VIOLATED")
	} else {
		fmt.Fprintln(w, "  RESULT: ok")
	}
}

// sinceFault names the offset d as a time after the fault, or says it
// was not seen.
func (r *Report) sinceFault(d time.Duration) string {
	if d == 0 {
		return "not within the run"
	}
	return (d - r.FaultAt).Round(time.Millisecond).String() + " after the fault"
}

func (r *Report) errorsString() string {
	if len(r.Errors) == 0 {
		return "0"
	}
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(r.Errors)) {
		fmt.Fprintf(&b, "%s %d, ", k, r.Errors[k])
	}
	return strings.TrimSuffix(b.String(), ", ")
}

// runner is one run's state.
type runner struct {
	opts  Options
	mode  *Mode
	fault *Fault
	env   *Env
	hist  *History
	conns []*grpc.ClientConn
	holds holds
	// holder is the client process of client-kill.
	holder *holder
	// switchWatch follows a Sentinel group's servers through a fault.
	switchWatch *switchWatch
	// skew is worker 0's clock's skew (the clock-skew faults); answers
	// the intermediates' leases (under holds.mu), for CheckOutlived.
	skew    clockSkew
	answers []leaseAnswer
	// leased[w]: the capacity of worker w's last answer, in thousandths,
	// or 0 if that lease had ended (the leases modes).
	leased []atomic.Int64
}

// conn is worker's connection: to server worker mod servers.
func (r *runner) conn(worker int) *grpc.ClientConn { return r.conns[worker%len(r.conns)] }

// Run runs opts.Mode under opts.Fault on real processes and returns what
// it measured. It stops everything it started before it returns; it
// takes about Warm + Hold + Recover plus the setup (seconds).
func Run(ctx context.Context, opts Options) (*Report, error) {
	m, ok := Modes[opts.Mode]
	if !ok {
		return nil, fmt.Errorf("mode %q: not one of %s", opts.Mode, strings.Join(slices.Sorted(maps.Keys(Modes)), ", "))
	}
	f, ok := Faults[opts.Fault]
	if !ok {
		return nil, fmt.Errorf("fault %q: not one of %s", opts.Fault, strings.Join(slices.Sorted(maps.Keys(Faults)), ", "))
	}
	if !f.applies(m) {
		return nil, fmt.Errorf("fault %s does not apply to mode %s (store %s)", f.Name, m.Name, m.Store)
	}
	opts.Warm = cmp.Or(opts.Warm, 3*time.Second)
	opts.Hold = max(cmp.Or(opts.Hold, 5*time.Second), f.hold)
	opts.Recover = cmp.Or(opts.Recover, 6*time.Second)
	if opts.Workers <= 0 {
		opts.Workers = 8
	}
	r := &runner{opts: opts, mode: m, fault: f}
	env, err := r.setup()
	if env != nil {
		defer env.Close()
	}
	if err != nil {
		return nil, err
	}
	r.env = env
	for _, s := range env.Servers {
		c, err := dial(s.Addr)
		if err != nil {
			return nil, err
		}
		defer c.Close()
		r.conns = append(r.conns, c)
	}
	if r.holder != nil {
		defer func() { _ = r.holder.cmd.Process.Kill(); _ = r.holder.cmd.Wait() }()
	}
	defer func() {
		if r.switchWatch != nil { // a run that ended early
			r.switchWatch.stop()
		}
	}()
	return r.run(ctx)
}

// setup starts the stores, proxies and servers of the mode.
func (r *runner) setup() (*Env, error) {
	dir, err := os.MkdirTemp("", "sluice-chaos-")
	if err != nil {
		return nil, err
	}
	e := &Env{Dir: dir}
	content := limitsConfig
	if r.mode.Kind == "leases" {
		content = leaseConfig
	}
	cfg, err := e.writeFile("config.yaml", content)
	if err != nil {
		return e, err
	}
	envoy, err := e.writeFile("envoy.yaml", envoyConfig)
	if err != nil {
		return e, err
	}
	args := make([][]string, r.mode.Servers)
	for i := range args {
		args[i] = []string{"--config", cfg, "--envoy-ratelimit-config", envoy}
	}
	switch r.mode.Store {
	case Redis:
		if r.fault.persistent {
			e.Redis, err = redistest.StartPersistent(dir)
		} else {
			e.Redis, err = redistest.Start()
		}
		if err != nil {
			return e, err
		}
		e.RedisProxies = newProxies()
		for i := range args {
			addr, err := e.RedisProxies.add(i, "redis-"+strconv.Itoa(i), e.Redis.Addr)
			if err != nil {
				return e, err
			}
			args[i] = append(args[i], "--redis", "redis://"+addr+"/0")
		}
	case Cluster:
		if e.Cluster, err = redistest.StartClusterReplicas(3, 1); err != nil {
			return e, err
		}
		for i := range args {
			args[i] = append(args[i], "--redis-cluster", strings.Join(e.Cluster.Addrs(), ","))
		}
	case ClusterTLS:
		c, err := makeCerts(dir)
		if err != nil {
			return e, err
		}
		pw, pwFile, err := e.password()
		if err != nil {
			return e, err
		}
		e.Sec = redistest.Security{Password: pw, TLSCert: c.RedisCert, TLSKey: c.RedisKey, TLSCA: c.CA, TLSAuthClients: true}
		if e.Cluster, err = redistest.StartClusterSecure(3, 1, e.Sec); err != nil {
			return e, err
		}
		// One go-redis cluster URL: the first node, the others as addr=.
		a := e.Cluster.Addrs()
		u := "rediss://" + a[0] + "?addr=" + strings.Join(a[1:], "&addr=")
		e.Prefix = "chaos-tls:"
		for i := range args {
			args[i] = append(args[i], "--redis-cluster", u, "--redis-password-file", pwFile,
				"--redis-tls-ca", c.CA, "--redis-tls-cert", c.ClientCert, "--redis-tls-key", c.ClientKey, "--redis-key-prefix", e.Prefix)
		}
	case Sentinel:
		pw, pwFile, err := e.password()
		if err != nil {
			return e, err
		}
		e.Sec = redistest.Security{Password: pw}
		if e.Sentinel, err = redistest.StartSentinel(e.Sec); err != nil {
			return e, err
		}
		// go-redis's failover URL: a sentinel, the others as addr=; the
		// master's password comes from the file (which overrides the
		// URL's &password=, and keeps it off the command line).
		sa := e.Sentinel.SentinelAddrs()
		u := "redis://" + sa[0] + "/0?master_name=" + e.Sentinel.Name() + "&addr=" + strings.Join(sa[1:], "&addr=")
		for i := range args {
			args[i] = append(args[i], "--redis-sentinel", u, "--redis-password-file", pwFile)
		}
	}
	if r.mode.Etcd {
		if e.Etcd, err = etcdtest.StartCluster(dir+"/etcd", max(r.fault.etcdMembers, 1)); err != nil {
			return e, err
		}
		e.EtcdProxies = newProxies()
		for i := range args {
			var eps []string
			for k, m := range e.Etcd.Members {
				addr, err := e.EtcdProxies.add(i, fmt.Sprintf("etcd-%d-%d", i, k), m.Addr)
				if err != nil {
					return e, err
				}
				eps = append(eps, "http://"+addr)
			}
			args[i] = append(args[i], "--etcd-endpoints", strings.Join(eps, ","), "--fleet-ttl", "2s", "--fleet-prefix", "/chaos")
			if r.mode.Kind == "leases" {
				args[i] = append(args[i], "--election", "etcd", "--election-key", "/chaos/root", "--election-ttl", "2s")
			}
		}
	}
	if r.mode.Tree {
		e.ParentProxies = newProxies()
	}
	for i := range args {
		if r.mode.Tree && i > 0 { // an intermediate: no configuration of its own, its parent through a proxy
			addr, err := e.ParentProxies.add(i, "parent-"+strconv.Itoa(i), e.Servers[0].Addr)
			if err != nil {
				return e, err
			}
			args[i] = []string{"--parent", addr, "--id", "mid-" + strconv.Itoa(i)}
		}
		var env []string
		if r.fault.skew != 0 { // its clock reads its skew file (setSkew)
			env = []string{hooks.ClockSkewEnv + "=" + skewFile(dir, i)}
		}
		s, err := startServerEnv(r.opts.Sluice, "server-"+strconv.Itoa(i), r.opts.Log, env, args[i]...)
		if err != nil {
			return e, err
		}
		e.Servers = append(e.Servers, s)
	}
	return e, nil
}

func (r *runner) logf(format string, args ...any) {
	if r.opts.Log != nil {
		fmt.Fprintf(r.opts.Log, "chaos: "+format+"\n", args...)
	}
}

// run drives the load, injects and heals the fault, and checks the
// history.
func (r *runner) run(ctx context.Context) (*Report, error) {
	if r.mode.Kind == "copies" {
		if err := r.waitCopies(ctx); err != nil {
			return nil, err
		}
	}
	rep := &Report{Mode: r.mode.Name, Fault: r.fault.Name, Errors: map[string]int64{}}
	r.hist = NewHistory(time.Now())
	r.leased = make([]atomic.Int64, r.opts.Workers)
	lctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for w := range r.opts.Workers {
		log := r.hist.Log()
		wg.Go(func() { r.mode.load(lctx, r, w, log) })
	}
	var polls []rootLease
	if r.mode.Tree {
		wg.Go(func() { polls = r.pollRoot(lctx) })
	}
	stopLoad := sync.OnceFunc(func() {
		stop()
		wg.Wait()
	})
	defer stopLoad()
	sleep := func(d time.Duration) error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(d):
			return nil
		}
	}
	if r.mode.Kind == "leases" {
		// Servers just started hand out no lease for a few seconds (a
		// root learns for a lease length; an intermediate has nothing
		// before its parent's first lease), and a tree's first division
		// goes to whichever intermediate asked first until the parent's
		// next decisions (Doorman's 5 s between two, at each level):
		// warm up from when the division has settled, so that a run
		// measures it and not how fast the servers started.
		deadline := time.Now().Add(40 * time.Second)
		for !r.settled() && time.Now().Before(deadline) {
			if err := sleep(50 * time.Millisecond); err != nil {
				return nil, err
			}
		}
		r.logf("%s: the division has settled: %v", r.hist.Since(time.Now()).Round(time.Millisecond), r.settled())
	}
	if err := sleep(r.opts.Warm); err != nil {
		return nil, err
	}
	rep.FaultAt = r.hist.Since(time.Now())
	r.logf("%s: injecting %s", rep.FaultAt.Round(time.Millisecond), r.fault.Name)
	heal, err := r.fault.inject(r)
	if err != nil {
		return nil, fmt.Errorf("injecting %s: %w", r.fault.Name, err)
	}
	rep.HealAt = rep.FaultAt
	if err := sleep(r.opts.Hold); err != nil {
		return nil, err
	}
	if heal != nil {
		rep.HealAt = r.hist.Since(time.Now())
		r.logf("%s: healing %s", rep.HealAt.Round(time.Millisecond), r.fault.Name)
		if err := heal(); err != nil {
			return nil, fmt.Errorf("healing %s: %w", r.fault.Name, err)
		}
	}
	if err := sleep(r.opts.Recover); err != nil {
		return nil, err
	}
	stopLoad()
	rep.End = r.hist.Since(time.Now())
	if w := r.switchWatch; w != nil {
		w.stop()
		rep.Promoted, rep.Announced, rep.FirstOnNew, rep.Demoted = w.promoted, w.announced, w.firstOnNew, w.demoted
		rep.LostScripts, rep.LastOnOld = w.lostScripts, w.lastOnOld
		if !w.oldAnswered {
			rep.LostScripts = -1
		}
	}
	ops := r.hist.Ops()
	rep.History = ops
	for _, op := range ops {
		if op.Key == "release" {
			if op.Outcome == Failed {
				rep.Errors["release "+op.Code]++
			}
			continue
		}
		rep.Requests++
		switch op.Outcome {
		case Granted:
			rep.Granted++
			if op.Degraded {
				rep.Degraded++
			}
		case Rejected:
			rep.Rejected++
		case Failed:
			rep.Errors[op.Code]++
		}
		if op.Lapsed && op.Start >= rep.FaultAt {
			rep.Lapsed++
		}
		if (op.Outcome == Failed || op.Degraded || op.Lapsed) && op.End > rep.HealAt {
			rep.Recovery = max(rep.Recovery, op.End-rep.HealAt)
		}
	}
	switch r.mode.Kind {
	case "bucket":
		size, rate := r.mode.bound()
		c := CheckBucket(ops, size, rate)
		rep.Bucket, rep.Size, rep.Rate = &c, size, rate
	case "leases":
		c := CheckCount(r.holds.hs, rep.End)
		rep.Leases, rep.Capacity = &c, LeaseCapacity
		rep.LeaseMean = MeanCount(r.holds.hs, rep.FaultAt, rep.End, rep.End) / 1000
		if r.mode.Tree {
			o := CheckOutlived(r.answers, polls, func(i int) string { return "mid-" + strconv.Itoa(i) })
			rep.Outlived = &o
		}
	case "copies":
		hs := r.holds.hs
		if h := r.holder; h != nil {
			for i := range hs {
				if hs[i].Key == holderDomain {
					hs[i].Released = h.killed
				}
			}
			// The fault's recovery: from the kill until its copies
			// were released.
			rep.Recovery = <-h.released
			if rep.Recovery == 0 {
				rep.Lost += h.granted
			}
		}
		var load []Hold
		for _, h := range hs {
			if h.Key != holderDomain {
				load = append(load, h)
			}
		}
		c, g := CheckCount(load, rep.End), CheckCount(hs, rep.End)
		rep.Count, rep.Limit, rep.Global, rep.GlobalLimit = &c, CopyLimit, &g, GlobalLimit
		if err := r.settle(ctx, rep); err != nil {
			return nil, err
		}
	}
	return rep, nil
}

// settled reports whether every worker's last answer gave it a lease
// within 5 % of the capacity of its max-min fair share (the division the
// servers converge to, across the tree too: docs/departures.md, rule 6)
// that had not ended.
func (r *runner) settled() bool {
	d := make(algorithm.Slice, len(r.leased))
	for i := range d {
		d[i] = algorithm.Requester{Wants: leaseWants(i), Subclients: 1}
	}
	level := d.WaterLevel(LeaseCapacity)
	for i := range r.leased {
		n := float64(r.leased[i].Load()) / 1000
		if n <= 0 || math.Abs(n-min(leaseWants(i), level)) > 0.05*LeaseCapacity {
			return false
		}
	}
	return true
}

// waitCopies waits until every server serves holds (its fleet epoch) and
// the resource grants a copy (its learning period over).
func (r *runner) waitCopies(ctx context.Context) error {
	for i := range r.conns {
		c := v1.NewLimitsClient(r.conns[i])
		deadline := time.Now().Add(30 * time.Second)
		for {
			s, err := openSession(ctx, c)
			if err == nil {
				s.close()
				_, _ = c.CloseSession(ctx, &v1.CloseSessionRequest{SessionId: s.id})
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("server %d does not serve holds: %w", i, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// With peers in the fleet, a fresh Redis starts the resource's
	// learning period at its first reserve (limits/redis.LearningPeriod):
	// wait it out before the recorded load.
	c := v1.NewLimitsClient(r.conns[0])
	s, err := openSession(ctx, c)
	if err != nil {
		return err
	}
	defer func() {
		s.close()
		_, _ = c.CloseSession(ctx, &v1.CloseSessionRequest{SessionId: s.id})
	}()
	if _, err := reserve(ctx, c, s.id, r.mode.resource, "warm", 1); err != nil {
		return err
	}
	_, err = c.Release(ctx, &v1.ReleaseRequest{SessionId: s.id, Resource: r.mode.resource, Domain: "warm", Copies: 1})
	return err
}

// settle checks, after the run, that every copy came back exactly once:
// within 30 s the whole limit can be reserved again — the domain limit in
// the load's domain, the rest of the global limit in another — (none
// lost), and then not one copy more in either (none counted free twice).
func (r *runner) settle(ctx context.Context, rep *Report) error {
	c := v1.NewLimitsClient(r.conns[len(r.conns)-1])
	s, err := openSession(ctx, c)
	if err != nil {
		return fmt.Errorf("settle: %w", err)
	}
	defer func() {
		s.close()
		_, _ = c.CloseSession(context.Background(), &v1.CloseSessionRequest{SessionId: s.id})
	}()
	try := func(domain string, n int64) (int64, error) {
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		defer cancel()
		resp, err := c.Reserve(cctx, &v1.ReserveRequest{SessionId: s.id, Resource: r.mode.resource, Domain: domain, Copies: n, MinCopies: 1})
		if err != nil || resp.GetStatus() != v1.ReserveResponse_OK {
			return 0, err
		}
		return resp.GetGranted(), nil
	}
	release := func(domain string, n int64) {
		if n > 0 {
			_, _ = c.Release(ctx, &v1.ReleaseRequest{SessionId: s.id, Resource: r.mode.resource, Domain: domain, Copies: n})
		}
	}
	start := time.Now()
	var best int64
	for {
		a, _ := try(r.mode.domain, CopyLimit)
		b, _ := try(holderDomain, GlobalLimit-CopyLimit)
		best = max(best, a+b)
		if a+b == GlobalLimit {
			break
		}
		release(r.mode.domain, a)
		release(holderDomain, b)
		if time.Since(start) > 30*time.Second {
			rep.Lost = GlobalLimit - best
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	rep.Settled = r.hist.Since(time.Now()) - rep.End
	for _, d := range []string{r.mode.domain, holderDomain} {
		n, err := try(d, 1)
		if err != nil {
			return fmt.Errorf("settle: reserve beyond the limit: %w", err)
		}
		rep.ReleasedTwice += n
	}
	return nil
}
