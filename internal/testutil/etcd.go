// Package testutil holds helpers shared by Sluice's tests: an embedded etcd
// on loopback and free ports. It is imported only from _test.go files.
package testutil

import (
	"net"
	"net/url"
	"os"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
)

// Etcd is a single-member etcd server embedded in the test process,
// listening on 127.0.0.1 with kernel-chosen ports.
type Etcd struct {
	// Endpoint is the client URL, e.g. "http://127.0.0.1:41234".
	Endpoint string
	// Addr is the client address, "127.0.0.1:41234".
	Addr string
	srv  *embed.Etcd
}

// StartEtcd starts an embedded etcd (go.etcd.io/etcd/server/v3/embed) with
// its data in t.TempDir, waits until it serves (at most 30 s, else t.Fatal)
// and stops it in t.Cleanup. Its logs are silenced unless SLUICE_TEST_ETCD_LOG
// is set.
func StartEtcd(t testing.TB) *Etcd { return startEtcd(t, nil) }

// StartEtcdTLS is StartEtcd serving its clients over TLS with certs'
// server certificate and requiring client certificates signed by their CA
// (mTLS).
func StartEtcdTLS(t testing.TB, certs *Certs) *Etcd { return startEtcd(t, certs) }

func startEtcd(t testing.TB, certs *Certs) *Etcd {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Name = "test"
	cfg.Dir = t.TempDir()
	cfg.LogLevel = "error"
	if os.Getenv("SLUICE_TEST_ETCD_LOG") == "" {
		cfg.LogOutputs = []string{"/dev/null"}
	}
	client := FreeURL(t)
	peer := FreeURL(t)
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
		t.Fatalf("start embedded etcd: %v", err)
	}
	t.Cleanup(srv.Close)
	select {
	case <-srv.Server.ReadyNotify():
	case err := <-srv.Err():
		t.Fatalf("embedded etcd: %v", err)
	case <-time.After(30 * time.Second):
		srv.Server.Stop()
		t.Fatal("embedded etcd did not become ready in 30 s")
	}
	return &Etcd{Endpoint: client.String(), Addr: client.Host, srv: srv}
}

// FreeURL returns http://127.0.0.1:PORT for a port that was free a moment
// ago (the kernel picked it for a listener that is closed again). Used where
// a server must be told its address before it starts.
func FreeURL(t testing.TB) url.URL {
	t.Helper()
	return url.URL{Scheme: "http", Host: FreeAddr(t)}
}

// FreeAddr returns "127.0.0.1:PORT" for a port that was free a moment ago.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	defer l.Close()
	return l.Addr().String()
}
