// Package hooks holds the knobs of packages client and server/capacity
// that only Sluice's simulator and tests use — in-process dialers, a
// refresh loop the caller drives on virtual time, seeded jitter, and the
// comparison modes of the allocation across the tree — so that they stay
// out of those packages' public APIs.
//
// A client takes them through client.WithHooks(*hooks.Client), a capacity
// service through capacity.Options.Hooks (*hooks.Server): both are public,
// but their types are internal, so code outside Sluice can only pass nil.
// The client and the service fill in the hooks' Step and StepParent
// functions, with which the caller drives them on virtual time.
//
// SkewedClock is the one knob of a whole `sluice server` process: the
// fault harness skews its clock through an environment variable
// (ClockSkewEnv) that only this package reads.
package hooks

import (
	"context"
	"math/rand/v2"
	"time"

	v1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/api/sluice/v1/sluicev1connect"
	"github.com/sluice-rl/sluice/internal/discovery"
)

// Client holds a client's knobs beyond its public options.
type Client struct {
	// Dial reaches servers instead of gRPC over the client's HTTP client
	// (the simulator passes in-process servers).
	Dial discovery.Dialer
	// Manual starts no refresh goroutine: the caller calls Step
	// whenever the previous step said, and after a resource is added or its
	// wants change. Close then releases nothing.
	Manual bool
	// Rand is the source of the retry jitter; nil is math/rand/v2's global
	// source.
	Rand *rand.Rand

	// WatchDial, when set, reaches servers' sluice.v1.Leases instead of
	// the client's HTTP client (tests).
	WatchDial func(addr string) sluicev1connect.LeasesClient

	// Push is set by client.New: it applies leases pushed to the client
	// (the simulator delivers them, with Manual, on virtual time).
	Push func([]*v1.PushedLease)

	// Step is set by client.New: it takes one turn of the client's refresh
	// loop at its clock and returns how long until the next is due (see
	// the client's package doc for the rule). Not for concurrent use with
	// itself.
	Step func(ctx context.Context) time.Duration
}

// Server holds a capacity service's knobs beyond its public Options.
type Server struct {
	// ParentDial, when set, replaces Options.ParentHTTP: it returns the
	// stub for a parent address (the simulator passes in-process servers).
	ParentDial discovery.Dialer
	// ManualParent makes the caller drive the parent link with
	// StepParent (the simulator, on virtual time): Run does not start
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
	// MinRequestInterval, when not 0, replaces Doorman's minimum time
	// between two decisions for one requester (doorman.MinRequestInterval,
	// 5 s); negative: none. Tests of streams that report more often than
	// every 5 s on the wall clock (server/rlqs) shorten it.
	MinRequestInterval time.Duration

	// Push is set by capacity.New: it applies leases the parent pushed
	// (the simulator delivers them, with ManualParent, on virtual time).
	Push func([]*v1.PushedLease)

	// StepParent is set by capacity.New: it takes one turn of the service's
	// link to its parent (with ManualParent) and returns how long until
	// the next is due; 0 at the root. Not for concurrent use with itself.
	StepParent func(ctx context.Context) time.Duration
}
