// Package etcdtest runs an embedded etcd on loopback for Sluice's tests. It
// is apart from package testutil so that tests without etcd do not link it.
// It is imported only from _test.go files and the fault harness
// (internal/chaos, cmd/sluice-chaos).
package etcdtest

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/sluice-rl/sluice/internal/testutil"
)

// Etcd is a single-member etcd server embedded in the test process,
// listening on 127.0.0.1 with kernel-chosen ports.
type Etcd struct {
	// Endpoint is the client URL, e.g. "http://127.0.0.1:41234".
	Endpoint string
	// Addr is the client address, "127.0.0.1:41234".
	Addr string
	cfg  *embed.Config
	srv  *embed.Etcd
	stop sync.Once
}

// StartEtcd starts an embedded etcd (go.etcd.io/etcd/server/v3/embed) with
// its data in t.TempDir, waits until it serves (at most 30 s, else t.Fatal)
// and stops it in t.Cleanup. Its logs are silenced unless SLUICE_TEST_ETCD_LOG
// is set.
func StartEtcd(t testing.TB) *Etcd { return startEtcd(t, nil) }

// StartEtcdTLS is StartEtcd serving its clients over TLS with certs'
// server certificate and requiring client certificates signed by their CA
// (mTLS).
func StartEtcdTLS(t testing.TB, certs *testutil.Certs) *Etcd { return startEtcd(t, certs) }

func startEtcd(t testing.TB, certs *testutil.Certs) *Etcd {
	t.Helper()
	e, err := start(t.TempDir(), certs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Stop)
	return e
}

// Start is StartEtcd outside a test: its data in dir, an error if it does
// not serve within 30 s. Stop it with Stop.
func Start(dir string) (*Etcd, error) { return start(dir, nil) }

func start(dir string, certs *testutil.Certs) (*Etcd, error) {
	// Port 0 everywhere: the kernel picks the ports and the listeners are
	// read back below (a single member never dials its peer URL).
	client := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	peer := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	cfg := config("test", dir, client, peer)
	cfg.InitialCluster = cfg.Name + "=" + peer.String()
	if certs != nil {
		client.Scheme = "https"
		cfg.ListenClientUrls = []url.URL{client}
		cfg.AdvertiseClientUrls = []url.URL{client}
		cfg.ClientTLSInfo = transport.TLSInfo{CertFile: certs.ServerCert, KeyFile: certs.ServerKey,
			TrustedCAFile: certs.CA, ClientCertAuth: true}
	}
	e := &Etcd{cfg: cfg}
	if err := e.serve(); err != nil {
		return nil, err
	}
	return e, nil
}

// config is an embedded member's configuration: its data in dir, its logs
// silenced unless SLUICE_TEST_ETCD_LOG is set.
func config(name, dir string, client, peer url.URL) *embed.Config {
	cfg := embed.NewConfig()
	cfg.Name = name
	cfg.Dir = dir
	cfg.LogLevel = "error"
	if os.Getenv("SLUICE_TEST_ETCD_LOG") == "" {
		cfg.LogOutputs = []string{"/dev/null"}
	}
	cfg.ListenClientUrls = []url.URL{client}
	cfg.AdvertiseClientUrls = []url.URL{client}
	cfg.ListenPeerUrls = []url.URL{peer}
	cfg.AdvertisePeerUrls = []url.URL{peer}
	return cfg
}

// serve starts the member from e.cfg and waits, at most 30 s, until it
// serves (for a member of a cluster: until the cluster has a quorum).
func (e *Etcd) serve() error {
	srv, err := embed.StartEtcd(e.cfg)
	if err != nil {
		return fmt.Errorf("start embedded etcd %s: %w", e.cfg.Name, err)
	}
	e.srv, e.stop = srv, sync.Once{}
	select {
	case <-srv.Server.ReadyNotify():
	case err := <-srv.Err():
		e.Stop()
		return fmt.Errorf("embedded etcd %s: %w", e.cfg.Name, err)
	case <-time.After(30 * time.Second):
		e.Stop()
		return fmt.Errorf("embedded etcd %s did not become ready in 30 s", e.cfg.Name)
	}
	client := e.cfg.ListenClientUrls[0]
	client.Host = srv.Clients[0].Addr().String()
	e.Endpoint, e.Addr = client.String(), client.Host
	return nil
}

// Stop stops the etcd server at once, as if its process had been killed:
// its clients see connections refused from then on. Safe to call more than
// once (t.Cleanup calls it again).
func (e *Etcd) Stop() { e.stop.Do(e.srv.Close) }

// stopped reports whether Stop has run since the member last started.
func (e *Etcd) stopped() bool {
	select {
	case <-e.srv.Server.StopNotify():
		return true
	default:
		return false
	}
}

// Cluster is an etcd cluster of embedded members in this process, each
// with its own data directory and fixed loopback ports (so that a member
// stopped with Kill comes back with Restart on the same addresses, as a
// restarted etcd process would).
type Cluster struct {
	Members []*Etcd
}

// StartCluster starts n members with their data under dir and waits, at
// most 30 s, until they all serve. Stop it with Stop.
func StartCluster(dir string, n int) (*Cluster, error) {
	c := &Cluster{}
	var initial []string
	for i := range n {
		var urls [2]url.URL
		for k := range urls {
			port, err := testutil.FreePort()
			if err != nil {
				return nil, err
			}
			urls[k] = url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", port)}
		}
		name := fmt.Sprintf("m%d", i)
		c.Members = append(c.Members, &Etcd{cfg: config(name, fmt.Sprintf("%s/%s", dir, name), urls[0], urls[1])})
		initial = append(initial, name+"="+urls[1].String())
	}
	// Every member at once: none is ready before a quorum is.
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, m := range c.Members {
		m.cfg.InitialCluster = strings.Join(initial, ",")
		wg.Go(func() { errs[i] = m.serve() })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// Endpoints are the members' client URLs.
func (c *Cluster) Endpoints() []string {
	var eps []string
	for _, m := range c.Members {
		eps = append(eps, m.Endpoint)
	}
	return eps
}

// Leader is the index of the member that is the raft leader, as a running
// member sees it; -1 when no running member knows one.
func (c *Cluster) Leader() int {
	for _, m := range c.Members {
		if m.srv == nil || m.stopped() {
			continue
		}
		lead := m.srv.Server.Leader()
		for i, o := range c.Members {
			if o.srv != nil && o.srv.Server.MemberID() == lead {
				return i
			}
		}
	}
	return -1
}

// Kill stops member i at once, as if its process had been killed.
func (c *Cluster) Kill(i int) { c.Members[i].Stop() }

// Restart starts member i again from its data directory on its addresses
// and waits until it serves.
func (c *Cluster) Restart(i int) error { return c.Members[i].serve() }

// Stop stops every member.
func (c *Cluster) Stop() {
	for _, m := range c.Members {
		if m.srv != nil {
			m.Stop()
		}
	}
}

// Client returns a client of e (a 5 s dial timeout, no logs), closed when
// the test ends.
func (e *Etcd) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{e.Endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}
