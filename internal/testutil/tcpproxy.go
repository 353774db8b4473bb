package testutil

import (
	"io"
	"net"
	"sync"
	"testing"
)

// TCPProxy is a TCP proxy on a loopback port the kernel picks, in front
// of a server (etcd, say), for tests of what its clients do when the
// network fails: Cut drops every connection and refuses new ones for a
// while (a network hiccup); Kill does so for good, its port closed (a
// killed process: clients see their streams broken at once, where a
// graceful stop may drain them for seconds). Safe for concurrent use.
type TCPProxy struct {
	// Addr is the proxy's host:port.
	Addr   string
	lis    net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

// NewTCPProxy proxies to target (host:port); it is killed, and its
// goroutines waited for, when tb ends.
func NewTCPProxy(tb testing.TB, target string) *TCPProxy {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p := &TCPProxy{Addr: lis.Addr().String(), lis: lis, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	tb.Cleanup(func() {
		p.Kill()
		p.wg.Wait()
	})
	return p
}

func (p *TCPProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.lis.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			c.Close()
			u.Close()
			continue
		}
		p.conns[c], p.conns[u] = struct{}{}, struct{}{}
		p.wg.Add(2)
		p.mu.Unlock()
		go p.pipe(c, u)
		go p.pipe(u, c)
	}
}

func (p *TCPProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	_, _ = io.Copy(dst, src)
	dst.Close()
	src.Close()
}

// Cut, with true, closes every open connection and refuses new ones
// until Cut(false) (a hiccup).
func (p *TCPProxy) Cut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for c := range p.conns {
			c.Close()
		}
		clear(p.conns)
	}
}

// Kill closes the listener and every open connection, for good. Safe to
// call more than once.
func (p *TCPProxy) Kill() {
	p.Cut(true)
	p.lis.Close()
}
