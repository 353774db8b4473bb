package tlsutil

import (
	"context"
	"crypto/tls"
	"crypto/x509"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

type connKey struct{}

// WithConn returns ctx carrying the TLS connection c, for an
// http.Server's ConnContext: net/http fills Request.TLS only for a
// *tls.Conn it accepted itself, not for one a muxer (cmux) wrapped.
func WithConn(ctx context.Context, c *tls.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// PeerCertificates returns the certificates the client presented on the
// TLS connection of ctx's request, leaf first, after the handshake
// verified them against the server's client CAs: the connection ctx
// carries (WithConn: net/http's side of the endpoint), else the
// credentials.TLSInfo of ctx's grpc-go peer (grpc-go's side, whose
// transport credentials report the TLS connection's state). nil when ctx
// carries neither or the client presented none.
func PeerCertificates(ctx context.Context) []*x509.Certificate {
	if c, _ := ctx.Value(connKey{}).(*tls.Conn); c != nil {
		st := c.ConnectionState()
		if !st.HandshakeComplete {
			return nil
		}
		return st.PeerCertificates
	}
	if p, ok := peer.FromContext(ctx); ok {
		if info, ok := p.AuthInfo.(credentials.TLSInfo); ok && info.State.HandshakeComplete {
			return info.State.PeerCertificates
		}
	}
	return nil
}
