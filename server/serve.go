package server

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/soheilhy/cmux"
	"google.golang.org/grpc"

	pb "github.com/sluice-rl/sluice/api/doorman"
)

// Endpoint serves a Server on one listener: gRPC on grpc-go's own
// transport (it batches its frame writes: about a third of the CPU per
// request of net/http's HTTP/2 server), and everything else — gRPC-Web,
// Connect's JSON, status pages, /metrics, and gRPC on a connection that
// began with something else — on net/http (HTTP/1.1 and HTTP/2).
//
// A connection goes to grpc-go when its first request is
// "content-type: application/grpc" (or application/grpc+proto) over
// HTTP/2; the choice is made once per connection (github.com/soheilhy/cmux
// reads the first HEADERS frame). With TLS, the listener terminates TLS
// first (ALPN h2 and http/1.1; mTLS when the config requires client
// certificates), so both servers see the plaintext.
//
// Both paths run the same handlers (Server.GRPC and Server.Handler's),
// with the same metrics, mastership redirects and drain.
type Endpoint struct {
	m    cmux.CMux
	lis  net.Listener
	hs   *http.Server
	gs   *grpc.Server
	errc chan error
}

// Serve starts serving s on lis, with handler (Server.Handler, possibly
// wrapped) for the net/http side, and returns at once. tlsConfig nil means
// plaintext (HTTP/2 without TLS, h2c, and HTTP/1.1). The caller stops it
// with Shutdown; Err reports a listener that failed.
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
	grpcL := e.m.MatchWithWriters(
		cmux.HTTP2MatchHeaderFieldSendSettings("content-type", "application/grpc"),
		cmux.HTTP2MatchHeaderFieldSendSettings("content-type", "application/grpc+proto"))
	httpL := e.m.Match(cmux.Any())

	e.gs = grpc.NewServer(grpc.MaxRecvMsgSize(MaxRequestBytes), grpc.UnaryInterceptor(s.metrics.grpcInterceptor))
	e.gs.RegisterService(&pb.Capacity_ServiceDesc, s.GRPC())
	protocols := new(http.Protocols) // TLS, if any, is already terminated
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	e.hs = &http.Server{Handler: handler, Protocols: protocols, ReadHeaderTimeout: 10 * time.Second}

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
