// Package server is Sluice's capacity server: the RPC handlers of the
// Doorman service doorman.Capacity over the lease core (package lease),
// with locking, configuration, mastership and metrics, served on one port
// by an Endpoint: gRPC on grpc-go's own transport, and gRPC-Web, JSON over
// HTTP (POST /doorman.Capacity/<Method>, Content-Type: application/json),
// status pages and /metrics on net/http with Connect.
//
// The files, by job: server.go (options, the resource map, sweeping),
// handlers.go (the RPCs and their wire conversion), mastership.go,
// parent.go (an intermediate's link to its parent), serve.go (the
// endpoint), grpc.go (the handlers for grpc-go), validate.go, metrics.go,
// status.go (the status pages' data), status_http.go (their HTML and
// JSON), status_filter.go (filter and sort), status_history.go (samples).
//
// Source: doorman-design.md, "Server operation"; doorman-wire.md.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluice-rl/sluice/algorithm"
	pb "github.com/sluice-rl/sluice/api/doorman"
	"github.com/sluice-rl/sluice/api/doorman/doormanconnect"
	"github.com/sluice-rl/sluice/api/quotaservice/quotaserviceconnect"
	"github.com/sluice-rl/sluice/api/sluice/v1/sluicev1connect"
	"github.com/sluice-rl/sluice/config"
	"github.com/sluice-rl/sluice/internal/hooks"
	"github.com/sluice-rl/sluice/lease"
	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/limits/copies"
	"github.com/sluice-rl/sluice/ratelimit"
)

// Limits on the size of a request. A request beyond them is rejected with
// InvalidArgument.
const (
	MaxResourcesPerRequest = 10_000
	MaxIDLength            = 1024
	MaxBandsPerResource    = 1024
	MaxRequestBytes        = 8 << 20
)

// The lease length and refresh interval of a resource that matches no
// template (it is granted what it asks: NO_ALGORITHM, per doorman-design.md,
// "Root server configuration"), and at an intermediate server of a resource
// it holds no lease for from its parent yet. (client.DefaultRefreshInterval,
// 5 s, is the client's own, before any lease says otherwise.)
const (
	FallbackLeaseLength     = 60 * time.Second
	FallbackRefreshInterval = 16 * time.Second
)

// Options configures a Server.
type Options struct {
	// ID identifies this server (as a client of its parent, and in logs).
	ID string
	// Address is the address clients should use to reach this server
	// ("host:port"), reported in Discovery and mastership redirects. Empty
	// means the local address of the connection each request came in on
	// (the listener's address), so that Discovery never names a master
	// without its address (doorman-design.md, "Discovery").
	Address string
	// Config is the resource configuration; nil means no templates (every
	// resource is granted what it asks).
	Config *config.Repository
	// Now returns the current time; nil means time.Now. Tests and the
	// simulator pass a fake clock.
	Now func() time.Time
	// Logger receives structured logs; nil means slog.Default().
	Logger *slog.Logger
	// Registry receives the server's metrics; nil means a new registry,
	// served at /metrics by Handler, that also holds the process's and the
	// Go runtime's collectors (process_cpu_seconds_total, go_*).
	Registry *prometheus.Registry
	// Parent, when not empty, makes this an intermediate server: it asks
	// the node at these addresses (its tasks; any of them, the master is
	// found with Discovery and redirects) for capacity on behalf of its
	// requesters, and adopts the capacity, algorithm and safe capacity the
	// parent pushes down; Config is then not used. Run starts the link.
	Parent []string
	// ParentHTTP is the HTTP client for the parent link; nil means one
	// speaking gRPC over unencrypted HTTP/2.
	ParentHTTP *http.Client
	// ParentTLS, when set (and ParentHTTP is not), makes the parent link
	// speak gRPC over TLS with it (RootCAs verify the parent; Certificates
	// are presented for mTLS).
	ParentTLS *tls.Config
	// RequireConfig makes /readyz fail until a configuration is set (a
	// root started with a configuration file or key).
	RequireConfig bool
	// Limits is the limits configuration: the token buckets of
	// sluice.v1.Limits and quotaservice.QuotaService (nil: none, every
	// request is REJECTED_NO_BUCKET; SetLimits changes it). It must be
	// valid (limits.Config.Validate); an invalid one is logged and not used.
	Limits *limits.Config
	// LimitsStore holds the limits' buckets (nil: a new limits.MemoryStore,
	// this process's alone).
	LimitsStore limits.Store
	// Copies configures the copy-limited resources (Charon's counting
	// semaphores) of sluice.v1.Limits' Reserve, Release, Transfer and
	// Seize (nil: none; SetCopies changes it). It must be valid; an invalid
	// one is logged and not used.
	Copies *copies.Config
	// CopiesLog, when set, is the copy log shared with the other servers
	// using the same Redis (limits/redis.CopyLog): the engine asks it for
	// every decision, keeps its sessions and hold sets, and Run writes its
	// contributions back every reconcileEvery when they are in doubt. The
	// engine starts fenced when it is set: the fleet membership
	// (package fleet) unfences it once it has an epoch. nil: the counts are
	// this server's alone.
	CopiesLog copies.Log
	// MaxSessions caps the sessions of copy-limited resources this server
	// holds open at once (OpenSession): at the cap, OpenSession answers
	// ResourceExhausted, counted in sluice_copies_sessions_refused_total,
	// until a session ends (closed, its keep-alive stream broken, or its
	// ttl passed and Run's next expiry ended it). Each session costs the
	// server memory until it ends, so without a cap a misbehaving client
	// could open sessions until the process runs out of memory. A fleet's
	// sessions count only on their home, the server that opened them (the
	// requests forwarded to it open none). 0 means DefaultMaxSessions
	// (100 000); negative means no cap.
	MaxSessions int

	// hooks are the simulator's and the tests' knobs (internal/hooks).
	hooks hooks.Server
}

func init() {
	hooks.ServerOptions = func(opts any, h hooks.Server) any {
		o := opts.(Options)
		o.hooks = h
		return o
	}
	hooks.ServerStepParent = func(s any, ctx context.Context) time.Duration {
		return s.(*Server).stepParent(ctx)
	}
}

// Server is a capacity server. It is safe for concurrent use: a server-wide
// RWMutex guards the resource map and mastership, and each resource has a
// mutex of its own, so decisions on different resources run in parallel.
type Server struct {
	opts    Options
	now     func() time.Time
	log     *slog.Logger
	metrics *metrics

	mu          sync.RWMutex
	cfg         *config.Repository
	resources   map[string]*resource
	isMaster    bool
	masterAddr  string
	masterSince time.Time

	loggedMu      sync.Mutex
	logged        map[string]struct{} // see once
	unrecordedLog *ratelimit.Limiter  // paces the log of claims without a record

	// minRequest is doorman.MinRequestInterval; the package's tests of
	// tree behaviour on the wall clock shorten it.
	minRequest time.Duration

	limits        *limits.Engine
	limitsMetrics *limitsMetrics
	rateNames     namesOf // resources the limits configuration names
	copies        *copies.Engine
	copyNames     namesOf // resources the copies configuration names
	fleet         atomic.Pointer[func() FleetStatus]
	router        atomic.Pointer[router] // forwards other servers' sessions (SetSessionRouter)
	forwarded     atomic.Uint64          // requests forwarded to sessions' homes
	openMu        sync.Mutex             // serializes OpenSession's check of MaxSessions and the open
	refused       atomic.Uint64          // sessions refused at MaxSessions

	parent   *parentLink // nil at the root
	started  time.Time   // wall time, for uptime
	election string      // how this node elects, for the status page
	draining bool
	hist     history
}

type resource struct {
	mu       sync.Mutex
	store    *lease.Resource
	template *config.Template // nil when no template matched
	parent   parentLease      // intermediate servers: the lease from the parent
}

// New returns a standalone server: master from now on (Standalone
// mastership; an election can change that with SetMastership).
func New(opts Options) *Server {
	s := &Server{
		opts:      opts,
		now:       opts.Now,
		log:       opts.Logger,
		cfg:       opts.Config,
		resources: make(map[string]*resource),
		logged:    make(map[string]struct{}),
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if opts.Registry == nil {
		// The process's own figures too: process_cpu_seconds_total is what
		// `sluice bench` divides by the requests it sent.
		s.opts.Registry = prometheus.NewRegistry()
		s.opts.Registry.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), collectors.NewGoCollector())
	}
	s.started = time.Now()
	s.minRequest = pb.MinRequestInterval
	s.unrecordedLog = ratelimit.NewLimiter(float64(time.Second)/float64(unrecordedLogEvery), unrecordedLogEvery.Seconds(), ratelimit.WithClock(s.now))
	s.metrics = newMetrics(s.opts.Registry, s)
	s.limitsMetrics = newLimitsMetrics(s.opts.Registry)
	s.limits, _ = limits.New(nil, limits.Options{Listener: s.limitsMetrics, Store: opts.LimitsStore})
	if st, ok := s.limits.Store().(collectorOf); ok {
		s.opts.Registry.MustRegister(st.Collector())
	}
	s.opts.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sluice_limits_buckets",
		Help: "Buckets (token buckets and burst-tier domains) the limits engine's store holds: exact in memory; on Redis an estimate, the keys of its database (DBSIZE per node, other keys included); 0 when Redis does not answer.",
	}, func() float64 {
		// A scrape has no context (client_golang's collectors take
		// none): the store bounds the call by its own timeout.
		n, _ := s.limits.EstimateLen(context.Background())
		return float64(n)
	}))
	s.rateNames.Store(&map[string]bool{})
	if opts.Limits != nil {
		if err := s.SetLimits(opts.Limits); err != nil {
			s.log.Error("the limits configuration is invalid; serving no limits", "err", err)
		}
	}
	s.copies, _ = copies.New(nil, copies.Options{Log: opts.CopiesLog})
	if opts.CopiesLog != nil {
		s.copies.Fence()
	}
	s.registerCopiesMetrics()
	s.copyNames.Store(&map[string]bool{})
	if opts.Copies != nil {
		if err := s.SetCopies(opts.Copies); err != nil {
			s.log.Error("the copy-limited resources' configuration is invalid; serving none", "err", err)
		}
	}
	s.isMaster = true
	s.masterAddr = opts.Address
	s.masterSince = s.now()
	if len(opts.Parent) > 0 {
		s.parent = newParentLink(s, opts.Parent, opts.ParentHTTP, opts.hooks.ParentDial, opts.ParentTLS)
	}
	return s
}

// Intermediate reports whether the server gets its capacity from a parent.
func (s *Server) Intermediate() bool { return s.parent != nil }

// Parent returns the state of the link to the parent; ok is false at the
// root.
func (s *Server) Parent() (st ParentStatus, ok bool) {
	if s.parent == nil {
		return ParentStatus{}, false
	}
	return s.parent.status(), true
}

// Registry returns the Prometheus registry the server's metrics live in.
func (s *Server) Registry() *prometheus.Registry { return s.opts.Registry }

// Handler returns an http.Handler that serves the Capacity service
// (gRPC, gRPC-Web and JSON over HTTP) and /metrics. Serve it with
// unencrypted HTTP/2 enabled so gRPC clients can connect without TLS.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	path, h := doormanconnect.NewCapacityHandler(s,
		connect.WithReadMaxBytes(MaxRequestBytes),
		connect.WithInterceptors(s.metrics.interceptor()),
	)
	mux.Handle(path, h)
	path, h = sluicev1connect.NewLimitsHandler(limitsConnect{api: s.LimitsAPI()},
		connect.WithReadMaxBytes(MaxRequestBytes),
		connect.WithInterceptors(s.metrics.interceptor()),
	)
	mux.Handle(path, h)
	path, h = quotaserviceconnect.NewQuotaServiceHandler(quotaConnect{s.QuotaServiceAPI()},
		connect.WithReadMaxBytes(MaxRequestBytes),
		connect.WithInterceptors(s.metrics.interceptor()),
	)
	mux.Handle(path, h)
	mux.Handle("/metrics", promhttp.HandlerFor(s.opts.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /debug/status", s.handleStatus)
	mux.HandleFunc("GET /debug/status/resource", s.handleResource)
	mux.HandleFunc("GET /debug/status/buckets", s.handleBuckets)
	mux.HandleFunc("GET /debug/status/admin", s.handleAdmin)
	mux.Handle("GET /debug/status/static/", http.StripPrefix("/debug/status/static/", http.FileServerFS(staticFS)))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /readyz", s.handleReady)
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/debug/status", http.StatusFound)
	})
	return mux
}

// SetConfig installs a new resource configuration. Existing resources take
// the new template's parameters at once; their outstanding leases are kept
// and converge on the clients' next refreshes.
func (s *Server) SetConfig(repo *config.Repository) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cfg = repo
	if s.parent != nil {
		return // the parent pushes the parameters down
	}
	for id, r := range s.resources {
		r.mu.Lock()
		t, ok := s.find(id)
		if ok {
			r.template = &t
		} else {
			r.template = nil
		}
		r.store.SetParams(s.params(paramsFor(r.template)))
		r.mu.Unlock()
	}
}

// Config returns the configuration in force (nil if none).
func (s *Server) Config() *config.Repository {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.cfg
}

func (s *Server) find(id string) (config.Template, bool) {
	if s.cfg == nil {
		return config.Template{}, false
	}
	return s.cfg.Find(id)
}

// paramsFor resolves a template (nil: no template) into lease parameters.
func paramsFor(t *config.Template) lease.Params {
	if t == nil {
		return lease.Params{
			Kind:            algorithm.NoAlgorithm,
			Capacity:        math.Inf(1),
			LeaseLength:     FallbackLeaseLength,
			RefreshInterval: FallbackRefreshInterval,
		}
	}
	return lease.Params{
		Kind:                 t.Algorithm.Kind,
		Capacity:             t.Capacity,
		SafeCapacity:         t.SafeCapacity,
		HasSafeCapacity:      t.HasSafeCapacity,
		LeaseLength:          t.Algorithm.LeaseLength,
		RefreshInterval:      t.Algorithm.RefreshInterval,
		LearningModeDuration: t.Algorithm.LearningModeDuration,
	}
}

// params completes a resource's parameters with what is the server's, not
// the template's: Doorman's minimum time between two requests.
func (s *Server) params(p lease.Params) lease.Params {
	p.MinRequestInterval = s.minRequest
	return p
}

// resource returns the state of resource id, creating it if needed, or
// nil if this server is not the master. The caller holds no lock.
func (s *Server) resource(id string) *resource {
	s.mu.RLock()
	r, ok := s.resources[id]
	master := s.isMaster
	s.mu.RUnlock()
	if ok || !master {
		return r
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.isMaster {
		return nil
	}
	if r, ok := s.resources[id]; ok {
		return r
	}
	r = &resource{}
	switch {
	case s.parent != nil:
		r.store = lease.NewResource(id, s.params(r.parent.params()), s.masterSince)
	default:
		if t, ok := s.find(id); ok {
			r.template = &t
		} else {
			s.unmatched(id)
		}
		r.store = lease.NewResource(id, s.params(paramsFor(r.template)), s.masterSince)
	}
	s.resources[id] = r
	return r
}

// resourceList returns the resources this server holds state for, ids[i]
// naming rs[i], copied under the server's read lock (the caller then locks
// each resource on its own).
func (s *Server) resourceList() (ids []string, rs []*resource) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	ids = make([]string, 0, len(s.resources))
	rs = make([]*resource, 0, len(s.resources))
	for id, r := range s.resources {
		ids = append(ids, id)
		rs = append(rs, r)
	}
	return ids, rs
}

// unmatched logs, once per resource id (up to a bound), that a resource
// matched no template, and counts it.
func (s *Server) unmatched(id string) {
	s.metrics.unmatched.Inc()
	if s.once("unmatched", id) {
		s.log.Warn("resource matches no template; granting what clients ask (NO_ALGORITHM)", "resource", id)
	}
}

// once reports whether this is the first time (what, id) is seen, for
// logging a condition once per resource: true at most once per pair, and
// for at most maxLoggedOnce pairs in all (memory stays bounded; the metrics
// count every occurrence).
func (s *Server) once(what, id string) bool {
	const maxLoggedOnce = 10_000
	k := what + "\x00" + id
	s.loggedMu.Lock()
	defer s.loggedMu.Unlock()
	if _, seen := s.logged[k]; seen || len(s.logged) >= maxLoggedOnce {
		return false
	}
	s.logged[k] = struct{}{}
	return true
}

// Sweep drops expired leases on every resource and forgets resources that
// hold no lease (their state is rebuilt on the next request, so memory
// stays bounded by the live leases; an intermediate server releases them at
// its parent), and records a history sample per resource for the status
// page. Run it periodically (Run does, every second).
func (s *Server) Sweep() {
	now := s.now()
	var dropped []string
	s.mu.Lock()
	for id, r := range s.resources {
		r.mu.Lock()
		r.store.Cleanup(now)
		_, _, _, n := r.store.Totals()
		idle := n == 0 && !r.store.Learning(now)
		r.mu.Unlock()
		if idle {
			delete(s.resources, id)
			dropped = append(dropped, id)
		}
	}
	s.mu.Unlock()
	for _, id := range dropped {
		s.hist.drop(id)
	}
	if s.parent != nil && len(dropped) > 0 {
		// Nobody here holds these any more: give them back upstream rather
		// than let the parent keep them booked until they expire.
		s.parent.release(dropped)
	}
	s.sample(now)
}

// Run sweeps expired leases and reaps idle limits buckets every interval,
// and ends the sessions and staged transfers whose ttl passed every 250 ms,
// until ctx is done; on an intermediate server it also runs the link to
// the parent.
func (s *Server) Run(ctx context.Context, interval time.Duration) error {
	if s.parent != nil && !s.opts.hooks.ManualParent {
		done := make(chan struct{})
		defer func() { <-done }()
		go func() {
			defer close(done)
			s.parent.run(ctx)
		}()
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	sessions := time.NewTicker(expireEvery)
	defer sessions.Stop()
	var reconcile <-chan time.Time
	if s.opts.CopiesLog != nil {
		r := time.NewTicker(reconcileEvery)
		defer r.Stop()
		reconcile = r.C
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			s.Sweep()
			s.reapLimits(ctx)
		case <-sessions.C:
			s.expireSessions(ctx)
		case <-reconcile:
			s.reconcileCopies(ctx)
		}
	}
}

// ResourceStatus is a snapshot of one resource, for status pages and tests.
type ResourceStatus struct {
	ID           string
	Template     string // identifier_glob of the matched template; "" if none
	Algorithm    algorithm.Kind
	Capacity     float64
	SumHas       float64
	SumWants     float64
	Clients      int
	Learning     bool
	SafeCapacity float64
	// ParentExpiry is, at an intermediate server, when its lease from the
	// parent for this resource ends; zero at the root or without a lease.
	ParentExpiry time.Time
	Leases       []lease.Lease
}

// Status returns a snapshot of resource id, with its leases.
func (s *Server) Status(id string) (ResourceStatus, error) {
	s.mu.RLock()
	r := s.resources[id]
	s.mu.RUnlock()
	if r == nil {
		return ResourceStatus{}, fmt.Errorf("resource %q: %w", id, ErrUnknownResource)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := s.now()
	r.store.Cleanup(now)
	p := r.store.Params()
	w, h, _, n := r.store.Totals()
	st := ResourceStatus{
		ID: id, Algorithm: p.Kind, Capacity: p.Capacity, SumHas: h, SumWants: w, Clients: n,
		Learning: r.store.Learning(now), SafeCapacity: r.store.SafeCapacity(), Leases: r.store.Leases(),
	}
	if r.template != nil {
		st.Template = r.template.IdentifierGlob
	}
	if s.parent != nil && r.parent.ok {
		st.ParentExpiry = r.parent.expiry
	}
	return st, nil
}

// ErrUnknownResource is returned by Status for a resource the server holds
// no state for.
var ErrUnknownResource = errors.New("unknown resource")
