// Package xdstest is an xDS control plane for tests: a real one, as Envoy
// Gateway serves envoyproxy/ratelimit's rules — go-control-plane's server
// (pkg/server/v3) over its snapshot cache (pkg/cache/v3), the aggregated
// discovery service on a loopback port, over mTLS or in plaintext —
// serving resources of type ratelimit.config.ratelimit.v3.RateLimitConfig
// (resource.RateLimitConfigType, which limits/rlsxds subscribes to as its
// TypeURL), and keeping what its clients told it: the versions they
// acknowledged (ACK), the error details of the versions they rejected
// (NACK), the gRPC metadata of their streams and their nodes.
//
// It does not import limits/rlsxds, whose in-package tests use it. It is
// imported only from _test.go files.
package xdstest

import (
	"context"
	"crypto/tls"
	"net"
	"strings"
	"sync"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-rl/sluice/internal/tlsutil"
)

// ControlPlane is a real xDS control plane as Envoy Gateway serves
// envoyproxy/ratelimit's rules (its ratelimit runner: go-control-plane's
// server over a snapshot cache, aggregated discovery only, state of the
// world): Set gives a node a version of RateLimitConfig resources, which
// the node's open streams receive at once and streams opened later when
// they subscribe. It records what its clients send: Acks, Nacks, Headers,
// NodeIDs and NodeMetadata.
//
// Stop ends it as a control plane going away does (its streams break, its
// port closes) and Restart serves again on the same port, with the
// snapshots set so far (also those set while it was stopped), as a
// restarted control plane recomputes them; the records are kept across
// restarts. Start followed by Stop is a control plane not there yet: its
// address can be given to a client, which fails to connect until Restart.
//
// Its methods are safe for concurrent use; those taking a testing.TB call
// t.Fatal, so they belong to the test's goroutine. It is stopped at the
// cleanup of the test that started it; a test that must see it gone
// earlier — before goleak.VerifyNone, say, which a deferred call runs
// before the cleanups — calls Stop, which may be called any number of
// times.
type ControlPlane struct {
	cache cache.SnapshotCache
	tls   *tls.Config

	run    sync.Mutex // serialises serving and stopping
	addr   string
	gs     *grpc.Server // nil: stopped
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex // guards the records
	acks    []string
	nacks   []string
	streams []metadata.MD
	nodes   []*corev3.Node
}

// Start serves a control plane on 127.0.0.1, on a port the kernel picks,
// with tlsConfig (nil: plaintext; for mTLS as Envoy Gateway's, a server
// configuration requiring client certificates, as tlsutil.Server makes),
// and stops it at t's cleanup. It serves no snapshot until Set.
func Start(t testing.TB, tlsConfig *tls.Config) *ControlPlane {
	t.Helper()
	cp := &ControlPlane{cache: cache.NewSnapshotCache(false, cache.IDHash{}, nil), tls: tlsConfig, addr: "127.0.0.1:0"}
	cp.run.Lock()
	cp.serveLocked(t)
	cp.run.Unlock()
	t.Cleanup(cp.Stop)
	return cp
}

// StartMTLS is Start over mTLS as Envoy Gateway serves its control plane:
// the server certificate and key, client certificates required, signed
// by ca (PEM files; tlsutil.Server).
func StartMTLS(t testing.TB, cert, key, ca string) *ControlPlane {
	t.Helper()
	tc, err := tlsutil.Server(cert, key, ca)
	if err != nil {
		t.Fatal(err)
	}
	return Start(t, tc)
}

// Addr is the control plane's address, host:port, the same after a
// Restart (and while stopped).
func (cp *ControlPlane) Addr() string {
	cp.run.Lock()
	defer cp.run.Unlock()
	return cp.addr
}

// Stop ends the control plane, if it is serving: its streams break and
// its port closes. It returns once its goroutines have. The snapshots and
// the records stay.
func (cp *ControlPlane) Stop() {
	cp.run.Lock()
	defer cp.run.Unlock()
	cp.stopLocked()
}

// Restart stops the control plane if it is serving and serves again on
// the same port (a control plane restarted), with the snapshots set so
// far. It fails t if the port cannot be had again.
func (cp *ControlPlane) Restart(t testing.TB) {
	t.Helper()
	cp.run.Lock()
	defer cp.run.Unlock()
	cp.stopLocked()
	cp.serveLocked(t)
}

func (cp *ControlPlane) stopLocked() {
	if cp.gs == nil {
		return
	}
	cp.cancel()
	cp.gs.Stop()
	<-cp.done
	cp.gs, cp.cancel, cp.done = nil, nil, nil
}

// serveLocked listens on cp.addr and serves the aggregated discovery
// service over cp.cache, recording what the clients send.
func (cp *ControlPlane) serveLocked(t testing.TB) {
	t.Helper()
	lis, err := net.Listen("tcp", cp.addr)
	if err != nil {
		t.Fatalf("xdstest: listening on %s: %v", cp.addr, err)
	}
	cp.addr = lis.Addr().String()
	cb := server.CallbackFuncs{
		StreamOpenFunc: func(ctx context.Context, _ int64, _ string) error {
			md, _ := metadata.FromIncomingContext(ctx)
			cp.mu.Lock()
			defer cp.mu.Unlock()
			cp.streams = append(cp.streams, md.Copy())
			return nil
		},
		StreamRequestFunc: func(_ int64, req *discovery.DiscoveryRequest) error {
			cp.mu.Lock()
			defer cp.mu.Unlock()
			if n := req.GetNode(); n != nil {
				cp.nodes = append(cp.nodes, proto.Clone(n).(*corev3.Node))
			}
			switch {
			case req.GetErrorDetail() != nil:
				cp.nacks = append(cp.nacks, req.GetErrorDetail().GetMessage())
			case req.GetResponseNonce() != "":
				cp.acks = append(cp.acks, req.GetVersionInfo())
			}
			return nil
		},
	}
	var opts []grpc.ServerOption
	if cp.tls != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(cp.tls)))
	}
	ctx, cancel := context.WithCancel(context.Background())
	gs := grpc.NewServer(opts...)
	discovery.RegisterAggregatedDiscoveryServiceServer(gs, server.NewServer(ctx, cp.cache, cb))
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = gs.Serve(lis)
	}()
	cp.gs, cp.cancel, cp.done = gs, cancel, done
}

// Set serves node a snapshot of version holding configs (none: a version
// without rules), replacing the node's last one: its subscribed streams
// receive it at once. It may be called while the control plane is
// stopped, for the Restart to serve.
func (cp *ControlPlane) Set(t testing.TB, node, version string, configs ...*rlsconfv3.RateLimitConfig) {
	t.Helper()
	rs := make([]types.Resource, len(configs))
	for i, c := range configs {
		rs[i] = c
	}
	snap, err := cache.NewSnapshot(version, map[string][]types.Resource{resource.RateLimitConfigType: rs})
	if err != nil {
		t.Fatal(err)
	}
	if err := cp.cache.SetSnapshot(context.Background(), node, snap); err != nil {
		t.Fatal(err)
	}
}

// Acks are the versions the clients acknowledged (a request answering a
// response, its nonce, without an error detail), in the order received,
// across streams and restarts.
func (cp *ControlPlane) Acks() []string {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return append([]string(nil), cp.acks...)
}

// Nacks are the error details' messages of the versions the clients
// rejected, in the order received.
func (cp *ControlPlane) Nacks() []string {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return append([]string(nil), cp.nacks...)
}

// Headers is the gRPC metadata key (as sent as a header: any case) of
// each stream, in the order the streams opened: its values joined with
// ",", "" where the stream had none.
func (cp *ControlPlane) Headers(key string) []string {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	out := make([]string, len(cp.streams))
	for i, md := range cp.streams {
		out[i] = strings.Join(md.Get(key), ",")
	}
	return out
}

// NodeIDs are the node ids of the requests, in the order received (each
// request's: go-control-plane gives the requests that leave the node out
// their stream's first node).
func (cp *ControlPlane) NodeIDs() []string {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	out := make([]string, len(cp.nodes))
	for i, n := range cp.nodes {
		out[i] = n.GetId()
	}
	return out
}

// NodeMetadata is the string value of key in the node's metadata of each
// request, as NodeIDs ("" where the node has none).
func (cp *ControlPlane) NodeMetadata(key string) []string {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	out := make([]string, len(cp.nodes))
	for i, n := range cp.nodes {
		out[i] = n.GetMetadata().GetFields()[key].GetStringValue()
	}
	return out
}
