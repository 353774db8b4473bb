package testutil

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Certs are PEM files made for a test: a CA, a server certificate for
// 127.0.0.1 and localhost, a client certificate and a Redis certificate,
// all signed by the CA; and a second CA that signed nothing here (for
// "wrong CA" tests).
type Certs struct {
	CA, OtherCA               string
	ServerCert, ServerKey     string
	ClientCert, ClientKey     string
	OtherClientCert, OtherKey string // signed by OtherCA

	// RedisCert and RedisKey are a certificate for 127.0.0.1 and
	// localhost (subject CN "redis") usable both to serve (ServerAuth)
	// and to connect (ClientAuth): redis-server presents its own
	// certificate as a client on the cluster bus, to its master
	// (tls-replication) and, as a sentinel, to the servers and sentinels
	// it watches. The key is a PEM "EC PRIVATE KEY", as every key here,
	// which redis-server (OpenSSL) reads.
	RedisCert, RedisKey string

	dir   string
	ca    *x509.Certificate
	caKey *ecdsa.PrivateKey
	n     int // client certificates Client made
}

// MakeCerts writes fresh certificates into t.TempDir(), valid for an hour.
func MakeCerts(t testing.TB) *Certs {
	t.Helper()
	dir := t.TempDir()
	ca, caKey := selfSigned(t, "sluice test CA")
	c := &Certs{dir: dir, ca: ca, caKey: caKey}
	other, otherKey := selfSigned(t, "another CA")
	c.CA = writePEM(t, dir, "ca.pem", "CERTIFICATE", ca.Raw)
	c.OtherCA = writePEM(t, dir, "other-ca.pem", "CERTIFICATE", other.Raw)
	c.ServerCert, c.ServerKey = leaf(t, dir, "server", "server", nil, ca, caKey, x509.ExtKeyUsageServerAuth)
	c.ClientCert, c.ClientKey = leaf(t, dir, "client", "client", nil, ca, caKey, x509.ExtKeyUsageClientAuth)
	c.OtherClientCert, c.OtherKey = leaf(t, dir, "other-client", "other-client", nil, other, otherKey, x509.ExtKeyUsageClientAuth)
	c.RedisCert, c.RedisKey = leaf(t, dir, "redis", "redis", nil, ca, caKey, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
	return c
}

// Client writes another client certificate signed by c's CA, with subject
// CN cn ("" for none) and the URI SANs uris (a SPIFFE ID
// "spiffe://example.org/…", say), and returns its certificate and key
// files. Not safe for concurrent use.
func (c *Certs) Client(t testing.TB, cn string, uris ...string) (certFile, keyFile string) {
	t.Helper()
	var us []*url.URL
	for _, u := range uris {
		pu, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		us = append(us, pu)
	}
	c.n++
	return leaf(t, c.dir, fmt.Sprintf("client-%d", c.n), cn, us, c.ca, c.caKey, x509.ExtKeyUsageClientAuth)
}

func key(t testing.TB) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func serial(t testing.TB) *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func selfSigned(t testing.TB, name string) (*x509.Certificate, *ecdsa.PrivateKey) {
	k := key(t)
	tmpl := &x509.Certificate{
		SerialNumber: serial(t), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, k
}

func leaf(t testing.TB, dir, name, cn string, uris []*url.URL, ca *x509.Certificate, caKey *ecdsa.PrivateKey, usage ...x509.ExtKeyUsage) (certFile, keyFile string) {
	k := key(t)
	tmpl := &x509.Certificate{
		SerialNumber: serial(t), Subject: pkix.Name{CommonName: cn}, URIs: uris,
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: usage,
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kd, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return writePEM(t, dir, name+".pem", "CERTIFICATE", der), writePEM(t, dir, name+"-key.pem", "EC PRIVATE KEY", kd)
}

func writePEM(t testing.TB, dir, name, typ string, der []byte) string {
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
