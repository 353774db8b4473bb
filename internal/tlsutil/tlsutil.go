// Package tlsutil builds the TLS configurations of Sluice's listeners and
// clients from PEM files: server certificate and key, optional client
// certificate verification (mTLS), and for clients the CA that signed the
// servers' certificates and an optional client certificate.
package tlsutil

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// Server returns the configuration of a TLS listener with the certificate
// and key in certFile and keyFile (PEM). With clientCAFile set, clients
// must present a certificate signed by one of its CAs (mTLS). TLS 1.2 at
// least; HTTP/2 and HTTP/1.1 by ALPN. Errors name the file at fault.
func Server(certFile, keyFile, clientCAFile string) (*tls.Config, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("tls: a server needs both a certificate and a key")
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("tls: loading %s and %s: %w", certFile, keyFile, err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}}
	if clientCAFile != "" {
		pool, err := pool(clientCAFile)
		if err != nil {
			return nil, err
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// Client returns the configuration of a TLS client that trusts the CAs in
// caFile (empty: the system's) and, with certFile and keyFile set,
// presents that certificate (mTLS).
func Client(caFile, certFile, keyFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}
	if caFile != "" {
		pool, err := pool(caFile)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	switch {
	case certFile != "" && keyFile != "":
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("tls: loading %s and %s: %w", certFile, keyFile, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	case certFile != "" || keyFile != "":
		return nil, errors.New("tls: a client certificate needs both the certificate and the key")
	}
	return cfg, nil
}

func pool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("tls: %s holds no PEM certificate", file)
	}
	return p, nil
}
