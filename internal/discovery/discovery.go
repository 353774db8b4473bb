// Package discovery finds the master of a node of capacity servers with
// the Doorman Discovery RPC, which every server answers, master or not.
//
// Source: doorman-design.md, "Using the Discovery RPC".
package discovery

import (
	"context"
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

// Ask asks the server at addr who the master is. It returns addr if that
// server is the master, the master's address if it knows it, or "" if it
// does not; err if the server could not be reached.
func Ask(ctx context.Context, hc *http.Client, addr string) (string, error) {
	stub := doormanconnect.NewCapacityClient(hc, URL(addr), connect.WithGRPC())
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
func Next(ctx context.Context, hc *http.Client, addrs []string, current string) string {
	start := 0
	for i, a := range addrs {
		if a == current {
			start = i + 1
		}
	}
	for k := range addrs {
		a := addrs[(start+k)%len(addrs)]
		if master, err := Ask(ctx, hc, a); err == nil && master != "" {
			return master
		}
		if ctx.Err() != nil {
			break
		}
	}
	return addrs[start%len(addrs)]
}
