package demo

import (
	"context"
	"net"
	"net/http"
	"time"

	"github.com/sluice-rl/sluice/server"
)

// startServer starts a Sluice server with opts on a loopback port the
// kernel picks, serving on its production endpoint (server.Endpoint) and
// running its background work until ctx is done. stop shuts it down.
func startServer(ctx context.Context, opts server.Options) (srv *server.Server, addr string, stop func(), err error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", nil, err
	}
	addr = lis.Addr().String()
	if opts.ID == "" {
		opts.ID = addr
	}
	if opts.Address == "" {
		opts.Address = addr
	}
	srv = server.New(opts)
	ep := srv.Serve(lis, srv.Handler(), nil)
	go func() { _ = srv.Run(ctx, time.Second) }()
	return srv, addr, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = ep.Shutdown(sctx)
	}, nil
}

// startTarget serves h on a loopback port the kernel picks; it returns
// the target's address and the function that stops it.
func startTarget(h http.Handler) (addr string, stop func(), err error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	hs := &http.Server{Handler: h}
	go func() { _ = hs.Serve(lis) }()
	return lis.Addr().String(), func() { _ = hs.Close() }, nil
}
