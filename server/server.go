package server

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/sluice-rl/sluice/admin/etcdstore"
	pb "github.com/sluice-rl/sluice/api/doorman"
	"github.com/sluice-rl/sluice/api/doorman/doormanconnect"
	qs "github.com/sluice-rl/sluice/api/quotaservice"
	"github.com/sluice-rl/sluice/api/quotaservice/quotaserviceconnect"
	v1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/api/sluice/v1/sluicev1connect"
	"github.com/sluice-rl/sluice/election"
	"github.com/sluice-rl/sluice/fleet"
	"github.com/sluice-rl/sluice/internal/filewatch"
	"github.com/sluice-rl/sluice/internal/grpcconnect"
	"github.com/sluice-rl/sluice/internal/identity"
	"github.com/sluice-rl/sluice/internal/refresh"
	"github.com/sluice-rl/sluice/limits/copies"
	"github.com/sluice-rl/sluice/limits/limitsyaml"
	redisstore "github.com/sluice-rl/sluice/limits/redis"
	"github.com/sluice-rl/sluice/limits/rls"
	"github.com/sluice-rl/sluice/limits/rlsxds"
	"github.com/sluice-rl/sluice/resources"
	"github.com/sluice-rl/sluice/server/capacity"
	"github.com/sluice-rl/sluice/server/envoyrls"
	"github.com/sluice-rl/sluice/server/envoyrls/upstreamstats"
	"github.com/sluice-rl/sluice/server/internal/authz"
	"github.com/sluice-rl/sluice/server/internal/promreg"
	"github.com/sluice-rl/sluice/server/internal/rpc"
	"github.com/sluice-rl/sluice/server/internal/slogzap"
	"github.com/sluice-rl/sluice/server/leases"
	"github.com/sluice-rl/sluice/server/limitsvc"
	"github.com/sluice-rl/sluice/server/rlqs"
	"github.com/sluice-rl/sluice/server/sessions"
	"github.com/sluice-rl/sluice/server/status"
)

// MaxRequestBytes bounds the size of one request message on either
// transport; a larger one is refused (ResourceExhausted on gRPC).
const MaxRequestBytes = 8 << 20

// DefaultMaxSessions is the cap on open sessions when Config.Sessions.Max
// is 0 (sessions.DefaultMaxSessions).
const DefaultMaxSessions = sessions.DefaultMaxSessions

// Drain timing: a resignation etcd does not answer within resignTimeout is
// given up (the session's TTL ends the candidacy).
const resignTimeout = 2 * time.Second

// Server is an assembled server: its services, configuration sources,
// election, fleet and endpoint. Run serves it once.
type Server struct {
	cfg     Config
	log     *slog.Logger
	reg     *prometheus.Registry
	now     func() time.Time
	lis     net.Listener
	addr    string
	rpc     *rpcMetrics
	reloads *prometheus.CounterVec

	capacity *capacity.Service
	limits   *limitsvc.Service
	sessions *sessions.Service
	envoy    *envoyrls.Service
	leases   *leases.Service
	rlqs     *rlqs.Service
	status   *status.Site
	handler  http.Handler // the net/http side, admin API and pprof included

	etcd      *clientv3.Client
	closeEtcd func()
	election  election.Election
	member    *fleet.Member
	watchers  []func(context.Context) error // configuration watchers, started by Run
	files     []fileWatcher                 // reloaded by Reload
	// syncConfig brings the --config file's or key's configuration up to
	// date now (the admin API's read-your-writes); nil without --config.
	syncConfig func(context.Context) error
	// syncQuota is syncConfig for --quotaservice-config.
	syncQuota func(context.Context) error
	draining  atomic.Bool
	shared    Shared                                       // the open store (Config.Store); its zero value: memory
	tls       struct{ endpoint, parent, etcd *tls.Config } // loaded by openTLS
	health    *health.Server                               // grpc.health.v1.Health, following Ready

	// tracer is Config.Runtime.Tracing's provider (nil: off), and
	// closeTracing flushes and shuts down the one New built.
	tracer       trace.TracerProvider
	closeTracing func()

	// horizon is a root's lease horizon under an etcd election (nil:
	// none): the capacity service keeps it, the election opens its terms.
	horizon *election.LeaseHorizon
	// auth binds clients to their certificates' identities
	// (Config.Listen.Identity; nil: off), for every service.
	auth *identity.Authorizer
	// authz authorizes every RPC (authzRules) on both transports.
	authz *authz.Interceptor
	// statsd sends Envoy's rate limit service's statistics under
	// envoyproxy/ratelimit's names (Config.Runtime.Statsd; nil: off).
	statsd *upstreamstats.Sink
	// xds follows the xDS control plane serving Envoy's rate limit rules
	// (Config.Document.EnvoyRateLimitXDS; nil: none); its Run is a watcher.
	xds *rlsxds.Source
}

// New assembles a server from cfg: it listens, builds the services over
// their stores, loads the configuration sources, and creates the election
// and the fleet membership, without serving yet (Run does). Every error
// is returned: a listener that cannot be opened, an unreadable or invalid
// configuration, limits configured twice, a missing etcd, a bad election,
// a Config.Runtime.Registry that already holds one of Sluice's metrics (the error
// names it: two servers in one process need a Registry each). On error,
// whatever New opened is closed.
func New(ctx context.Context, cfg Config) (_ *Server, err error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: cfg.Runtime.Logger, reg: cfg.Runtime.Registry, now: cfg.Runtime.Now, closeEtcd: func() {}, closeTracing: func() {}}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.reg == nil {
		// The process's own figures too: process_cpu_seconds_total is what
		// `sluice bench` divides by the requests it sent.
		s.reg = prometheus.NewRegistry()
		if err := promreg.Register(s.reg, collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), collectors.NewGoCollector()); err != nil {
			return nil, err
		}
	}
	if s.cfg.Listen.Grace == 0 {
		s.cfg.Listen.Grace = 10 * time.Second
	}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	if err := s.openTLS(); err != nil {
		return nil, err
	}
	s.lis = cfg.Listen.Listener
	if s.lis == nil && cfg.Listen.Address != "" {
		if s.lis, err = net.Listen("tcp", cfg.Listen.Address); err != nil {
			return nil, err
		}
	}
	s.addr = cfg.Listen.Advertise
	if s.addr == "" && s.lis != nil {
		s.addr = s.lis.Addr().String()
	}
	id := cfg.ID
	switch {
	case id != "":
	case cfg.Election.Kind == "etcd" && cfg.Election.Key != "":
		id = cfg.Election.Key
	default:
		host, _ := os.Hostname()
		id = fmt.Sprintf("%s:%d", host, os.Getpid())
	}
	if s.rpc, err = newRPCMetrics(s.reg); err != nil {
		return nil, err
	}
	s.health = health.NewServer()
	s.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_server_config_reloads_total",
		Help: "Configuration reloads, by result (ok, failed).",
	}, []string{"result"})
	for _, r := range []string{"ok", "failed"} {
		s.reloads.WithLabelValues(r) // at 0 from the start, so a dashboard's panel has data before the first reload
	}
	if err := promreg.Register(s.reg, s.reloads); err != nil {
		return nil, err
	}

	if err := s.openTracing(ctx); err != nil {
		return nil, err
	}
	s.rpc.traced = s.tracer != nil
	if err := s.openStore(ctx); err != nil {
		return nil, err
	}
	if err := s.openEtcd(); err != nil {
		return nil, err
	}
	if err := s.openIdentity(); err != nil {
		return nil, err
	}
	if err := s.newServices(id); err != nil {
		return nil, err
	}
	s.authz = s.newAuthz()
	if err := s.newElection(); err != nil {
		return nil, err
	}
	if err := s.loadConfig(ctx); err != nil {
		return nil, err
	}
	s.status = status.New(status.Views{
		Capacity: s.capacity.View(), Limits: s.limits.Engine(), Sessions: s.sessions, Envoy: s.envoy, RLQS: s.rlqs,
		Ready: s.Ready, Draining: s.draining.Load, Redis: s.redisStatus, Now: s.now, Logger: s.log,
	})
	if s.handler, err = s.adminHandler(s.Handler()); err != nil {
		return nil, err
	}
	if cfg.Listen.Pprof {
		mux := http.NewServeMux()
		mux.Handle("/", s.handler)
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		s.handler = mux
	}
	return s, nil
}

// openEtcd connects to etcd when the election, the document or the fleet
// needs it (validate has checked that Etcd.Endpoints is given where it
// is required).
func (s *Server) openEtcd() error {
	cfg := s.cfg
	if cfg.Election.Kind != "etcd" && !strings.HasPrefix(cfg.Document.Path, "etcd:") && s.shared.Copies == nil {
		return nil
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: cfg.Etcd.Endpoints, DialTimeout: 5 * time.Second, TLS: s.tls.etcd, Logger: etcdLogger(s.log),
		DialOptions: s.grpcClientTracing()})
	if err != nil {
		return &FieldError{Field: "Etcd.Endpoints", Err: err}
	}
	s.etcd = cli
	s.closeEtcd = sync.OnceFunc(func() { _ = cli.Close() })
	return nil
}

// openTLS loads the TLS configurations of the endpoint, the parent link
// and etcd.
func (s *Server) openTLS() (err error) {
	if s.tls.endpoint, err = s.cfg.Listen.TLS.server("Listen.TLS"); err != nil {
		return err
	}
	if s.tls.parent, err = s.cfg.Parent.TLS.client("Parent.TLS"); err != nil {
		return err
	}
	s.tls.etcd, err = s.cfg.Etcd.TLS.client("Etcd.TLS")
	return err
}

// openStore opens the Store: Store.Shared as given, or a Redis (Cluster)
// store, or none (this process's memory). A shared copy log is kept only
// with etcd, whose fleet leader cleans up after a crashed server: without
// Etcd.Endpoints the copies stay in this server's memory, and the log
// says why.
func (s *Server) openStore(ctx context.Context) error {
	st := s.cfg.Store
	switch {
	case st.Shared != nil:
		s.shared = *st.Shared
	case st.redis():
		tc, err := st.tlsConfig()
		if err != nil {
			return err
		}
		timeout := st.Timeout
		if timeout == 0 {
			timeout = redisstore.DefaultTimeout
		}
		rs, err := redisstore.Open(ctx, redisstore.Dial{URL: st.Redis, Cluster: st.Cluster, Sentinel: st.Sentinel, TLS: tc,
			PasswordFile: st.PasswordFile, Prefix: st.KeyPrefix, Timeout: timeout, Logger: s.log, TracerProvider: s.tracer})
		if err != nil {
			return storeFieldError(err)
		}
		s.shared = redisShared(rs)
	}
	if s.shared.Copies != nil && len(s.cfg.Etcd.Endpoints) == 0 {
		s.shared.Copies = nil
		s.log.Info("copy-limited resources stay in this server's memory: the shared store's copy log needs etcd (Etcd.Endpoints), whose fleet leader cleans up after a crashed server")
	}
	return nil
}

// storeFieldError returns err, an error of limits/redis.Open, naming the
// Config field at fault: its Dial field under Store (URL is Store.Redis,
// TLS Store.TLS, …).
func storeFieldError(err error) error {
	var fe *FieldError
	if !errors.As(err, &fe) {
		return &FieldError{Field: "Store", Err: err}
	}
	field := map[string]string{"URL": "Redis", "Prefix": "KeyPrefix"}[fe.Field]
	if field == "" {
		field = fe.Field
	}
	return &FieldError{Field: "Store." + field, Err: fe.Err}
}

// newServices builds the capacity, limits and sessions services.
func (s *Server) newServices(id string) error {
	cfg := s.cfg
	// A root elected in etcd keeps a lease horizon, so that a successor
	// elected after every lease lapsed does not learn for nothing (an
	// intermediate learns the same from its parent): the capacity service
	// is built with it, and the election (newElection) with the service's
	// longest lease and it.
	var horizon capacity.Horizon
	if cfg.Election.Kind == "etcd" && len(cfg.Parent.Addresses) == 0 {
		s.horizon = new(election.LeaseHorizon)
		horizon = s.horizon
	}
	// capacity.New returns no error: its registration errors are
	// recorded instead of panicking, and checked here.
	reg := promreg.NewRecorder(s.reg)
	fixed := cfg.Document.Fixed
	if fixed == nil {
		fixed = resources.Compose(nil, nil, nil, nil)
	}
	s.capacity = capacity.New(capacity.Options{ID: id, Address: s.addr, Config: cfg.Document.Fixed, Now: s.now, Logger: s.log,
		Registry: reg, Parent: cfg.Parent.Addresses, ParentTLS: s.tls.parent,
		RequireConfig: cfg.Document.Path != "" && len(cfg.Parent.Addresses) == 0, NoPush: cfg.Leases.DisablePush,
		Setting: cfg.Runtime.Setting, Election: s.describeElection(), Horizon: horizon})
	if err := reg.Err(); err != nil {
		return fmt.Errorf("capacity: %w", err)
	}
	s.leases = leases.New(s.capacity)
	var err error
	ro := cfg.RLQS.options()
	ro.Now, ro.Logger, ro.Registry, ro.Authorizer = s.now, s.log, s.reg, s.auth
	if s.rlqs, err = rlqs.New(s.capacity, ro); err != nil {
		return err
	}
	if s.shared.Metrics != nil {
		if err := promreg.Register(s.reg, s.shared.Metrics); err != nil {
			return fmt.Errorf("shared store: %w", err)
		}
	}
	// The budgets' counters live beside Envoy's in the shared store's
	// Redis (s.shared.RLS), else in this process's memory.
	s.limits, err = limitsvc.New(limitsvc.Options{Now: s.now, Logger: s.log, Registry: s.reg, Config: fixed.Limits(), Store: s.shared.Limits, Budgets: s.shared.RLS})
	if err != nil {
		return err
	}
	var log copies.Log
	if s.shared.Copies != nil {
		log = s.shared.Copies
	}
	so := sessions.Options{Address: s.addr, Now: s.now, Logger: s.log, Registry: s.reg, Config: fixed.Copies(),
		Log: log, MaxSessions: cfg.Sessions.Max, Setting: cfg.Runtime.Setting, ForwardDialOptions: s.grpcClientTracing()}
	if log != nil {
		// The fleet sharing the copy log: the membership fences the
		// engine until it has an epoch; requests for sessions homed on
		// another server go there, with the parent link's client
		// certificate if any.
		so.JoinFleet = func(eng *copies.Engine) (sessions.FleetMember, error) {
			m, err := fleet.New(s.etcd, s.shared.Copies, eng, fleet.Options{Prefix: cfg.Sessions.Fleet.Prefix, TTL: cfg.Sessions.Fleet.TTL, Address: s.addr, Logger: s.log})
			if err != nil {
				return nil, err
			}
			s.member = m
			return fleetMember{m}, nil
		}
		if s.tls.parent != nil {
			so.ForwardCreds = credentials.NewTLS(s.tls.parent)
		}
	}
	s.sessions, err = sessions.New(so)
	if err != nil {
		return err
	}
	eo := cfg.Envoy.options()
	eo.Now, eo.Logger, eo.Registry, eo.Store, eo.Tiers = s.now, s.log, s.reg, rls.NewMemoryStore(), s.limits.Engine()
	if st := cfg.Runtime.Statsd; st.enabled() {
		sink, err := upstreamstats.New(st.options(s.log))
		var fe *FieldError
		switch {
		case errors.As(err, &fe):
			return fe.Under("Runtime.Statsd")
		case err != nil:
			return &FieldError{Field: "Runtime.Statsd", Err: err}
		}
		s.statsd, eo.Stats = sink, sink
	}
	if s.shared.RLS != nil {
		eo.Store = s.shared.RLS
	}
	if s.envoy, err = envoyrls.New(eo); err != nil {
		return err
	}
	if cfg.Document.EnvoyRateLimitPath == "" {
		s.envoy.SetConfig(fixed.EnvoyRateLimit())
	}
	return nil
}

// newElection creates the election of cfg.Election, after newServices.
func (s *Server) newElection() error {
	el := s.cfg.Election
	switch el.Kind {
	case "", "standalone":
		s.election = election.Standalone(s.addr)
	case "etcd": // its key and etcd's endpoints checked by Config.validate
		opts := election.EtcdOptions{Key: el.Key, Address: s.addr, TTL: s.electionTTL(), Logger: s.log}
		if s.horizon != nil { // a root (newServices)
			opts.LongestLease, opts.Horizon = s.capacity.LongestLease, s.horizon
		}
		e, err := election.Etcd(s.etcd, opts)
		if err != nil {
			return err
		}
		s.election = e
		s.capacity.SetMastership(false, "") // until the election says otherwise
	}
	return nil
}

// electionTTL is the etcd election's session TTL: cfg.Election.TTL, 10 s
// when zero.
func (s *Server) electionTTL() time.Duration {
	if ttl := s.cfg.Election.TTL; ttl != 0 {
		return ttl
	}
	return 10 * time.Second
}

// describeElection describes cfg.Election for the status page
// (capacity.Options.Election).
func (s *Server) describeElection() string {
	el := s.cfg.Election
	if el.Kind != "etcd" {
		return "standalone"
	}
	return fmt.Sprintf("etcd %s at %s (session TTL %v)", el.Key, strings.Join(s.cfg.Etcd.Endpoints, ","), s.electionTTL())
}

// loadConfig loads the configuration sources (their watchers start with
// Run) and installs what they hold.
func (s *Server) loadConfig(ctx context.Context) error {
	cfg := s.cfg
	if err := s.openXDS(); err != nil {
		return err
	}
	switch {
	case len(cfg.Parent.Addresses) > 0:
		if cfg.Document.Path != "" {
			s.log.Warn("Document.Path is ignored with Parent.Addresses: the parent pushes the configuration down")
		}
		s.log.Info("intermediate server", "parent", cfg.Parent.Addresses)
	case cfg.Document.Path != "":
		// The file or etcd key: installed now, and on every change (a bad
		// one is logged and counted; the last good one stays).
		key, inEtcd := strings.CutPrefix(cfg.Document.Path, "etcd:")
		where := []any{"path", cfg.Document.Path}
		if inEtcd {
			where = []any{"etcd_key", key}
		}
		onLoad := func(r *resources.Repository) {
			s.applyConfig(r)
			s.configReloaded(nil)
			s.log.Info("configuration loaded", append(where, "templates", r.Len(), "hash", r.Hash())...)
		}
		onError := func(err error) {
			s.configReloaded(err)
			s.log.Error("configuration reload failed; keeping the last good configuration", append(where, "err", err)...)
		}
		var current *resources.Repository
		if inEtcd {
			gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			w, err := etcdstore.NewWatcher(gctx, s.etcd, key, onLoad, onError)
			cancel()
			if err != nil {
				return err
			}
			current = w.Current()
			s.watchers = append(s.watchers, w.Run)
			s.syncConfig = w.Sync
		} else {
			w, err := resources.NewWatcher(cfg.Document.Path, onLoad, onError)
			if err != nil {
				return fmt.Errorf("loading %s: %w", cfg.Document.Path, err)
			}
			current = w.Current()
			s.watchers = append(s.watchers, w.Run)
			s.files = append(s.files, fileWatcher{cfg.Document.Path, w})
			s.syncConfig = func(context.Context) error { return w.Reload() }
		}
		if err := s.checkLimitsOnce(current); err != nil {
			return err
		}
		if err := s.checkXDSOnce(current); err != nil {
			return err
		}
		s.applyConfig(current)
	case cfg.Document.Fixed != nil:
		if err := s.checkLimitsOnce(cfg.Document.Fixed); err != nil {
			return err
		}
		if err := s.checkXDSOnce(cfg.Document.Fixed); err != nil {
			return err
		}
	case cfg.Document.QuotaServicePath == "" && cfg.Document.EnvoyRateLimitPath == "" && s.xds == nil:
		s.log.Warn("no resource document (Document.Path): every resource is granted what it asks (NO_ALGORITHM)")
	}
	if path := cfg.Document.QuotaServicePath; path != "" {
		w, err := resources.NewWatcherFunc(path, resources.LoadQuotaService, func(r *resources.Repository) {
			err := s.limits.SetConfig(r.Limits())
			s.configReloaded(err)
			s.log.Info("quota service configuration loaded", "path", path, "namespaces", len(r.Limits().Resources), "hash", r.Hash(), "err", err)
		}, func(err error) {
			s.configReloaded(err)
			s.log.Error("quota service configuration reload failed; keeping the last good configuration", "path", path, "err", err)
		})
		if err != nil {
			return fmt.Errorf("loading %s: %w", path, err)
		}
		if err := s.limits.SetConfig(w.Current().Limits()); err != nil {
			return fmt.Errorf("loading %s: %w", path, err)
		}
		s.watchers = append(s.watchers, w.Run)
		s.files = append(s.files, fileWatcher{path, w})
		s.syncQuota = func(context.Context) error { return w.Reload() }
	}
	if path := cfg.Document.EnvoyRateLimitPath; path != "" {
		w, err := filewatch.New(path, limitsyaml.LoadEnvoyRateLimit, func(c *rls.Config) {
			s.envoy.SetConfig(c)
			s.envoyLoaded(nil)
			s.log.Info("envoy rate limit configuration loaded", "path", path, "domains", c.Len(), "hash", c.Hash())
		}, func(err error) {
			s.envoyLoaded(err)
			s.log.Error("envoy rate limit configuration reload failed; keeping the last good configuration", "path", path, "err", err)
		})
		if err != nil {
			return fmt.Errorf("loading %s: %w", path, err)
		}
		s.envoy.SetConfig(w.Current())
		s.envoyLoaded(nil)
		s.log.Info("envoy rate limit configuration loaded", "path", path, "domains", w.Current().Len(), "hash", w.Current().Hash())
		s.watchers = append(s.watchers, w.Run)
		s.files = append(s.files, fileWatcher{path, w})
	}
	return nil
}

// openXDS checks Config.Document.EnvoyRateLimitXDS and, when it names a
// control plane, makes the source that follows it (its Run a watcher, so
// that Run starts it): each version's rules go to Envoy's rate limit
// service whole, each version refused is logged (by the source) and
// counted in sluice_server_config_reloads_total; the source's metrics
// (sluice_envoy_xds_*) join the registry. Errors (*FieldError):
// fields set without ServerURL, the control plane with
// Document.EnvoyRateLimitPath, ServerName without TLS, TLS files that
// cannot be loaded, and the source's own refusals (RetryInterval,
// Headers).
func (s *Server) openXDS() error {
	const field = "Document.EnvoyRateLimitXDS"
	x := s.cfg.Document.EnvoyRateLimitXDS
	switch {
	case !x.enabled() && (x.NodeID != "" || len(x.NodeMetadata) > 0 || !x.TLS.IsZero() || x.ServerName != "" ||
		len(x.Headers) > 0 || x.RetryInterval != 0 || x.MergeDomains || x.ForceStart):
		return fieldErr(field+".ServerURL", "empty, but other %s fields are set; give the control plane's host:port", field)
	case !x.enabled():
		return nil
	case s.cfg.Document.EnvoyRateLimitPath != "":
		return fieldErr(field, "envoy rate limit rules configured twice: by %s (%s) and by Document.EnvoyRateLimitPath %s; keep one",
			field, x.ServerURL, s.cfg.Document.EnvoyRateLimitPath)
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
		Headers: x.Headers, RetryInterval: x.RetryInterval, MergeDomains: x.MergeDomains, Logger: s.log,
		Apply: func(c *rls.Config) error {
			s.envoy.SetConfig(c)
			s.envoyLoaded(nil)
			return nil
		},
		Rejected: func(_ string, err error) { s.envoyLoaded(err) }})
	var fe *FieldError
	if errors.As(err, &fe) {
		return fe.Under(field)
	}
	if err != nil {
		return err
	}
	if err := promreg.Register(s.reg, src.Collectors()...); err != nil {
		return err
	}
	s.xds = src
	s.watchers = append(s.watchers, src.Run)
	s.log.Info("envoy rate limit rules from an xDS control plane", "server", x.ServerURL, "node_id", cmp.Or(x.NodeID, rlsxds.DefaultNodeID),
		"tls", tc != nil, "force_start", x.ForceStart)
	return nil
}

// checkXDSOnce refuses Envoy's rules from both the xDS control plane and
// the document's envoy_ratelimit section.
func (s *Server) checkXDSOnce(r *resources.Repository) error {
	doc := s.cfg.Document
	if s.xds == nil || r.EnvoyRateLimit() == nil {
		return nil
	}
	where := "Document.Fixed"
	if doc.Path != "" {
		where = "Document.Path " + doc.Path
	}
	return fieldErr("Document.EnvoyRateLimitXDS", "envoy rate limit rules configured twice: in the envoy_ratelimit section of %s and by Document.EnvoyRateLimitXDS (%s); keep one",
		where, doc.EnvoyRateLimitXDS.ServerURL)
}

// fileWatcher is a configuration file's watcher.
type fileWatcher struct {
	path string
	w    interface{ Reload() error }
}

// applyConfig installs a repository: its templates, and its limits
// section unless --quotaservice-config gives the limits.
func (s *Server) applyConfig(r *resources.Repository) {
	s.capacity.SetConfig(r)
	if s.cfg.Document.QuotaServicePath == "" {
		if err := s.limits.SetConfig(r.Limits()); err != nil {
			s.log.Error("limits section refused", "err", err)
		}
	}
	if err := s.sessions.SetConfig(r.Copies()); err != nil {
		s.log.Error("copy-limited resources refused", "err", err)
	}
	if s.cfg.Document.EnvoyRateLimitPath == "" && s.xds == nil {
		s.envoy.SetConfig(r.EnvoyRateLimit())
	}
	for _, note := range r.Notes() {
		s.log.Info("configuration normalized", "note", note)
	}
}

// checkLimitsOnce refuses limits, or Envoy's rules, from two sources.
func (s *Server) checkLimitsOnce(r *resources.Repository) error {
	doc := s.cfg.Document
	where := "Document.Fixed"
	if doc.Path != "" {
		where = "Document.Path " + doc.Path
	}
	if doc.QuotaServicePath != "" && r.Limits() != nil {
		return fieldErr("Document.QuotaServicePath", "limits configured twice: in the limits section of %s and by Document.QuotaServicePath %s; keep one", where, doc.QuotaServicePath)
	}
	if doc.EnvoyRateLimitPath != "" && r.EnvoyRateLimit() != nil {
		return fieldErr("Document.EnvoyRateLimitPath", "envoy rate limit rules configured twice: in the envoy_ratelimit section of %s and by Document.EnvoyRateLimitPath %s; keep one", where, doc.EnvoyRateLimitPath)
	}
	return nil
}

// configReloaded records the outcome of a configuration reload (err nil:
// ok) in sluice_server_config_reloads_total.
func (s *Server) configReloaded(err error) {
	if err != nil {
		s.reloads.WithLabelValues("failed").Inc()
		return
	}
	s.reloads.WithLabelValues("ok").Inc()
}

// envoyLoaded records a load of Envoy's rate limit rules (err nil: good):
// as every configuration reload (configReloaded), and in upstream's
// statistics (config_load_success, config_load_error) when statsd is on.
func (s *Server) envoyLoaded(err error) {
	s.configReloaded(err)
	if s.statsd != nil {
		s.statsd.ConfigLoad(err)
	}
}

// Reload rereads the configuration files (--config,
// --quotaservice-config, --envoy-ratelimit-config, --client-policy) at
// once, as on SIGHUP; a bad file is logged and counted, and the last good
// configuration keeps serving.
func (s *Server) Reload() {
	for _, f := range s.files {
		s.log.Info("reloading configuration", "path", f.path)
		_ = f.w.Reload()
	}
}

// redisShared is the shared store on rs: its buckets, Envoy's counters,
// its copy log, its collector (sluice_redis_* on /metrics) and its health
// (the status page); closing it closes rs.
func redisShared(rs *redisstore.Store) Shared {
	return Shared{Limits: rs, Copies: redisstore.NewCopyLog(rs), RLS: redisstore.NewRLS(rs), Metrics: rs.Collector(), Health: rs.Health, Close: rs.Close}
}

// fleetMember is a fleet membership as the sessions service sees it.
type fleetMember struct{ *fleet.Member }

func (m fleetMember) FleetStatus() sessions.FleetStatus { return sessions.FleetStatus(m.Status()) }

// Addr returns the advertised address (the listener's, unless
// Config.Advertise).
func (s *Server) Addr() string { return s.addr }

// Capacity returns the Doorman capacity service.
func (s *Server) Capacity() *capacity.Service { return s.capacity }

// Limits returns the limits service.
func (s *Server) Limits() *limitsvc.Service { return s.limits }

// Sessions returns the copy-limited resources' service.
func (s *Server) Sessions() *sessions.Service { return s.sessions }

// EnvoyStats returns envoyproxy/ratelimit's /stats (the statistics sent
// to statsd, as its debug port prints them), or nil when
// Config.Runtime.Statsd is off.
func (s *Server) EnvoyStats() http.Handler {
	if s.statsd == nil {
		return nil
	}
	return s.statsd.Handler()
}

// EnvoyPrometheus returns envoyproxy/ratelimit's Prometheus endpoint (the
// statistics as statsd_exporter's mapping names them; upstream serves it
// at PROMETHEUS_PATH on PROMETHEUS_ADDR), or nil when
// Config.Runtime.Statsd.Prometheus is off.
func (s *Server) EnvoyPrometheus() http.Handler {
	if s.statsd == nil {
		return nil
	}
	return s.statsd.PrometheusHandler()
}

// upstreamHealthName is the gRPC health service envoyproxy/ratelimit
// reports (its src/server/health.go: "ratelimit"), so that a probe
// written for it asks Sluice the same.
const upstreamHealthName = "ratelimit"

// Envoy returns Envoy's rate limit service.
func (s *Server) Envoy() *envoyrls.Service { return s.envoy }

// Status returns the status site.
func (s *Server) Status() *status.Site { return s.status }

// Registry returns the Prometheus registry every metric lives in.
func (s *Server) Registry() *prometheus.Registry { return s.reg }

// Ready reports whether the server should receive traffic: not draining,
// with a shared copy log a member of the fleet (its copies engine not
// fenced) whose copy-limited resources are known not to be in learning
// mode (sessions.Service.Ready), a shared store that has answered since
// it opened (a Redis away at start), Envoy's rate limit rules from the
// xDS control plane applied once (Document.EnvoyRateLimitXDS, unless
// its ForceStart), and the capacity service ready (configured,
// mastership known). why says what is missing.
func (s *Server) Ready() (ready bool, why string) {
	if s.draining.Load() {
		return false, "draining"
	}
	if s.xds != nil && !s.xds.Ready() && !s.cfg.Document.EnvoyRateLimitXDS.ForceStart {
		why := "no Envoy rate limit rules yet from the xDS control plane at " + s.cfg.Document.EnvoyRateLimitXDS.ServerURL +
			" (Document.EnvoyRateLimitXDS; Document.EnvoyRateLimitXDS.ForceStart serves before them)"
		if err := s.xds.Err(); err != nil {
			why += ": " + err.Error()
		}
		return false, why
	}
	if s.shared.Health != nil {
		if h := s.shared.Health(); h.Unanswered {
			return false, "Redis has not answered since the server started (" + h.LastError + ")"
		}
	}
	if s.member != nil {
		// Every Reserve would answer Unavailable: the copies engine
		// holds nothing until this server has its epoch in the fleet,
		// and a resource in learning mode grants nothing.
		if ok, why := s.sessions.Ready(); !ok {
			return false, why
		}
	}
	return s.capacity.Ready()
}

// redisStatus is the status page's view of the shared store.
func (s *Server) redisStatus() *status.RedisStatus {
	if s.shared.Health != nil {
		return status.RedisStatusOf(s.shared.Health())
	}
	return nil
}

// Handler returns the net/http side of the endpoint without the admin API:
// every service over Connect (gRPC, gRPC-Web and JSON), the status site,
// /metrics, /healthz and /readyz. Serve it with unencrypted HTTP/2
// enabled so gRPC clients can connect without TLS.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	for _, h := range s.connectHandlers() {
		mux.Handle(s.traced(h.path, h.handler))
	}
	mux.Handle("/metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}))
	s.status.Register(mux)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if ok, why := s.Ready(); !ok {
			http.Error(w, why, http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	return mux
}

// connectHandler is one service's Connect handler and its path
// ("/doorman.Capacity/").
type connectHandler struct {
	path    string
	handler http.Handler
}

// connectHandlers are every service's Connect handlers (gRPC, gRPC-Web
// and JSON), with the RPC metrics and the authorization of every RPC: the
// services' handlers, written in grpc-go's shape, served to Connect by
// package rpc's adapters.
func (s *Server) connectHandlers() []connectHandler {
	opts := []connect.HandlerOption{connect.WithReadMaxBytes(MaxRequestBytes), connect.WithInterceptors(s.rpc.interceptor(), s.authz.Connect())}
	var hs []connectHandler
	add := func(path string, h http.Handler) { hs = append(hs, connectHandler{path, h}) }
	add(doormanconnect.NewCapacityHandler(grpcconnect.Capacity{S: s.capacity}, opts...))
	add(sluicev1connect.NewLimitsHandler(rpc.LimitsConnect{L: s.limitsAPI()}, opts...))
	add(quotaserviceconnect.NewQuotaServiceHandler(rpc.QuotaService{S: s.limits.QuotaService()}, opts...))
	add(rpc.NewRateLimitServiceHandler(s.envoy, opts...))
	add(sluicev1connect.NewLeasesHandler(rpc.Leases{W: s.leases}, opts...))
	add(rpc.NewRateLimitQuotaServiceHandler(s.rlqs, opts...))
	return hs
}

// limitsAPI is sluice.v1.Limits: Allow from the limits service, the
// copy-limited RPCs from the sessions service.
func (s *Server) limitsAPI() *rpc.Limits { return rpc.NewLimits(s.limits, s.sessions) }

// registerGRPC registers every service with grpc-go's server, and
// beside them the standard grpc.health.v1.Health (following Ready, see
// followReadiness) and gRPC server reflection (v1 and v1alpha), so that
// Envoy's and Kubernetes' health checks, grpcurl and ghz need no proto
// files.
func (s *Server) registerGRPC(gs *grpc.Server) {
	gs.RegisterService(&pb.Capacity_ServiceDesc, s.capacity)
	gs.RegisterService(&v1.Limits_ServiceDesc, s.limitsAPI())
	gs.RegisterService(&qs.QuotaService_ServiceDesc, s.limits.QuotaService())
	gs.RegisterService(&rlsv3.RateLimitService_ServiceDesc, s.envoy)
	gs.RegisterService(&v1.Leases_ServiceDesc, s.leases)
	gs.RegisterService(&rlqsv3.RateLimitQuotaService_ServiceDesc, s.rlqs)
	healthpb.RegisterHealthServer(gs, s.health)
	reflection.Register(gs)
}

// readinessEvery is how often the health service's statuses follow
// Ready (a change of mastership or configuration shows within it;
// draining shows at once).
const readinessEvery = 250 * time.Millisecond

// followReadiness sets the health service's status of the server ("")
// and of each of its services to SERVING while Ready, else NOT_SERVING,
// every readinessEvery until ctx ends: the answers /readyz gives, for
// gRPC health checks (Envoy's cluster health checks, Kubernetes' grpc
// probes). Envoy's RLQS service is SERVING only while Ready on the
// node's master, where its streams must go.
func (s *Server) followReadiness(ctx context.Context) {
	last, lastRLQS := healthpb.HealthCheckResponse_UNKNOWN, healthpb.HealthCheckResponse_UNKNOWN
	refresh.Run(ctx, nil, func(context.Context) time.Duration {
		st, rlqsSt := healthpb.HealthCheckResponse_NOT_SERVING, healthpb.HealthCheckResponse_NOT_SERVING
		if ok, _ := s.Ready(); ok {
			st = healthpb.HealthCheckResponse_SERVING
			// RLQS streams stay on the task they reach, which must be its
			// node's master (a standby ends them): Envoy's health checks
			// of the service send them there.
			if master, _ := s.capacity.IsMaster(); master {
				rlqsSt = st
			}
		}
		if st != last {
			for _, name := range []string{"", pb.Capacity_ServiceDesc.ServiceName, v1.Limits_ServiceDesc.ServiceName, qs.QuotaService_ServiceDesc.ServiceName,
				rlsv3.RateLimitService_ServiceDesc.ServiceName, v1.Leases_ServiceDesc.ServiceName, upstreamHealthName} {
				s.health.SetServingStatus(name, st)
			}
			last = st
		}
		if rlqsSt != lastRLQS {
			s.health.SetServingStatus(rlqsv3.RateLimitQuotaService_ServiceDesc.ServiceName, rlqsSt)
			lastRLQS = rlqsSt
		}
		return readinessEvery
	})
}

// Run serves until ctx ends, then drains: /readyz turns 503, the election
// is resigned so that another task takes over at once (every capacity RPC
// is then answered with a redirect to it), the listener closes and the
// RPCs in flight finish, all within Config.Listen.Grace. It runs the services'
// background work (sweeping leases, reaping buckets, ending sessions), the
// configuration watchers, the fleet membership and the election. It
// returns an error when serving fails or the drain did not finish within
// the grace period. Run may be called once.
func (s *Server) Run(ctx context.Context) error {
	if s.lis == nil {
		return errors.New("server: no listener (Config.Listen.Address or Config.Listen.Listener)")
	}
	defer s.close()
	var wg sync.WaitGroup
	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	defer func() {
		stopBG()
		wg.Wait()
	}()
	for _, run := range []func(context.Context){
		func(ctx context.Context) { s.capacity.Run(ctx, time.Second) },
		func(ctx context.Context) { s.limits.Run(ctx, time.Second) },
		s.sessions.Run,
		s.followReadiness,
		func(ctx context.Context) { s.envoy.Run(ctx, 10*time.Second) },
	} {
		wg.Go(func() { run(bg) })
	}
	for _, w := range s.watchers {
		wg.Go(func() {
			if err := w(bg); err != nil && bg.Err() == nil {
				s.log.Error("configuration watcher stopped; the configuration in force stays", "err", err)
			}
		})
	}
	fleetDone := make(chan struct{})
	if s.member != nil {
		go func() {
			defer close(fleetDone)
			if err := s.member.Run(ctx); err != nil { // leaves the fleet when ctx ends
				s.log.Error("fleet membership stopped", "err", err)
			}
		}()
	} else {
		close(fleetDone)
	}
	// The election outlives ctx: it is resigned after the in-flight RPCs
	// have finished.
	ectx, ecancel := context.WithCancel(context.WithoutCancel(ctx))
	defer ecancel()
	electionDone := make(chan struct{})
	go func() {
		defer close(electionDone)
		err := s.election.Run(ectx, func(st election.Status) {
			s.capacity.SetMastership(st.IsMaster, st.Master)
			if st.IsMaster {
				s.capacity.SetLeasesEndBy(st.LeasesEndBy)
			}
			s.log.Info("mastership", "is_master", st.IsMaster, "master", st.Master, "previous_leases_end_by", st.LeasesEndBy)
		})
		if err != nil {
			s.log.Error("the election stopped: this task no longer campaigns", "err", err)
		}
	}()
	ep := s.Serve(s.lis, s.handler, s.tls.endpoint)
	s.log.Info("sluice server listening", "addr", s.lis.Addr().String(), "id", s.capacity.View().Node().ID)
	select {
	case err := <-ep.Err():
		_ = ep.Shutdown(context.Background())
		return err
	case <-ctx.Done():
	}
	return s.drain(ep, fleetDone, electionDone, ecancel)
}

// drain stops the server within Config.Listen.Grace (see Run). Its waits are
// real timers; the instants and durations it logs are Config.Runtime.Now's.
func (s *Server) drain(ep *Endpoint, fleetDone, electionDone <-chan struct{}, stopElection func()) error {
	grace := s.cfg.Listen.Grace
	start := s.now()
	s.log.Info("draining: not ready, resigning mastership, finishing in-flight RPCs", "grace", grace)
	s.draining.Store(true)
	s.health.Shutdown() // every status NOT_SERVING at once, and for good
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	wasMaster, _ := s.capacity.IsMaster()
	// An etcd that does not answer at once is gone: the session's TTL
	// ends the candidacy then.
	rctx, rcancel := context.WithTimeout(sctx, min(grace/4, resignTimeout))
	resignErr := s.election.Resign(rctx)
	rcancel()
	if resignErr != nil {
		s.log.Warn("resigning the election failed; the etcd session's TTL will end the candidacy", "err", resignErr)
	}
	// A successor is elected at once after a resignation etcd took;
	// without one, it takes the session's TTL: do not wait for it.
	if wasMaster && s.cfg.Election.Kind == "etcd" && resignErr == nil {
		wctx, wcancel := context.WithTimeout(sctx, grace/2)
		for wctx.Err() == nil {
			if is, m := s.capacity.IsMaster(); !is && m != "" && m != s.addr {
				s.log.Info("successor elected", "master", m, "after", s.now().Sub(start))
				// Linger a little: a client sent here by a candidate that
				// had not yet heard of the election must still find us,
				// and be redirected, not refused.
				sleepCtx(wctx, 500*time.Millisecond)
				break
			}
			sleepCtx(wctx, 20*time.Millisecond)
		}
		wcancel()
	}
	s.log.Info("closing the listener, finishing in-flight RPCs")
	s.capacity.EndWatches() // the streams would hold the listener open until the grace ends
	s.rlqs.Drain()
	shutdownErr := ep.Shutdown(sctx)
	s.log.Info("listener closed", "err", shutdownErr)
	select { // the fleet membership revokes its session
	case <-fleetDone:
	case <-sctx.Done():
	}
	stopElection()
	select {
	case <-electionDone:
	case <-sctx.Done():
		// etcd's client can wait on its own context while etcd is
		// unreachable (a campaign's clean-up resigns with it): closing
		// the client ends that.
		s.log.Warn("the election did not stop within the grace period; closing the etcd client")
		s.closeEtcd()
		<-electionDone
	}
	if shutdownErr != nil {
		return fmt.Errorf("graceful shutdown: %w", shutdownErr)
	}
	s.log.Info("stopped", "took", s.now().Sub(start))
	return nil
}

// sleepCtx waits d, or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// etcdLogger is the etcd client's zap logger: errors only (the client
// logs every retried RPC at warn), to log (Config.Runtime.Logger), named
// "etcd-client" (the records' "logger" attribute), with the caller in
// etcd's source.
func etcdLogger(log *slog.Logger) *zap.Logger {
	return zap.New(slogzap.NewCore(log.Handler(), zapcore.ErrorLevel), zap.AddCaller()).Named("etcd-client")
}

// close releases what New opened: the listener (if Run never served it),
// the etcd client, the shared store and the TracerProvider (its last
// spans exported).
func (s *Server) close() {
	if s.lis != nil {
		_ = s.lis.Close()
	}
	s.closeEtcd()
	if s.shared.Close != nil {
		_ = s.shared.Close()
	}
	if s.statsd != nil {
		_ = s.statsd.Close()
	}
	s.closeTracing()
}
