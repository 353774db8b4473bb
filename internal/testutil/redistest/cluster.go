package redistest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a running Redis Cluster, every node a redis-server process
// on a loopback port.
type Cluster struct {
	addrs []string
	procs []*proc
	dir   string
	opts  *redis.Options // of the helper's clients, Addr unset
}

// ReplicaNodeTimeout is the cluster-node-timeout of a cluster with
// replicas: how long a master may be unreachable before its replica takes
// over.
const ReplicaNodeTimeout = 2 * time.Second

// clusterWait bounds the wait for the cluster to be usable.
const clusterWait = 20 * time.Second

// StartCluster starts masters (at least 3) redis-server processes with
// cluster mode on and no replicas, on free loopback ports, each with its
// own free cluster bus port (--cluster-port), no persistence, and their
// nodes files in a temporary directory; joins them with redis-cli
// --cluster create; and waits, up to 20 s, until every node reports
// cluster_state:ok and a ClusterClient can write and read keys in
// different slots. Without redis-server or redis-cli it returns an error,
// or ErrSkip with SLUICE_SKIP_REDIS=1. Stop it with Stop.
func StartCluster(masters int) (*Cluster, error) { return StartClusterReplicas(masters, 0) }

// StartClusterReplicas is StartCluster with replicas replicas per master
// (redis-cli --cluster create --cluster-replicas), so that a master that
// fails or is told to (CLUSTER FAILOVER on its replica) is replaced; the
// nodes then use a cluster-node-timeout of ReplicaNodeTimeout, and Start
// waits until every replica is in sync and every node reports it online
// (so that MasterOf names it).
func StartClusterReplicas(masters, replicas int) (*Cluster, error) {
	return StartClusterSecure(masters, replicas, Security{})
}

// StartClusterSecure is StartClusterReplicas with every node secured by
// sec: with TLS the nodes listen on TLS only and talk TLS on the cluster
// bus (tls-cluster) and to their masters (tls-replication), presenting
// sec.TLSCert as their client certificate; with a password or ACL users
// replicas log in to their masters (masterauth, masteruser) as sec says.
// redis-cli --cluster create, the waits and Client connect as sec says.
// It returns an error for an inconsistent sec (see Security) or
// unreadable certificates, and ErrSkip as StartCluster.
func StartClusterSecure(masters, replicas int, sec Security) (*Cluster, error) {
	if masters < 3 {
		return nil, fmt.Errorf("redistest: a Redis Cluster needs at least 3 masters, not %d", masters)
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		return nil, missing("redis-cli")
	}
	server, sec, opts, dir, err := prepare(sec, "redistest-cluster-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{dir: dir, opts: opts}
	ok := false
	defer func() {
		if !ok {
			c.Stop()
		}
	}()
	nodes := masters * (1 + replicas)
	// A node's bus port defaults to its port + 10000, which may be taken
	// or above 65535: give each its own.
	ports, err := freePorts(2 * nodes)
	if err != nil {
		return nil, err
	}
	for i := range nodes {
		port, bus := ports[2*i], ports[2*i+1]
		p := strconv.Itoa(port)
		args := append([]string{server}, sec.serverArgs(port)...)
		args = append(args,
			"--cluster-enabled", "yes",
			"--cluster-port", strconv.Itoa(bus),
			"--cluster-config-file", filepath.Join(dir, "nodes-"+p+".conf"),
			"--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no",
			// Replicas sync at once rather than after 5 s.
			"--repl-diskless-sync-delay", "0",
			"--dir", dir)
		if sec.TLS() {
			args = append(args, "--tls-cluster", "yes")
		}
		if replicas > 0 {
			args = append(args, "--cluster-node-timeout", strconv.Itoa(int(ReplicaNodeTimeout/time.Millisecond)))
		}
		pr, err := startProc(args)
		if err != nil {
			return nil, err
		}
		c.procs = append(c.procs, pr)
		c.addrs = append(c.addrs, net.JoinHostPort("127.0.0.1", p))
	}
	deadline := time.Now().Add(clusterWait)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	for i, a := range c.addrs {
		if err := waitPing(ctx, c.options(a), c.procs[i]); err != nil {
			return nil, err
		}
	}
	hint := ""
	if sec.TLSAuthClients {
		// Redis logs the refusals only at loglevel verbose.
		hint = "\n(the nodes refuse each other on the cluster bus if TLSCert does not allow client authentication)"
	}
	secArgs, env := sec.cliArgs()
	args := append(secArgs, "--cluster", "create")
	args = append(args, c.addrs...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	create := exec.CommandContext(ctx, cli, args...)
	create.Env = env
	var out bytes.Buffer
	create.Stdout, create.Stderr = &out, &out
	if err := create.Run(); err != nil {
		return nil, fmt.Errorf("redistest: redis-cli --cluster create: %v\n%s%s", err, out.String(), hint)
	}
	if err := c.waitReady(ctx); err != nil {
		return nil, fmt.Errorf("%w%s", err, hint)
	}
	if replicas > 0 {
		if err := c.waitReplicas(ctx, masters*replicas); err != nil {
			return nil, err
		}
	}
	ok = true
	return c, nil
}

// StartClusterSecureT is StartClusterSecure for t, stopped when t ends;
// it skips t on ErrSkip and fails it on any other error.
func StartClusterSecureT(t testing.TB, masters, replicas int, sec Security) *Cluster {
	t.Helper()
	return forTest(t, func() (*Cluster, error) { return StartClusterSecure(masters, replicas, sec) })
}

// options returns the options of the helper's client of the node at addr.
func (c *Cluster) options(addr string) *redis.Options {
	o := *c.opts
	o.Addr = addr
	o.MaxRetries = -1
	return &o
}

// StartClusterT starts a cluster of masters for t, stopped when t ends;
// it skips t when redis-server or redis-cli is missing (ErrSkip) and fails
// it on any other error.
func StartClusterT(t testing.TB, masters int) *Cluster {
	t.Helper()
	return forTest(t, func() (*Cluster, error) { return StartCluster(masters) })
}

// missing is the error for a missing binary.
func missing(bin string) error {
	if os.Getenv("SLUICE_SKIP_REDIS") == "1" {
		return ErrSkip
	}
	return fmt.Errorf("%s not found (install Debian's redis-server, or set SLUICE_SKIP_REDIS=1 to skip)", bin)
}

// waitPing waits until the node at o.Addr, process p, answers PING, and
// fails at once if p ends.
func waitPing(ctx context.Context, o *redis.Options, p *proc) error {
	c := redis.NewClient(o)
	defer c.Close()
	for {
		err := c.Ping(ctx).Err()
		if err == nil {
			return nil
		}
		if p.exited() {
			return fmt.Errorf("redistest: redis-server on %s ended: %s", o.Addr, p.why())
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redistest: redis-server on %s did not answer within %v: %v", o.Addr, clusterWait, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitReady waits until every node reports cluster_state:ok and a
// ClusterClient writes and reads keys in slots owned by every master.
func (c *Cluster) waitReady(ctx context.Context) error {
	var last string
	for _, a := range c.addrs {
		n := redis.NewClient(c.options(a))
		for {
			info, err := n.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			last = fmt.Sprint(info, err)
			select {
			case <-ctx.Done():
				n.Close()
				return fmt.Errorf("redistest: cluster node %s not ok within %v: %s", a, clusterWait, last)
			case <-time.After(50 * time.Millisecond):
			}
		}
		n.Close()
	}
	cc := c.Client()
	defer cc.Close()
	// Keys "{0}".."{15}" hash to slots spread over the whole range, so
	// they reach every master of a small cluster.
	for {
		err := c.probe(ctx, cc)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redistest: cluster not usable within %v: %v", clusterWait, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// probe writes and reads keys in different slots through cc.
func (c *Cluster) probe(ctx context.Context, cc *redis.ClusterClient) error {
	slots := map[int64]bool{}
	for i := range 16 {
		k := "redistest:probe:{" + strconv.Itoa(i) + "}"
		if err := cc.Set(ctx, k, i, time.Minute).Err(); err != nil {
			return err
		}
		v, err := cc.Get(ctx, k).Int()
		if err != nil {
			return err
		}
		if v != i {
			return fmt.Errorf("read %d from %s, wrote %d", v, k, i)
		}
		if err := cc.Del(ctx, k).Err(); err != nil {
			return err
		}
		slot, err := cc.ClusterKeySlot(ctx, k).Result()
		if err != nil {
			return err
		}
		slots[slot] = true
	}
	if len(slots) < 2 {
		return errors.New("probe keys all in one slot")
	}
	return nil
}

// waitReplicas waits until every replica's link to its master is up,
// then, having written through every master, until every node reports
// replicas replicas online in CLUSTER SHARDS (as MasterOf reads them):
// for a second or so other nodes list a new replica as a master without
// slots, and one that has replicated nothing yet as "loading".
func (c *Cluster) waitReplicas(ctx context.Context, replicas int) error {
	if err := c.waitLinks(ctx); err != nil {
		return err
	}
	cc := c.Client()
	defer cc.Close()
	if err := c.probe(ctx, cc); err != nil {
		return fmt.Errorf("redistest: cluster with replicas not usable: %v", err)
	}
	for _, a := range c.addrs {
		n := redis.NewClient(c.options(a))
		for {
			shards, err := n.ClusterShards(ctx).Result()
			online := 0
			for _, sh := range shards {
				for _, node := range sh.Nodes {
					if node.Role != "master" && node.Health == "online" {
						online++
					}
				}
			}
			if err == nil && online == replicas {
				break
			}
			select {
			case <-ctx.Done():
				n.Close()
				return fmt.Errorf("redistest: node %s reports %d replicas online, not %d, within %v: %+v %v", a, online, replicas, clusterWait, shards, err)
			case <-time.After(50 * time.Millisecond):
			}
		}
		n.Close()
	}
	return nil
}

// waitLinks waits until every replica's link to its master is up.
func (c *Cluster) waitLinks(ctx context.Context) error {
	for _, a := range c.addrs {
		n := redis.NewClient(c.options(a))
		for {
			info, err := n.Info(ctx, "replication").Result()
			if err == nil && (strings.Contains(info, "role:master") || strings.Contains(info, "master_link_status:up")) {
				break
			}
			select {
			case <-ctx.Done():
				n.Close()
				return fmt.Errorf("redistest: replica %s not in sync within %v: %v %v", a, clusterWait, info, err)
			case <-time.After(50 * time.Millisecond):
			}
		}
		n.Close()
	}
	return nil
}

// MasterOf returns the address of the master serving key's slot, and of a
// replica of it ("" without replicas), as the cluster reports them now.
func (c *Cluster) MasterOf(ctx context.Context, key string) (master, replica string, err error) {
	cc := c.Client()
	defer cc.Close()
	slot, err := cc.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		return "", "", err
	}
	shards, err := cc.ClusterShards(ctx).Result()
	if err != nil {
		return "", "", err
	}
	for _, sh := range shards {
		for _, r := range sh.Slots {
			if r.Start > slot || slot > r.End {
				continue
			}
			for _, n := range sh.Nodes {
				port := n.Port
				if port == 0 { // TLS only
					port = n.TLSPort
				}
				addr := net.JoinHostPort(n.IP, strconv.FormatInt(port, 10))
				switch {
				case n.Role == "master":
					master = addr
				case n.Health == "online":
					replica = addr
				}
			}
			return master, replica, nil
		}
	}
	return "", "", fmt.Errorf("redistest: no node serves slot %d", slot)
}

// Kill kills the node at addr (SIGKILL), as a crashed host.
func (c *Cluster) Kill(addr string) error {
	for i, a := range c.addrs {
		if a == addr {
			return c.procs[i].cmd.Process.Kill()
		}
	}
	return fmt.Errorf("redistest: no node %s", addr)
}

// Addrs returns the nodes' host:port addresses on 127.0.0.1 (masters and
// replicas, in the order they started).
func (c *Cluster) Addrs() []string { return append([]string(nil), c.addrs...) }

// Client returns a new ClusterClient of the cluster, logged in and over
// TLS as the cluster's Security says (a plain client for StartCluster's);
// the caller closes it.
func (c *Cluster) Client() *redis.ClusterClient {
	return redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(),
		Username: c.opts.Username, Password: c.opts.Password, TLSConfig: c.opts.TLSConfig})
}

// Stop kills the nodes, waits for them and removes their directory.
func (c *Cluster) Stop() {
	killAll(c.procs)
	c.procs = nil
	removeDir(&c.dir)
}

// prepare is what a group of servers needs before it starts:
// redis-server's path (missing: an error, or ErrSkip), sec checked and
// made absolute, the helper's client options for it, and a temporary
// directory named from pattern (os.MkdirTemp's) that the caller removes.
func prepare(sec Security, pattern string) (bin string, _ Security, _ *redis.Options, dir string, _ error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", sec, nil, "", missing("redis-server")
	}
	if sec, err = sec.check(); err != nil {
		return "", sec, nil, "", err
	}
	opts, err := sec.Options("")
	if err != nil {
		return "", sec, nil, "", err
	}
	dir, err = os.MkdirTemp("", pattern)
	if err != nil {
		return "", sec, nil, "", err
	}
	return bin, sec, opts, dir, nil
}
