// Package hooks reaches the knobs of packages client and server that only
// Sluice's simulator and tests use — in-process dialers, a refresh loop the
// caller drives on virtual time, seeded jitter, and the comparison modes of
// the allocation across the tree — so that they stay out of those
// packages' public APIs.
//
// Packages client and server fill the function variables below in their
// init functions (so a program that imports hooks and one of them finds
// them set). Their values are typed any where this package cannot name the
// other packages' types; each variable's comment gives the concrete type,
// as grpc-go's internal package does.
package hooks

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/sluice-rl/sluice/internal/discovery"
)

// Client holds a client's knobs beyond its public options.
type Client struct {
	// Dial reaches servers instead of gRPC over the client's HTTP client
	// (the simulator passes in-process servers).
	Dial discovery.Dialer
	// Manual starts no refresh goroutine: the caller calls ClientStep
	// whenever the previous step said, and after a resource is added or its
	// wants change. Close then releases nothing.
	Manual bool
	// Rand is the source of the retry jitter; nil is math/rand/v2's global
	// source.
	Rand *rand.Rand
}

// Server holds a server's knobs beyond its public Options.
type Server struct {
	// ParentDial, when set, replaces Options.ParentHTTP: it returns the
	// stub for a parent address (the simulator passes in-process servers).
	ParentDial discovery.Dialer
	// ManualParent makes the caller drive the parent link with
	// ServerStepParent (the simulator, on virtual time): Run does not start
	// it, and a first request, instead of waiting for the link, takes one
	// turn of it inline (so the server must not be called concurrently).
	ManualParent bool
	// Rand is the source of retry jitter; nil is math/rand/v2's global
	// source.
	Rand *rand.Rand
	// DoormanAllocation turns off Sluice's changes to Doorman's allocation
	// across the tree, for comparison (the simulator's --allocation
	// doorman): a parent does not keep a child's outstanding leases booked
	// (lease.Request.KeepOutstanding), an intermediate reports its lease
	// rather than what it handed out, and learning mode cuts claims to what
	// is free instead of handing back those it cannot cover.
	DoormanAllocation bool
	// DesignRefreshDecay turns the refresh interval's decay across the tree
	// the design's way, for comparison (the simulator's --refresh-decay
	// design): each level further from the root refreshes decay_factor
	// times as long as the level above it (clients most often), instead of
	// 1/decay_factor times (Sluice's default: the levels nearer the root
	// refresh most often).
	//
	// Source: doorman-design.md, "Algorithms" ("the refresh interval of a
	// lease should halve with every level we go up in the tree").
	DesignRefreshDecay bool
}

// Set by package client.
var (
	// ClientOption returns a client.Option that installs h.
	ClientOption func(h Client) any
	// ClientStep takes one turn of a *client.Client's refresh loop at its
	// clock and returns how long until the next is due (see the client's
	// package doc for the rule). Not for concurrent use with itself.
	ClientStep func(c any, ctx context.Context) time.Duration
)

// Set by package server.
var (
	// ServerOptions returns a copy of a server.Options with h installed.
	ServerOptions func(opts any, h Server) any
	// ServerStepParent takes one turn of a *server.Server's link to its
	// parent (with ManualParent) and returns how long until the next is
	// due; 0 at the root. Not for concurrent use with itself.
	ServerStepParent func(s any, ctx context.Context) time.Duration
)
