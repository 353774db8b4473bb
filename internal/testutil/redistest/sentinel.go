package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SentinelDownAfter is the sentinels' down-after-milliseconds: how long
// a master may not answer before a sentinel deems it down. A failover
// after a master's crash (KillMaster) takes about this, plus an election
// (about a second).
const SentinelDownAfter = time.Second

// SentinelFailoverTimeout is the sentinels' failover-timeout. Sentinel
// does not fail the same master over again within twice this.
const SentinelFailoverTimeout = 5 * time.Second

// sentinelWait bounds StartSentinel's wait and those of Sentinel's
// methods.
const sentinelWait = 20 * time.Second

// Sentinel is a master and a replica watched by three sentinels
// (redis-server --sentinel) under the name Name, every one a process on a
// loopback port.
type Sentinel struct {
	name      string
	servers   []*Server // the first master, then its replica
	sentinels []*proc
	saddrs    []string
	dir       string
	opts      *redis.Options // of the helper's clients of the servers, Addr unset
	sopts     *redis.Options // of the helper's clients of the sentinels, Addr unset
}

// StartSentinel starts a master and a replica of it (--replicaof)
// without persistence, and three sentinels monitoring the master under
// the name "mymaster" with quorum 2, down-after-milliseconds
// SentinelDownAfter and failover-timeout SentinelFailoverTimeout, each
// with its own config file (which sentinels rewrite) in a temporary
// directory; every process on free loopback ports. It waits, up to 20 s,
// until the replica is in sync and every sentinel knows the master, the
// replica and the two other sentinels.
//
// The servers are secured by sec as StartSecure's: the replica logs in
// to its master (masteruser, masterauth) and the sentinels to the servers
// (auth-user, auth-pass) as sec says. With TLS the sentinels listen on
// TLS only too, with the same certificate and tls-auth-clients (a
// go-redis FailoverClient uses one TLS configuration for sentinels and
// servers), and connect to servers and to each other over TLS
// (tls-replication) presenting sec.TLSCert. The sentinels want no
// password.
//
// It returns an error for an inconsistent sec (see Security) or
// unreadable certificates; without redis-server an error, or ErrSkip
// with SLUICE_SKIP_REDIS=1. Stop it with Stop.
func StartSentinel(sec Security) (*Sentinel, error) {
	bin, sec, opts, dir, err := prepare(sec, "redistest-sentinel-")
	if err != nil {
		return nil, err
	}
	s := &Sentinel{name: "mymaster", dir: dir, opts: opts,
		sopts: &redis.Options{TLSConfig: opts.TLSConfig, MaxRetries: -1}}
	ok := false
	defer func() {
		if !ok {
			s.Stop()
		}
	}()
	ports, err := freePorts(5)
	if err != nil {
		return nil, err
	}
	for i, port := range ports[:2] {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		o := *opts
		o.Addr = addr
		args := append([]string{bin}, sec.serverArgs(port)...)
		// Replicas sync at once rather than after 5 s, and save the
		// master's data (as a replica with a disk load does) in dir.
		args = append(args, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--repl-diskless-sync-delay", "0",
			"--dir", dir, "--dbfilename", "dump-"+strconv.Itoa(port)+".rdb")
		if i > 0 {
			args = append(args, "--replicaof", "127.0.0.1", strconv.Itoa(ports[0]))
		}
		srv := &Server{Addr: addr, wait: 10 * time.Second, opts: &o, args: args}
		if err := srv.run(); err != nil {
			return nil, err
		}
		s.servers = append(s.servers, srv)
	}
	user, pass := sec.login()
	for i, port := range ports[2:] {
		var conf strings.Builder
		conf.WriteString("bind 127.0.0.1\n")
		conf.WriteString(sec.configTLS(port))
		fmt.Fprintf(&conf, "dir %s\n", quote(dir))
		fmt.Fprintf(&conf, "sentinel monitor %s 127.0.0.1 %d 2\n", s.name, ports[0])
		fmt.Fprintf(&conf, "sentinel down-after-milliseconds %s %d\n", s.name, SentinelDownAfter.Milliseconds())
		fmt.Fprintf(&conf, "sentinel failover-timeout %s %d\n", s.name, SentinelFailoverTimeout.Milliseconds())
		if user != "" {
			fmt.Fprintf(&conf, "sentinel auth-user %s %s\n", s.name, quote(user))
		}
		if pass != "" {
			fmt.Fprintf(&conf, "sentinel auth-pass %s %s\n", s.name, quote(pass))
		}
		file := filepath.Join(dir, "sentinel-"+strconv.Itoa(i)+".conf")
		if err := os.WriteFile(file, []byte(conf.String()), 0o600); err != nil {
			return nil, err
		}
		p, err := startProc([]string{bin, file, "--sentinel"})
		if err != nil {
			return nil, err
		}
		s.sentinels = append(s.sentinels, p)
		s.saddrs = append(s.saddrs, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), sentinelWait)
	defer cancel()
	for i, a := range s.saddrs {
		o := *s.sopts
		o.Addr = a
		if err := waitPing(ctx, &o, s.sentinels[i]); err != nil {
			return nil, err
		}
	}
	if err := s.WaitSynced(ctx); err != nil {
		return nil, err
	}
	ok = true
	return s, nil
}

// StartSentinelT is StartSentinel for t, stopped when t ends; it skips t
// on ErrSkip and fails it on any other error.
func StartSentinelT(t testing.TB, sec Security) *Sentinel {
	t.Helper()
	return forTest(t, func() (*Sentinel, error) { return StartSentinel(sec) })
}

// Name returns the name the sentinels know the master by ("mymaster").
func (s *Sentinel) Name() string { return s.name }

// SentinelAddrs returns the sentinels' host:port addresses on 127.0.0.1.
func (s *Sentinel) SentinelAddrs() []string { return append([]string(nil), s.saddrs...) }

// Addrs returns the servers' host:port addresses on 127.0.0.1: the first
// master, then its replica, whichever is master now.
func (s *Sentinel) Addrs() []string {
	addrs := make([]string, len(s.servers))
	for i, srv := range s.servers {
		addrs[i] = srv.Addr
	}
	return addrs
}

// FailoverOptions returns new options of a go-redis FailoverClient of the
// master: the sentinels' addresses, Name, and the login and TLS
// configuration of the Security the servers were started with.
func (s *Sentinel) FailoverOptions() *redis.FailoverOptions {
	return &redis.FailoverOptions{MasterName: s.name, SentinelAddrs: s.SentinelAddrs(),
		Username: s.opts.Username, Password: s.opts.Password, TLSConfig: s.opts.TLSConfig}
}

// Client returns a new FailoverClient (redis.NewFailoverClient) of
// FailoverOptions, which follows the master the sentinels report; the
// caller closes it.
func (s *Sentinel) Client() *redis.Client { return redis.NewFailoverClient(s.FailoverOptions()) }

// sentinel returns a new client of the i-th sentinel.
func (s *Sentinel) sentinel(i int) *redis.SentinelClient {
	o := *s.sopts
	o.Addr = s.saddrs[i]
	return redis.NewSentinelClient(&o)
}

// server returns a new client of the server at addr.
func (s *Sentinel) server(addr string) *redis.Client {
	o := *s.opts
	o.Addr = addr
	o.MaxRetries = -1
	return redis.NewClient(&o)
}

// askMaster returns the master's address as the i-th sentinel reports it
// (SENTINEL GET-MASTER-ADDR-BY-NAME).
func (s *Sentinel) askMaster(ctx context.Context, i int) (string, error) {
	c := s.sentinel(i)
	defer c.Close()
	hp, err := c.GetMasterAddrByName(ctx, s.name).Result()
	if err != nil {
		return "", fmt.Errorf("redistest: sentinel %s: %w", s.saddrs[i], err)
	}
	if len(hp) != 2 {
		return "", fmt.Errorf("redistest: sentinel %s reports master %q", s.saddrs[i], hp)
	}
	return net.JoinHostPort(hp[0], hp[1]), nil
}

// MasterAddr returns the master's host:port as the first sentinel that
// answers reports it (SENTINEL GET-MASTER-ADDR-BY-NAME), or the last
// sentinel's error when none answers.
func (s *Sentinel) MasterAddr(ctx context.Context) (string, error) {
	var err error
	for i := range s.saddrs {
		var addr string
		if addr, err = s.askMaster(ctx, i); err == nil {
			return addr, nil
		}
	}
	return "", err
}

// agreed returns the master's address if every sentinel reports the same.
func (s *Sentinel) agreed(ctx context.Context) (string, error) {
	var master string
	for i := range s.saddrs {
		addr, err := s.askMaster(ctx, i)
		if err != nil {
			return "", err
		}
		if i > 0 && addr != master {
			return "", fmt.Errorf("redistest: sentinels report masters %s and %s", master, addr)
		}
		master = addr
	}
	return master, nil
}

// role returns the role line of the server at addr's INFO replication
// ("master", "slave").
func (s *Sentinel) role(ctx context.Context, addr string) (string, error) {
	c := s.server(addr)
	defer c.Close()
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return "", err
	}
	for line := range strings.Lines(info) {
		if r, ok := strings.CutPrefix(strings.TrimSpace(line), "role:"); ok {
			return r, nil
		}
	}
	return "", fmt.Errorf("redistest: no role in INFO of %s", addr)
}

// WaitMaster waits until every sentinel reports the same master, other
// than notAddr, and that server reports role:master, and returns its
// host:port; it gives up, with an error, after 20 s or when ctx is done.
// After KillMaster, the sentinels promote the replica in about
// SentinelDownAfter and an election, a couple of seconds.
func (s *Sentinel) WaitMaster(ctx context.Context, notAddr string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, sentinelWait)
	defer cancel()
	for {
		addr, err := s.agreed(ctx)
		if err == nil && addr == notAddr {
			err = fmt.Errorf("redistest: the sentinels still report master %s", addr)
		}
		if err == nil {
			var role string
			if role, err = s.role(ctx, addr); err == nil && role != "master" {
				err = fmt.Errorf("redistest: the sentinels report master %s, which is a %s", addr, role)
			}
		}
		if err == nil {
			return addr, nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("redistest: no new master (not %s) within %v: %v", notAddr, sentinelWait, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Failover has a sentinel fail the master over to the replica (SENTINEL
// FAILOVER, which needs no agreement) and waits, as WaitMaster, until the
// sentinels report the replica as master and it reports role:master;
// it returns the new master's host:port. It fails at once if the
// sentinel refuses (no good replica: "NOGOODSLAVE").
//
// In Redis 7.0 the old master stays a master, and writable, for about 10
// s after Failover returns, until a sentinel reconfigures it as a
// replica of the new one; only then, once in sync (see WaitSynced), is
// it a good replica for another Failover, which Sentinel moreover
// refuses for twice SentinelFailoverTimeout after the last.
func (s *Sentinel) Failover(ctx context.Context) (newMaster string, err error) {
	ctx, cancel := context.WithTimeout(ctx, sentinelWait)
	defer cancel()
	old, err := s.MasterAddr(ctx)
	if err != nil {
		return "", err
	}
	c := s.sentinel(0)
	err = c.Failover(ctx, s.name).Err()
	c.Close()
	if err != nil {
		return "", fmt.Errorf("redistest: SENTINEL FAILOVER %s: %w", s.name, err)
	}
	return s.WaitMaster(ctx, old)
}

// KillMaster kills the process of the master the sentinels report
// (SIGKILL), as a crashed host, and returns its host:port; WaitMaster
// then waits for the sentinels to promote the replica. It is an error
// when no sentinel answers within 5 s or the master is down already.
func (s *Sentinel) KillMaster() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	addr, err := s.MasterAddr(ctx)
	if err != nil {
		return "", err
	}
	for _, srv := range s.servers {
		if srv.Addr == addr && !srv.p.exited() {
			srv.Stop()
			return addr, nil
		}
	}
	return "", fmt.Errorf("redistest: master %s is down already", addr)
}

// WaitSynced waits until the sentinels agree on a master that reports
// role:master, the other server is its replica with its link up, and
// every sentinel knows that replica (healthy, link ok) and the two other
// sentinels; it gives up, with an error, after 20 s or when ctx is done.
// StartSentinel returns once this holds; after Failover it holds again
// once Sentinel has turned the old master into a replica (about 10 s);
// after KillMaster it never holds.
func (s *Sentinel) WaitSynced(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, sentinelWait)
	defer cancel()
	for {
		err := s.synced(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redistest: sentinel group not in sync within %v: %v", sentinelWait, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// synced returns nil if WaitSynced's condition holds, else why not.
func (s *Sentinel) synced(ctx context.Context) error {
	master, err := s.agreed(ctx)
	if err != nil {
		return err
	}
	if role, err := s.role(ctx, master); err != nil || role != "master" {
		return fmt.Errorf("master %s: role %q, %v", master, role, err)
	}
	var replica string
	for _, srv := range s.servers {
		if srv.Addr != master {
			replica = srv.Addr
		}
	}
	rc := s.server(replica)
	info, err := rc.Info(ctx, "replication").Result()
	rc.Close()
	if err != nil {
		return fmt.Errorf("replica %s: %w", replica, err)
	}
	host, port, _ := net.SplitHostPort(master)
	for _, want := range []string{"role:slave", "master_host:" + host, "master_port:" + port, "master_link_status:up"} {
		if !strings.Contains(info, want+"\r\n") {
			return fmt.Errorf("replica %s: no %s in %q", replica, want, info)
		}
	}
	for i, a := range s.saddrs {
		c := s.sentinel(i)
		m, err := c.Master(ctx, s.name).Result()
		var reps []map[string]string
		if err == nil {
			reps, err = c.Replicas(ctx, s.name).Result()
		}
		c.Close()
		if err != nil {
			return fmt.Errorf("sentinel %s: %w", a, err)
		}
		if m["flags"] != "master" || m["num-other-sentinels"] != strconv.Itoa(len(s.saddrs)-1) {
			return fmt.Errorf("sentinel %s: master %v", a, m)
		}
		known := false
		for _, r := range reps {
			known = known || (net.JoinHostPort(r["ip"], r["port"]) == replica && r["flags"] == "slave" && r["master-link-status"] == "ok")
		}
		if !known {
			return fmt.Errorf("sentinel %s: replica %s not known healthy: %v", a, replica, reps)
		}
	}
	return nil
}

// Stop kills the sentinels and the servers (SIGKILL), waits for them and
// removes the sentinels' directory.
func (s *Sentinel) Stop() {
	killAll(s.sentinels)
	s.sentinels = nil
	for _, srv := range s.servers {
		srv.Stop()
	}
	removeDir(&s.dir)
}
