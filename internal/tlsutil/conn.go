package tlsutil

import (
	"context"
	"crypto/tls"
	"crypto/x509"
)

type connKey struct{}

// WithConn returns ctx carrying the TLS connection c, for an
// http.Server's ConnContext: net/http fills Request.TLS only for a
// *tls.Conn it accepted itself, not for one a muxer (cmux) wrapped.
func WithConn(ctx context.Context, c *tls.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// PeerCertificates returns the certificates the client presented on the
// TLS connection ctx carries (WithConn), leaf first, after the handshake
// verified them against the server's client CAs; nil when ctx carries no
// TLS connection or the client presented none.
func PeerCertificates(ctx context.Context) []*x509.Certificate {
	c, _ := ctx.Value(connKey{}).(*tls.Conn)
	if c == nil {
		return nil
	}
	st := c.ConnectionState()
	if !st.HandshakeComplete {
		return nil
	}
	return st.PeerCertificates
}
