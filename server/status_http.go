package server

import (
	"embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/config"
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
	"num":        formatNum,
	"safe":       formatSafe,
	"sortURL":    sortURL,
	"ago":        func(t time.Time) string { return time.Since(t).Round(time.Second).String() },
	"bucketsURL": bucketsURL,
	"add":        func(a, b int) int { return a + b },
	"mul":        func(a, b int) int { return a * b },
	"ms":         func(seconds float64) float64 { return seconds * 1000 },
}).ParseFS(webFS, "web/*.html"))

// formatSafe formats a safe capacity: -1 (config.NoSafeCapacityLimit) is
// "no limit".
func formatSafe(x *float64) string {
	if x != nil && *x == config.NoSafeCapacityLimit {
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
