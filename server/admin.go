package server

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/sluice-rl/sluice/admin"
	"github.com/sluice-rl/sluice/admin/adminhttp"
	"github.com/sluice-rl/sluice/admin/etcdstore"
	"github.com/sluice-rl/sluice/admin/quotaapi"
	"github.com/sluice-rl/sluice/resources"
)

// Admin configures the admin API at /admin/v1/ (JSON: the configuration
// of Config.Document.Path, object by object, versioned, audited) and the
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

// adminHandler returns handler with the admin API mounted at /admin/v1/
// (and the quota service's at /api): over the configuration of
// Config.Document.Path (a file, or an etcd key), the quota service's REST
// API over Config.Document.QuotaServicePath when it is set (in Square's
// format; /admin/v1 too when there is no Document.Path), or, with neither (no
// configuration path, or an intermediate server), answering that there is
// nothing to edit. Changes take effect the one way configuration changes
// do: the servers' watchers of the file or key; this server's watcher
// applies a change before the change answers (read-your-writes).
func (s *Server) adminHandler(handler http.Handler) (http.Handler, error) {
	a := s.cfg.Admin
	if a.Keep == 0 {
		a.Keep = admin.DefaultKeep
	}
	prefixes, err := adminhttp.ParsePrefixes(a.TrustForwarded)
	if err != nil {
		return nil, &FieldError{Field: "Admin.TrustForwarded", Err: err}
	}
	clientCerts := s.tls.endpoint != nil && s.tls.endpoint.ClientCAs != nil
	auth, err := adminhttp.NewAuth(adminhttp.AuthOptions{TokenFile: a.TokenFile, ClientCerts: clientCerts, TrustForwarded: prefixes,
		Insecure: a.Insecure, AuthReads: a.AuthReads, Logger: s.log, Setting: s.cfg.Runtime.Setting})
	if err != nil {
		return nil, &FieldError{Field: "Admin.TokenFile", Err: err}
	}
	cfgPath, quotaPath := s.cfg.Document.Path, s.cfg.Document.QuotaServicePath
	if len(s.cfg.Parent.Addresses) > 0 {
		cfgPath = "" // the parent's configuration: nothing to edit here
	}
	var store admin.Store
	switch {
	case cfgPath == "":
	case strings.HasPrefix(cfgPath, "etcd:"):
		store = etcdstore.New(s.etcd, strings.TrimPrefix(cfgPath, "etcd:"), etcdstore.Options{Keep: a.Keep})
	default:
		fs, err := admin.OpenFile(cfgPath, admin.FileOptions{Keep: a.Keep})
		if err != nil {
			s.log.Warn("admin API disabled", "err", err)
		} else {
			store = fs
		}
	}
	var svc, qsSvc *admin.Service
	if store != nil {
		svc = admin.New(store, admin.Options{Logger: s.log, Check: func(r *resources.Repository) error {
			if quotaPath != "" && r.Limits() != nil {
				return fmt.Errorf("limits: this server reads its limits from Document.QuotaServicePath %s, and refuses a limits section in Document.Path; edit them through /api, or /admin/v1 on a server without Document.Path", quotaPath)
			}
			return nil
		}, Sync: s.syncConfig})
	}
	// With Document.QuotaServicePath, the quota service's REST API at /api
	// edits that file in Square's format (and so does /admin/v1 when there
	// is no Document.Path).
	//
	// Source: docs/admin.md, "The quota service's admin API".
	if quotaPath != "" {
		qs, err := quotaapi.OpenFile(quotaPath, admin.FileOptions{Keep: a.Keep})
		if err != nil {
			s.log.Warn("quota service admin API disabled", "err", err)
		} else {
			qsSvc = admin.New(qs, admin.Options{Logger: s.log, Check: quotaapi.Check, Sync: s.syncQuota})
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
			s.log.Warn("Admin.Insecure: anyone on this host may change the configuration through /admin/v1/ without credentials", "store", store.String())
		case !auth.WritesEnabled():
			s.log.Info("admin API read-only: " + auth.DisabledMessage())
		default:
			s.log.Info("admin API", "store", store.String(), "authentication", strings.Join(auth.Methods(), ","), "history", a.Keep)
		}
	}
	mux := http.NewServeMux()
	mux.Handle(adminhttp.Prefix, adminhttp.Handler(svc, auth, s.log))
	mux.Handle(adminhttp.ResetPath, adminhttp.ResetHandler(s.resetter(), auth, s.log)) // (a write, audited; no document needed)
	// The quota service's admin REST API at /api, with the same
	// authentication, and the limits engine for /api/stats.
	//
	// Source: quotaservice-wire.md, "Admin REST API"; docs/admin.md,
	// "The quota service's admin API".
	opts := quotaapi.Options{Stats: quotaapi.EngineStats(s.limits.Engine(), s.now), Logger: s.log}
	qh := quotaapi.Handler(qsSvc, auth, opts)
	mux.Handle(quotaapi.Prefix, qh)
	mux.Handle(quotaapi.Prefix+"/", qh)
	mux.Handle("/", handler)
	return mux, nil
}
