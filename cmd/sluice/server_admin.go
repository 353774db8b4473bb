package main

import (
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/spf13/pflag"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluice-rl/sluice/admin"
	"github.com/sluice-rl/sluice/admin/etcdstore"
	"github.com/sluice-rl/sluice/config"
)

// adminFlags are sluice server's flags of the admin API (/admin/v1/).
type adminFlags struct {
	tokenFile string
	forwarded []string
	insecure  bool
	authReads bool
	keep      int
}

func (a *adminFlags) register(f *pflag.FlagSet) {
	f.StringVar(&a.tokenFile, "admin-token-file", "", "admin API (/admin/v1/): bearer tokens for writes, one \"USER TOKEN\" pair per line (# comments); reread when it changes")
	f.StringSliceVar(&a.forwarded, "admin-trust-forwarded-user", nil, "admin API: take the user from X-Forwarded-User for requests from these addresses (CIDRs or IPs, comma-separated): an authenticating proxy")
	f.BoolVar(&a.insecure, "admin-insecure", false, "admin API: allow writes without credentials from loopback addresses (development only)")
	f.BoolVar(&a.authReads, "admin-auth-reads", false, "admin API: reads need the same authentication as writes")
	f.IntVar(&a.keep, "admin-history", admin.DefaultKeep, "admin API: how many versions of the configuration to keep (in FILE.history/ or KEY/history/)")
}

// adminHandler returns handler with the admin API mounted at
// /admin/v1/ (and the quota service's at /api, qs): over the configuration of --config (a file, or with cli an
// etcd key), or, with neither (no --config, or --parent), answering that
// there is nothing to edit. Changes take effect the one way configuration
// changes do: the servers' watchers of the file or key.
func adminHandler(handler http.Handler, flags adminFlags, cfgPath, quotaPath string, cli *clientv3.Client, clientCerts bool, qs quotaServiceAPI, log *slog.Logger) (http.Handler, error) {
	prefixes, err := admin.ParsePrefixes(flags.forwarded)
	if err != nil {
		return nil, fmt.Errorf("--admin-trust-forwarded-user: %w", err)
	}
	auth, err := admin.NewAuth(admin.AuthOptions{TokenFile: flags.tokenFile, ClientCerts: clientCerts, TrustForwarded: prefixes,
		Insecure: flags.insecure, AuthReads: flags.authReads, Logger: log})
	if err != nil {
		return nil, err
	}
	var store admin.Store
	switch {
	case cfgPath == "":
	case strings.HasPrefix(cfgPath, "etcd:"):
		store = etcdstore.New(cli, strings.TrimPrefix(cfgPath, "etcd:"), etcdstore.Options{Keep: flags.keep})
	default:
		fs, err := admin.OpenFile(cfgPath, admin.FileOptions{Keep: flags.keep})
		if err != nil {
			log.Warn("admin API disabled", "err", err)
		} else {
			store = fs
		}
	}
	var svc *admin.Service
	if store != nil {
		svc = admin.New(store, admin.Options{Logger: log, Check: func(r *config.Repository) error {
			if quotaPath != "" && r.Limits() != nil {
				return fmt.Errorf("limits: this server reads its limits from --quotaservice-config %s, and refuses a limits section in --config; edit that file instead", quotaPath)
			}
			return nil
		}})
		switch {
		case flags.insecure:
			log.Warn("--admin-insecure: anyone on this host may change the configuration through /admin/v1/ without credentials", "store", store.String())
		case !auth.WritesEnabled():
			log.Info("admin API read-only: " + admin.DisabledMessage)
		default:
			log.Info("admin API", "store", store.String(), "authentication", strings.Join(auth.Methods(), ","), "history", flags.keep)
		}
	}
	mux := http.NewServeMux()
	mux.Handle(admin.Prefix, admin.Handler(svc, auth, log))
	qs.mount(mux, svc, auth, log) // the quota service's admin REST API at /api
	mux.Handle("/", handler)
	return mux, nil
}
