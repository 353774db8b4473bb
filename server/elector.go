package server

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluice-rl/sluice/election"
	"github.com/sluice-rl/sluice/server/capacity"
)

// Drain timing: a resignation etcd does not answer within resignTimeout is
// given up (the session's TTL ends the candidacy).
const resignTimeout = 2 * time.Second

// elector is the server's election (Config.Election) wired to its
// capacity service: the election made (open), a root's lease horizon
// under etcd, the mastership it reports handed to the service (run), and
// the resignation when the server drains. Its fields are set in New (the
// election by open) and only read after; run and resign may be called
// from different goroutines, as election.Election allows.
type elector struct {
	cfg       Election
	endpoints []string // Etcd.Endpoints, for the status page
	addr      string   // this server's advertised address
	log       *slog.Logger
	// horizon is a root's lease horizon under an etcd election (nil:
	// none): the capacity service keeps it, the election opens its terms.
	horizon  *election.LeaseHorizon
	election election.Election // set by open
}

// newElector returns the elector of cfg.Election for a server advertised
// at addr, before the services: a root elected in etcd keeps a lease
// horizon, so that a successor elected after every lease lapsed does not
// learn for nothing (an intermediate learns the same from its parent).
func newElector(cfg Config, addr string, log *slog.Logger) *elector {
	e := &elector{cfg: cfg.Election, endpoints: cfg.Etcd.Endpoints, addr: addr, log: log}
	if cfg.Election.Kind == "etcd" && len(cfg.Parent.Addresses) == 0 {
		e.horizon = new(election.LeaseHorizon)
	}
	return e
}

// capacityHorizon is the horizon for capacity.Options.Horizon: nil (no
// horizon kept) unless a root elected in etcd.
func (e *elector) capacityHorizon() capacity.Horizon {
	if e.horizon == nil {
		return nil
	}
	return e.horizon
}

// open creates the election, after the capacity service svc (whose
// longest lease a root's horizon covers); under etcd, through etcd, and
// with svc not master until the election says so.
func (e *elector) open(etcd *clientv3.Client, svc *capacity.Service) error {
	switch e.cfg.Kind {
	case "", "standalone":
		e.election = election.Standalone(e.addr)
	case "etcd": // its key and etcd's endpoints checked by Config.validate
		opts := election.EtcdOptions{Key: e.cfg.Key, Address: e.addr, TTL: e.ttl(), Logger: e.log}
		if e.horizon != nil { // a root (newElector)
			opts.LongestLease, opts.Horizon = svc.LongestLease, e.horizon
		}
		el, err := election.Etcd(etcd, opts)
		if err != nil {
			return err
		}
		e.election = el
		svc.SetMastership(false, "") // until the election says otherwise
	}
	return nil
}

// ttl is the etcd election's session TTL: Election.TTL, 10 s when zero.
func (e *elector) ttl() time.Duration {
	if ttl := e.cfg.TTL; ttl != 0 {
		return ttl
	}
	return 10 * time.Second
}

// describe describes the election for the status page
// (capacity.Options.Election).
func (e *elector) describe() string {
	if e.cfg.Kind != "etcd" {
		return "standalone"
	}
	return fmt.Sprintf("etcd %s at %s (session TTL %v)", e.cfg.Key, strings.Join(e.endpoints, ","), e.ttl())
}

// run campaigns until ctx ends, handing every change of mastership to
// svc (and, to a new master, when its predecessor's leases end).
func (e *elector) run(ctx context.Context, svc *capacity.Service) {
	err := e.election.Run(ctx, func(st election.Status) {
		svc.SetMastership(st.IsMaster, st.Master)
		if st.IsMaster {
			svc.SetLeasesEndBy(st.LeasesEndBy)
		}
		e.log.Info("mastership", "is_master", st.IsMaster, "master", st.Master, "previous_leases_end_by", st.LeasesEndBy)
	})
	if err != nil {
		e.log.Error("the election stopped: this task no longer campaigns", "err", err)
	}
}

// resign resigns the election within ctx and at most min(grace/4,
// resignTimeout): an etcd that does not answer at once is gone, and the
// session's TTL ends the candidacy then (logged).
func (e *elector) resign(ctx context.Context, grace time.Duration) error {
	rctx, cancel := context.WithTimeout(ctx, min(grace/4, resignTimeout))
	defer cancel()
	err := e.election.Resign(rctx)
	if err != nil {
		e.log.Warn("resigning the election failed; the etcd session's TTL will end the candidacy", "err", err)
	}
	return err
}
