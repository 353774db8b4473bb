package sessions

import (
	"context"
	"errors"
	"io"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	v1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/server/internal/authz"
)

// Sessions of a fleet (copy-limited resources shared on Redis) live in the
// memory of the server that opened them, their home, which names them
// after its epoch (copies.SessionEpoch). Any server answers any request:
// one for a session homed elsewhere is forwarded to its home over gRPC,
// once (a forwarded request carries forwardedKey and is never forwarded
// again), and the home's answer, or error, is the answer. A KeepAlive
// stream's messages for sessions homed elsewhere go over one upstream
// stream per home, opened with the first such message and closed with the
// client's stream, so a broken client stream still ends its sessions on
// their home.
//
// With identities, a session belongs to the identity that opened it,
// which its home records (copies.Engine.OpenOwned) and the server's
// authorization checks on every request for it (package
// server/internal/authz, from Service.Owner): a forwarding server says
// whose request it forwards (authz.ForwardedIdentityKey, the identity its
// client's certificate names),
// and the home believes it only from a caller whose own certificate names
// a fleet server (identity.Authorizer.Forwarded); from anyone else the
// request is refused.
//
// Source: charon-paper.md, section 4.2 (a limiting server keeps the hold
// sets of its clients' sessions); docs/charon.md, "The fleet" (any server
// answers any request); docs/identity.md, "A fleet's forwarded requests".

// SessionRouter finds the home of a session (package fleet's Member).
type SessionRouter interface {
	// Home returns the advertised address of the server holding session
	// id, or here true when it is this server. An error when no live
	// server holds it.
	Home(ctx context.Context, id string) (addr string, here bool, err error)
	// Forget drops what Home remembers of id's home (it did not answer).
	Forget(id string)
}

// forwardedKey marks a forwarded request (gRPC metadata).
const forwardedKey = "sluice-forwarded"

// router forwards requests to sessions' homes.
type router struct {
	r    SessionRouter
	dial []grpc.DialOption // the credentials, and ForwardDialOptions

	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

// client returns a Limits client of addr (connections are cached for the
// server's life: the fleet is a handful of servers).
func (rt *router) client(addr string) (v1.LimitsClient, error) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if c := rt.conns[addr]; c != nil {
		return v1.NewLimitsClient(c), nil
	}
	c, err := grpc.NewClient(addr, rt.dial...)
	if err != nil {
		return nil, err
	}
	rt.conns[addr] = c
	return v1.NewLimitsClient(c), nil
}

// home returns a client of session id's home, its address and the context
// to forward with, or a nil client when the request is to be answered here
// (no fleet, the session is homed here, or the request was forwarded
// already).
func (s *Service) home(ctx context.Context, id string) (v1.LimitsClient, string, context.Context, error) {
	rt := s.router
	if rt == nil {
		return nil, "", nil, nil
	}
	if md, ok := metadata.FromIncomingContext(ctx); ok && len(md.Get(forwardedKey)) > 0 {
		return nil, "", nil, nil
	}
	addr, here, err := rt.r.Home(ctx, id)
	switch {
	case err != nil:
		return nil, "", nil, status.Errorf(codes.NotFound, "session_id: %v", err)
	case here:
		return nil, "", nil, nil
	}
	kv := []string{forwardedKey, s.opts.Address}
	if who := authz.Who(ctx); who != "" {
		// The home checks that the session is the client's: it trusts the
		// identity said here because this server's own certificate is a
		// fleet server's (identity.Authorizer.Forwarded).
		kv = append(kv, authz.ForwardedIdentityKey, who)
	}
	c, err := rt.client(addr)
	if err != nil {
		return nil, "", nil, status.Errorf(codes.Unavailable, "session_id: its server %s: %v", addr, err)
	}
	s.forwarded.Add(1)
	return c, addr, metadata.AppendToOutgoingContext(ctx, kv...), nil
}

// forward answers req at session id's home if it is another server: done
// reports whether it did (then resp, err are the home's answer).
func forward[Req, Resp any](s *Service, ctx context.Context, id string, req Req,
	call func(v1.LimitsClient, context.Context, Req, ...grpc.CallOption) (Resp, error)) (resp Resp, done bool, err error) {
	c, _, fctx, err := s.home(ctx, id)
	if err != nil || c == nil {
		return resp, err != nil, err
	}
	resp, err = call(c, fctx, req)
	if status.Code(err) == codes.Unavailable {
		s.router.r.Forget(id)
	}
	return resp, true, err
}

// upstreams are the KeepAlive streams one client stream opened to other
// servers, by address.
type upstreams struct {
	s       *Service
	ctx     context.Context
	streams map[string]grpc.BidiStreamingClient[v1.KeepAliveRequest, v1.KeepAliveResponse]
}

// keepAlive forwards req to its session's home when it is another server:
// done reports whether it did, with the home's answer.
func (u *upstreams) keepAlive(req *v1.KeepAliveRequest) (*v1.KeepAliveResponse, bool, error) {
	c, addr, fctx, err := u.s.home(u.ctx, req.GetSessionId())
	if err != nil || c == nil {
		return nil, err != nil, err
	}
	up := u.streams[addr]
	if up == nil {
		if up, err = c.KeepAlive(fctx); err != nil {
			return nil, true, err
		}
		u.streams[addr] = up
	}
	if err := up.Send(req); err != nil {
		_, err = up.Recv() // the stream's status says why
		return nil, true, upstreamErr(err)
	}
	resp, err := up.Recv()
	return resp, true, upstreamErr(err)
}

// upstreamErr is an upstream stream's end as this stream's error.
func upstreamErr(err error) error {
	if errors.Is(err, io.EOF) {
		return status.Error(codes.Unavailable, "session_id: its server ended the keep-alive stream")
	}
	return err
}

// close ends every upstream stream (their homes end the sessions they
// kept alive, as for a broken client stream).
func (u *upstreams) close() {
	for _, up := range u.streams {
		_ = up.CloseSend()
	}
}
