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
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"

	"github.com/sluice-rl/sluice/internal/testutil"
)

// Etcd is a single-member etcd server embedded in the test process,
// listening on 127.0.0.1 with kernel-chosen ports.
type Etcd struct {
	// Endpoint is the client URL, e.g. "http://127.0.0.1:41234".
	Endpoint string
	// Addr is the client address, "127.0.0.1:41234".
	Addr string
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
	cfg := embed.NewConfig()
	cfg.Name = "test"
	cfg.Dir = dir
	cfg.LogLevel = "error"
	if os.Getenv("SLUICE_TEST_ETCD_LOG") == "" {
		cfg.LogOutputs = []string{"/dev/null"}
	}
	// Port 0 everywhere: the kernel picks the ports and the listeners are
	// read back below (a single member never dials its peer URL).
	client := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	peer := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	if certs != nil {
		client.Scheme = "https"
		cfg.ClientTLSInfo = transport.TLSInfo{CertFile: certs.ServerCert, KeyFile: certs.ServerKey,
			TrustedCAFile: certs.CA, ClientCertAuth: true}
	}
	cfg.ListenClientUrls = []url.URL{client}
	cfg.AdvertiseClientUrls = []url.URL{client}
	cfg.ListenPeerUrls = []url.URL{peer}
	cfg.AdvertisePeerUrls = []url.URL{peer}
	cfg.InitialCluster = cfg.Name + "=" + peer.String()
	srv, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("start embedded etcd: %w", err)
	}
	e := &Etcd{srv: srv}
	select {
	case <-srv.Server.ReadyNotify():
	case err := <-srv.Err():
		e.Stop()
		return nil, fmt.Errorf("embedded etcd: %w", err)
	case <-time.After(30 * time.Second):
		e.Stop()
		return nil, errors.New("embedded etcd did not become ready in 30 s")
	}
	addr := srv.Clients[0].Addr().String()
	client.Host = addr
	e.Endpoint, e.Addr = client.String(), addr
	return e, nil
}

// Stop stops the etcd server at once, as if its process had been killed:
// its clients see connections refused from then on. Safe to call more than
// once (t.Cleanup calls it again).
func (e *Etcd) Stop() { e.stop.Do(e.srv.Close) }
