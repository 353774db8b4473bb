package server

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	v1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/limits/copies"
)

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
func (s *Server) maxSessions() int {
	switch n := s.opts.MaxSessions; {
	case n == 0:
		return DefaultMaxSessions
	case n < 0:
		return 0
	default:
		return n
	}
}

// Copies returns the server's engine of copy-limited resources.
func (s *Server) Copies() *copies.Engine { return s.copies }

// SetCopies replaces the copy-limited resources' configuration (nil:
// none). On error (copies.Config.Validate's) the old one stays. Every live
// hold stays, counted; new limits apply to new reserves.
func (s *Server) SetCopies(cfg *copies.Config) error {
	if cfg == nil {
		cfg = &copies.Config{}
	}
	if err := s.copies.SetConfig(cfg); err != nil {
		return err
	}
	storeNames(&s.copyNames, cfg.Resources)
	return nil
}

// isCopyLimited reports whether resource is configured as copy-limited.
func (s *Server) isCopyLimited(resource string) bool { return (*s.copyNames.Load())[resource] }

// FleetStatus is this server's membership of the fleet sharing
// copy-limited resources on Redis (package fleet's Status): its epoch (""
// while it has none), whether it leads the fleet, and how many dead
// epochs it buried as leader.
type FleetStatus struct {
	Epoch  string
	Leader bool
	Buried int
}

// SetFleet gives the server its fleet membership's status, for the
// buckets page (/debug/status/buckets) and the sluice_copies_* metrics.
// Safe for concurrent use.
func (s *Server) SetFleet(status func() FleetStatus) { s.fleet.Store(&status) }

// reconcileEvery is how often Run, with a shared copy log, checks that
// this server's contributions are there and writes back those in doubt
// (copies.Engine.Reconcile): the most the counts stay wrong after Redis
// lost its data, or after a fail-open reserve. It is well under a
// session's keep-alive period (a third of the 10 s default ttl).
const reconcileEvery = time.Second

// expireSessions ends the sessions and transfers whose ttl passed.
func (s *Server) expireSessions(ctx context.Context) {
	for _, e := range s.copies.Expire(ctx, s.now()) {
		s.log.Debug("session ended", "session", e.Session, "transfer", e.Transfer, "reason", e.Reason, "holds_released", len(e.Released))
	}
}

// reconcileCopies writes this server's contributions back to the shared
// copy log where they are in doubt.
func (s *Server) reconcileCopies(ctx context.Context) {
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
func (a LimitsAPI) OpenSession(_ context.Context, req *v1.OpenSessionRequest) (*v1.OpenSessionResponse, error) {
	ttl, err := duration("ttl", req.GetTtl())
	if err != nil {
		return nil, err
	}
	if n := a.s.maxSessions(); n > 0 {
		// Only opens add sessions: serializing them makes the check and
		// the open one step, while sessions that end only free slots.
		a.s.openMu.Lock()
		defer a.s.openMu.Unlock()
		if a.s.copies.Stats().Sessions >= n {
			a.s.refused.Add(1)
			return nil, status.Errorf(codes.ResourceExhausted,
				"this server holds its maximum of %d open sessions (sluice server --max-sessions, Options.MaxSessions): close sessions, or retry when some have ended", n)
		}
	}
	sess, err := a.s.copies.Open(a.s.now(), ttl)
	if err != nil {
		return nil, copiesError(err)
	}
	return &v1.OpenSessionResponse{SessionId: sess.ID, Ttl: durationpb.New(sess.TTL)}, nil
}

// CloseSession ends a session and releases its holds.
func (a LimitsAPI) CloseSession(ctx context.Context, req *v1.CloseSessionRequest) (*v1.CloseSessionResponse, error) {
	if resp, done, err := forward(a.s, ctx, req.GetSessionId(), req, v1.LimitsClient.CloseSession); done {
		return resp, err
	}
	if _, err := a.s.copies.Close(ctx, a.s.now(), req.GetSessionId()); err != nil {
		return nil, copiesError(err)
	}
	return &v1.CloseSessionResponse{}, nil
}

// KeepAlive renews the session of every message and answers each with
// its ttl; when the stream ends — the client closed it, or its connection
// broke — the sessions it kept alive end (a client that wants its session
// to outlive the stream opens another stream first).
func (a LimitsAPI) KeepAlive(stream grpc.BidiStreamingServer[v1.KeepAliveRequest, v1.KeepAliveResponse]) error {
	return a.keepAlive(stream.Context(), stream.Recv, stream.Send)
}

// keepAlive is KeepAlive over any stream.
func (a LimitsAPI) keepAlive(ctx context.Context, recv func() (*v1.KeepAliveRequest, error), send func(*v1.KeepAliveResponse) error) error {
	kept := map[string]bool{}
	ups := &upstreams{s: a.s, ctx: ctx, streams: map[string]grpc.BidiStreamingClient[v1.KeepAliveRequest, v1.KeepAliveResponse]{}}
	defer func() {
		ups.close()
		now := a.s.now()
		// The stream's context has ended: the releases are cleanup, bounded
		// by the copy log's own timeout.
		cctx := context.WithoutCancel(ctx)
		for id := range kept {
			if _, err := a.s.copies.Close(cctx, now, id); err == nil {
				a.s.log.Debug("session ended with its keep-alive stream", "session", id)
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
		sess, err := a.s.copies.KeepAlive(a.s.now(), req.GetSessionId())
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
func (a LimitsAPI) Reserve(ctx context.Context, req *v1.ReserveRequest) (*v1.ReserveResponse, error) {
	if resp, done, err := forward(a.s, ctx, req.GetSessionId(), req, v1.LimitsClient.Reserve); done {
		return resp, err
	}
	if _, err := duration("max_wait", req.GetMaxWait()); err != nil {
		return nil, err
	}
	if a.s.isRateLimited(req.GetResource()) {
		return nil, copiesError(copies.WrongKind(req.GetResource(), "rate-limited"))
	}
	n, lo := req.GetCopies(), req.GetMinCopies()
	if n == 0 {
		n = 1
	}
	if lo == 0 {
		lo = n
	}
	r, err := a.s.copies.Reserve(ctx, a.s.now(), req.GetSessionId(), req.GetResource(), req.GetDomain(), n, lo)
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
func (a LimitsAPI) Release(ctx context.Context, req *v1.ReleaseRequest) (*v1.ReleaseResponse, error) {
	if resp, done, err := forward(a.s, ctx, req.GetSessionId(), req, v1.LimitsClient.Release); done {
		return resp, err
	}
	if err := a.s.copies.Release(ctx, a.s.now(), req.GetSessionId(), req.GetResource(), req.GetDomain(), req.GetCopies(), req.GetGroups()); err != nil {
		return nil, copiesError(err)
	}
	return &v1.ReleaseResponse{}, nil
}

// Transfer stages copies for another session to Seize.
func (a LimitsAPI) Transfer(ctx context.Context, req *v1.TransferRequest) (*v1.TransferResponse, error) {
	if resp, done, err := forward(a.s, ctx, req.GetSessionId(), req, v1.LimitsClient.Transfer); done {
		return resp, err
	}
	ttl, err := duration("ttl", req.GetTtl())
	if err != nil {
		return nil, err
	}
	st, err := a.s.copies.Transfer(ctx, a.s.now(), req.GetSessionId(), req.GetResource(), req.GetDomain(), req.GetCopies(), req.GetGroups(), ttl)
	if err != nil {
		return nil, copiesError(err)
	}
	return &v1.TransferResponse{TransferId: st.ID}, nil
}

// Seize takes a staged transfer into the session, once.
func (a LimitsAPI) Seize(ctx context.Context, req *v1.SeizeRequest) (*v1.SeizeResponse, error) {
	if resp, done, err := forward(a.s, ctx, req.GetSessionId(), req, v1.LimitsClient.Seize); done {
		return resp, err
	}
	sz, err := a.s.copies.Seize(ctx, a.s.now(), req.GetSessionId(), req.GetTransferId())
	if err != nil {
		return nil, copiesError(err)
	}
	return &v1.SeizeResponse{Resource: sz.Resource, Domain: sz.Domain, Groups: sz.Groups, Copies: sz.Copies}, nil
}

// The Connect side of the same methods.

func (c limitsConnect) OpenSession(ctx context.Context, req *connect.Request[v1.OpenSessionRequest]) (*connect.Response[v1.OpenSessionResponse], error) {
	return connectUnary(c.api.OpenSession(ctx, req.Msg))
}

func (c limitsConnect) CloseSession(ctx context.Context, req *connect.Request[v1.CloseSessionRequest]) (*connect.Response[v1.CloseSessionResponse], error) {
	return connectUnary(c.api.CloseSession(ctx, req.Msg))
}

func (c limitsConnect) KeepAlive(ctx context.Context, stream *connect.BidiStream[v1.KeepAliveRequest, v1.KeepAliveResponse]) error {
	return connectError(c.api.keepAlive(ctx, stream.Receive, stream.Send))
}

func (c limitsConnect) Reserve(ctx context.Context, req *connect.Request[v1.ReserveRequest]) (*connect.Response[v1.ReserveResponse], error) {
	return connectUnary(c.api.Reserve(ctx, req.Msg))
}

func (c limitsConnect) Release(ctx context.Context, req *connect.Request[v1.ReleaseRequest]) (*connect.Response[v1.ReleaseResponse], error) {
	return connectUnary(c.api.Release(ctx, req.Msg))
}

func (c limitsConnect) Transfer(ctx context.Context, req *connect.Request[v1.TransferRequest]) (*connect.Response[v1.TransferResponse], error) {
	return connectUnary(c.api.Transfer(ctx, req.Msg))
}

func (c limitsConnect) Seize(ctx context.Context, req *connect.Request[v1.SeizeRequest]) (*connect.Response[v1.SeizeResponse], error) {
	return connectUnary(c.api.Seize(ctx, req.Msg))
}

// connectUnary wraps a grpc-go style answer for Connect.
func connectUnary[T any](resp *T, err error) (*connect.Response[T], error) {
	if err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(resp), nil
}

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
