// Package server is Sluice's capacity server: the RPC handlers of the
// Doorman service doorman.Capacity over the lease core (package lease),
// with locking, configuration, mastership and metrics. Transport is Connect:
// one handler serves gRPC (what a Doorman client speaks), gRPC-Web and JSON
// over HTTP (POST /doorman.Capacity/<Method>, Content-Type:
// application/json) on the same port.
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
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-rl/sluice/algorithm"
	pb "github.com/sluice-rl/sluice/api/doorman"
	"github.com/sluice-rl/sluice/api/doorman/doormanconnect"
	"github.com/sluice-rl/sluice/config"
	"github.com/sluice-rl/sluice/internal/discovery"
	"github.com/sluice-rl/sluice/lease"
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
	// ParentDial, when set, replaces ParentHTTP: it returns the stub for a
	// parent address (the simulator passes in-process servers).
	ParentDial discovery.Dialer
	// ManualParent makes the caller drive the parent link with StepParent
	// (the simulator, on virtual time): Run does not start it, and a first
	// request, instead of waiting for the link, takes one turn of it
	// inline (so the server must not be called concurrently).
	ManualParent bool
	// Rand is the source of retry jitter; nil means math/rand/v2's global
	// source. The simulator passes a seeded one.
	Rand *rand.Rand
	// DoormanAllocation turns off Sluice's changes to Doorman's allocation
	// across the tree, for comparison (the simulator's --allocation
	// doorman): a parent does not keep a child's outstanding leases booked
	// (lease.Request.KeepOutstanding), an intermediate reports its lease rather
	// than what it handed out, and learning mode cuts claims to what is
	// free instead of handing back those it cannot cover.
	DoormanAllocation bool
	// DesignRefreshDecay turns the refresh interval's decay across the
	// tree the design's way, for comparison (the simulator's
	// --refresh-decay design): each level further from the root refreshes
	// decay_factor times as long as the level above it (clients most
	// often), instead of 1/decay_factor times (Sluice's default: the levels
	// nearer the root refresh most often).
	//
	// Source: doorman-design.md, "Algorithms" ("the refresh interval of a
	// lease should halve with every level we go up in the tree").
	DesignRefreshDecay bool
	// RequireConfig makes /readyz fail until a configuration is set (a
	// root started with a configuration file or key).
	RequireConfig bool
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
	s.isMaster = true
	s.masterAddr = opts.Address
	s.masterSince = s.now()
	if len(opts.Parent) > 0 {
		s.parent = newParentLink(s, opts.Parent, opts.ParentHTTP, opts.ParentDial, opts.ParentTLS)
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
	mux.Handle("/metrics", promhttp.HandlerFor(s.opts.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /debug/status", s.handleStatus)
	mux.HandleFunc("GET /debug/status/resource", s.handleResource)
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

// SetMastership tells the server whether it is the master and, if not, who
// is. Winning mastership starts from an empty state in learning mode;
// losing it drops all state at once.
//
// Source: doorman-design.md, "Master Election".
func (s *Server) SetMastership(isMaster bool, masterAddr string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if isMaster != s.isMaster {
		s.resources = make(map[string]*resource)
		if isMaster {
			s.masterSince = s.now()
			s.metrics.elections.WithLabelValues("won").Inc()
		} else {
			s.metrics.elections.WithLabelValues("lost").Inc()
		}
	}
	s.isMaster = isMaster
	s.masterAddr = masterAddr
	if isMaster && masterAddr == "" {
		s.masterAddr = s.opts.Address
	}
}

// IsMaster reports whether the server is the master and the master's
// address.
func (s *Server) IsMaster() (bool, string) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.isMaster, s.masterAddr
}

func (s *Server) find(id string) (config.Template, bool) {
	if s.cfg == nil {
		return config.Template{}, false
	}
	return s.cfg.Find(id)
}

// wireSafeCapacity returns the safe capacity for the wire, or nil (the
// field is optional) when there is no finite one, as for a resource that
// matches no template.
func wireSafeCapacity(c float64) *float64 {
	if math.IsInf(c, 0) || math.IsNaN(c) {
		return nil
	}
	return proto.Float64(c)
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

// mastership returns the redirect to put in a response when this server is
// not the master, or nil when it is.
func (s *Server) mastership() *pb.Mastership {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.isMaster {
		return nil
	}
	m := &pb.Mastership{}
	if s.masterAddr != "" {
		m.MasterAddress = proto.String(s.masterAddr)
	}
	return m
}

// Discovery implements doorman.Capacity/Discovery. It always answers.
func (s *Server) Discovery(ctx context.Context, _ *connect.Request[pb.DiscoveryRequest]) (*connect.Response[pb.DiscoveryResponse], error) {
	master, addr := s.IsMaster()
	if master && addr == "" {
		if la, ok := ctx.Value(http.LocalAddrContextKey).(net.Addr); ok {
			addr = la.String()
		}
	}
	m := &pb.Mastership{}
	if addr != "" {
		m.MasterAddress = proto.String(addr)
	}
	return connect.NewResponse(&pb.DiscoveryResponse{Mastership: m, IsMaster: proto.Bool(master)}), nil
}

// GetCapacity implements doorman.Capacity/GetCapacity: a bulk request for
// capacity from one client.
//
// Source: doorman-design.md, "Processing the GetCapacity RPC".
func (s *Server) GetCapacity(ctx context.Context, req *connect.Request[pb.GetCapacityRequest]) (*connect.Response[pb.GetCapacityResponse], error) {
	if err := ValidateGetCapacity(req.Msg); err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	if m := s.mastership(); m != nil {
		return connect.NewResponse(&pb.GetCapacityResponse{Mastership: m}), nil
	}
	client := req.Msg.GetClientId()
	out := &pb.GetCapacityResponse{Response: make([]*pb.ResourceResponse, 0, len(req.Msg.GetResource()))}
	ids := make([]string, len(req.Msg.GetResource()))
	lrs := make([]lease.Request, len(ids))
	for i, rr := range req.Msg.GetResource() {
		lr := lease.Request{
			Client:     client,
			Priority:   rr.GetPriority(),
			Wants:      rr.GetWants(),
			Subclients: 1,
		}
		if h := rr.GetHas(); h != nil {
			lr.Has = proto.Float64(h.GetCapacity())
			if !s.opts.DoormanAllocation {
				lr.HasExpiry = time.Unix(h.GetExpiryTime(), 0)
			}
		}
		ids[i], lrs[i] = rr.GetResourceId(), lr
	}
	grants, ok := s.decideAll(ctx, ids, lrs)
	if !ok {
		return connect.NewResponse(&pb.GetCapacityResponse{Mastership: s.mastershipOrUnknown()}), nil
	}
	for i, g := range grants {
		out.Response = append(out.Response, &pb.ResourceResponse{
			ResourceId:   proto.String(ids[i]),
			Gets:         wireLease(g),
			SafeCapacity: wireSafeCapacity(g.SafeCapacity),
		})
	}
	return connect.NewResponse(out), nil
}

// GetServerCapacity implements doorman.Capacity/GetServerCapacity: a
// downstream server asks on behalf of its clients, summarised per priority
// band. Each band counts as num_clients subclients at its priority (see
// algorithm.PriorityFairTarget); the response pushes the resource's
// algorithm and safe capacity down.
func (s *Server) GetServerCapacity(ctx context.Context, req *connect.Request[pb.GetServerCapacityRequest]) (*connect.Response[pb.GetServerCapacityResponse], error) {
	if err := ValidateGetServerCapacity(req.Msg); err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	if m := s.mastership(); m != nil {
		return connect.NewResponse(&pb.GetServerCapacityResponse{Mastership: m}), nil
	}
	server := req.Msg.GetServerId()
	out := &pb.GetServerCapacityResponse{}
	ids := make([]string, len(req.Msg.GetResource()))
	lrs := make([]lease.Request, len(ids))
	for i, rr := range req.Msg.GetResource() {
		// Each band counts as that many subclients at its priority.
		lr := lease.Request{Client: server, Subclients: 1}
		for _, b := range rr.GetWants() {
			lr.Bands = append(lr.Bands, lease.Band{Priority: b.GetPriority(), Clients: b.GetNumClients(), Wants: b.GetWants()})
		}
		// A downstream server's has is what it has handed out and that
		// still runs: it stays booked until its clients give it back.
		lr.KeepOutstanding = !s.opts.DoormanAllocation
		if h := rr.GetHas(); h != nil {
			lr.Has = proto.Float64(h.GetCapacity())
			if !s.opts.DoormanAllocation {
				lr.HasExpiry = time.Unix(h.GetExpiryTime(), 0)
			}
		}
		ids[i], lrs[i] = rr.GetResourceId(), lr
	}
	grants, ok := s.decideAll(ctx, ids, lrs)
	if !ok {
		return connect.NewResponse(&pb.GetServerCapacityResponse{Mastership: s.mastershipOrUnknown()}), nil
	}
	for i, g := range grants {
		p, params := s.paramsOf(ids[i])
		out.Response = append(out.Response, &pb.ServerCapacityResourceResponse{
			ResourceId: proto.String(ids[i]),
			Gets:       wireLease(g),
			Algorithm: &pb.Algorithm{
				Kind:        pb.Algorithm_Kind(p.Kind).Enum(),
				LeaseLength: proto.Int64(int64(p.LeaseLength / time.Second)),
				// The child refreshes with this server every
				// p.RefreshInterval (Gets); its own requesters, one level
				// further from the root, refresh 1/decay_factor as slowly.
				RefreshInterval:      proto.Int64(int64(childInterval(p.RefreshInterval, p.LeaseLength, decayFactor(params), s.opts.DesignRefreshDecay) / time.Second)),
				LearningModeDuration: proto.Int64(int64(p.LearningModeDuration / time.Second)),
				Parameters:           params,
			},
			SafeCapacity: wireSafeCapacity(g.SafeCapacity),
		})
	}
	return connect.NewResponse(out), nil
}

// ReleaseCapacity implements doorman.Capacity/ReleaseCapacity: it drops
// the client's leases on the listed resources.
func (s *Server) ReleaseCapacity(_ context.Context, req *connect.Request[pb.ReleaseCapacityRequest]) (*connect.Response[pb.ReleaseCapacityResponse], error) {
	if err := ValidateReleaseCapacity(req.Msg); err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	if m := s.mastership(); m != nil {
		return connect.NewResponse(&pb.ReleaseCapacityResponse{Mastership: m}), nil
	}
	for _, id := range req.Msg.GetResourceId() {
		if id == "" {
			s.metrics.emptyReleaseIDs.Inc()
			continue
		}
		s.mu.RLock()
		r := s.resources[id]
		s.mu.RUnlock()
		if r == nil {
			continue
		}
		r.mu.Lock()
		r.store.Release(req.Msg.GetClientId())
		r.mu.Unlock()
	}
	return connect.NewResponse(&pb.ReleaseCapacityResponse{}), nil
}

// decideAll runs one decision per resource, each under its resource's
// lock. ok is false when the server lost mastership meanwhile. On an
// intermediate server, resources it holds no lease for from its parent yet
// are recorded first, so that the parent hears of their demand, and decided
// again once the parent answered: one wait of at most firstLeaseWait for
// the whole request.
func (s *Server) decideAll(ctx context.Context, ids []string, reqs []lease.Request) ([]lease.Grant, bool) {
	grants := make([]lease.Grant, len(ids))
	rs := make([]*resource, len(ids))
	var pending []int
	for i, id := range ids {
		r := s.resource(id)
		if r == nil {
			return nil, false
		}
		rs[i] = r
		r.mu.Lock()
		grants[i] = s.decide(r, id, reqs[i])
		if s.parent != nil && !r.parent.ok {
			pending = append(pending, i)
		}
		r.mu.Unlock()
	}
	if len(pending) == 0 {
		return grants, true
	}
	waiting := make([]*resource, len(pending))
	for j, i := range pending {
		waiting[j] = rs[i]
	}
	s.waitFirstLeases(ctx, waiting)
	for _, i := range pending {
		r := rs[i]
		r.mu.Lock()
		if r.parent.ok {
			rq := reqs[i]
			rq.Repeat = true // the same request, decided again now that there is capacity
			grants[i] = s.decide(r, ids[i], rq)
		}
		r.mu.Unlock()
	}
	return grants, true
}

// decide runs one decision on r (the caller holds r.mu) and counts and logs
// what the store flags: early requests (Doorman's 5-second rule) and
// claimed leases without a record outside learning mode (logged at most
// once every unrecordedLogEvery).
func (s *Server) decide(r *resource, id string, req lease.Request) lease.Grant {
	g := r.store.Decide(s.now(), req)
	if g.Early {
		s.metrics.early.Inc()
	}
	if g.Unrecorded {
		s.metrics.unrecorded.Inc()
		if s.unrecordedLog.Allow() {
			s.log.Warn("request claims a lease the server has no record of, outside learning mode; deciding it as usual",
				"resource", id, "client", req.Client, "has", *req.Has,
				"see", "sluice_server_unrecorded_has_total")
		}
	}
	return g
}

// unrecordedLogEvery is the least time between two logs of a claimed lease
// without a record (the counter counts every one).
const unrecordedLogEvery = 10 * time.Second

// paramsOf returns resource id's parameters and algorithm parameters.
func (s *Server) paramsOf(id string) (lease.Params, []*pb.NamedParameter) {
	s.mu.RLock()
	r := s.resources[id]
	s.mu.RUnlock()
	if r == nil {
		return paramsFor(nil), nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if s.parent != nil {
		return r.store.Params(), r.parent.algoParams
	}
	var params []*pb.NamedParameter
	if r.template != nil {
		for _, p := range r.template.Algorithm.Parameters {
			params = append(params, &pb.NamedParameter{Name: proto.String(p.Name), Value: proto.String(p.Value)})
		}
	}
	return r.store.Params(), params
}

func (s *Server) mastershipOrUnknown() *pb.Mastership {
	if m := s.mastership(); m != nil {
		return m
	}
	return &pb.Mastership{}
}

func wireLease(g lease.Grant) *pb.Lease {
	return &pb.Lease{
		ExpiryTime:      proto.Int64(g.Expiry.Unix()),
		RefreshInterval: proto.Int64(int64(math.Ceil(g.RefreshInterval.Seconds()))),
		Capacity:        proto.Float64(g.Capacity),
	}
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

// Run sweeps expired leases every interval until ctx is done; on an
// intermediate server it also runs the link to the parent.
func (s *Server) Run(ctx context.Context, interval time.Duration) error {
	if s.parent != nil && !s.opts.ManualParent {
		done := make(chan struct{})
		defer func() { <-done }()
		go func() {
			defer close(done)
			s.parent.run(ctx)
		}()
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			s.Sweep()
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
