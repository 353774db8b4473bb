package server

import (
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
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	"google.golang.org/grpc/reflection"

	pb "github.com/sluice-rl/sluice/api/doorman"
	"github.com/sluice-rl/sluice/api/doorman/doormanconnect"
	qs "github.com/sluice-rl/sluice/api/quotaservice"
	"github.com/sluice-rl/sluice/api/quotaservice/quotaserviceconnect"
	v1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/api/sluice/v1/sluicev1connect"
	"github.com/sluice-rl/sluice/fleet"
	"github.com/sluice-rl/sluice/internal/grpcconnect"
	"github.com/sluice-rl/sluice/internal/identity"
	"github.com/sluice-rl/sluice/limits/copies"
	redisstore "github.com/sluice-rl/sluice/limits/redis"
	"github.com/sluice-rl/sluice/limits/rls"
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
	"github.com/sluice-rl/sluice/server/status/view"
)

// MaxRequestBytes bounds the size of one request message on either
// transport; a larger one is refused (ResourceExhausted on gRPC).
const MaxRequestBytes = 8 << 20

// DefaultMaxSessions is the cap on open sessions when Config.Sessions.Max
// is 0 (sessions.DefaultMaxSessions).
const DefaultMaxSessions = sessions.DefaultMaxSessions

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
	reloads *prometheus.CounterVec // sluice_server_config_reloads_total (configReloaded)

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
	member    *fleet.Member
	draining  atomic.Bool
	shared    Shared                                       // the open store (Config.Store); its zero value: memory
	tls       struct{ endpoint, parent, etcd *tls.Config } // loaded by openTLS
	health    *healthFollower                              // grpc.health.v1.Health, following Ready

	tracer tracer         // Config.Runtime.Tracing (zero: off)
	config *configSources // the configuration sources, their watchers and reloads
	elect  *elector       // the election (Config.Election) and a root's lease horizon
	// auth binds clients to their certificates' identities
	// (Config.Listen.Identity; nil: off), for every service.
	auth *identity.Authorizer
	// authz authorizes every RPC (authzRules) on both transports.
	authz *authz.Interceptor
	// statsd sends Envoy's rate limit service's statistics under
	// envoyproxy/ratelimit's names (Config.Runtime.Statsd; nil: off).
	statsd *upstreamstats.Sink
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
	s := &Server{cfg: cfg, log: cfg.Runtime.Logger, reg: cfg.Runtime.Registry, now: cfg.Runtime.Now, closeEtcd: func() {}}
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

	s.config = &configSources{repo: cfg.Repository, parent: cfg.Parent.Addresses, log: s.log, reg: s.reg, reloaded: s.configReloaded}

	if s.tracer, err = openTracer(ctx, cfg.Runtime.Tracing, s.log); err != nil {
		return nil, err
	}
	s.rpc.traced = s.tracer.on()
	if err := s.openStore(ctx); err != nil {
		return nil, err
	}
	if err := s.openEtcd(); err != nil {
		return nil, err
	}
	if s.auth, err = s.config.openIdentity(cfg.Listen.Identity, cfg.Runtime.Setting, s.tls.parent); err != nil {
		return nil, err
	}
	s.elect = newElector(cfg, s.addr, s.log)
	if err := s.newServices(id); err != nil {
		return nil, err
	}
	s.health = &healthFollower{server: health.NewServer(), ready: s.Ready, isMaster: s.capacity.IsMaster}
	s.authz = s.newAuthz()
	if err := s.elect.open(s.etcd, s.capacity); err != nil {
		return nil, err
	}
	if err := s.config.load(ctx, s.etcd, configTargets{capacity: s.capacity, limits: s.limits, sessions: s.sessions, envoy: s.envoy, statsd: s.statsd}); err != nil {
		return nil, err
	}
	s.status = status.New(status.Views{
		Capacity: s.capacity.View(), Limits: s.limits.Engine(), Sessions: s.sessions, Envoy: s.envoy, RLQS: s.rlqs,
		Ready: s.Ready, Draining: s.draining.Load, Redis: s.shared.redisStatus, Now: s.now, Logger: s.log,
	})
	admin := adminAPI{cfg: cfg.Admin, repo: cfg.Repository, intermediate: len(cfg.Parent.Addresses) > 0,
		clientCerts: s.tls.endpoint != nil && s.tls.endpoint.ClientCAs != nil, setting: cfg.Runtime.Setting, log: s.log, now: s.now,
		etcd: s.etcd, syncConfig: s.config.syncConfig, syncQuota: s.config.syncQuota, limits: s.limits, envoy: s.envoy}
	if s.handler, err = admin.handler(s.Handler()); err != nil {
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

// openEtcd connects to etcd when the election, the repository or the fleet
// needs it (validate has checked that Etcd.Endpoints is given where it
// is required).
func (s *Server) openEtcd() error {
	cfg := s.cfg
	if cfg.Election.Kind != "etcd" && !strings.HasPrefix(cfg.Repository.Path, "etcd:") && s.shared.Copies == nil {
		return nil
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: cfg.Etcd.Endpoints, DialTimeout: 5 * time.Second, TLS: s.tls.etcd, Logger: etcdLogger(s.log),
		DialOptions: s.tracer.grpcClient()})
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
			PasswordFile: st.PasswordFile, Prefix: st.KeyPrefix, Timeout: timeout, Logger: s.log, TracerProvider: s.tracer.provider})
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
	// capacity.New returns no error: its registration errors are
	// recorded instead of panicking, and checked here.
	reg := promreg.NewRecorder(s.reg)
	fixed := cfg.Repository.Fixed
	if fixed == nil {
		fixed = resources.Compose(nil, nil, nil, nil)
	}
	s.capacity = capacity.New(capacity.Options{ID: id, Address: s.addr, Config: cfg.Repository.Fixed, Now: s.now, Logger: s.log,
		Registry: reg, Parent: cfg.Parent.Addresses, ParentTLS: s.tls.parent,
		RequireConfig: cfg.Repository.Path != "" && len(cfg.Parent.Addresses) == 0, NoPush: cfg.Leases.DisablePush,
		Setting: cfg.Runtime.Setting, Election: s.elect.describe(), Horizon: s.elect.capacityHorizon()})
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
		Log: log, MaxSessions: cfg.Sessions.Max, Setting: cfg.Runtime.Setting, ForwardDialOptions: s.tracer.grpcClient()}
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
	if cfg.Repository.EnvoyRateLimitPath == "" {
		s.envoy.SetConfig(fixed.EnvoyRateLimit())
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

// Reload rereads the configuration files (--config,
// --quotaservice-config, --envoy-ratelimit-config, --client-policy) at
// once, as on SIGHUP; a bad file is logged and counted, and the last good
// configuration keeps serving.
func (s *Server) Reload() { s.config.reload() }

// redisShared is the shared store on rs: its buckets, Envoy's counters,
// its copy log, its collector (sluice_redis_* on /metrics) and its health
// (the status page); closing it closes rs.
func redisShared(rs *redisstore.Store) Shared {
	return Shared{Limits: rs, Copies: redisstore.NewCopyLog(rs), RLS: redisstore.NewRLS(rs), Metrics: rs.Collector(), Health: rs.Health, Close: rs.Close}
}

// redisStatus is the status page's view of the store: its health, nil
// without one (this process's memory).
func (sh Shared) redisStatus() *status.RedisStatus {
	if sh.Health != nil {
		return status.RedisStatusOf(sh.Health())
	}
	return nil
}

// fleetMember is a fleet membership as the sessions service sees it.
type fleetMember struct{ *fleet.Member }

func (m fleetMember) FleetStatus() view.FleetStatus { return view.FleetStatus(m.Status()) }

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
// xDS control plane applied once (Repository.EnvoyRateLimitXDS, unless
// its ForceStart), and the capacity service ready (configured,
// mastership known). why says what is missing.
func (s *Server) Ready() (ready bool, why string) {
	if s.draining.Load() {
		return false, "draining"
	}
	if ok, why := s.config.xdsReady(); !ok {
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

// Handler returns the net/http side of the endpoint without the admin API:
// every service over Connect (gRPC, gRPC-Web and JSON), the status site,
// /metrics, /healthz and /readyz. Serve it with unencrypted HTTP/2
// enabled so gRPC clients can connect without TLS.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	for _, h := range s.connectHandlers() {
		mux.Handle(s.tracer.http(h.path, h.handler))
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
// healthFollower) and gRPC server reflection (v1 and v1alpha), so that
// Envoy's and Kubernetes' health checks, grpcurl and ghz need no proto
// files.
func (s *Server) registerGRPC(gs *grpc.Server) {
	gs.RegisterService(&pb.Capacity_ServiceDesc, s.capacity)
	gs.RegisterService(&v1.Limits_ServiceDesc, s.limitsAPI())
	gs.RegisterService(&qs.QuotaService_ServiceDesc, s.limits.QuotaService())
	gs.RegisterService(&rlsv3.RateLimitService_ServiceDesc, s.envoy)
	gs.RegisterService(&v1.Leases_ServiceDesc, s.leases)
	gs.RegisterService(&rlqsv3.RateLimitQuotaService_ServiceDesc, s.rlqs)
	s.health.register(gs)
	reflection.Register(gs)
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
		s.health.follow,
		func(ctx context.Context) { s.envoy.Run(ctx, 10*time.Second) },
	} {
		wg.Go(func() { run(bg) })
	}
	for _, w := range s.config.watchers {
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
		s.elect.run(ectx, s.capacity)
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
	s.health.shutdown()
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	wasMaster, _ := s.capacity.IsMaster()
	resignErr := s.elect.resign(sctx, grace)
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
	s.tracer.close()
}
