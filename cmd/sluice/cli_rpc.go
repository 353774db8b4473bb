package main

import (
	"crypto/tls"
	"net/http"

	"github.com/spf13/cobra"

	"github.com/sluice-rl/sluice/internal/discovery"
	"github.com/sluice-rl/sluice/internal/tlsutil"
)

// rpcFlags are the connection flags of the commands that talk to a server.
type rpcFlags struct {
	server                    string
	caFile, certFile, keyFile string
}

func (f *rpcFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.server, "server", "127.0.0.1:15000", "server address (host:port)")
	fl.StringVar(&f.caFile, "tls-ca", "", "speak TLS, verifying the server with these CAs (PEM)")
	fl.StringVar(&f.certFile, "tls-cert", "", "client certificate (PEM) for mTLS")
	fl.StringVar(&f.keyFile, "tls-key", "", "the private key of --tls-cert (PEM)")
}

// tlsConfig returns the client TLS configuration, nil for plaintext.
func (f *rpcFlags) tlsConfig() (*tls.Config, error) {
	if f.caFile == "" && f.certFile == "" && f.keyFile == "" {
		return nil, nil
	}
	return tlsutil.Client(f.caFile, f.certFile, f.keyFile)
}

// dialer returns a gRPC dialer for the flags; each call of the returned
// dialer's transport shares one connection pool.
func (f *rpcFlags) dialer() (discovery.Dialer, error) {
	cfg, err := f.tlsConfig()
	if err != nil {
		return nil, err
	}
	return discovery.NewDialer(&http.Client{Transport: discovery.Transport(cfg, false)}, discovery.Scheme(cfg), false), nil
}
