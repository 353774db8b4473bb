package capacity

import (
	"fmt"
	"math"
	"time"

	"github.com/sluice-rl/sluice/algorithm"
	"github.com/sluice-rl/sluice/lease"
	"github.com/sluice-rl/sluice/server/capacity/parentlink"
)

// sharing reports whether an algorithm shares capacity (and so has a
// learning mode).
func sharing(k algorithm.Kind) bool {
	return k == algorithm.FairShare || k == algorithm.ProportionalShare
}

// ConfigStatus describes the loaded configuration.
type ConfigStatus struct {
	Hash      string        `json:"hash"`
	Templates []TemplateRow `json:"templates"`
}

// TemplateRow is one configured template. Durations are seconds.
type TemplateRow struct {
	Glob            string   `json:"identifier_glob"`
	Capacity        float64  `json:"capacity"`
	SafeCapacity    *float64 `json:"safe_capacity,omitempty"`
	Algorithm       string   `json:"algorithm"`
	LeaseLength     float64  `json:"lease_length"`
	RefreshInterval float64  `json:"refresh_interval"`
	Learning        float64  `json:"learning_mode_duration"`
	Description     string   `json:"description,omitempty"`
}

// ResourceRow is one resource in the resources table. Capacity and
// SafeCapacity are null when unlimited (NO_ALGORITHM).
type ResourceRow struct {
	ID           string   `json:"id"`
	Template     string   `json:"template"`
	Algorithm    string   `json:"algorithm"`
	Capacity     *float64 `json:"capacity"`
	SumHas       float64  `json:"sum_has"`
	SumWants     float64  `json:"sum_wants"`
	Clients      int      `json:"clients"`
	Learning     bool     `json:"learning"`
	SafeCapacity *float64 `json:"safe_capacity"`
}

// ResourcePage is one resource's detail: its row, its leases (unsorted),
// its history, and at an intermediate server when its lease from the
// parent ends (RFC 3339; "" at the root or without a lease).
type ResourcePage struct {
	Resource ResourceRow `json:"resource"`
	Leases   []LeaseRow  `json:"leases"`
	History  []Point     `json:"history"` // oldest first, one per second
	ParentOf string      `json:"parent_expiry,omitempty"`
}

// LeaseRow is one lease. Expiry is RFC 3339; durations are seconds.
type LeaseRow struct {
	Client          string    `json:"client"`
	Priority        int64     `json:"priority"`
	Has             float64   `json:"has"`
	Wants           float64   `json:"wants"`
	Subclients      int64     `json:"subclients"`
	Expiry          time.Time `json:"expiry"`
	ExpiresIn       float64   `json:"expires_in"`
	RefreshInterval float64   `json:"refresh_interval"`
}

// Point is one history sample: unix seconds and the resource's capacity
// (null: unlimited), Σ has and Σ wants.
type Point struct {
	T        int64    `json:"t"`
	Capacity *float64 `json:"capacity"`
	Has      float64  `json:"has"`
	Wants    float64  `json:"wants"`
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

// Node is the service's view of its node: its identity, mastership,
// election, and its parent at an intermediate server.
type Node struct {
	ID       string             `json:"id"`
	Address  string             `json:"address"`
	Started  time.Time          `json:"started"` // wall time
	IsMaster bool               `json:"is_master"`
	Master   string             `json:"master"`           // the master's address, "" if unknown
	Election string             `json:"election"`         // how this node elects (Options.Election); "standalone" if not set
	Parent   *parentlink.Status `json:"parent,omitempty"` // intermediate servers
}

// Node returns the node's view.
func (v View) Node() Node {
	s := v.s
	s.mu.RLock()
	n := Node{ID: s.opts.ID, Address: s.opts.Address, Started: s.started, IsMaster: s.master.isMaster, Master: s.master.addr, Election: s.opts.Election}
	s.mu.RUnlock()
	if n.Election == "" {
		n.Election = "standalone"
	}
	if ps, ok := s.Parent(); ok {
		n.Parent = &ps
	}
	return n
}

// ConfigView returns the root's configuration for the status page (nil at
// an intermediate server or without a configuration).
func (v View) ConfigView() *ConfigStatus {
	s := v.s
	cfg := s.Config()
	if cfg == nil || s.parent != nil {
		return nil
	}
	cs := &ConfigStatus{Hash: cfg.Hash()}
	for _, t := range cfg.Templates() {
		row := TemplateRow{Glob: t.IdentifierGlob, Capacity: t.Capacity, Algorithm: t.Algorithm.Kind.String(),
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
func (v View) ResourceRows(match func(id string) bool) (rows []ResourceRow, total int) {
	s := v.s
	now := s.now()
	ids, rs := s.resourceList()
	rows = []ResourceRow{}
	for i, r := range rs {
		if match != nil && !match(ids[i]) {
			continue
		}
		rows = append(rows, row(ids[i], r, now))
	}
	return rows, len(ids)
}

// row returns resource r's row, as of now, under its lock.
func row(id string, r *resource, now time.Time) ResourceRow {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.store.Cleanup(now)
	p := r.store.Params()
	w, h, _, n := r.store.Totals()
	row := ResourceRow{ID: id, Algorithm: p.Kind.String(), Capacity: finite(p.Capacity), SumHas: h, SumWants: w,
		Clients: n, Learning: r.store.Learning(now) && sharing(p.Kind), SafeCapacity: finite(r.store.SafeCapacity())}
	if r.template != nil {
		row.Template = r.template.IdentifierGlob
	}
	return row
}

// ResourcePage returns resource id's detail. Errors: ErrUnknownResource.
func (v View) ResourcePage(id string) (ResourcePage, error) {
	s := v.s
	s.mu.RLock()
	r := s.resources[id]
	s.mu.RUnlock()
	if r == nil {
		return ResourcePage{}, fmt.Errorf("resource %q: %w", id, ErrUnknownResource)
	}
	now := s.now()
	page := ResourcePage{Resource: row(id, r, now), History: s.hist.get(id), Leases: []LeaseRow{}}
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
		page.History = []Point{}
	}
	return page, nil
}

func leaseRow(l lease.Lease, now time.Time) LeaseRow {
	return LeaseRow{Client: l.Client, Priority: l.Priority, Has: l.Has, Wants: l.Wants, Subclients: l.Subclients,
		Expiry: l.Expiry.UTC(), ExpiresIn: math.Round(l.Expiry.Sub(now).Seconds()), RefreshInterval: l.RefreshInterval.Seconds()}
}
