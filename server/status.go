package server

import (
	"fmt"
	"math"
	"regexp"
	"runtime/debug"
	"time"

	"github.com/sluice-rl/sluice/algorithm"
	"github.com/sluice-rl/sluice/lease"
)

// sharing reports whether an algorithm shares capacity (and so has a
// learning mode).
func sharing(k algorithm.Kind) bool {
	return k == algorithm.FairShare || k == algorithm.ProportionalShare
}

// Version is the server's version, from the module's build information.
var Version = func() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "devel"
}()

// ServerStatus is the /debug/status page's data.
type ServerStatus struct {
	ID            string        `json:"id"`
	Address       string        `json:"address"`
	Version       string        `json:"version"`
	Started       time.Time     `json:"started"`
	UptimeSeconds float64       `json:"uptime_seconds"`
	IsMaster      bool          `json:"is_master"`
	Master        string        `json:"master"`     // the master's address, "" if unknown
	MasterURL     string        `json:"master_url"` // its status page
	Election      string        `json:"election"`   // how this node elects (see SetElection)
	Ready         bool          `json:"ready"`
	Draining      bool          `json:"draining"`
	Parent        *ParentStatus `json:"parent,omitempty"` // intermediate servers
	Redis         *RedisStatus  `json:"redis,omitempty"`  // the limits store on Redis (--redis, --redis-cluster)
	Config        *ConfigStatus `json:"config,omitempty"` // the root's configuration
	Resources     []ResourceRow `json:"resources"`
	Filter        Filter        `json:"filter"`
	Total         int           `json:"total"` // resources before filtering
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

// Filter selects and orders table rows: rows whose id (resources) or
// client (leases) starts with Prefix and matches Regex, sorted by the
// column named Sort (a JSON field name), descending if Desc.
type Filter struct {
	Prefix string `json:"prefix,omitempty"`
	Regex  string `json:"regex,omitempty"`
	Sort   string `json:"sort,omitempty"`
	Desc   bool   `json:"desc,omitempty"`
	re     *regexp.Regexp
}

// ResourcePage is the /debug/status/resource page's data.
type ResourcePage struct {
	Resource ResourceRow `json:"resource"`
	Leases   []LeaseRow  `json:"leases"`
	Total    int         `json:"total"` // leases before filtering
	Filter   Filter      `json:"filter"`
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

func finite(x float64) *float64 {
	if math.IsInf(x, 0) || math.IsNaN(x) {
		return nil
	}
	return &x
}

// SetElection records how this node elects its master, for the status page
// (e.g. "etcd /sluice/root (TTL 10s)" or "standalone").
func (s *Server) SetElection(desc string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.election = desc
}

// SetDraining marks the server as draining (stopping): /readyz answers 503.
func (s *Server) SetDraining(d bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.draining = d
}

// Ready reports whether the server should receive traffic: it has a
// configuration (or a parent to get one from), knows who the master is,
// and is not draining. why says what is missing.
func (s *Server) Ready() (ready bool, why string) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	switch {
	case s.draining:
		return false, "draining"
	case s.parent == nil && s.cfg == nil && s.opts.RequireConfig:
		return false, "no configuration loaded"
	case !s.isMaster && s.masterAddr == "":
		return false, "mastership unknown"
	}
	return true, "ok"
}

// Status returns the /debug/status data, resources filtered and sorted by f.
func (s *Server) StatusPage(f Filter) ServerStatus {
	now := s.now()
	s.mu.RLock()
	st := ServerStatus{
		ID: s.opts.ID, Address: s.opts.Address, Version: Version, Started: s.started,
		UptimeSeconds: time.Since(s.started).Seconds(), IsMaster: s.isMaster, Master: s.masterAddr,
		Election: s.election, Draining: s.draining, Filter: f,
	}
	cfg := s.cfg
	s.mu.RUnlock()
	ids, rs := s.resourceList()
	if st.Master != "" {
		st.MasterURL = "http://" + st.Master + "/debug/status"
	}
	if st.Election == "" {
		st.Election = "standalone"
	}
	st.Ready, _ = s.Ready()
	if ps, ok := s.Parent(); ok {
		st.Parent = &ps
	}
	st.Redis = s.redisStatus()
	if cfg != nil && s.parent == nil {
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
		st.Config = cs
	}
	st.Total = len(ids)
	st.Resources = []ResourceRow{}
	for i, r := range rs {
		if !f.match(ids[i]) {
			continue
		}
		st.Resources = append(st.Resources, s.row(ids[i], r, now))
	}
	sortRows(st.Resources, f.Sort, f.Desc, resourceKey)
	return st
}

func (s *Server) row(id string, r *resource, now time.Time) ResourceRow {
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

// ResourceStatusPage returns the /debug/status/resource data for id, leases
// filtered and sorted by f. Errors: ErrUnknownResource.
func (s *Server) ResourceStatusPage(id string, f Filter) (ResourcePage, error) {
	s.mu.RLock()
	r := s.resources[id]
	s.mu.RUnlock()
	if r == nil {
		return ResourcePage{}, fmt.Errorf("resource %q: %w", id, ErrUnknownResource)
	}
	now := s.now()
	page := ResourcePage{Resource: s.row(id, r, now), Filter: f, History: s.hist.get(id), Leases: []LeaseRow{}}
	r.mu.Lock()
	leases := r.store.Leases()
	if s.parent != nil && r.parent.ok {
		page.ParentOf = r.parent.expiry.UTC().Format(time.RFC3339)
	}
	r.mu.Unlock()
	page.Total = len(leases)
	for _, l := range leases {
		if !f.match(l.Client) {
			continue
		}
		page.Leases = append(page.Leases, leaseRow(l, now))
	}
	sortRows(page.Leases, f.Sort, f.Desc, leaseKey)
	if page.History == nil {
		page.History = []Point{}
	}
	return page, nil
}

func leaseRow(l lease.Lease, now time.Time) LeaseRow {
	return LeaseRow{Client: l.Client, Priority: l.Priority, Has: l.Has, Wants: l.Wants, Subclients: l.Subclients,
		Expiry: l.Expiry.UTC(), ExpiresIn: math.Round(l.Expiry.Sub(now).Seconds()), RefreshInterval: l.RefreshInterval.Seconds()}
}
