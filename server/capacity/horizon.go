package capacity

import (
	"context"
	"slices"
	"sync/atomic"

	"github.com/sluice-rl/sluice/lease"
)

// Horizon is a root master's lease horizon, kept before it hands out its
// first lease of more than 0 in each term (Options.Horizon).
// election.LeaseHorizon implements it with etcd; the simulator keeps one
// of its own.
//
// Source: docs/departures.md, "Doorman" (how long a new master of a root
// stays in learning mode: a master that never granted anything holds its
// successor in learning mode for nothing).
type Horizon interface {
	// KeepHorizon makes the horizon cover every lease this master grants
	// from now until its term ends; it is called again after a failure
	// and in each new term, and must be cheap once it has succeeded in a
	// term. It fails when the horizon cannot be kept (the master must not
	// hand out more than 0 then). Safe for concurrent use.
	KeepHorizon(ctx context.Context) error
}

// HorizonFunc adapts a function to Horizon.
type HorizonFunc func(ctx context.Context) error

// KeepHorizon implements Horizon: it calls f.
func (f HorizonFunc) KeepHorizon(ctx context.Context) error { return f(ctx) }

// horizonGate keeps a master's lease horizon once a term before leases of
// more than 0 leave it: a response that would carry one waits for
// Horizon.KeepHorizon, and fails when it fails (the leases decided are
// booked, and never reach their requesters); a pushed lease of more than
// 0 is not pushed until it has succeeded (its holder keeps what it had,
// and gets it on its next request). Without a Horizon every lease leaves
// at once. Safe for concurrent use.
type horizonGate struct {
	h Horizon // nil: none kept
	// term counts the terms won (newTerm), and kept is the term in which
	// the horizon last succeeded.
	term atomic.Int64
	kept atomic.Int64
}

func newHorizonGate(h Horizon) *horizonGate {
	g := &horizonGate{h: h}
	g.kept.Store(-1) // term 0's horizon is not kept
	return g
}

// newTerm starts a term (mastership won): its horizon is not kept yet.
func (g *horizonGate) newTerm() { g.term.Add(1) }

// keep keeps the horizon before grants carrying more than 0 leave this
// server, once a term. Errors: Horizon.KeepHorizon's.
func (g *horizonGate) keep(ctx context.Context, grants []lease.Grant) error {
	if g.held() {
		return nil
	}
	term := g.term.Load()
	if !slices.ContainsFunc(grants, func(gr lease.Grant) bool { return gr.Capacity > 0 }) {
		return nil
	}
	if err := g.h.KeepHorizon(ctx); err != nil {
		return err
	}
	g.kept.Store(term)
	return nil
}

// held reports whether this master may hand out more than 0: it keeps no
// lease horizon, or has kept it in this term.
func (g *horizonGate) held() bool {
	return g.h == nil || g.kept.Load() == g.term.Load()
}
