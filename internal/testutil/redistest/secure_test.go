package redistest_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/internal/testutil/redistest"
)

// aliceTLS is a Security with TLS, client certificates required, and
// the default user off: only alice, with s3cret, gets in.
func aliceTLS(t *testing.T) (redistest.Security, *testutil.Certs) {
	c := testutil.MakeCerts(t)
	return redistest.Security{
		Users:          []string{"alice on >s3cret ~* &* +@all"},
		DisableDefault: true,
		User:           "alice", UserPassword: "s3cret",
		TLSCert: c.RedisCert, TLSKey: c.RedisKey, TLSCA: c.CA, TLSAuthClients: true,
		ClientCert: c.ClientCert, ClientKey: c.ClientKey,
	}, c
}

// roots returns a pool holding the CA in file.
func roots(t *testing.T, file string) *x509.CertPool {
	pem, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	p := x509.NewCertPool()
	p.AppendCertsFromPEM(pem)
	return p
}

// ping PINGs addr with o (Addr set to addr, no retries) and returns the error.
func ping(t *testing.T, addr string, o redis.Options) error {
	o.Addr, o.MaxRetries, o.DialTimeout = addr, -1, 2*time.Second
	c := redis.NewClient(&o)
	defer c.Close()
	return c.Ping(t.Context()).Err()
}

// TestStartSecure: a TLS-only server with an ACL user answers alice over
// TLS with a client certificate, and no one else; Restart keeps that.
func TestStartSecure(t *testing.T) {
	t.Parallel() // real processes that mostly wait: beside the others
	sec, certs := aliceTLS(t)
	s := redistest.StartSecureT(t, sec)
	c := s.Client()
	defer c.Close()
	if who, err := c.Do(t.Context(), "ACL", "WHOAMI").Text(); err != nil || who != "alice" {
		t.Fatalf("ACL WHOAMI: %q, %v", who, err)
	}
	cert, err := tls.LoadX509KeyPair(certs.ClientCert, certs.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	other, err := tls.LoadX509KeyPair(certs.OtherClientCert, certs.OtherKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := roots(t, certs.CA)
	alice := redis.Options{Username: "alice", Password: "s3cret"}
	for _, tc := range []struct {
		name string
		o    redis.Options
		ok   bool
	}{
		{"alice", redis.Options{Username: "alice", Password: "s3cret", TLSConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}}, true},
		{"no client certificate", redis.Options{Username: "alice", Password: "s3cret", TLSConfig: &tls.Config{RootCAs: pool}}, false},
		{"client certificate of another CA", redis.Options{Username: "alice", Password: "s3cret", TLSConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{other}}}, false},
		{"plain TCP", alice, false},
		{"default user", redis.Options{TLSConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}}, false},
		{"wrong password", redis.Options{Username: "alice", Password: "nope", TLSConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}}, false},
	} {
		if err := ping(t, s.Addr, tc.o); (err == nil) != tc.ok {
			t.Errorf("%s: PING: %v", tc.name, err)
		}
	}
	if err := c.Set(t.Context(), "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := ping(t, s.Addr, redis.Options{TLSConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}}); err == nil {
		t.Error("the default user gets in after Restart")
	}
	if n, err := c.Exists(t.Context(), "k").Result(); err != nil || n != 0 {
		t.Errorf("after Restart: EXISTS k: %d, %v", n, err)
	}
}

// TestStartSecurePassword: requirepass alone, on plain TCP.
func TestStartSecurePassword(t *testing.T) {
	t.Parallel() // real processes that mostly wait: beside the others
	s := redistest.StartSecureT(t, redistest.Security{Password: `pa ss"w\rd`})
	if err := ping(t, s.Addr, redis.Options{}); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Errorf("PING without password: %v", err)
	}
	if err := ping(t, s.Addr, redis.Options{Password: `pa ss"w\rd`}); err != nil {
		t.Errorf("PING with password: %v", err)
	}
	c := s.Client()
	defer c.Close()
	if err := c.Ping(t.Context()).Err(); err != nil {
		t.Error(err)
	}
}

// TestSecurityErrors: StartSecure refuses an inconsistent Security
// before starting anything.
func TestSecurityErrors(t *testing.T) {
	for _, sec := range []redistest.Security{
		{TLSCert: "cert.pem"},
		{DisableDefault: true},
		{User: "alice"},
		{ClientCert: "c.pem", ClientKey: "k.pem"},
		{Users: []string{" "}},
		{TLSCert: "/nonexistent/cert.pem", TLSKey: "/nonexistent/key.pem", TLSCA: "/nonexistent/ca.pem"},
	} {
		s, err := redistest.StartSecure(sec)
		if errors.Is(err, redistest.ErrSkip) {
			t.Skip(err)
		}
		if err == nil {
			s.Stop()
			t.Errorf("%+v: no error", sec)
		}
	}
}

// TestStartClusterSecure: three TLS masters with a password write and
// read keys in every master's slots through Client; MasterOf reports TLS
// ports; a client without the password or without TLS is refused.
func TestStartClusterSecure(t *testing.T) {
	t.Parallel() // real processes that mostly wait: beside the others
	certs := testutil.MakeCerts(t)
	sec := redistest.Security{Password: "s3cret",
		TLSCert: certs.RedisCert, TLSKey: certs.RedisKey, TLSCA: certs.CA, TLSAuthClients: true,
		ClientCert: certs.ClientCert, ClientKey: certs.ClientKey}
	c := redistest.StartClusterSecureT(t, 3, 0, sec)
	cc := c.Client()
	defer cc.Close()
	ctx := t.Context()
	masters := map[string]bool{}
	for i := range 30 {
		k := "k{" + strconv.Itoa(i) + "}"
		if err := cc.Set(ctx, k, i, 0).Err(); err != nil {
			t.Fatal(err)
		}
		if v, err := cc.Get(ctx, k).Int(); err != nil || v != i {
			t.Fatalf("GET %s: %d, %v", k, v, err)
		}
		if len(masters) == 3 {
			continue
		}
		m, replica, err := c.MasterOf(ctx, k)
		if err != nil || replica != "" {
			t.Fatalf("MasterOf(%s): %s, %q, %v", k, m, replica, err)
		}
		masters[m] = true
	}
	for _, a := range c.Addrs() {
		if !masters[a] {
			t.Errorf("no key on %s (masters %v)", a, masters)
		}
	}
	tc, err := sec.TLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	if err := ping(t, c.Addrs()[0], redis.Options{TLSConfig: tc}); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Errorf("PING without password: %v", err)
	}
	if err := ping(t, c.Addrs()[0], redis.Options{Password: "s3cret"}); err == nil {
		t.Error("PING on plain TCP answered")
	}
}

// TestStartClusterSecureReplicas: replicas sync with their masters over
// TLS as an ACL user (masteruser), the default user off.
func TestStartClusterSecureReplicas(t *testing.T) {
	t.Parallel() // real processes that mostly wait: beside the others
	sec, _ := aliceTLS(t)
	c := redistest.StartClusterSecureT(t, 3, 1, sec)
	ctx := t.Context()
	m, r, err := c.MasterOf(ctx, "k")
	if err != nil || m == "" || r == "" {
		t.Fatalf("MasterOf: %q, %q, %v", m, r, err)
	}
	cc := c.Client()
	defer cc.Close()
	if err := cc.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	o, err := sec.Options(r)
	if err != nil {
		t.Fatal(err)
	}
	rc := redis.NewClient(o)
	defer rc.Close()
	// DBSIZE, unlike GET, needs no READONLY on a cluster replica.
	testutil.Eventually(t, 5*time.Second, "k on the replica", func() bool {
		n, err := rc.DBSize(ctx).Result()
		return err == nil && n == 1
	})
}

// TestSentinelFailover: over TLS as alice, Failover moves the master to
// the replica, and a FailoverClient follows.
func TestSentinelFailover(t *testing.T) {
	t.Parallel() // real processes that mostly wait: beside the others
	sec, _ := aliceTLS(t)
	s := redistest.StartSentinelT(t, sec)
	ctx := t.Context()
	if s.Name() != "mymaster" || len(s.SentinelAddrs()) != 3 || len(s.Addrs()) != 2 {
		t.Fatalf("%s %v %v", s.Name(), s.SentinelAddrs(), s.Addrs())
	}
	old, err := s.MasterAddr(ctx)
	if err != nil || old != s.Addrs()[0] {
		t.Fatalf("MasterAddr: %s, %v; servers %v", old, err, s.Addrs())
	}
	c := s.Client()
	defer c.Close()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	nm, err := s.Failover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Failover to %s took %v", nm, time.Since(start))
	if nm != s.Addrs()[1] {
		t.Fatalf("new master %s, servers %v", nm, s.Addrs())
	}
	if got, err := s.MasterAddr(ctx); err != nil || got != nm {
		t.Errorf("MasterAddr after Failover: %s, %v", got, err)
	}
	testutil.Eventually(t, 10*time.Second, "the FailoverClient writing to the new master", func() bool {
		if c.Set(ctx, "k2", "v2", 0).Err() != nil {
			return false
		}
		o, _ := sec.Options(nm)
		n := redis.NewClient(o)
		defer n.Close()
		v, err := n.Get(ctx, "k2").Result()
		return err == nil && v == "v2"
	})
	if v, err := c.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Errorf("k after Failover: %q, %v", v, err)
	}
}

// TestSentinelKillMaster: with a password on plain TCP, the sentinels
// promote the replica after KillMaster.
func TestSentinelKillMaster(t *testing.T) {
	t.Parallel() // real processes that mostly wait: beside the others
	s := redistest.StartSentinelT(t, redistest.Security{Password: "s3cret"})
	ctx := t.Context()
	c := s.Client()
	defer c.Close()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// WAIT: the write is on the replica before the master dies.
	if n, err := c.Do(ctx, "WAIT", 1, 5000).Int(); err != nil || n != 1 {
		t.Fatalf("WAIT: %d, %v", n, err)
	}
	start := time.Now()
	old, err := s.KillMaster()
	if err != nil || old != s.Addrs()[0] {
		t.Fatalf("KillMaster: %s, %v", old, err)
	}
	if _, err := s.KillMaster(); err == nil {
		t.Error("a second KillMaster, the master down already: no error")
	}
	nm, err := s.WaitMaster(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("promotion of %s took %v", nm, time.Since(start))
	if nm != s.Addrs()[1] {
		t.Fatalf("new master %s, servers %v", nm, s.Addrs())
	}
	ctx2, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if v, err := c.Get(ctx2, "k").Result(); err != nil || v != "v" {
		t.Errorf("k on the new master: %q, %v", v, err)
	}
}
