package server

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"runtime"
	"strings"
	"time"

	"github.com/soheilhy/cmux"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/sluice-rl/sluice/internal/tlsutil"
)

// streamWorkersPerCPU sizes grpc-go's pool of stream workers
// (grpc.NumStreamWorkers): goroutines that serve one RPC after another,
// so that an RPC runs on a stack already grown to its depth instead of a
// new goroutine's, which grows it again (copying) on every request. With
// more RPCs in flight than workers, the rest get goroutines of their
// own, as without the pool. Measured with quota-bench on Redis (50
// callers, 2 cores): 36 µs of server CPU a request with 64 workers, 40
// µs without; the profile without showed 12 % of the server's CPU in
// runtime.copystack under gRPC's reading of the request.
const streamWorkersPerCPU = 32

// Endpoint serves the services on one listener: gRPC on grpc-go's own
// transport (it batches its frame writes: about a third of the CPU per
// request of net/http's HTTP/2 server), and everything else — gRPC-Web,
// Connect's JSON, status pages, /metrics, and gRPC on a connection that
// began with something else — on net/http (HTTP/1.1 and HTTP/2).
//
// A connection goes to grpc-go when its first request is
// "content-type: application/grpc" over HTTP/2; the choice is made once per connection (github.com/soheilhy/cmux
// reads the first HEADERS frame, answering the client's SETTINGS on the
// way). With TLS, the listener terminates TLS
// first (ALPN h2 and http/1.1; mTLS when the config requires client
// certificates), so both servers see the plaintext.
//
// Both paths run the same handlers (registered with grpc-go, and adapted to
// Connect in Server.Handler), with the same metrics, mastership redirects
// and drain.
type Endpoint struct {
	m    cmux.CMux
	lis  net.Listener
	hs   *http.Server
	gs   *grpc.Server
	errc chan error
}

// Serve starts serving s's services on lis, with handler (Server.Handler,
// possibly wrapped) for the net/http side, and returns at once. tlsConfig
// nil means plaintext (HTTP/2 without TLS, h2c, and HTTP/1.1). The caller
// stops it with Shutdown; Err reports a listener that failed. Run serves
// this way; Serve is for callers that run the services themselves.
func (s *Server) Serve(lis net.Listener, handler http.Handler, tlsConfig *tls.Config) *Endpoint {
	if tlsConfig != nil {
		cfg := tlsConfig.Clone()
		if len(cfg.NextProtos) == 0 {
			cfg.NextProtos = []string{"h2", "http/1.1"}
		}
		lis = tls.NewListener(lis, cfg)
	}
	e := &Endpoint{lis: lis, errc: make(chan error, 3)}
	e.m = cmux.New(lis)
	e.m.SetReadTimeout(10 * time.Second) // a connection that never sends its first request
	// grpc-go's client sends its first request only after the server's
	// SETTINGS, so the matcher sends them (one empty SETTINGS frame: one
	// matcher, since each would send its own; ackFilterListener drops the
	// client's acknowledgement of it on the connections that go to
	// net/http) while it reads the first HEADERS frame. Other gRPC content
	// types (application/grpc+proto) are served by Connect.
	grpcL := e.m.MatchWithWriters(cmux.HTTP2MatchHeaderFieldSendSettings("content-type", "application/grpc"))
	httpL := ackFilterListener{e.m.Match(cmux.Any())}

	gopts := append(s.tracer.grpcServer(), grpc.MaxRecvMsgSize(MaxRequestBytes), grpc.ChainUnaryInterceptor(s.rpc.grpcInterceptor, s.authz.Unary), grpc.StreamInterceptor(s.authz.Stream),
		grpc.NumStreamWorkers(uint32(streamWorkersPerCPU*runtime.GOMAXPROCS(0))))
	if tlsConfig != nil {
		gopts = append(gopts, grpc.Creds(terminatedTLS{}))
	}
	e.gs = grpc.NewServer(gopts...)
	s.registerGRPC(e.gs)
	protocols := new(http.Protocols) // TLS, if any, is already terminated
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	e.hs = &http.Server{Handler: handler, Protocols: protocols, ReadHeaderTimeout: 10 * time.Second, ConnContext: connContext}

	go func() { e.report(e.gs.Serve(grpcL)) }()
	go func() { e.report(e.hs.Serve(httpL)) }()
	go func() { e.report(e.m.Serve()) }()
	return e
}

// report passes on a serving error that is not the end of serving.
func (e *Endpoint) report(err error) {
	if err == nil || errors.Is(err, http.ErrServerClosed) || errors.Is(err, grpc.ErrServerStopped) ||
		errors.Is(err, net.ErrClosed) || errors.Is(err, cmux.ErrListenerClosed) || errors.Is(err, cmux.ErrServerClosed) {
		return
	}
	select {
	case e.errc <- err:
	default:
	}
}

// Err returns a channel that receives an error if serving fails.
func (e *Endpoint) Err() <-chan error { return e.errc }

// Shutdown stops accepting connections and waits, until ctx ends, for the
// RPCs in flight on both sides to finish; then it closes what is left and
// returns ctx's error.
func (e *Endpoint) Shutdown(ctx context.Context) error {
	e.m.Close() // closes lis: no new connections on either side
	done := make(chan struct{})
	go func() {
		e.gs.GracefulStop()
		close(done)
	}()
	err := e.hs.Shutdown(ctx)
	if errors.Is(err, net.ErrClosed) {
		err = nil // its listener was the muxer's, closed above
	}
	select {
	case <-done:
	case <-ctx.Done():
		e.gs.Stop()
		<-done
		err = ctx.Err()
	}
	if err != nil {
		_ = e.hs.Close()
	}
	return err
}

// connContext gives the handlers the TLS connection under a muxed one
// (tlsutil.PeerCertificates: the admin API's mTLS users): net/http sets
// Request.TLS only for a *tls.Conn it accepted itself.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if tc := tlsConnOf(c); tc != nil {
		return tlsutil.WithConn(ctx, tc)
	}
	return ctx
}

// tlsConnOf returns the TLS connection under a muxed one, nil for none.
func tlsConnOf(c net.Conn) *tls.Conn {
	for range 4 {
		switch x := c.(type) {
		case *tls.Conn:
			return x
		case *ackFilterConn:
			c = x.Conn
		case *cmux.MuxConn:
			c = x.Conn
		default:
			return nil
		}
	}
	return nil
}

// terminatedTLS are grpc-go's transport credentials on a listener that
// terminated TLS already: no handshake of their own, and the TLS
// connection's state as the peer's AuthInfo, so that grpc-go's handlers
// see the client's certificate (tlsutil.PeerCertificates) as net/http's
// do through connContext.
type terminatedTLS struct{}

func (terminatedTLS) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	tc := tlsConnOf(c)
	if tc == nil {
		return c, nil, nil
	}
	return c, credentials.TLSInfo{State: tc.ConnectionState(), CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}, nil
}

func (terminatedTLS) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("server: terminatedTLS serves only")
}

func (terminatedTLS) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls"}
}

func (terminatedTLS) Clone() credentials.TransportCredentials { return terminatedTLS{} }

func (terminatedTLS) OverrideServerName(string) error { return nil }

// ackFilterListener hands net/http the HTTP/2 connections the gRPC matcher
// let pass, without the client's acknowledgement of the matcher's SETTINGS
// frame: net/http's HTTP/2 server never sent those SETTINGS, and treats an
// acknowledgement it did not ask for as a PROTOCOL_ERROR. HTTP/1
// connections pass untouched.
type ackFilterListener struct{ net.Listener }

func (l ackFilterListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &ackFilterConn{Conn: c}, nil
}

// http2Preface is the client connection preface of HTTP/2 (RFC 9113 §3.4).
const http2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// ackFilterConn passes the bytes a client sends through, but for the first
// SETTINGS frame with the ACK flag after an HTTP/2 preface, which it drops.
// It parses frame headers (9 bytes: length, type, flags, stream; RFC 9113
// §4.1) only until then.
type ackFilterConn struct {
	net.Conn
	in      []byte // read from the client, not yet examined
	out     []byte // examined, to hand to the reader
	skip    int    // bytes of the current frame still to pass without examining
	checked bool   // the preface was seen (or is absent)
	done    bool   // the acknowledgement was dropped, or there is none to drop
}

func (c *ackFilterConn) Read(p []byte) (int, error) {
	for !c.done && len(c.out) == 0 {
		n, err := c.Conn.Read(p) // p is only scratch here: c.out is copied into it below
		c.in = append(c.in, p[:n]...)
		c.scan()
		if err != nil && len(c.out) == 0 {
			if len(c.in) > 0 { // a partial frame header at the end
				c.passRest()
				break
			}
			return 0, err
		}
	}
	if len(c.out) > 0 {
		n := copy(p, c.out)
		c.out = c.out[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// passRest hands everything read so far to the reader and stops examining.
func (c *ackFilterConn) passRest() {
	c.out, c.in, c.done = append(c.out, c.in...), nil, true
}

// scan moves examined bytes from in to out, dropping the acknowledgement.
func (c *ackFilterConn) scan() {
	if !c.checked {
		if len(c.in) < len(http2Preface) {
			if !strings.HasPrefix(http2Preface, string(c.in)) {
				c.checked = true
				c.passRest()
			}
			return
		}
		c.checked = true
		if string(c.in[:len(http2Preface)]) != http2Preface {
			c.passRest()
			return
		}
		c.out = append(c.out, c.in[:len(http2Preface)]...)
		c.in = c.in[len(http2Preface):]
	}
	for !c.done {
		if c.skip > 0 {
			n := min(c.skip, len(c.in))
			c.out = append(c.out, c.in[:n]...)
			c.in, c.skip = c.in[n:], c.skip-n
			if c.skip > 0 {
				return
			}
		}
		if len(c.in) < 9 {
			return
		}
		length := int(c.in[0])<<16 | int(c.in[1])<<8 | int(c.in[2])
		const typeSettings, flagAck = 0x4, 0x1
		if c.in[3] == typeSettings && c.in[4]&flagAck != 0 && length == 0 {
			c.in = c.in[9:] // the matcher's SETTINGS, acknowledged
			c.passRest()
			return
		}
		c.out = append(c.out, c.in[:9]...)
		c.in, c.skip = c.in[9:], length
	}
}
