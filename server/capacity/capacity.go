// Package capacity is Doorman's capacity service, doorman.Capacity: the
// RPC handlers over the lease core (package lease), with locking, the
// resource repository, mastership, the link of an intermediate server
// to its parent, validation and metrics, and the read-only views the
// status pages show.
//
// Its handlers have grpc-go's shape (func(ctx, *Req) (*Resp, error));
// package server registers them with grpc-go and adapts them to Connect.
//
// The files, by job: capacity.go (options, the resource map, sweeping),
// handlers.go (the RPCs and their wire conversion), mastership.go,
// configured.go (the templates in force, and what matches them),
// horizon.go (the lease horizon a root master keeps), push.go (the
// watchers of pushed leases), intermediate.go (an intermediate's side of
// the link to its parent, package parentlink), validate.go, metrics.go,
// notes.go (paced warnings), view.go (the status pages' data), history.go
// (samples).
//
// Source: doorman-design.md, "Server operation"; doorman-wire.md.
package capacity

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

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/algorithm"
	pb "github.com/sluice-rl/sluice/api/doorman"
	v1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/internal/hooks"
	"github.com/sluice-rl/sluice/internal/refresh"
	"github.com/sluice-rl/sluice/lease"
	"github.com/sluice-rl/sluice/resources"
	"github.com/sluice-rl/sluice/server/capacity/parentlink"
)

// Limits on the size of a request. A request beyond them is rejected with
// InvalidArgument.
const (
	MaxResourcesPerRequest = 10_000
	MaxIDLength            = 1024
	MaxBandsPerResource    = 1024
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

// Options configures a Service.
type Options struct {
	// ID identifies this server (as a client of its parent, and in logs).
	ID string
	// Address is the address clients should use to reach this server
	// ("host:port"), reported in Discovery and mastership redirects. Empty
	// means the local address of the connection each request came in on
	// (the listener's address), so that Discovery never names a master
	// without its address (doorman-design.md, "Discovery").
	Address string
	// Config is the resource repository (its templates); nil means no
	// templates (every resource is granted what it asks).
	Config *resources.Repository
	// Now returns the current time; nil means time.Now. Tests and the
	// simulator pass a fake clock.
	Now func() time.Time
	// Logger receives structured logs; nil means slog.Default().
	Logger *slog.Logger
	// Registry receives the service's metrics (sluice_server_*); nil
	// registers none.
	Registry prometheus.Registerer
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
	// RequireConfig makes Ready false until a configuration is set (a
	// root started with a configuration file or key).
	RequireConfig bool
	// NoPush turns off pushed leases (sluice.v1.Leases): Watch fails, and
	// capacity that becomes free waits for its takers' next requests, as
	// in Doorman. The zero value pushes.
	NoPush bool
	// Setting names server.Config fields in messages to clients
	// (server.Config.Runtime.Setting; names.Setting): "Leases.DisablePush"
	// for NoPush. nil: the paths themselves.
	Setting func(path string) string
	// Election describes how this node elects its master, for the status
	// page (e.g. "etcd /sluice/root at host:2379 (session TTL 10s)"); ""
	// means "standalone".
	Election string
	// Horizon, when set, is the lease horizon this server keeps as a
	// root master: before it hands out its first lease of more than 0 in
	// each term, a response that would carry one waits for
	// Horizon.KeepHorizon, and fails with Unavailable when it fails (the
	// leases it decided are booked, and never reach their requesters); a
	// pushed lease of more than 0 is not pushed until it has succeeded
	// (its holder keeps what it had, and gets it on its next request).
	// nil keeps none (a standalone node, an intermediate server, which
	// learns the same from its parent).
	//
	// Source: docs/departures.md, "Doorman" (a master that never granted
	// anything holds its successor in learning mode for nothing).
	Horizon Horizon
	// Hooks are the simulator's and the tests' knobs. Its type is
	// internal: only Sluice's own packages can set it; nil means none.
	Hooks *hooks.Server
}

// Service is Doorman's capacity service. It is safe for concurrent use: a
// service-wide RWMutex guards the resource map and mastership, and each
// resource has a mutex of its own, so decisions on different resources
// run in parallel.
type Service struct {
	// Unimplemented answers the methods a newer doorman.proto may add
	// (grpc-go's forward compatibility).
	pb.UnimplementedCapacityServer

	opts    Options
	hooks   hooks.Server // *opts.Hooks, or none
	now     func() time.Time
	log     *slog.Logger
	metrics *metrics

	mu        sync.RWMutex
	cfg       templates // the configuration in force (under mu)
	resources map[string]*resource
	master    masterState // under mu
	// leasesEndBy (Unix nanoseconds; 0: unknown) is when every lease of
	// this node's previous master has ended (SetLeasesEndBy).
	leasesEndBy atomic.Int64
	horizon     *horizonGate // Options.Horizon, once a term
	push        *pushes      // the watchers (Watch)

	watchesEnded bool // EndWatches was called (under mu)

	notes notes // paced warnings

	// minRequest is doorman.MinRequestInterval; the package's tests of
	// tree behaviour on the wall clock shorten it.
	minRequest time.Duration

	parent  *intermediate // nil at the root
	started time.Time     // wall time, for uptime
	hist    history
}

type resource struct {
	mu       sync.Mutex
	store    *lease.Resource
	template *resources.Template // nil when no template matched
	// Intermediate servers: the lease from the parent, and the channel
	// closed when the parent first answers for the resource (nil: nobody
	// waits; see intermediate.waitFirstLeases).
	parent     parentlink.Lease
	firstLease chan struct{}
}

// New returns a service built from opts, complete: master from now on
// (Standalone mastership; an election changes that with SetMastership),
// and at an intermediate server (Options.Parent) with its link to the
// parent, which Run starts. It registers its metrics with
// opts.Registry, which panics on a registry that already holds them (see
// package promreg for a Registerer that records the error instead).
func New(opts Options) *Service {
	s := &Service{
		opts:      opts,
		now:       opts.Now,
		log:       opts.Logger,
		cfg:       templates{opts.Config},
		resources: make(map[string]*resource),
	}
	s.minRequest = pb.MinRequestInterval
	if opts.Hooks != nil {
		s.hooks = *opts.Hooks
		if d := opts.Hooks.MinRequestInterval; d != 0 {
			s.minRequest = max(d, 0)
		}
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.started = time.Now()
	reg := opts.Registry
	if reg == nil {
		reg = prometheus.NewRegistry() // registered nowhere
	}
	s.horizon = newHorizonGate(opts.Horizon)
	s.push = newPushes(s.now, s.horizon) // before the metrics: their gauge reads it
	s.metrics = newMetrics(reg, s)
	s.push.pushed = s.metrics.pushes
	s.master = masterState{isMaster: true, addr: opts.Address, since: s.now()}
	if len(opts.Parent) > 0 {
		s.parent = newIntermediate(s)
	}
	if opts.Hooks != nil {
		// The root has no link: its turn is due never, and it applies no
		// pushed lease.
		opts.Hooks.StepParent = func(context.Context) time.Duration { return 0 }
		opts.Hooks.Push = func([]*v1.PushedLease) {}
		if s.parent != nil {
			opts.Hooks.StepParent = s.parent.link.Step
			opts.Hooks.Push = s.parent.Pushed
		}
	}
	return s
}

// Parent returns the state of the link to the parent; ok is false at the
// root.
func (s *Service) Parent() (st parentlink.Status, ok bool) {
	if s.parent == nil {
		return parentlink.Status{}, false
	}
	return s.parent.link.Status(), true
}

// SetConfig installs a new resource repository. Existing resources take
// the new template's parameters at once; their outstanding leases are kept
// and converge on the clients' next refreshes.
func (s *Service) SetConfig(repo *resources.Repository) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cfg = templates{repo}
	if s.parent != nil {
		return // the parent pushes the parameters down
	}
	for id, r := range s.resources {
		r.mu.Lock()
		t, ok := s.cfg.find(id)
		if ok {
			r.template = &t
		} else {
			r.template = nil
		}
		r.store.SetParams(s.params(paramsFor(r.template)))
		s.push.offer(r)
		r.mu.Unlock()
	}
}

// Config returns the configuration in force (nil if none).
func (s *Service) Config() *resources.Repository {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.cfg.repo
}

// paramsFor resolves a template (nil: no template) into lease parameters.
func paramsFor(t *resources.Template) lease.Params {
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
// the template's: Doorman's minimum time between two requests, and the
// end of the previous master's leases (SetLeasesEndBy), by which learning
// mode ends at the latest.
func (s *Service) params(p lease.Params) lease.Params {
	p.MinRequestInterval = s.minRequest
	if n := s.leasesEndBy.Load(); n != 0 {
		if by := time.Unix(0, n); p.LearningEndsBy.IsZero() || by.Before(p.LearningEndsBy) {
			p.LearningEndsBy = by
		}
	}
	return p
}

// LongestLease is the longest lease this server may grant: its
// configuration's longest lease_length, and at least FallbackLeaseLength
// (a resource no template matches). For an election's lease horizon
// (election.EtcdOptions.LongestLease). Safe for concurrent use.
func (s *Service) LongestLease() time.Duration {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.cfg.longestLease()
}

// SetLeasesEndBy tells a master when every lease its node's previous
// master granted has ended (the election knows: election.Etcd's lease
// horizon). Learning mode exists to learn those leases from the clients'
// reports, so it ends then at the latest, for every resource: at once when
// by is past (the previous master's leases have all lapsed, as after a
// node down for longer than a lease). A zero by changes nothing. Winning
// mastership forgets the previous term's value. Safe for concurrent use.
//
// Source: doorman-design.md, "Learning mode" (its purpose);
// docs/departures.md, "Doorman" (a root has no parent to tell it when its
// predecessor's leases end).
func (s *Service) SetLeasesEndBy(by time.Time) {
	if by.IsZero() {
		return
	}
	s.leasesEndBy.Store(by.UnixNano())
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, r := range s.resources {
		r.mu.Lock()
		r.store.SetParams(s.params(r.store.Params()))
		r.mu.Unlock()
	}
}

// resource returns the state of resource id, creating it if needed, or
// nil if this server is not the master. The caller holds no lock.
func (s *Service) resource(id string) *resource {
	s.mu.RLock()
	r, ok := s.resources[id]
	master := s.master.isMaster
	s.mu.RUnlock()
	if ok || !master {
		return r
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.master.isMaster {
		return nil
	}
	if r, ok := s.resources[id]; ok {
		return r
	}
	r = &resource{}
	switch {
	case s.parent != nil:
		r.store = lease.NewResource(id, s.params(r.parent.Params(fallback)), s.master.since)
	default:
		if t, ok := s.cfg.find(id); ok {
			r.template = &t
		} else {
			s.metrics.unmatched.Inc()
			if s.notes.once("unmatched", id) {
				s.log.Warn("resource matches no template; granting what clients ask (NO_ALGORITHM)", "resource", id)
			}
		}
		r.store = lease.NewResource(id, s.params(paramsFor(r.template)), s.master.since)
	}
	s.resources[id] = r
	return r
}

// resourceList returns the resources this server holds state for, ids[i]
// naming rs[i], copied under the server's read lock (the caller then locks
// each resource on its own).
func (s *Service) resourceList() (ids []string, rs []*resource) {
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

// Sweep drops expired leases on every resource and forgets resources that
// hold no lease (their state is rebuilt on the next request, so memory
// stays bounded by the live leases; an intermediate server releases them at
// its parent), and records a history sample per resource for the status
// page. Run it periodically (Run does, every second).
func (s *Service) Sweep() {
	now := s.now()
	var dropped []string
	s.mu.Lock()
	for id, r := range s.resources {
		r.mu.Lock()
		r.store.Cleanup(now)
		s.push.offer(r)
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
		s.parent.link.Release(dropped)
	}
	ids, rs := s.resourceList()
	s.hist.sample(now, ids, rs)
}

// Run sweeps expired leases every interval until ctx is done; on an
// intermediate server it also runs the link to the parent (unless
// hooks.Server.ManualParent: the caller drives it).
func (s *Service) Run(ctx context.Context, interval time.Duration) {
	if s.parent != nil && !s.hooks.ManualParent {
		done := make(chan struct{})
		defer func() { <-done }()
		go func() {
			defer close(done)
			s.parent.link.Run(ctx)
		}()
	}
	refresh.Every(ctx, interval, func(context.Context) { s.Sweep() })
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
func (s *Service) Status(id string) (ResourceStatus, error) {
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
	if s.parent != nil && r.parent.OK {
		st.ParentExpiry = r.parent.Expiry
	}
	return st, nil
}

// ErrUnknownResource is returned by Status for a resource the server holds
// no state for.
var ErrUnknownResource = errors.New("unknown resource")
