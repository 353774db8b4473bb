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
	cmds  []*exec.Cmd
	dir   string
}

// ReplicaNodeTimeout is the cluster-node-timeout of a cluster with
// replicas: how long a master may be unreachable before its replica takes
// over.
const ReplicaNodeTimeout = 2 * time.Second

// clusterWait bounds the wait for the cluster to be usable.
const clusterWait = 20 * time.Second

// StartCluster starts masters (at least 3) redis-server processes with
// cluster mode on and no replicas, free loopback ports whose cluster bus ports (port +
// 10000) are free too, no persistence, and their nodes files in a
// temporary directory; joins them with redis-cli --cluster create; and
// waits, up to 20 s, until every node reports cluster_state:ok and a
// ClusterClient can write and read keys in different slots. Without
// redis-server or redis-cli it returns an error, or ErrSkip with
// SLUICE_SKIP_REDIS=1. Stop it with Stop.
func StartCluster(masters int) (*Cluster, error) { return StartClusterReplicas(masters, 0) }

// StartClusterReplicas is StartCluster with replicas replicas per master
// (redis-cli --cluster create --cluster-replicas), so that a master that
// fails or is told to (CLUSTER FAILOVER on its replica) is replaced; the
// nodes then use a cluster-node-timeout of ReplicaNodeTimeout, and Start
// waits until every replica is in sync.
func StartClusterReplicas(masters, replicas int) (*Cluster, error) {
	if masters < 3 {
		return nil, fmt.Errorf("redistest: a Redis Cluster needs at least 3 masters, not %d", masters)
	}
	server, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, missing("redis-server")
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		return nil, missing("redis-cli")
	}
	dir, err := os.MkdirTemp("", "redistest-cluster-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{dir: dir}
	ok := false
	defer func() {
		if !ok {
			c.Stop()
		}
	}()
	held := map[int]bool{}
	for range masters * (1 + replicas) {
		port, err := clusterPort(held)
		if err != nil {
			return nil, err
		}
		held[port] = true
		p := strconv.Itoa(port)
		args := []string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, "nodes-"+p+".conf"),
			"--port", p, "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no",
			"--dir", dir}
		if replicas > 0 {
			args = append(args, "--cluster-node-timeout", strconv.Itoa(int(ReplicaNodeTimeout/time.Millisecond)))
		}
		cmd := exec.Command(server, args...)
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		c.cmds = append(c.cmds, cmd)
		c.addrs = append(c.addrs, net.JoinHostPort("127.0.0.1", p))
	}
	deadline := time.Now().Add(clusterWait)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	for _, a := range c.addrs {
		if err := waitPing(ctx, a); err != nil {
			return nil, err
		}
	}
	args := append([]string{"--cluster", "create"}, c.addrs...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	create := exec.CommandContext(ctx, cli, args...)
	var out bytes.Buffer
	create.Stdout, create.Stderr = &out, &out
	if err := create.Run(); err != nil {
		return nil, fmt.Errorf("redistest: redis-cli --cluster create: %v\n%s", err, out.String())
	}
	if err := c.waitReady(ctx); err != nil {
		return nil, err
	}
	if replicas > 0 {
		if err := c.waitReplicas(ctx); err != nil {
			return nil, err
		}
	}
	ok = true
	return c, nil
}

// StartClusterT starts a cluster of masters for t, stopped when t ends;
// it skips t when redis-server or redis-cli is missing (ErrSkip) and fails
// it on any other error.
func StartClusterT(t testing.TB, masters int) *Cluster {
	t.Helper()
	c, err := StartCluster(masters)
	if errors.Is(err, ErrSkip) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return c
}

// missing is the error for a missing binary.
func missing(bin string) error {
	if os.Getenv("SLUICE_SKIP_REDIS") == "1" {
		return ErrSkip
	}
	return fmt.Errorf("%s not found (install Debian's redis-server, or set SLUICE_SKIP_REDIS=1 to skip)", bin)
}

// clusterPort returns a free loopback port below 55536 whose cluster bus
// port (+10000) is free too, and not in held.
func clusterPort(held map[int]bool) (int, error) {
	for range 100 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if port+10000 > 65535 || held[port] || held[port+10000] || held[port-10000] {
			continue
		}
		bus, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+10000)))
		if err != nil {
			continue
		}
		bus.Close()
		return port, nil
	}
	return 0, errors.New("redistest: no free port pair (port, port+10000) in 100 tries")
}

// waitPing waits until the node at addr answers PING.
func waitPing(ctx context.Context, addr string) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	for c.Ping(ctx).Err() != nil {
		select {
		case <-ctx.Done():
			return fmt.Errorf("redistest: redis-server on %s did not answer within %v", addr, clusterWait)
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// waitReady waits until every node reports cluster_state:ok and a
// ClusterClient writes and reads keys in slots owned by every master.
func (c *Cluster) waitReady(ctx context.Context) error {
	var last string
	for _, a := range c.addrs {
		n := redis.NewClient(&redis.Options{Addr: a, MaxRetries: -1})
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

// waitReplicas waits until every replica's link to its master is up.
func (c *Cluster) waitReplicas(ctx context.Context) error {
	for _, a := range c.addrs {
		n := redis.NewClient(&redis.Options{Addr: a, MaxRetries: -1})
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
				addr := net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10))
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
			return c.cmds[i].Process.Kill()
		}
	}
	return fmt.Errorf("redistest: no node %s", addr)
}

// Addrs returns the nodes' host:port addresses on 127.0.0.1 (masters and
// replicas, in the order they started).
func (c *Cluster) Addrs() []string { return append([]string(nil), c.addrs...) }

// Client returns a new ClusterClient of the cluster; the caller closes it.
func (c *Cluster) Client() *redis.ClusterClient {
	return redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
}

// Stop kills the nodes, waits for them and removes their directory.
func (c *Cluster) Stop() {
	for _, cmd := range c.cmds {
		_ = cmd.Process.Kill()
	}
	for _, cmd := range c.cmds {
		_ = cmd.Wait()
	}
	c.cmds = nil
	if c.dir != "" {
		_ = os.RemoveAll(c.dir)
		c.dir = ""
	}
}
