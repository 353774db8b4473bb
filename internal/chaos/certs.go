package chaos

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// certs are the PEM files of a secured store: a CA, the Redis nodes'
// certificate and the sluice servers' client certificate, both signed by
// the CA, for 127.0.0.1 and localhost. (internal/testutil's MakeCerts
// wants a testing.TB; a run is no test.)
type certs struct {
	CA string
	// RedisCert and RedisKey serve (ServerAuth) and connect (ClientAuth):
	// redis-server presents its own certificate as a client on the
	// cluster bus and to its master.
	RedisCert, RedisKey string
	// ClientCert and ClientKey are the servers' (--redis-tls-cert,
	// --redis-tls-key): ClientAuth only.
	ClientCert, ClientKey string
}

// makeCerts writes fresh certificates, valid for a day, into dir. Keys
// are ECDSA P-256 in PEM "EC PRIVATE KEY" blocks, which redis-server
// (OpenSSL) and Go both read.
func makeCerts(dir string) (*certs, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caSerial, err := serial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: caSerial, Subject: pkix.Name{CommonName: "sluice-chaos CA"},
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	c := &certs{}
	if c.CA, err = writePEM(dir, "ca.pem", "CERTIFICATE", der); err != nil {
		return nil, err
	}
	if c.RedisCert, c.RedisKey, err = leafCert(dir, "redis", ca, caKey, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth); err != nil {
		return nil, err
	}
	if c.ClientCert, c.ClientKey, err = leafCert(dir, "sluice", ca, caKey, x509.ExtKeyUsageClientAuth); err != nil {
		return nil, err
	}
	return c, nil
}

func serial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
}

// leafCert writes a certificate named cn, for 127.0.0.1 and localhost,
// signed by ca, and its key, and returns their files.
func leafCert(dir, cn string, ca *x509.Certificate, caKey *ecdsa.PrivateKey, usage ...x509.ExtKeyUsage) (certFile, keyFile string, err error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	sn, err := serial()
	if err != nil {
		return "", "", err
	}
	tmpl := &x509.Certificate{
		SerialNumber: sn, Subject: pkix.Name{CommonName: cn},
		NotBefore: ca.NotBefore, NotAfter: ca.NotAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: usage,
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
	if err != nil {
		return "", "", err
	}
	kd, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return "", "", err
	}
	if certFile, err = writePEM(dir, cn+".pem", "CERTIFICATE", der); err != nil {
		return "", "", err
	}
	keyFile, err = writePEM(dir, cn+"-key.pem", "EC PRIVATE KEY", kd)
	return certFile, keyFile, err
}

func writePEM(dir, name, typ string, der []byte) (string, error) {
	p := filepath.Join(dir, name)
	return p, os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}
