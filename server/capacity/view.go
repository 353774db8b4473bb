package capacity

import (
	"fmt"
	"math"
	"time"

	"github.com/sluice-rl/sluice/algorithm"
	"github.com/sluice-rl/sluice/lease"
	"github.com/sluice-rl/sluice/server/status/view"
)

// sharing reports whether an algorithm shares capacity (and so has a
// learning mode).
func sharing(k algorithm.Kind) bool {
	return k == algorithm.FairShare || k == algorithm.ProportionalShare
}

// finite returns &x, or nil when x is infinite or NaN (JSON's null: an
// unlimited capacity).
func finite(x float64) *float64 {
	if math.IsInf(x, 0) || math.IsNaN(x) {
		return nil
	}
	return &x
}

// Ready reports whether the service should receive traffic: it has a
// configuration (or a parent to get one from) when Options.RequireConfig,
// and knows who the master is. why says what is missing.
func (s *Service) Ready() (ready bool, why string) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	switch {
	case s.parent == nil && s.cfg.repo == nil && s.opts.RequireConfig:
		return false, "no configuration loaded"
	case !s.master.isMaster && s.master.addr == "":
		return false, "mastership unknown"
	}
	return true, "ok"
}

// View is the data of a service's status pages (server/status's
// CapacityView): its node, its configuration, and its resources with
// their leases and history. The zero value is not usable: get one from
// Service.View. Safe for concurrent use; each call is one snapshot.
type View struct{ s *Service }

// View returns the service's status pages' view.
func (s *Service) View() View { return View{s: s} }

// Ready is Service.Ready, for the status page.
func (v View) Ready() (ready bool, why string) { return v.s.Ready() }

// Node returns the node's view.
func (v View) Node() view.Node {
	s := v.s
	s.mu.RLock()
	n := view.Node{ID: s.opts.ID, Address: s.opts.Address, Started: s.started, IsMaster: s.master.isMaster, Master: s.master.addr, Election: s.opts.Election}
	s.mu.RUnlock()
	if n.Election == "" {
		n.Election = "standalone"
	}
	if ps, ok := s.Parent(); ok {
		p := view.ParentStatus(ps)
		n.Parent = &p
	}
	return n
}

// ConfigView returns the root's configuration for the status page (nil at
// an intermediate server or without a configuration).
func (v View) ConfigView() *view.ConfigStatus {
	s := v.s
	cfg := s.Config()
	if cfg == nil || s.parent != nil {
		return nil
	}
	cs := &view.ConfigStatus{Hash: cfg.Hash()}
	for _, t := range cfg.Templates() {
		row := view.TemplateRow{Glob: t.IdentifierGlob, Capacity: t.Capacity, Algorithm: t.Algorithm.Kind.String(),
			LeaseLength: t.Algorithm.LeaseLength.Seconds(), RefreshInterval: t.Algorithm.RefreshInterval.Seconds(),
			Learning: t.Algorithm.LearningModeDuration.Seconds(), Description: t.Description}
		if t.HasSafeCapacity {
			row.SafeCapacity = finite(t.SafeCapacity)
		}
		cs.Templates = append(cs.Templates, row)
	}
	return cs
}

// ResourceRows returns the rows of the resources whose id match accepts
// (nil: all), unsorted, and the number of resources before filtering. It
// costs one pass over the resources, locking each in turn.
func (v View) ResourceRows(match func(id string) bool) (rows []view.ResourceRow, total int) {
	s := v.s
	now := s.now()
	ids, rs := s.resourceList()
	rows = []view.ResourceRow{}
	for i, r := range rs {
		if match != nil && !match(ids[i]) {
			continue
		}
		rows = append(rows, row(ids[i], r, now))
	}
	return rows, len(ids)
}

// row returns resource r's row, as of now, under its lock.
func row(id string, r *resource, now time.Time) view.ResourceRow {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.store.Cleanup(now)
	p := r.store.Params()
	w, h, _, n := r.store.Totals()
	row := view.ResourceRow{ID: id, Algorithm: p.Kind.String(), Capacity: finite(p.Capacity), SumHas: h, SumWants: w,
		Clients: n, Learning: r.store.Learning(now) && sharing(p.Kind), SafeCapacity: finite(r.store.SafeCapacity())}
	if r.template != nil {
		row.Template = r.template.IdentifierGlob
	}
	return row
}

// ResourcePage returns resource id's detail. Errors: ErrUnknownResource.
func (v View) ResourcePage(id string) (view.ResourcePage, error) {
	s := v.s
	s.mu.RLock()
	r := s.resources[id]
	s.mu.RUnlock()
	if r == nil {
		return view.ResourcePage{}, fmt.Errorf("resource %q: %w", id, ErrUnknownResource)
	}
	now := s.now()
	page := view.ResourcePage{Resource: row(id, r, now), History: s.hist.get(id), Leases: []view.LeaseRow{}}
	r.mu.Lock()
	leases := r.store.Leases()
	if s.parent != nil && r.parent.OK {
		page.ParentOf = r.parent.Expiry.UTC().Format(time.RFC3339)
	}
	r.mu.Unlock()
	for _, l := range leases {
		page.Leases = append(page.Leases, leaseRow(l, now))
	}
	if page.History == nil {
		page.History = []view.Point{}
	}
	return page, nil
}

func leaseRow(l lease.Lease, now time.Time) view.LeaseRow {
	return view.LeaseRow{Client: l.Client, Priority: l.Priority, Has: l.Has, Wants: l.Wants, Subclients: l.Subclients,
		Expiry: l.Expiry.UTC(), ExpiresIn: math.Round(l.Expiry.Sub(now).Seconds()), RefreshInterval: l.RefreshInterval.Seconds()}
}
