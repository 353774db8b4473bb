package server

import (
	"cmp"
	"embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"math"
	"net/http"
	"net/url"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluice-rl/sluice/algorithm"
	"github.com/sluice-rl/sluice/config"
	"github.com/sluice-rl/sluice/lease"
)

// sharing reports whether an algorithm shares capacity (and so has a
// learning mode).
func sharing(k algorithm.Kind) bool {
	return k == algorithm.FairShare || k == algorithm.ProportionalShare
}

// The status pages (doorman-design.md's introspection; the keyed-limiter
// write-up, "Introspection"): server-rendered HTML with a little embedded
// JavaScript for sorting links and the live chart, and the same data as
// JSON with Accept: application/json or ?format=json.
//
//	GET /                       redirect to /debug/status
//	GET /debug/status           the server, its election and parent, the configuration, the resources
//	GET /debug/status/resource  ?id=ID: one resource, its leases, its history (chart)
//	GET /healthz                200 while the process runs
//	GET /readyz                 200 when configured, mastership is known and not draining; else 503

//go:embed web
var webFS embed.FS

// staticFS is web/static: the style sheet and the chart's script.
var staticFS = func() fs.FS {
	sub, err := fs.Sub(webFS, "web/static")
	if err != nil {
		panic(err) // embedded at build time
	}
	return sub
}()

var pages = template.Must(template.New("").Funcs(template.FuncMap{
	"num":     formatNum,
	"safe":    formatSafe,
	"sortURL": sortURL,
	"ago":     func(t time.Time) string { return time.Since(t).Round(time.Second).String() },
}).ParseFS(webFS, "web/*.html"))

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

// History bounds: samples per resource (one per Sweep, normally a second)
// and resources with a history.
const (
	HistoryLength    = 600
	HistoryResources = 1000
)

// history keeps the last HistoryLength samples of up to HistoryResources
// resources.
type history struct {
	mu   sync.Mutex
	byID map[string]*ring
}

// ring is one resource's samples, oldest first from next once it is full:
// adding costs O(1), not a shift of every sample.
type ring struct {
	ps   []Point // at most HistoryLength
	next int     // where the next sample goes once ps is full
}

func (h *history) add(id string, p Point) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.byID == nil {
		h.byID = map[string]*ring{}
	}
	r, ok := h.byID[id]
	if !ok {
		if len(h.byID) >= HistoryResources {
			return
		}
		r = &ring{}
		h.byID[id] = r
	}
	if len(r.ps) < HistoryLength {
		r.ps = append(r.ps, p)
		return
	}
	r.ps[r.next] = p
	r.next = (r.next + 1) % len(r.ps)
}

// get returns a copy of id's samples, oldest first.
func (h *history) get(id string) []Point {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.byID[id]
	if r == nil {
		return nil
	}
	out := make([]Point, 0, len(r.ps))
	out = append(out, r.ps[r.next:]...)
	return append(out, r.ps[:r.next]...)
}

func (h *history) drop(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.byID, id)
}

// formatSafe formats a safe capacity: -1 (config.NoSafeCapacityLimit) is
// "no limit".
func formatSafe(x *float64) string {
	if x != nil && *x == config.NoSafeCapacityLimit {
		return "no limit"
	}
	return formatNum(x)
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

func parseFilter(q url.Values) (Filter, error) {
	f := Filter{Prefix: q.Get("prefix"), Regex: q.Get("regex"), Sort: q.Get("sort"), Desc: q.Get("desc") == "1" || q.Get("desc") == "true"}
	if f.Regex != "" {
		re, err := regexp.Compile(f.Regex)
		if err != nil {
			return f, fmt.Errorf("regex: %w", err)
		}
		f.re = re
	}
	return f, nil
}

func (f Filter) match(s string) bool {
	return strings.HasPrefix(s, f.Prefix) && (f.re == nil || f.re.MatchString(s))
}

// sortRows sorts rows by the JSON field named col (unknown: the first
// column), numbers numerically and the rest as strings, stable.
func sortRows[T any](rows []T, col string, desc bool, key func(T, string) (float64, string, bool)) {
	slices.SortStableFunc(rows, func(a, b T) int {
		na, sa, okA := key(a, col)
		nb, sb, _ := key(b, col)
		c := 0
		if okA {
			c = cmp.Compare(na, nb)
		} else {
			c = strings.Compare(sa, sb)
		}
		if desc {
			c = -c
		}
		return c
	})
}

func boolNum(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func ptrNum(p *float64) float64 {
	if p == nil {
		return math.Inf(1)
	}
	return *p
}

func resourceKey(r ResourceRow, col string) (float64, string, bool) {
	switch col {
	case "template":
		return 0, r.Template, false
	case "algorithm":
		return 0, r.Algorithm, false
	case "capacity":
		return ptrNum(r.Capacity), "", true
	case "sum_has":
		return r.SumHas, "", true
	case "sum_wants":
		return r.SumWants, "", true
	case "clients":
		return float64(r.Clients), "", true
	case "learning":
		return boolNum(r.Learning), "", true
	case "safe_capacity":
		return ptrNum(r.SafeCapacity), "", true
	}
	return 0, r.ID, false
}

func leaseKey(l LeaseRow, col string) (float64, string, bool) {
	switch col {
	case "priority":
		return float64(l.Priority), "", true
	case "has":
		return l.Has, "", true
	case "wants":
		return l.Wants, "", true
	case "subclients":
		return float64(l.Subclients), "", true
	case "expiry", "expires_in":
		return l.ExpiresIn, "", true
	case "refresh_interval":
		return l.RefreshInterval, "", true
	}
	return 0, l.Client, false
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

// sample records one history point per resource (called from Sweep).
func (s *Server) sample(now time.Time) {
	ids, rs := s.resourceList()
	for i, r := range rs {
		r.mu.Lock()
		p := r.store.Params()
		w, h, _, _ := r.store.Totals()
		r.mu.Unlock()
		s.hist.add(ids[i], Point{T: now.Unix(), Capacity: finite(p.Capacity), Has: h, Wants: w})
	}
}

func wantsJSON(r *http.Request) bool {
	return r.URL.Query().Get("format") == "json" || strings.Contains(r.Header.Get("Accept"), "application/json")
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func (s *Server) handleStatus(w http.ResponseWriter, r *http.Request) {
	f, err := parseFilter(r.URL.Query())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	st := s.StatusPage(f)
	if wantsJSON(r) {
		writeJSON(w, st)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := pages.ExecuteTemplate(w, "status.html", st); err != nil {
		s.log.Error("status page", "err", err)
	}
}

func (s *Server) handleResource(w http.ResponseWriter, r *http.Request) {
	f, err := parseFilter(r.URL.Query())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	id := r.URL.Query().Get("id")
	page, err := s.ResourceStatusPage(id, f)
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	if wantsJSON(r) {
		writeJSON(w, page)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := pages.ExecuteTemplate(w, "resource.html", struct {
		ResourcePage
		ID string
	}{page, id}); err != nil {
		s.log.Error("resource page", "err", err)
	}
}

func (s *Server) handleReady(w http.ResponseWriter, _ *http.Request) {
	ok, why := s.Ready()
	if !ok {
		http.Error(w, why, http.StatusServiceUnavailable)
		return
	}
	_, _ = w.Write([]byte("ok\n"))
}

// formatNum prints a number for a table: "∞" for unlimited, else up to
// three decimals.
func formatNum(v any) string {
	switch x := v.(type) {
	case *float64:
		if x == nil {
			return "∞"
		}
		return formatNum(*x)
	case float64:
		if math.IsInf(x, 0) {
			return "∞"
		}
		return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.3f", x), "0"), ".")
	}
	return fmt.Sprint(v)
}

// sortURL returns the current page's URL sorted by col (toggling the
// direction if it is already sorted by col).
func sortURL(f Filter, path, col string, extra ...string) string {
	q := url.Values{}
	if f.Prefix != "" {
		q.Set("prefix", f.Prefix)
	}
	if f.Regex != "" {
		q.Set("regex", f.Regex)
	}
	q.Set("sort", col)
	if f.Sort == col && !f.Desc {
		q.Set("desc", "1")
	}
	for i := 0; i+1 < len(extra); i += 2 {
		q.Set(extra[i], extra[i+1])
	}
	return path + "?" + q.Encode()
}
