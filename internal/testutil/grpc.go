package testutil

import (
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Dial returns a plaintext gRPC client connection to addr, closed with the
// test.
func Dial(tb testing.TB, addr string) *grpc.ClientConn {
	tb.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { conn.Close() })
	return conn
}

// ServeGRPC serves, on a loopback port the kernel picks, a gRPC server
// with the services register registers, stopped with the test, and
// returns a client connection to it.
func ServeGRPC(tb testing.TB, register func(*grpc.Server)) *grpc.ClientConn {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	gs := grpc.NewServer()
	register(gs)
	go func() { _ = gs.Serve(lis) }()
	tb.Cleanup(gs.Stop)
	return Dial(tb, lis.Addr().String())
}

// FreePort asks the kernel for a free loopback port (listens on
// 127.0.0.1:0 and closes). For a child process or a peer URL that must
// know its port before it starts; anything that can take a listener
// should take one instead.
func FreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
