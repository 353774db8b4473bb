package status

import "net/http"

// The admin page: the configuration browsed and edited in a browser.
//
//	GET /debug/status/admin  the page (web/admin.html, web/static/admin.js)
//
// The page is a shell: its script reads and writes through the admin API
// under /admin/v1/ (package admin's Handler, mounted on the same port by
// `sluice server`), so the API's authentication applies to it unchanged. A
// bearer token typed into the page is kept in the tab's sessionStorage and
// sent as Authorization: Bearer; with --admin-insecure, requests from
// loopback need none, and behind an authenticating proxy the proxy's
// X-Forwarded-User names the user. Without the admin API (no --config) the page loads and shows the API's 404.
// Edits carry the version read as If-Match: a stale one shows the API's
// 409 ("configuration changed since you read it: version N now"); "show
// the diff" is the API's dry_run; every validation error is listed.
//
// Source: docs/admin.md, "The page".
func (s *Site) handleAdmin(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := pages.ExecuteTemplate(w, "admin.html", nil); err != nil {
		s.v.Logger.Error("admin page", "err", err)
	}
}
