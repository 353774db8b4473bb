package main

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/sluice-rl/sluice/admin"
	"github.com/sluice-rl/sluice/server"
)

// quotaServiceAPI says how sluice server serves the quota service's admin
// REST API (/api, beside /admin/v1/): over the same Service and
// authentication, with the server's limits engine for /api/stats.
type quotaServiceAPI struct {
	stats admin.QuotaStats
	// disabled, when set, is why /api edits nothing (the limits come
	// from --quotaservice-config, a file the admin API does not edit).
	disabled string
}

// newQuotaServiceAPI returns the quota service API's settings for srv;
// quotaPath is --quotaservice-config.
func newQuotaServiceAPI(srv *server.Server, quotaPath string) quotaServiceAPI {
	q := quotaServiceAPI{stats: admin.EngineStats(srv.Limits(), time.Now)}
	if quotaPath != "" {
		q.disabled = "the limits come from --quotaservice-config " + quotaPath + ", which the admin API does not edit: change that file (the server reloads it)"
	}
	return q
}

// mount mounts the quota service's admin REST API on mux at /api and
// /api/ (svc nil, or q.disabled: answering 404 with the reason).
//
// Source: issue 16, "Compatible with quotaservice's admin tools";
// quotaservice-wire.md, "Admin REST API".
func (q quotaServiceAPI) mount(mux *http.ServeMux, svc *admin.Service, auth *admin.Auth, log *slog.Logger) {
	if q.disabled != "" {
		svc = nil
	}
	h := admin.QuotaServiceHandler(svc, auth, admin.QSOptions{Stats: q.stats, Logger: log, Disabled: q.disabled})
	mux.Handle(admin.QSPrefix, h)
	mux.Handle(admin.QSPrefix+"/", h)
}
