package chaos

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-rl/sluice/api/doorman"
	v1 "github.com/sluice-rl/sluice/api/sluice/v1"
	redisstore "github.com/sluice-rl/sluice/limits/redis"
)

// Fault is one thing that goes wrong: inject starts it at the fault's
// start, and the function it returns heals it (nil when there is nothing
// to heal: a kill, a restart).
type Fault struct {
	Name, Doc string
	// applies reports whether the fault means something for the mode.
	applies func(m *Mode) bool
	inject  func(r *runner) (heal func() error, err error)
	// persistent: Redis runs with its append-only file; etcdMembers: how
	// many members etcd runs (0: one); skew: how far the fault sets a
	// server's and a client's clocks off (the servers then read their
	// clocks' skew from a file, setSkew).
	persistent  bool
	etcdMembers int
	skew        time.Duration
	// hold, when longer than Options.Hold, is how long the fault lasts.
	hold time.Duration
}

func onRedis(m *Mode) bool    { return m.Store == Redis }
func onCluster(m *Mode) bool  { return m.Store == Cluster || m.Store == ClusterTLS }
func onSentinel(m *Mode) bool { return m.Store == Sentinel }
func always(*Mode) bool       { return true }
func onLeases(m *Mode) bool   { return m.Kind == "leases" }

// latency is a toxic adding d to every answer from the store.
func latency(d time.Duration) func(r *runner) (func() error, error) {
	return toxic(fmt.Sprintf(`{"type":"latency","stream":"downstream","attributes":{"latency":%d}}`, d.Milliseconds()))
}

func toxic(spec string) func(r *runner) (func() error, error) {
	return func(r *runner) (func() error, error) {
		return r.env.RedisProxies.heal, r.env.RedisProxies.toxic(spec)
	}
}

// Faults are the faults the harness knows, by name.
var Faults = map[string]*Fault{
	"none": {Doc: "no fault: the baseline", applies: always,
		inject: func(*runner) (func() error, error) { return nil, nil }},
	"server-kill": {Doc: "SIGKILL one server, start it again when the fault heals", applies: always,
		inject: func(r *runner) (func() error, error) {
			r.env.Servers[0].Kill()
			return r.env.Servers[0].Restart, nil
		}},
	"server-stop": {Doc: "SIGSTOP one server (a stalled host), SIGCONT when the fault heals", applies: always,
		inject: func(r *runner) (func() error, error) {
			s := r.env.Servers[0]
			return func() error { return s.Signal(syscall.SIGCONT) }, s.Signal(syscall.SIGSTOP)
		}},
	"redis-latency-10ms":  {Doc: "every answer from Redis 10 ms late (toxiproxy latency)", applies: onRedis, inject: latency(10 * time.Millisecond)},
	"redis-latency-100ms": {Doc: "every answer from Redis 100 ms late", applies: onRedis, inject: latency(100 * time.Millisecond)},
	"redis-latency-2s":    {Doc: "every answer from Redis 2 s late (past --redis-timeout)", applies: onRedis, inject: latency(2 * time.Second)},
	"redis-reset": {Doc: "every connection to Redis reset as data arrives (toxiproxy reset_peer)", applies: onRedis,
		inject: toxic(`{"type":"reset_peer","stream":"upstream","attributes":{"timeout":0}}`)},
	"redis-blackhole": {Doc: "Redis's packets dropped: connections hang, nothing answers (toxiproxy timeout 0)", applies: onRedis,
		inject: toxic(`{"type":"timeout","stream":"upstream","attributes":{"timeout":0}}`)},
	"server-cut": {Doc: "one server cut off from Redis and etcd (its proxies closed), the others unharmed", applies: onRedis,
		inject: func(r *runner) (func() error, error) {
			r.env.RedisProxies.cut(0)
			if r.env.EtcdProxies != nil {
				r.env.EtcdProxies.cut(0)
			}
			return func() error {
				err := r.env.RedisProxies.heal()
				if r.env.EtcdProxies != nil && err == nil {
					err = r.env.EtcdProxies.heal()
				}
				return err
			}, nil
		}},
	"redis-stop": {Doc: "SIGSTOP redis-server (a stalled Redis), SIGCONT when the fault heals", applies: onRedis,
		inject: func(r *runner) (func() error, error) {
			r.env.Redis.Pause()
			return func() error { r.env.Redis.Resume(); return nil }, nil
		}},
	"redis-restart": {Doc: "SIGKILL redis-server and start it again without persistence: it comes back empty", applies: onRedis,
		inject: func(r *runner) (func() error, error) { return nil, r.env.Redis.Restart() }},
	"redis-restart-aof": {Doc: "SIGKILL redis-server and start it again from its append-only file (appendfsync always)", applies: onRedis, persistent: true,
		inject: func(r *runner) (func() error, error) { return nil, r.env.Redis.Restart() }},
	"cluster-failover": {Doc: "CLUSTER FAILOVER on the replica of the master holding the bucket", applies: onCluster,
		inject: func(r *runner) (func() error, error) {
			_, replica, err := r.env.Cluster.MasterOf(context.Background(), r.mode.hashKey())
			if err != nil {
				return nil, err
			}
			o, err := r.env.Sec.Options(replica)
			if err != nil {
				return nil, err
			}
			c := redis.NewClient(o)
			defer c.Close()
			return nil, c.ClusterFailover(context.Background()).Err()
		}},
	"cluster-kill-master": {Doc: "SIGKILL the master holding the bucket: its replica takes over after the node timeout (2 s)", applies: onCluster,
		inject: func(r *runner) (func() error, error) {
			master, _, err := r.env.Cluster.MasterOf(context.Background(), r.mode.hashKey())
			if err != nil {
				return nil, err
			}
			return nil, r.env.Cluster.Kill(master)
		}},
	"sentinel-failover": {Doc: "SENTINEL FAILOVER under load (redistest's Failover: the replica promoted, no agreement needed); the old master stays a writable master until Sentinel makes it a replica of the new one (about 10 s)",
		applies: onSentinel,
		inject: func(r *runner) (func() error, error) {
			s := r.env.Sentinel
			old, err := r.watchSentinel()
			if err != nil {
				return nil, err
			}
			start := time.Now()
			nm, err := s.Failover(context.Background())
			if err != nil {
				return nil, err
			}
			r.logf("sentinel: %s failed over to %s, the sentinels agreeing after %v", old, nm, time.Since(start).Round(time.Millisecond))
			return nil, nil
		}},
	"sentinel-kill-master": {Doc: "SIGKILL the master (redistest's KillMaster): the sentinels deem it down after 1 s (down-after-milliseconds) and promote the replica; the killed one stays dead",
		applies: onSentinel,
		inject: func(r *runner) (func() error, error) {
			if _, err := r.watchSentinel(); err != nil {
				return nil, err
			}
			old, err := r.env.Sentinel.KillMaster()
			if err == nil {
				r.logf("sentinel: killed the master %s", old)
			}
			return nil, err
		}},
	"master-kill": {Doc: "SIGKILL the elected master (the other task takes over after the election TTL, 2 s, and learns for a lease length), start it again when the fault heals",
		applies: func(m *Mode) bool { return m.Kind == "leases" && m.Etcd },
		inject: func(r *runner) (func() error, error) {
			m, err := r.master()
			if err != nil {
				return nil, err
			}
			m.Kill()
			return m.Restart, nil
		}},
	"etcd-cut": {Doc: "every server cut off from etcd (proxies closed)", applies: func(m *Mode) bool { return m.Etcd },
		inject: func(r *runner) (func() error, error) {
			r.env.EtcdProxies.cut(0, 1, 2)
			return r.env.EtcdProxies.heal, nil
		}},
	"etcd-leader-kill": {Doc: "etcd runs three members; SIGKILL-like stop of the raft leader (the other two elect a new one), start it again from its data when the fault heals",
		applies: func(m *Mode) bool { return m.Etcd }, etcdMembers: 3,
		inject: func(r *runner) (func() error, error) {
			c := r.env.Etcd
			lead := c.Leader()
			if lead < 0 {
				return nil, errors.New("etcd has no leader to kill")
			}
			r.logf("etcd: killing the leader, member %d", lead)
			c.Kill(lead)
			return func() error { return c.Restart(lead) }, nil
		}},
	"parent-cut": {Doc: "a Doorman intermediate (server 1) cut off from its parent, the root (the toxiproxy between them closed), its clients still reaching it; reopened when the fault heals, after 8 s at least (longer than a lease: the intermediate's runs out)",
		applies: func(m *Mode) bool { return m.Tree }, hold: 8 * time.Second,
		inject: func(r *runner) (func() error, error) {
			r.env.ParentProxies.cut(1)
			return r.env.ParentProxies.heal, nil
		}},
	"clock-skew-behind": {Doc: "the clocks of a Doorman server (leases-tree: an intermediate, server 1; leases: the master) and of one of its clients (worker 0) step 3 s back, and forward again when the fault heals",
		applies: onLeases, skew: -3 * time.Second, inject: skewClocks},
	"clock-skew-ahead": {Doc: "as clock-skew-behind, 3 s ahead", applies: onLeases, skew: 3 * time.Second, inject: skewClocks},
	"client-kill": {Doc: "SIGKILL a client process while it holds copies: its session's ttl (2 s) releases them", applies: func(m *Mode) bool { return m.Kind == "copies" },
		inject: func(r *runner) (func() error, error) {
			h, err := startHolder(r.env.Servers[0].Addr, r.mode.resource, holderDomain, GlobalLimit-CopyLimit)
			if err != nil {
				return nil, err
			}
			r.holder = h
			r.addHold(Hold{Key: holderDomain, N: h.granted, Acquired: r.hist.Since(h.at)})
			return func() error {
				err := h.cmd.Process.Kill()
				_ = h.cmd.Wait()
				h.killed = r.hist.Since(time.Now())
				h.released = make(chan time.Duration, 1)
				go func() { h.released <- r.untilReleased(holderDomain) }()
				return err
			}, nil
		}},
}

func init() {
	for name, f := range Faults {
		f.Name = name
	}
}

// skewClocks sets the fault's skew on a server's clock — an intermediate's
// (server 1) in a tree, else the master's — and on worker 0's (a client of
// that server), and heals by setting both back.
func skewClocks(r *runner) (func() error, error) {
	i := 1
	if !r.mode.Tree {
		m, err := r.master()
		if err != nil {
			return nil, err
		}
		i = slices.Index(r.env.Servers, m)
	}
	file := skewFile(r.env.Dir, i)
	r.logf("clocks of %s and worker 0: %v", r.env.Servers[i].Name, r.fault.skew)
	r.skew.set(r.hist.Since(time.Now()), r.fault.skew)
	if err := setSkew(file, r.fault.skew); err != nil {
		return nil, err
	}
	return func() error {
		r.skew.set(r.hist.Since(time.Now()), 0)
		return setSkew(file, 0)
	}, nil
}

// hashKey is a key in the slot of the mode's resource (limits/redis's
// hash tag: {r…} for a bucket's, {c…} for a copy-limited resource's,
// {e…} for Envoy's counters of a domain).
func (m *Mode) hashKey() string {
	if m.envoy { // limits/redis's RLS: {e<Envoy domain>}
		return "{e" + m.resource + "}"
	}
	if m.Kind == "copies" {
		return "{c" + m.resource + "}"
	}
	return "{r" + m.resource + "}"
}

// holderEnv, when set, makes MaybeRunHolder run the holder.
const holderEnv = "SLUICE_CHAOS_HOLDER"

// holderDomain is the domain the killed client holds copies in, apart
// from the load's, so that its count tells when they are back.
const holderDomain = "killed"

// holder is a client process holding copies.
type holder struct {
	cmd     *exec.Cmd
	granted int64
	at      time.Time
	// killed is when it was killed; released receives how long after
	// that its copies were released (zero: not within 30 s).
	killed   time.Duration
	released chan time.Duration
}

// untilReleased polls Redis (or the Redis Cluster) for domain's count of
// the mode's resource (limits/redis's key) until it is 0, for up to 30 s,
// and returns how long that took (zero if it did not happen).
func (r *runner) untilReleased(domain string) time.Duration {
	var c redis.UniversalClient
	if r.env.Cluster != nil {
		c = r.env.Cluster.Client()
	} else {
		c = r.env.Redis.Client()
	}
	defer c.Close()
	start := time.Now()
	key := cmp.Or(r.env.Prefix, redisstore.DefaultPrefix) + "{c" + r.mode.resource + "}n:d:" + domain
	for time.Since(start) < 30*time.Second {
		n, err := c.HGet(context.Background(), key, "_").Int64()
		if err == nil && n == 0 || errors.Is(err, redis.Nil) {
			return time.Since(start)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return 0
}

// holderSpec is what the holder process is told, and answers.
type holderSpec struct {
	Addr, Resource, Domain string
	Copies, Granted        int64
	Err                    string
}

// startHolder runs this executable again as a holder (MaybeRunHolder) and
// waits for it to hold its copies.
func startHolder(addr, resource, domain string, copies int64) (*holder, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	spec, _ := json.Marshal(holderSpec{Addr: addr, Resource: resource, Domain: domain, Copies: copies})
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), holderEnv+"="+string(spec))
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	var got holderSpec
	if err := json.NewDecoder(out).Decode(&got); err != nil || got.Err != "" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("holder: %v%s", err, got.Err)
	}
	return &holder{cmd: cmd, granted: got.Granted, at: time.Now()}, nil
}

// MaybeRunHolder is the holder process: when this process was started by
// the harness as a client holding copies, it opens a session, reserves
// them, prints what it got, keeps the session alive until it is killed,
// and never returns. Otherwise it returns at once. Call it first thing in
// main (and in TestMain of tests that run the harness).
func MaybeRunHolder() {
	v, ok := os.LookupEnv(holderEnv)
	if !ok {
		return
	}
	var spec holderSpec
	fail := func(err error) {
		spec.Err = err.Error()
		_ = json.NewEncoder(os.Stdout).Encode(spec)
		os.Exit(1)
	}
	if err := json.Unmarshal([]byte(v), &spec); err != nil {
		fail(err)
	}
	conn, err := dial(spec.Addr)
	if err != nil {
		fail(err)
	}
	c := v1.NewLimitsClient(conn)
	s, err := openSession(context.Background(), c)
	if err != nil {
		fail(err)
	}
	granted, err := reserve(context.Background(), c, s.id, spec.Resource, spec.Domain, spec.Copies)
	if err != nil {
		fail(err)
	}
	spec.Granted = granted
	_ = json.NewEncoder(os.Stdout).Encode(spec)
	select {}
}

// master returns the server that is master now, asking the first server
// (a non-master redirects to it).
func (r *runner) master() (*Server, error) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	resp, err := doorman.NewCapacityClient(r.conns[0]).GetCapacity(ctx, &doorman.GetCapacityRequest{ClientId: proto.String("chaos-probe"),
		Resource: []*doorman.ResourceRequest{{ResourceId: proto.String("leases"), Priority: proto.Int64(0), Wants: proto.Float64(0)}}})
	if err != nil {
		return nil, err
	}
	if m := resp.GetMastership(); m != nil && len(resp.GetResponse()) == 0 {
		for _, s := range r.env.Servers {
			if s.Addr == m.GetMasterAddress() {
				return s, nil
			}
		}
		return nil, fmt.Errorf("master %s is none of the servers", m.GetMasterAddress())
	}
	return r.env.Servers[0], nil
}
