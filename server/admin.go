package server

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluice-rl/sluice/admin"
	"github.com/sluice-rl/sluice/admin/adminhttp"
	"github.com/sluice-rl/sluice/admin/etcdstore"
	"github.com/sluice-rl/sluice/admin/filestore"
	"github.com/sluice-rl/sluice/admin/quotaapi"
	"github.com/sluice-rl/sluice/resources"
	"github.com/sluice-rl/sluice/server/envoyrls"
	"github.com/sluice-rl/sluice/server/limitsvc"
)

// Admin configures the admin API at /admin/v1/ (JSON: the configuration
// of Config.Repository.Path, object by object, versioned, audited) and the
// quota service's admin REST API at /api. Writes need TokenFile, client
// certificates (Config.Listen.TLS with client CAs: the certificate's CN is the
// user), TrustForwarded or Insecure; reads are open unless AuthReads.
type Admin struct {
	// TokenFile holds the bearer tokens for writes, one "USER TOKEN" pair
	// per line (# comments); reread when it changes.
	TokenFile string
	// TrustForwarded takes the user from X-Forwarded-User for requests
	// from these addresses (CIDRs or IPs): an authenticating proxy.
	TrustForwarded []string
	// Insecure allows writes without credentials from loopback addresses
	// (development only).
	Insecure bool
	// AuthReads makes reads need the same authentication as writes.
	AuthReads bool
	// Keep is how many versions of the configuration to keep (in
	// FILE.history/ or KEY/history/); 0: admin.DefaultKeep.
	Keep int
}

// adminAPI is the wiring of the admin APIs into the server: the admin
// API at /admin/v1/ (and its reset), and the quota service's REST API at
// /api. It holds the user's Admin group, where the configuration it edits
// lives (Repository, an etcd client for a key), and the server's parts the
// APIs reach: the configuration sources' syncs (read-your-writes), the
// limits engine (/api/stats) and the services a reset resets. New builds
// it and mounts its handler; it is not changed after, and its handlers
// are safe for concurrent use.
type adminAPI struct {
	cfg  Admin
	repo Repository
	// intermediate: Parent.Addresses is set; the configuration is the
	// parent's, and there is nothing to edit here.
	intermediate bool
	// clientCerts: Listen.TLS verifies client certificates, whose CN is
	// the user.
	clientCerts bool
	setting     func(string) string // Config.Runtime.Setting
	log         *slog.Logger
	now         func() time.Time
	etcd        *clientv3.Client // for Repository.Path etcd:KEY
	// syncConfig and syncQuota bring the configuration of Repository.Path
	// and of Repository.QuotaServicePath up to date now (configSources);
	// nil without them.
	syncConfig, syncQuota func(context.Context) error
	limits                *limitsvc.Service
	envoy                 *envoyrls.Service
}

// handler returns handler with the admin API mounted at /admin/v1/
// (and the quota service's at /api): over the configuration of
// Config.Repository.Path (a file, or an etcd key), the quota service's REST
// API over Config.Repository.QuotaServicePath when it is set (in Square's
// format; /admin/v1 too when there is no Repository.Path), or, with neither (no
// configuration path, or an intermediate server), answering that there is
// nothing to edit. Changes take effect the one way configuration changes
// do: the servers' watchers of the file or key; this server's watcher
// applies a change before the change answers (read-your-writes).
func (api adminAPI) handler(handler http.Handler) (http.Handler, error) {
	a := api.cfg
	if a.Keep == 0 {
		a.Keep = admin.DefaultKeep
	}
	prefixes, err := adminhttp.ParsePrefixes(a.TrustForwarded)
	if err != nil {
		return nil, &FieldError{Field: "Admin.TrustForwarded", Err: err}
	}
	auth, err := adminhttp.NewAuth(adminhttp.AuthOptions{TokenFile: a.TokenFile, ClientCerts: api.clientCerts, TrustForwarded: prefixes,
		Insecure: a.Insecure, AuthReads: a.AuthReads, Logger: api.log, Setting: api.setting})
	if err != nil {
		return nil, &FieldError{Field: "Admin.TokenFile", Err: err}
	}
	cfgPath, quotaPath := api.repo.Path, api.repo.QuotaServicePath
	if api.intermediate {
		cfgPath = "" // the parent's configuration: nothing to edit here
	}
	var store admin.Store
	switch {
	case cfgPath == "":
	case strings.HasPrefix(cfgPath, "etcd:"):
		store = etcdstore.New(api.etcd, strings.TrimPrefix(cfgPath, "etcd:"), etcdstore.Options{Keep: a.Keep})
	default:
		fs, err := filestore.Open(cfgPath, filestore.Options{Keep: a.Keep})
		if err != nil {
			api.log.Warn("admin API disabled", "err", err)
		} else {
			store = fs
		}
	}
	var svc, qsSvc *admin.Service
	if store != nil {
		svc = admin.New(store, admin.Options{Logger: api.log, Check: func(r *resources.Repository) error {
			if quotaPath != "" && r.Limits() != nil {
				return fmt.Errorf("limits: this server reads its limits from Repository.QuotaServicePath %s, and refuses a limits section in Repository.Path; edit them through /api, or /admin/v1 on a server without Repository.Path", quotaPath)
			}
			return nil
		}, Sync: api.syncConfig})
	}
	// With Repository.QuotaServicePath, the quota service's REST API at /api
	// edits that file in Square's format (and so does /admin/v1 when there
	// is no Repository.Path).
	//
	// Source: docs/admin.md, "The quota service's admin API".
	if quotaPath != "" {
		qs, err := quotaapi.OpenFile(quotaPath, filestore.Options{Keep: a.Keep})
		if err != nil {
			api.log.Warn("quota service admin API disabled", "err", err)
		} else {
			qsSvc = admin.New(qs, admin.Options{Logger: api.log, Check: quotaapi.Check, Sync: api.syncQuota})
			if svc == nil {
				svc, store = qsSvc, qs
			}
		}
	} else {
		qsSvc = svc
	}
	if store != nil {
		switch {
		case a.Insecure:
			api.log.Warn("Admin.Insecure: anyone on this host may change the configuration through /admin/v1/ without credentials", "store", store.String())
		case !auth.WritesEnabled():
			api.log.Info("admin API read-only: " + auth.DisabledMessage())
		default:
			api.log.Info("admin API", "store", store.String(), "authentication", strings.Join(auth.Methods(), ","), "history", a.Keep)
		}
	}
	mux := http.NewServeMux()
	mux.Handle(adminhttp.Prefix, adminhttp.Handler(svc, auth, api.log))
	mux.Handle(adminhttp.ResetPath, adminhttp.ResetHandler(api.resetter(), auth, api.log)) // (a write, audited; no repository needed)
	// The quota service's admin REST API at /api, with the same
	// authentication, and the limits engine for /api/stats.
	//
	// Source: quotaservice-wire.md, "Admin REST API"; docs/admin.md,
	// "The quota service's admin API".
	opts := quotaapi.Options{Stats: quotaapi.EngineStats(api.limits.Engine(), api.now), Logger: api.log}
	qh := quotaapi.Handler(qsSvc, auth, opts)
	mux.Handle(quotaapi.Prefix, qh)
	mux.Handle(quotaapi.Prefix+"/", qh)
	mux.Handle("/", handler)
	return mux, nil
}
