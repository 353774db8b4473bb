package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluice-rl/sluice/admin/etcdstore"
	"github.com/sluice-rl/sluice/internal/filewatch"
	"github.com/sluice-rl/sluice/limits/limitsyaml"
	"github.com/sluice-rl/sluice/limits/rls"
	"github.com/sluice-rl/sluice/limits/rlsxds"
	"github.com/sluice-rl/sluice/resources"
	"github.com/sluice-rl/sluice/server/capacity"
	"github.com/sluice-rl/sluice/server/envoyrls"
	"github.com/sluice-rl/sluice/server/envoyrls/upstreamstats"
	"github.com/sluice-rl/sluice/server/internal/promreg"
	"github.com/sluice-rl/sluice/server/limitsvc"
	"github.com/sluice-rl/sluice/server/sessions"
)

// configSources are the server's configuration sources: the resource
// repository (Repository.Path, a file or an etcd key; or
// Repository.Fixed), the quota service's file, Envoy's rules (a file or an
// xDS control plane)
// and the identity policy (Listen.Identity.PolicyPath). New loads them
// (openIdentity before the services, load after) and installs what they
// hold in the services; Run starts their watchers, Reload rereads their
// files, and every load's outcome is reported to reloaded
// (sluice_server_config_reloads_total).
//
// Its fields are set during New and only read after. The watchers'
// callbacks run on the watchers' goroutines and touch only the services
// (safe for concurrent use), the counters and the log.
type configSources struct {
	repo Repository
	// parent is Parent.Addresses: an intermediate server's parent pushes
	// the configuration down (Repository.Path is ignored).
	parent []string
	log    *slog.Logger
	reg    prometheus.Registerer // the xDS source's collectors
	// reloaded records a load's outcome (err nil: ok), as
	// Server.configReloaded.
	reloaded func(err error)

	// to are the services the configuration goes to (set by load).
	to configTargets
	// xds follows the xDS control plane serving Envoy's rate limit rules
	// (Repository.EnvoyRateLimitXDS; nil: none); its Run is a watcher.
	xds      *rlsxds.Source
	watchers []func(context.Context) error // started by Run
	files    []fileWatcher                 // reloaded by reload
	// syncConfig brings the repository of Repository.Path (a file or an
	// etcd key) up to date now (the admin API's read-your-writes); nil
	// without Repository.Path.
	syncConfig func(context.Context) error
	// syncQuota is syncConfig for Repository.QuotaServicePath.
	syncQuota func(context.Context) error
}

// configTargets are the services the configuration sources feed.
type configTargets struct {
	capacity *capacity.Service
	limits   *limitsvc.Service
	sessions *sessions.Service
	envoy    *envoyrls.Service
	statsd   *upstreamstats.Sink // Envoy's statistics under upstream's names (nil: off)
}

// fileWatcher is a configuration file's watcher.
type fileWatcher struct {
	path string
	w    interface{ Reload() error }
}

// load loads the configuration sources into the services of to (their
// watchers start with Run), reading an etcd key through etcd.
func (c *configSources) load(ctx context.Context, etcd *clientv3.Client, to configTargets) error {
	c.to = to
	repo := c.repo
	if err := c.openXDS(); err != nil {
		return err
	}
	switch {
	case len(c.parent) > 0:
		if repo.Path != "" {
			c.log.Warn("Repository.Path is ignored with Parent.Addresses: the parent pushes the configuration down")
		}
		c.log.Info("intermediate server", "parent", c.parent)
	case repo.Path != "":
		// The file or etcd key: installed now, and on every change (a bad
		// one is logged and counted; the last good one stays).
		key, inEtcd := strings.CutPrefix(repo.Path, "etcd:")
		where := []any{"path", repo.Path}
		if inEtcd {
			where = []any{"etcd_key", key}
		}
		onLoad := func(r *resources.Repository) {
			c.apply(r)
			c.reloaded(nil)
			c.log.Info("configuration loaded", append(where, "templates", r.Len(), "hash", r.Hash())...)
		}
		onError := func(err error) {
			c.reloaded(err)
			c.log.Error("configuration reload failed; keeping the last good configuration", append(where, "err", err)...)
		}
		var current *resources.Repository
		if inEtcd {
			gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			w, err := etcdstore.NewWatcher(gctx, etcd, key, onLoad, onError)
			cancel()
			if err != nil {
				return err
			}
			current = w.Current()
			c.watchers = append(c.watchers, w.Run)
			c.syncConfig = w.Sync
		} else {
			w, err := resources.NewWatcher(repo.Path, onLoad, onError)
			if err != nil {
				return fmt.Errorf("loading %s: %w", repo.Path, err)
			}
			current = w.Current()
			c.watchers = append(c.watchers, w.Run)
			c.files = append(c.files, fileWatcher{repo.Path, w})
			c.syncConfig = func(context.Context) error { return w.Reload() }
		}
		if err := c.checkLimitsOnce(current); err != nil {
			return err
		}
		if err := c.checkXDSOnce(current); err != nil {
			return err
		}
		c.apply(current)
	case repo.Fixed != nil:
		if err := c.checkLimitsOnce(repo.Fixed); err != nil {
			return err
		}
		if err := c.checkXDSOnce(repo.Fixed); err != nil {
			return err
		}
	case repo.QuotaServicePath == "" && repo.EnvoyRateLimitPath == "" && c.xds == nil:
		c.log.Warn("no resource repository (Repository.Path): every resource is granted what it asks (NO_ALGORITHM)")
	}
	if path := repo.QuotaServicePath; path != "" {
		w, err := resources.NewWatcherFunc(path, resources.LoadQuotaService, func(r *resources.Repository) {
			err := c.to.limits.SetConfig(r.Limits())
			c.reloaded(err)
			c.log.Info("quota service configuration loaded", "path", path, "namespaces", len(r.Limits().Resources), "hash", r.Hash(), "err", err)
		}, func(err error) {
			c.reloaded(err)
			c.log.Error("quota service configuration reload failed; keeping the last good configuration", "path", path, "err", err)
		})
		if err != nil {
			return fmt.Errorf("loading %s: %w", path, err)
		}
		if err := c.to.limits.SetConfig(w.Current().Limits()); err != nil {
			return fmt.Errorf("loading %s: %w", path, err)
		}
		c.watchers = append(c.watchers, w.Run)
		c.files = append(c.files, fileWatcher{path, w})
		c.syncQuota = func(context.Context) error { return w.Reload() }
	}
	if path := repo.EnvoyRateLimitPath; path != "" {
		w, err := filewatch.New(path, limitsyaml.LoadEnvoyRateLimit, func(r *rls.Config) {
			c.to.envoy.SetConfig(r)
			c.envoyLoaded(nil)
			c.log.Info("envoy rate limit configuration loaded", "path", path, "domains", r.Len(), "hash", r.Hash())
		}, func(err error) {
			c.envoyLoaded(err)
			c.log.Error("envoy rate limit configuration reload failed; keeping the last good configuration", "path", path, "err", err)
		})
		if err != nil {
			return fmt.Errorf("loading %s: %w", path, err)
		}
		c.to.envoy.SetConfig(w.Current())
		c.envoyLoaded(nil)
		c.log.Info("envoy rate limit configuration loaded", "path", path, "domains", w.Current().Len(), "hash", w.Current().Hash())
		c.watchers = append(c.watchers, w.Run)
		c.files = append(c.files, fileWatcher{path, w})
	}
	return nil
}

// openXDS checks Repository.EnvoyRateLimitXDS and, when it names a control
// plane, makes the source that follows it (its Run a watcher, so that Run
// starts it): each version's rules go to Envoy's rate limit service
// whole, each version refused is logged (by the source) and counted in
// sluice_server_config_reloads_total; the source's metrics
// (sluice_envoy_xds_*) join the registry. Errors (*FieldError): fields
// set without ServerURL, the control plane with
// Repository.EnvoyRateLimitPath, ServerName without TLS, TLS files that
// cannot be loaded, and the source's own refusals (RetryInterval,
// Headers).
func (c *configSources) openXDS() error {
	const field = "Repository.EnvoyRateLimitXDS"
	x := c.repo.EnvoyRateLimitXDS
	switch {
	case !x.enabled() && (x.NodeID != "" || len(x.NodeMetadata) > 0 || !x.TLS.IsZero() || x.ServerName != "" ||
		len(x.Headers) > 0 || x.RetryInterval != 0 || x.MergeDomains || x.ForceStart):
		return fieldErr(field+".ServerURL", "empty, but other %s fields are set; give the control plane's host:port", field)
	case !x.enabled():
		return nil
	case c.repo.EnvoyRateLimitPath != "":
		return fieldErr(field, "envoy rate limit rules configured twice: by %s (%s) and by Repository.EnvoyRateLimitPath %s; keep one",
			field, x.ServerURL, c.repo.EnvoyRateLimitPath)
	case x.ServerName != "" && x.TLS.IsZero():
		return fieldErr(field+".ServerName", "set without %s.TLS: the name is checked on TLS connections only", field)
	}
	tc, err := x.TLS.client(field + ".TLS")
	if err != nil {
		return err
	}
	if tc != nil && x.ServerName != "" {
		tc = tc.Clone()
		tc.ServerName = x.ServerName
	}
	src, err := rlsxds.New(rlsxds.Options{ServerURL: x.ServerURL, NodeID: x.NodeID, NodeMetadata: x.NodeMetadata, TLS: tc,
		Headers: x.Headers, RetryInterval: x.RetryInterval, MergeDomains: x.MergeDomains, Logger: c.log,
		Apply: func(r *rls.Config) error {
			c.to.envoy.SetConfig(r)
			c.envoyLoaded(nil)
			return nil
		},
		Rejected: func(_ string, err error) { c.envoyLoaded(err) }})
	var fe *FieldError
	if errors.As(err, &fe) {
		return fe.Under(field)
	}
	if err != nil {
		return err
	}
	if err := promreg.Register(c.reg, src.Collectors()...); err != nil {
		return err
	}
	c.xds = src
	c.watchers = append(c.watchers, src.Run)
	c.log.Info("envoy rate limit rules from an xDS control plane", "server", x.ServerURL, "node_id", cmp.Or(x.NodeID, rlsxds.DefaultNodeID),
		"tls", tc != nil, "force_start", x.ForceStart)
	return nil
}

// xdsReady reports whether Envoy's rate limit rules from the xDS control
// plane have been applied once, or need not be (no control plane, or its
// ForceStart); why says what is missing.
func (c *configSources) xdsReady() (ready bool, why string) {
	x := c.repo.EnvoyRateLimitXDS
	if c.xds == nil || c.xds.Ready() || x.ForceStart {
		return true, ""
	}
	why = "no Envoy rate limit rules yet from the xDS control plane at " + x.ServerURL +
		" (Repository.EnvoyRateLimitXDS; Repository.EnvoyRateLimitXDS.ForceStart serves before them)"
	if err := c.xds.Err(); err != nil {
		why += ": " + err.Error()
	}
	return false, why
}

// checkXDSOnce refuses Envoy's rules from both the xDS control plane and
// the repository's envoy_ratelimit section.
func (c *configSources) checkXDSOnce(r *resources.Repository) error {
	repo := c.repo
	if c.xds == nil || r.EnvoyRateLimit() == nil {
		return nil
	}
	where := "Repository.Fixed"
	if repo.Path != "" {
		where = "Repository.Path " + repo.Path
	}
	return fieldErr("Repository.EnvoyRateLimitXDS", "envoy rate limit rules configured twice: in the envoy_ratelimit section of %s and by Repository.EnvoyRateLimitXDS (%s); keep one",
		where, repo.EnvoyRateLimitXDS.ServerURL)
}

// apply installs a repository: its templates, and its limits section
// unless Repository.QuotaServicePath gives the limits.
func (c *configSources) apply(r *resources.Repository) {
	c.to.capacity.SetConfig(r)
	if c.repo.QuotaServicePath == "" {
		if err := c.to.limits.SetConfig(r.Limits()); err != nil {
			c.log.Error("limits section refused", "err", err)
		}
	}
	if err := c.to.sessions.SetConfig(r.Copies()); err != nil {
		c.log.Error("copy-limited resources refused", "err", err)
	}
	if c.repo.EnvoyRateLimitPath == "" && c.xds == nil {
		c.to.envoy.SetConfig(r.EnvoyRateLimit())
	}
	for _, note := range r.Notes() {
		c.log.Info("configuration normalized", "note", note)
	}
}

// checkLimitsOnce refuses limits, or Envoy's rules, from two sources.
func (c *configSources) checkLimitsOnce(r *resources.Repository) error {
	repo := c.repo
	where := "Repository.Fixed"
	if repo.Path != "" {
		where = "Repository.Path " + repo.Path
	}
	if repo.QuotaServicePath != "" && r.Limits() != nil {
		return fieldErr("Repository.QuotaServicePath", "limits configured twice: in the limits section of %s and by Repository.QuotaServicePath %s; keep one", where, repo.QuotaServicePath)
	}
	if repo.EnvoyRateLimitPath != "" && r.EnvoyRateLimit() != nil {
		return fieldErr("Repository.EnvoyRateLimitPath", "envoy rate limit rules configured twice: in the envoy_ratelimit section of %s and by Repository.EnvoyRateLimitPath %s; keep one", where, repo.EnvoyRateLimitPath)
	}
	return nil
}

// envoyLoaded records a load of Envoy's rate limit rules (err nil: good):
// as every configuration reload (reloaded), and in upstream's statistics
// (config_load_success, config_load_error) when statsd is on.
func (c *configSources) envoyLoaded(err error) {
	c.reloaded(err)
	if c.to.statsd != nil {
		c.to.statsd.ConfigLoad(err)
	}
}

// reload rereads the configuration files at once (Server.Reload).
func (c *configSources) reload() {
	for _, f := range c.files {
		c.log.Info("reloading configuration", "path", f.path)
		_ = f.w.Reload()
	}
}
