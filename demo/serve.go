package demo

import (
	"context"
	"net"
	"net/http"
	"time"

	"github.com/sluice-rl/sluice/server"
)

// startServer assembles a Sluice server from cfg on a loopback port the
// kernel picks and runs it (server.Server.Run: its production endpoint and
// background work) until ctx is done or stop is called; stop drains it and
// waits for it to end.
func startServer(ctx context.Context, cfg server.Config) (srv *server.Server, addr string, stop func(), err error) {
	cfg.Listen.Address = "127.0.0.1:0"
	cfg.Listen.Grace = 5 * time.Second
	srv, err = server.New(ctx, cfg)
	if err != nil {
		return nil, "", nil, err
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Run(rctx)
	}()
	return srv, srv.Addr(), func() {
		cancel()
		<-done
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
