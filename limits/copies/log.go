package copies

import (
	"context"
	"errors"
	"strings"
	"time"
)

// Log is a copy log shared by the engines of several servers: the counts
// per domain, group and resource, each the sum of per-server contributions
// stored beside it, kept outside the engine (on Redis:
// limits/redis.CopyLog) so that every server limits against the holds of
// every server. Staged transfers live there too, so that a transfer staged
// through one server can be seized through another.
//
// An Engine with a Log (Options.Log) keeps its sessions and their hold
// sets in memory, as Charon's limiting servers do, and asks the Log for
// every decision; this server's contributions are, at every moment, the
// sum of its sessions' holds, which is what lets Restore rebuild them.
//
// Every method is one atomic step on the shared state (one Redis script),
// made with the Log's own clock and timeouts; an error means the outcome
// is unknown or nothing happened, never a partial change the Log cannot
// repair with Restore. Errors wrap ErrUnavailable when the shared state
// cannot be reached, and ErrFenced when this server's contributions were
// taken over (its membership ended: see Engine.Fence). The Engine calls
// each method outside its own lock.
//
// Every method but Epoch takes the context of the work it serves: the
// request's (Reserve, Release, Stage, Seize on an RPC; Release too when a
// session is closed), or the caller's own for background work (Release
// and ExpireTransfers from Engine.Expire; Lost and Restore from
// Engine.Reconcile). Its deadline and cancellation bound the call: when
// ctx ends, the call returns at once with an error wrapping ctx.Err()
// (and ErrUnavailable), its outcome unknown unless it was never sent.
//
// Source: charon-paper.md, sections 4.2 and 4.3.2 (the copy log in shared
// memory, per-server contributions).
type Log interface {
	// Reserve grants the most n in [q.Min, q.Copies] such that, with every
	// server's holds, the domain's count stays within q.DomainLimit, each
	// of q.Groups' within its limit and the global count within
	// q.GlobalLimit (q.Ignore: whatever the limits), adding n to this
	// server's contribution to each count; or nothing, changing nothing.
	// When the Log finds its record of the resource gone while servers
	// may hold copies of it (q.Holding, or other servers share the Log),
	// it grants nothing and answers ErrLearning for a learning period,
	// while the servers write their holds back (Restore, Learn); a
	// resource that ignores its limits (q.Ignore) does not wait for it.
	Reserve(ctx context.Context, q LogReserve) (LogCounts, error)
	// Release subtracts each hold's copies from this server's
	// contributions (never below zero: what is not there is not
	// subtracted).
	Release(ctx context.Context, holds []Hold) error
	// Stage moves h's copies from this server's contribution to staged
	// transfer id, which session staged and which ends ttl from now (the
	// Log's clock), and returns that instant.
	Stage(ctx context.Context, id, session string, h Hold, ttl time.Duration) (time.Time, error)
	// Seize moves staged transfer id, unexpired, into this server's
	// contribution, once, and returns what it carried; an unknown, seized
	// or expired id is an error wrapping ErrUnknownTransfer.
	Seize(ctx context.Context, id string) (Hold, error)
	// ExpireTransfers releases every staged transfer whose ttl has passed
	// unseized (any server may call it; each is released once) and
	// returns them.
	ExpireTransfers(ctx context.Context) ([]Ended, error)
	// Restore makes this server's contributions to resource's counts
	// exactly holds (the copies its sessions hold there, one Hold per
	// domain and groups; none: zero), whatever they were: after the shared state lost
	// them, or after an operation whose outcome is unknown. A Restore
	// that finds the resource's record gone starts its learning period,
	// as Reserve does.
	Restore(ctx context.Context, resource string, holds []Hold) error
	// Lost returns those of resources, to each of which this server
	// contributes, whose record of this server's contributions has
	// vanished (Redis restarted empty, FLUSHALL, a failover that lost
	// writes): Restore rebuilds them.
	Lost(ctx context.Context, resources []string) ([]string, error)
	// Learn looks at the learning period of each check's resource, in one
	// atomic step per resource, and returns the time left of each, index
	// for index (0: none). A resource whose record the Log finds gone
	// gets one again, and its learning period starts, waiting for every
	// other live member of the fleet, and for this server if
	// check.Holding, to write its holds back (Restore, or Learn when it
	// holds none). Otherwise this server counts as having written its
	// holds back — unless check.Holding and its contributions are gone
	// (Lost: Restore first) — and the period ends as soon as every member
	// it waits for did, at the latest when it runs out. The engine learns
	// of every configured resource this way (Engine.Reconcile), so that
	// a new fleet, whose records Redis never had, is not refused at all.
	//
	// Source: doorman-design.md, "learning mode"; docs/charon.md,
	// "Readiness".
	Learn(ctx context.Context, checks []LearnCheck) ([]time.Duration, error)
	// Epoch returns this server's epoch ("" while it has none). The
	// engine names its sessions after it, EPOCH-ID, so that any server of
	// the fleet can tell which one holds a session (SessionEpoch).
	Epoch() string
}

// SessionEpoch returns the epoch of the server holding session id, as the
// engine named it (EPOCH-ID, with a shared Log); "" for an id without one.
func SessionEpoch(id string) string {
	if i := strings.IndexByte(id, '-'); i > 0 {
		return id[:i]
	}
	return ""
}

// LogReserve is one Reserve asked of a Log: the request and the limits
// that apply (the engine's configuration, resolved for the domain).
type LogReserve struct {
	Resource, Domain string
	// Copies and Min: grant the most n in [Min, Copies] (1 ≤ Min ≤ Copies).
	Copies, Min int64
	// DomainLimit is the domain's limit; GlobalLimit the global limit
	// (Unbounded: none).
	DomainLimit, GlobalLimit int64
	// Groups are the domain's groups, sorted by name, and GroupLimits
	// their limits, index for index.
	Groups      []string
	GroupLimits []int64
	// Ignore grants whatever the limits (still counted, still within
	// MaxCopies).
	Ignore bool
	// Holding says that this server holds copies of Resource now: if the
	// Log finds its record of the resource gone, this server's holds
	// were lost with it, and the Log learns (ErrLearning) even when no
	// other server shares it.
	Holding bool
}

// LearnCheck is one resource of Log.Learn.
type LearnCheck struct {
	Resource string
	// Holding says that this server holds copies of Resource now: its
	// contributions must be in the Log (written back by Restore when
	// lost) before the resource's learning period may end.
	Holding bool
}

// LogCounts is a Log's answer to Reserve: the copies granted and the
// counts after it, over every server.
type LogCounts struct {
	Granted                  int64
	DomainHolds, GlobalHolds int64
	// GroupHolds are the counts of LogReserve.Groups, index for index.
	GroupHolds []int64
}

// ErrUnavailable is wrapped by the errors of a Log that cannot reach its
// shared state (Redis down, a timeout, an open circuit breaker), and by
// the Engine's answers while it is fenced. Class Unavailable: the client
// may retry, through this server later or another one now.
var ErrUnavailable = errors.New("unavailable")

// ErrFenced is wrapped by a Log's errors once this server's contributions
// were taken over by the fleet's leader (its membership ended): the server
// must drop its sessions (Engine.Fence) and join again under a new epoch.
var ErrFenced = errors.New("fenced: this server's membership ended")

// ErrLearning is wrapped by Reserve's error while the Log counts a
// resource again after losing its record of it (Redis restarted empty, a
// FLUSHALL, a failover that lost writes): for a learning period, every
// server writes its holds back (Engine.Reconcile) and no new copy is
// granted, not even fail-open (Redis answered: this is no outage). It
// is of class Unavailable (retry after the period), and the Engine's
// error wraps ErrUnavailable too.
//
// Source: doorman-design.md, "learning mode" (a server that lost its
// state grants nothing new until its clients have told it what they
// hold), applied to the copy log; docs/accuracy.md, "Learning mode for
// copies".
var ErrLearning = errors.New("learning mode")

// OnStoreError is what a copy-limited resource answers when its shared
// Log fails.
type OnStoreError uint8

// The choices.
const (
	// FailClosed (the zero value): the reserve fails with ErrUnavailable.
	FailClosed OnStoreError = iota
	// FailOpen: the reserve is granted in full without looking at the
	// limits, flagged (Reservation.Degraded) and held; the server's
	// contributions are written back (Restore) once the Log answers again.
	FailOpen
)
