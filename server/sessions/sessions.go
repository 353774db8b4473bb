// Package sessions is Charon's copy-limited resources on sluice.v1.Limits:
// sessions (OpenSession, KeepAlive, CloseSession) and holds (Reserve,
// Release, Transfer, Seize) over a copies.Engine, the cap on open
// sessions, the forwarding of a fleet's requests to a session's home
// server, and the fleet's view for the status pages and metrics.
//
// Its handlers have grpc-go's shape (func(ctx, *Req) (*Resp, error));
// package server registers them with grpc-go and adapts them to Connect.
package sessions

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	v1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/internal/names"
	"github.com/sluice-rl/sluice/internal/tracing"
	"github.com/sluice-rl/sluice/limits/copies"
	"github.com/sluice-rl/sluice/server/internal/authz"
	"github.com/sluice-rl/sluice/server/status/view"
)

// Options configures a Service.
type Options struct {
	// Address is this server's advertised address ("host:port"): a
	// forwarded request names it.
	Address string
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
	// Logger receives structured logs; nil means slog.Default().
	Logger *slog.Logger
	// Registry receives the sluice_copies_* and sluice_fleet_* metrics;
	// nil registers none.
	Registry prometheus.Registerer
	// Config is the copy-limited resources' configuration (nil: none;
	// SetConfig changes it). An invalid one is New's error.
	Config *copies.Config
	// Log, when set, is the copy log shared with the other servers using
	// the same Redis (limits/redis.CopyLog): the engine asks it for every
	// decision, and Run writes this server's contributions back every
	// reconcileEvery when they are in doubt. The engine starts fenced when
	// it is set: the fleet membership (package fleet) unfences it once it
	// has an epoch. nil: the counts are this server's alone.
	Log copies.Log
	// MaxSessions caps the sessions this server holds open at once
	// (OpenSession): at the cap, OpenSession answers ResourceExhausted,
	// counted in sluice_copies_sessions_refused_total, until a session
	// ends (closed, its keep-alive stream broken, or its ttl passed and
	// Run's next expiry ended it). Each session costs memory until it
	// ends, so without a cap a misbehaving client could open sessions
	// until the process runs out of memory. A fleet's sessions count only
	// on their home. 0 means DefaultMaxSessions; negative means no cap.
	MaxSessions int
	// Setting names server.Config fields in messages and metric help
	// (server.Config.Runtime.Setting; names.Setting): "Sessions.Max"
	// for MaxSessions. nil: the paths themselves.
	Setting func(path string) string
	// JoinFleet, when set with Log, makes this server a member of the
	// fleet sharing Log (package fleet): New calls it once with the
	// service's copies engine (which the membership fences and unfences)
	// and keeps the member it returns, whose status the buckets page and
	// the sluice_fleet_* metrics show and which routes the requests of
	// sessions homed on other servers there. Its error is New's. nil: no
	// fleet.
	JoinFleet func(eng *copies.Engine) (FleetMember, error)
	// ForwardCreds are the transport credentials of requests forwarded
	// to sessions' homes (nil: plaintext).
	ForwardCreds credentials.TransportCredentials
	// ForwardDialOptions are further options of the connections to
	// sessions' homes (the server's tracing: a forwarded request
	// continues the request's trace); nil: none.
	ForwardDialOptions []grpc.DialOption
}

// Service serves the copy-limited RPCs of sluice.v1.Limits. It is safe
// for concurrent use.
type Service struct {
	opts Options
	now  func() time.Time
	log  *slog.Logger

	copies    *copies.Engine
	copyNames namesOf       // resources the configuration names
	fleet     FleetMember   // nil without Options.JoinFleet
	router    *router       // forwards other servers' sessions; nil without a fleet
	forwarded atomic.Uint64 // requests forwarded to sessions' homes
	openMu    sync.Mutex    // serializes OpenSession's check of MaxSessions and the open
	refused   atomic.Uint64 // sessions refused at MaxSessions
}

// New returns the service. Errors: the configuration is invalid
// (copies.Config.Validate's error), the engine could not be built, or
// opts.Registry already holds one of the service's metrics (the error
// names it).
func New(opts Options) (*Service, error) {
	s := &Service{opts: opts, now: opts.Now, log: opts.Logger}
	if s.now == nil {
		s.now = time.Now
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	eng, err := copies.New(nil, copies.Options{Log: opts.Log})
	if err != nil {
		return nil, fmt.Errorf("copy-limited resources: %w", err)
	}
	s.copies = eng
	if opts.Log != nil {
		s.copies.Fence()
	}
	s.copyNames.Store(&map[string]bool{})
	if err := s.SetConfig(opts.Config); err != nil {
		return nil, fmt.Errorf("copy-limited resources: %w", err)
	}
	if opts.JoinFleet != nil && opts.Log != nil {
		if s.fleet, err = opts.JoinFleet(eng); err != nil {
			return nil, fmt.Errorf("copy-limited resources: joining the fleet: %w", err)
		}
		creds := opts.ForwardCreds
		if creds == nil {
			creds = insecure.NewCredentials()
		}
		s.router = &router{r: s.fleet, dial: append([]grpc.DialOption{grpc.WithTransportCredentials(creds)}, opts.ForwardDialOptions...),
			conns: map[string]*grpc.ClientConn{}}
	}
	if opts.Registry != nil {
		if err := s.registerMetrics(opts.Registry); err != nil {
			return nil, fmt.Errorf("copy-limited resources: %w", err)
		}
		if err := s.registerLearning(opts.Registry); err != nil {
			return nil, fmt.Errorf("copy-limited resources: %w", err)
		}
	}
	return s, nil
}

// Run ends the sessions and staged transfers whose ttl passed every
// expireEvery and, with a shared copy log, writes this server's
// contributions back and checks the learning mode of its resources every
// reconcileEvery (every learnEvery while Ready would not say ready),
// until ctx is done.
func (s *Service) Run(ctx context.Context) {
	sessions := time.NewTicker(expireEvery)
	defer sessions.Stop()
	var reconcile <-chan time.Time
	var r *time.Timer
	if s.opts.Log != nil {
		r = time.NewTimer(s.reconcileAfter())
		defer r.Stop()
		reconcile = r.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-sessions.C:
			s.expireSessions(ctx)
		case <-reconcile:
			s.reconcileCopies(ctx)
			r.Reset(s.reconcileAfter())
		}
	}
}

// Charon's copy-limited resources on sluice.v1.Limits: sessions (OpenSession,
// KeepAlive, CloseSession) and holds (Reserve, Release, Transfer, Seize),
// over the server's copies.Engine. Every hold belongs to a session; a
// session ends when its client closes it, when the KeepAlive stream that
// kept it alive breaks, or when its ttl passes without a keep-alive (Run
// expires sessions every expireEvery), and then each of its holds is
// released exactly once.
//
// Errors as the paper classes them: a malformed request is InvalidArgument,
// an unknown resource, session or transfer NotFound, a request of the wrong
// kind (reserving a rate-limited resource, or Allow on a copy-limited one)
// and releasing what is not held FailedPrecondition; over limit is a normal
// answer (REJECTED_OVER_LIMIT); a server fault is Internal.
//
// Source: charon-paper.md, sections 2.2, 3.1, 4.2 and 4.3.1.

// expireEvery is how often Run ends the sessions and transfers whose ttl
// passed: the most a hold outlives its session's ttl.
const expireEvery = 250 * time.Millisecond

// DefaultMaxSessions is the cap on open sessions when Options.MaxSessions
// is 0: far above what a server's clients hold (a session per client
// process, typically), and a few tens of megabytes of hold sets at most.
const DefaultMaxSessions = 100_000

// maxSessions returns the cap on open sessions; 0 means none.
func (s *Service) maxSessions() int {
	switch n := s.opts.MaxSessions; {
	case n == 0:
		return DefaultMaxSessions
	case n < 0:
		return 0
	default:
		return n
	}
}

// Engine returns the engine of copy-limited resources.
func (s *Service) Engine() *copies.Engine { return s.copies }

// SetConfig replaces the copy-limited resources' configuration (nil:
// none). On error (copies.Config.Validate's) the old one stays. Every live
// hold stays, counted; new limits apply to new reserves.
func (s *Service) SetConfig(cfg *copies.Config) error {
	if cfg == nil {
		cfg = &copies.Config{}
	}
	if err := s.copies.SetConfig(cfg); err != nil {
		return err
	}
	storeNames(&s.copyNames, cfg.Resources)
	return nil
}

// CopyLimited reports whether resource is configured as copy-limited.
func (s *Service) CopyLimited(resource string) bool { return (*s.copyNames.Load())[resource] }

// FleetMember is this server's membership of the fleet sharing
// copy-limited resources (package fleet's Member, through the server): its
// status, and the homes of sessions.
type FleetMember interface {
	SessionRouter
	// FleetStatus returns the membership's status now.
	FleetStatus() view.FleetStatus
}

// reconcileEvery is how often Run, with a shared copy log, checks that
// this server's contributions are there and writes back those in doubt
// (copies.Engine.Reconcile): the most the counts stay wrong after Redis
// lost its data, or after a fail-open reserve. It is well under a
// session's keep-alive period (a third of the 10 s default ttl).
const reconcileEvery = time.Second

// expireSessions ends the sessions and transfers whose ttl passed.
func (s *Service) expireSessions(ctx context.Context) {
	for _, e := range s.copies.Expire(ctx, s.now()) {
		s.log.Debug("session ended", "session", e.Session, "transfer", e.Transfer, "reason", e.Reason, "holds_released", len(e.Released))
	}
}

// reconcileCopies writes this server's contributions back to the shared
// copy log where they are in doubt.
func (s *Service) reconcileCopies(ctx context.Context) {
	done, err := s.copies.Reconcile(ctx)
	if len(done) > 0 {
		s.log.Info("copy log: this server's contributions written back", "resources", done)
	}
	if err != nil {
		s.log.Warn("copy log: reconcile failed; retrying", "err", err)
	}
}

// copiesError maps an engine error to the gRPC status of its class.
func copiesError(err error) error {
	code := codes.Internal
	switch copies.ClassOf(err) {
	case copies.ClassInvalidArgument:
		code = codes.InvalidArgument
	case copies.ClassNotFound:
		code = codes.NotFound
	case copies.ClassFailedPrecondition:
		code = codes.FailedPrecondition
	case copies.ClassUnavailable:
		code = codes.Unavailable
	}
	return status.Error(code, err.Error())
}

// duration reads an optional Duration field: unset is 0; a malformed or
// negative one is InvalidArgument naming field.
func duration(field string, d *durationpb.Duration) (time.Duration, error) {
	if d == nil {
		return 0, nil
	}
	if err := d.CheckValid(); err != nil {
		return 0, status.Errorf(codes.InvalidArgument, "%s: %v", field, err)
	}
	if d.AsDuration() < 0 {
		return 0, status.Errorf(codes.InvalidArgument, "%s: negative", field)
	}
	return d.AsDuration(), nil
}

// OpenSession opens a session with the requested ttl (unset: 10 s; held
// to 1 s … 1 h). At Options.MaxSessions open sessions it opens none and
// answers ResourceExhausted (sessions whose ttl passed count until Run's
// next expiry ends them, within expireEvery). A session is opened on the
// server asked, its home: OpenSession is never forwarded.
func (s *Service) OpenSession(ctx context.Context, req *v1.OpenSessionRequest) (*v1.OpenSessionResponse, error) {
	ttl, err := duration("ttl", req.GetTtl())
	if err != nil {
		return nil, err
	}
	owner := authz.Who(ctx)
	if n := s.maxSessions(); n > 0 {
		// Only opens add sessions: serializing them makes the check and
		// the open one step, while sessions that end only free slots.
		s.openMu.Lock()
		defer s.openMu.Unlock()
		if s.copies.Stats().Sessions >= n {
			s.refused.Add(1)
			return nil, status.Errorf(codes.ResourceExhausted,
				"this server holds its maximum of %d open sessions (%s): close sessions, or retry when some have ended",
				n, names.Setting(s.opts.Setting, "Sessions.Max"))
		}
	}
	sess, err := s.copies.OpenOwned(s.now(), ttl, owner)
	if err != nil {
		return nil, copiesError(err)
	}
	return &v1.OpenSessionResponse{SessionId: sess.ID, Ttl: durationpb.New(sess.TTL)}, nil
}

// CloseSession ends a session and releases its holds.
func (s *Service) CloseSession(ctx context.Context, req *v1.CloseSessionRequest) (*v1.CloseSessionResponse, error) {
	if resp, done, err := forward(s, ctx, req.GetSessionId(), req, v1.LimitsClient.CloseSession); done {
		return resp, err
	}
	if _, err := s.copies.Close(ctx, s.now(), req.GetSessionId()); err != nil {
		return nil, copiesError(err)
	}
	return &v1.CloseSessionResponse{}, nil
}

// KeepAlive renews the session of every message and answers each with
// its ttl; when the stream ends — the client closed it, or its connection
// broke — the sessions it kept alive end (a client that wants its session
// to outlive the stream opens another stream first).
func (s *Service) KeepAlive(stream grpc.BidiStreamingServer[v1.KeepAliveRequest, v1.KeepAliveResponse]) error {
	return s.KeepAliveStream(stream.Context(), stream.Recv, stream.Send)
}

// KeepAliveStream is KeepAlive over any stream (Connect's bidi stream: recv
// is its Receive, send its Send).
func (s *Service) KeepAliveStream(ctx context.Context, recv func() (*v1.KeepAliveRequest, error), send func(*v1.KeepAliveResponse) error) error {
	kept := map[string]bool{}
	ups := &upstreams{s: s, ctx: ctx, streams: map[string]grpc.BidiStreamingClient[v1.KeepAliveRequest, v1.KeepAliveResponse]{}}
	defer func() {
		ups.close()
		now := s.now()
		// The stream's context has ended: the releases are cleanup, bounded
		// by the copy log's own timeout.
		cctx := context.WithoutCancel(ctx)
		for id := range kept {
			if _, err := s.copies.Close(cctx, now, id); err == nil {
				s.log.Debug("session ended with its keep-alive stream", "session", id)
			}
		}
	}()
	for {
		req, err := recv()
		if err != nil {
			if errors.Is(err, io.EOF) || ctx.Err() != nil {
				return nil
			}
			return err
		}
		if resp, done, err := ups.keepAlive(req); done {
			if err != nil {
				return err
			}
			if err := send(resp); err != nil {
				return err
			}
			continue
		}
		sess, err := s.copies.KeepAlive(s.now(), req.GetSessionId())
		if err != nil {
			return copiesError(err)
		}
		kept[sess.ID] = true
		if err := send(&v1.KeepAliveResponse{SessionId: sess.ID, Ttl: durationpb.New(sess.TTL)}); err != nil {
			return err
		}
	}
}

// Reserve holds copies for a domain in a session.
func (s *Service) Reserve(ctx context.Context, req *v1.ReserveRequest) (*v1.ReserveResponse, error) {
	if resp, done, err := forward(s, ctx, req.GetSessionId(), req, v1.LimitsClient.Reserve); done {
		if err == nil {
			tracing.Annotate(ctx, req.GetResource(), req.GetDomain(), resp.GetStatus().String(), resp.GetDegraded())
		}
		return resp, err
	}
	if _, err := duration("max_wait", req.GetMaxWait()); err != nil {
		return nil, err
	}
	n, lo := req.GetCopies(), req.GetMinCopies()
	if n == 0 {
		n = 1
	}
	if lo == 0 {
		lo = n
	}
	r, err := s.copies.Reserve(ctx, s.now(), req.GetSessionId(), req.GetResource(), req.GetDomain(), n, lo)
	if err != nil {
		return nil, copiesError(err)
	}
	resp := &v1.ReserveResponse{
		Status:      v1.ReserveResponse_OK,
		Granted:     r.Granted,
		DomainLimit: r.DomainLimit,
		DomainHolds: r.DomainHolds,
		GlobalHolds: r.GlobalHolds,
		Unlimited:   r.Unlimited,
		Degraded:    r.Degraded,
	}
	if r.Granted == 0 {
		resp.Status = v1.ReserveResponse_REJECTED_OVER_LIMIT
	}
	tracing.Annotate(ctx, req.GetResource(), req.GetDomain(), resp.Status.String(), r.Degraded)
	if r.GlobalLimit != copies.Unbounded {
		g := r.GlobalLimit
		resp.GlobalLimit = &g
	}
	for _, g := range r.Groups {
		resp.Groups = append(resp.Groups, &v1.GroupHolds{Name: g.Name, Limit: g.Limit, Holds: g.Holds})
	}
	return resp, nil
}

// Release gives back copies the session holds.
func (s *Service) Release(ctx context.Context, req *v1.ReleaseRequest) (*v1.ReleaseResponse, error) {
	if resp, done, err := forward(s, ctx, req.GetSessionId(), req, v1.LimitsClient.Release); done {
		return resp, err
	}
	if err := s.copies.Release(ctx, s.now(), req.GetSessionId(), req.GetResource(), req.GetDomain(), req.GetCopies(), req.GetGroups()); err != nil {
		return nil, copiesError(err)
	}
	return &v1.ReleaseResponse{}, nil
}

// Transfer stages copies for another session to Seize.
func (s *Service) Transfer(ctx context.Context, req *v1.TransferRequest) (*v1.TransferResponse, error) {
	if resp, done, err := forward(s, ctx, req.GetSessionId(), req, v1.LimitsClient.Transfer); done {
		return resp, err
	}
	ttl, err := duration("ttl", req.GetTtl())
	if err != nil {
		return nil, err
	}
	st, err := s.copies.Transfer(ctx, s.now(), req.GetSessionId(), req.GetResource(), req.GetDomain(), req.GetCopies(), req.GetGroups(), ttl)
	if err != nil {
		return nil, copiesError(err)
	}
	return &v1.TransferResponse{TransferId: st.ID}, nil
}

// Seize takes a staged transfer into the session, once.
func (s *Service) Seize(ctx context.Context, req *v1.SeizeRequest) (*v1.SeizeResponse, error) {
	if resp, done, err := forward(s, ctx, req.GetSessionId(), req, v1.LimitsClient.Seize); done {
		return resp, err
	}
	sz, err := s.copies.Seize(ctx, s.now(), req.GetSessionId(), req.GetTransferId())
	if err != nil {
		return nil, copiesError(err)
	}
	return &v1.SeizeResponse{Resource: sz.Resource, Domain: sz.Domain, Groups: sz.Groups, Copies: sz.Copies}, nil
}

// Owner returns the identity that opened session id if it is open on
// this server ("" when identities were off), for the server's
// authorization (a session belongs to the identity that opened it:
// docs/identity.md). Safe for concurrent use.
func (s *Service) Owner(id string) (string, bool) { return s.copies.Owner(id) }

// namesOf is a set of resource names, replaced whole on reconfiguration.
type namesOf = atomic.Pointer[map[string]bool]

// storeNames replaces set with the keys of m.
func storeNames[V any](set *namesOf, m map[string]V) {
	names := make(map[string]bool, len(m))
	for name := range m {
		names[name] = true
	}
	set.Store(&names)
}

// Snapshot returns the copy log as this server sees it: holds per
// resource, domain, group and session, and the staged transfers (the
// status pages' view; copies.Engine.Snapshot).
func (s *Service) Snapshot() copies.Snapshot { return s.copies.Snapshot() }

// Stats returns the engine's counters (copies.Engine.Stats).
func (s *Service) Stats() copies.Stats { return s.copies.Stats() }

// Fenced reports whether the engine serves no holds now (a fleet member
// without an epoch).
func (s *Service) Fenced() bool { return s.copies.Fenced() }
