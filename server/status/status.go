// Package status is the status site on the server's one port: pages over
// the read-only views the services export (the capacity service's node,
// configuration and resources; the limits engine's buckets; the sessions'
// holds and fleet; the store's health), as server-rendered HTML and as
// JSON.
package status

import (
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"math"
	"net/http"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/limits/copies"
	"github.com/sluice-rl/sluice/resources"
	"github.com/sluice-rl/sluice/server/status/view"
)

// The status pages (doorman-design.md's introspection; the keyed-limiter
// write-up, "Introspection"): server-rendered HTML with a little embedded
// JavaScript for sorting links and the live chart, and the same data as
// JSON with Accept: application/json or ?format=json.
//
//	GET /                       redirect to /debug/status
//	GET /debug/status           the server, its election and parent, the configuration, the resources
//	GET /debug/status/resource  ?id=ID: one resource, its leases, its history (chart)
//	GET /debug/status/buckets   the limits engine's token buckets: filter, sort, pages (status_buckets.go)
//	GET /debug/status/admin     the configuration: browse, edit, diff, save, history, through /admin/v1/ (status_admin.go)
//	GET /debug/status/rlqs      Envoy's RLQS streams and their buckets: wants, lease, assignment (rlqs.go)

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
	"num":        formatNum,
	"safe":       formatSafe,
	"sortURL":    sortURL,
	"ago":        func(t time.Time) string { return time.Since(t).Round(time.Second).String() },
	"bucketsURL": bucketsURL,
	"add":        func(a, b int) int { return a + b },
	"mul":        func(a, b int) int { return a * b },
	"ms":         func(seconds float64) float64 { return seconds * 1000 },
}).ParseFS(webFS, "web/*.html"))

// formatSafe formats a safe capacity: -1 (resources.NoSafeCapacityLimit) is
// "no limit".
func formatSafe(x *float64) string {
	if x != nil && *x == resources.NoSafeCapacityLimit {
		return "no limit"
	}
	return formatNum(x)
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

// Version is the server's version, from the module's build information.
var Version = func() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "devel"
}()

// CapacityView is what the site reads of the Doorman capacity service
// (capacity.View satisfies it): the node, its configuration, its
// resources and their leases, and its readiness. Safe for concurrent use.
type CapacityView interface {
	Node() view.Node
	ConfigView() *view.ConfigStatus
	ResourceRows(match func(id string) bool) (rows []view.ResourceRow, total int)
	ResourcePage(id string) (view.ResourcePage, error)
	Ready() (ready bool, why string)
}

// BucketsView is what the site reads of the limits engine
// (limits.Engine): a page of the buckets, and their number's estimate.
type BucketsView interface {
	Query(ctx context.Context, now time.Time, q limits.Query) (limits.Page, error)
	EstimateLen(ctx context.Context) (int, error)
}

// SessionsView is what the site reads of the copy-limited resources'
// service (sessions.Service): its holds, its fleet and its state.
type SessionsView interface {
	Snapshot() copies.Snapshot
	Fleet() (st view.FleetStatus, ok bool)
	Stats() copies.Stats
	Fenced() bool
}

// EnvoyView is what the site reads of Envoy's rate limit service
// (envoyrls.Service): its rules in force and a page of its counters.
type EnvoyView interface {
	Rules() []view.RuleRow
	Counters(ctx context.Context, prefix string, offset, limit, budget int) (view.CounterPage, error)
}

// Views are what the site shows: read-only views of the services. A view
// left nil (an interface holding no value: not a nil pointer) shows
// nothing of its service.
type Views struct {
	// Capacity is the Doorman capacity service (required).
	Capacity CapacityView
	// Limits is the limits engine; nil shows no buckets.
	Limits BucketsView
	// Sessions is the copy-limited resources' service; nil shows no holds.
	Sessions SessionsView
	// Envoy is Envoy's rate limit service; nil shows no rules.
	Envoy EnvoyView
	// RLQS is Envoy's Rate Limit Quota Service; nil shows no streams.
	RLQS RLQSView
	// Ready reports the server's readiness (draining included); nil is
	// the capacity service's.
	Ready func() (bool, string)
	// Draining reports whether the server is stopping; nil: never.
	Draining func() bool
	// Redis is the limits store's view of Redis; nil, or a nil result,
	// when the store is not on Redis.
	Redis func() *RedisStatus
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
	// Logger receives rendering errors; nil means slog.Default().
	Logger *slog.Logger
}

// Site serves the status pages. It is safe for concurrent use.
type Site struct {
	v Views
}

// New returns the site over v.
func New(v Views) *Site {
	if v.Ready == nil {
		v.Ready = v.Capacity.Ready
	}
	if v.Draining == nil {
		v.Draining = func() bool { return false }
	}
	if v.Redis == nil {
		v.Redis = func() *RedisStatus { return nil }
	}
	if v.Logger == nil {
		v.Logger = slog.Default()
	}
	if v.Now == nil {
		v.Now = time.Now
	}
	return &Site{v: v}
}

// Register adds the pages to mux: GET /, /debug/status,
// /debug/status/resource, /debug/status/buckets, /debug/status/admin,
// /debug/status/rlqs and the static files under /debug/status/static/.
func (s *Site) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET /debug/status", s.handleStatus)
	mux.HandleFunc("GET /debug/status/resource", s.handleResource)
	mux.HandleFunc("GET /debug/status/buckets", s.handleBuckets)
	mux.HandleFunc("GET /debug/status/admin", s.handleAdmin)
	mux.HandleFunc("GET /debug/status/rlqs", s.handleRLQS)
	mux.Handle("GET /debug/status/static/", http.StripPrefix("/debug/status/static/", http.FileServerFS(staticFS)))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/debug/status", http.StatusFound)
	})
}

// ServerStatus is the /debug/status page's data: the capacity service's
// node, and the server's.
type ServerStatus struct {
	view.Node
	Version       string             `json:"version"`
	UptimeSeconds float64            `json:"uptime_seconds"`
	MasterURL     string             `json:"master_url"` // the master's status page
	Ready         bool               `json:"ready"`
	Draining      bool               `json:"draining"`
	Redis         *RedisStatus       `json:"redis,omitempty"`       // the limits store on Redis (--redis, --redis-cluster)
	Config        *view.ConfigStatus `json:"config,omitempty"`      // the root's configuration
	EnvoyRules    []view.RuleRow     `json:"envoy_rules,omitempty"` // Envoy's rate limit service's rules in force
	Resources     []view.ResourceRow `json:"resources"`
	Filter        Filter             `json:"filter"`
	Total         int                `json:"total"` // resources before filtering
}

// ResourcePage is the /debug/status/resource page's data: the capacity
// service's page of the resource, its leases filtered and sorted.
type ResourcePage struct {
	view.ResourcePage
	Total  int    `json:"total"` // leases before filtering
	Filter Filter `json:"filter"`
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

// StatusPage returns the /debug/status data, resources filtered and sorted
// by f.
func (s *Site) StatusPage(f Filter) ServerStatus {
	n := s.v.Capacity.Node()
	st := ServerStatus{Node: n, Version: Version, UptimeSeconds: time.Since(n.Started).Seconds(), Draining: s.v.Draining(), Filter: f}
	if st.Master != "" {
		st.MasterURL = "http://" + st.Master + "/debug/status"
	}
	st.Ready, _ = s.v.Ready()
	st.Redis = s.v.Redis()
	st.Config = s.v.Capacity.ConfigView()
	if s.v.Envoy != nil {
		st.EnvoyRules = s.v.Envoy.Rules()
	}
	st.Resources, st.Total = s.v.Capacity.ResourceRows(f.match)
	sortRows(st.Resources, f.Sort, f.Desc, resourceKey)
	return st
}

// ResourceStatusPage returns the /debug/status/resource data for id, leases
// filtered and sorted by f. Errors: capacity.ErrUnknownResource.
func (s *Site) ResourceStatusPage(id string, f Filter) (ResourcePage, error) {
	p, err := s.v.Capacity.ResourcePage(id)
	if err != nil {
		return ResourcePage{}, err
	}
	page := ResourcePage{ResourcePage: p, Filter: f, Total: len(p.Leases)}
	page.Leases = slices.DeleteFunc(p.Leases, func(l view.LeaseRow) bool { return !f.match(l.Client) })
	sortRows(page.Leases, f.Sort, f.Desc, leaseKey)
	return page, nil
}

func (s *Site) handleStatus(w http.ResponseWriter, r *http.Request) {
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
		s.v.Logger.Error("status page", "err", err)
	}
}

func (s *Site) handleResource(w http.ResponseWriter, r *http.Request) {
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
		s.v.Logger.Error("resource page", "err", err)
	}
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
