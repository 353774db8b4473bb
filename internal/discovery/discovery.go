// Package discovery finds the master of a node of capacity servers with
// the Doorman Discovery RPC, which every server answers, master or not.
//
// Source: doorman-design.md, "Using the Discovery RPC".
package discovery

import (
	"context"
	"crypto/tls"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"

	pb "github.com/sluice-rl/sluice/api/doorman"
	"github.com/sluice-rl/sluice/api/doorman/doormanconnect"
)

// Timeout bounds one Discovery call.
const Timeout = time.Second

// URL returns the base URL for a server address: addr itself if it has a
// scheme, else http://addr.
func URL(addr string) string {
	if strings.Contains(addr, "://") {
		return addr
	}
	return "http://" + addr
}

// Transport returns the HTTP transport of the capacity RPCs: HTTP/2, as
// h2c (prior knowledge) in plaintext and by ALPN with TLS when cfg is not
// nil (a clone of cfg is used), plus HTTP/1.1 when http1 is set (Connect's
// JSON protocol works over either; gRPC needs HTTP/2).
func Transport(cfg *tls.Config, http1 bool) *http.Transport {
	tr := &http.Transport{}
	if cfg != nil {
		tr.TLSClientConfig = cfg.Clone()
	}
	tr.Protocols = new(http.Protocols)
	tr.Protocols.SetUnencryptedHTTP2(true)
	tr.Protocols.SetHTTP2(true)
	tr.Protocols.SetHTTP1(http1)
	return tr
}

// Scheme returns the scheme of addresses without one: "https" with a TLS
// configuration, "http" without (nil).
func Scheme(cfg *tls.Config) string {
	if cfg != nil {
		return "https"
	}
	return "http"
}

// Dialer returns a stub for the server at addr: over the network
// (HTTPDialer), or in process (the simulator hands out *server.Server
// values, which implement the same methods).
type Dialer func(addr string) doormanconnect.CapacityClient

// HTTPDialer returns a Dialer speaking gRPC (or, with json, Connect's JSON
// protocol) through hc to http://addr, or to addr itself if it has a scheme.
func HTTPDialer(hc *http.Client, json bool) Dialer { return NewDialer(hc, "http", json) }

// NewDialer is HTTPDialer for a scheme: "http", or "https" when hc speaks
// TLS (addresses without a scheme, as mastership redirects carry them, get
// this one).
func NewDialer(hc *http.Client, scheme string, json bool) Dialer {
	opts := ClientOptions(json)
	return func(addr string) doormanconnect.CapacityClient {
		return doormanconnect.NewCapacityClient(hc, Target(scheme, addr), opts...)
	}
}

// ClientOptions returns the Connect options of Sluice's lease RPCs: gRPC,
// or with json Connect's own protocol (JSON over HTTP/1.1 or HTTP/2).
func ClientOptions(json bool) []connect.ClientOption {
	if json {
		return nil
	}
	return []connect.ClientOption{connect.WithGRPC()}
}

// Target returns the base URL of a server address: addr itself if it has a
// scheme, else scheme://addr.
func Target(scheme, addr string) string {
	if strings.Contains(addr, "://") {
		return addr
	}
	return scheme + "://" + addr
}

// Ask asks the server at addr who the master is. It returns addr if that
// server is the master, the master's address if it knows it, or "" if it
// does not; err if the server could not be reached.
func Ask(ctx context.Context, dial Dialer, addr string) (string, error) {
	stub := dial(addr)
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	resp, err := stub.Discovery(ctx, connect.NewRequest(&pb.DiscoveryRequest{}))
	if err != nil {
		return "", err
	}
	if resp.Msg.GetIsMaster() {
		return addr, nil
	}
	return resp.Msg.GetMastership().GetMasterAddress(), nil
}

// Next picks the address to use after a failure on current: it asks each
// of addrs in turn, starting after current, and returns the first master
// one of them names; if none does, it returns the address after current.
// It makes at most len(addrs) calls of at most Timeout each.
func Next(ctx context.Context, dial Dialer, addrs []string, current string) string {
	start := 0
	for i, a := range addrs {
		if a == current {
			start = i + 1
		}
	}
	for k := range addrs {
		a := addrs[(start+k)%len(addrs)]
		if master, err := Ask(ctx, dial, a); err == nil && master != "" {
			return master
		}
		if ctx.Err() != nil {
			break
		}
	}
	return addrs[start%len(addrs)]
}
