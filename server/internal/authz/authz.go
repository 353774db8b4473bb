// Package authz authorizes every RPC the server serves, in one place: its
// interceptors (grpc-go's unary and stream ones, and Connect's) look up
// the RPC's full method name in a Table of Rules and enforce, before the
// handler runs, the client identities and the policy of package
// internal/identity (docs/identity.md): which request field is the
// client id the caller must own, which resources the policy must grant
// it and through which API, which session it must own — or why the
// method is exempt. A method the table does not name is refused
// (Internal): a new RPC cannot skip the check.
//
// The identity the request acts for is on the handler's context (Who).
// Streams are checked message by message as they are received (a
// server-streaming RPC's one request included). Refusals are
// identity.Refusal errors, turned into Unauthenticated or
// PermissionDenied here, at the transport's edge.
//
// Source: docs/identity.md ("What each RPC checks").
package authz

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-rl/sluice/internal/identity"
)

// ForwardedIdentityKey is the gRPC metadata key in which a fleet server
// forwarding a session request to the session's home names the identity
// of the client it acts for; the home believes it only from a fleet
// server (identity.Authorizer.Forwarded).
const ForwardedIdentityKey = "sluice-forwarded-identity"

// Rule says how the requests of one RPC are authorized. The zero Rule
// only asks for the caller's identity (a client certificate naming one).
// Each func gets the request message (the RPC's own type) and must not
// keep it.
type Rule struct {
	// Exempt, when not "", is why the method needs no identity (health
	// checks, reflection, Doorman's Discovery); the other fields are then
	// unused.
	Exempt string
	// Client returns the field naming the client id the request claims
	// and that id: it must be the caller's (identity.Authorizer's
	// CheckClient). nil: the request claims none.
	Client func(req proto.Message) (field, id string)
	// API is what the policy must grant the caller: the Resources, or,
	// when the request names none, at least one pattern (identity.
	// Authorizer's UsesAny) — an RPC that names no resource serves only
	// clients of that API.
	API identity.API
	// Resources returns the resources (or domains, or namespaces) the
	// request uses through API, each of which the policy must grant.
	Resources func(req proto.Message) []string
	// Session returns the session id the request acts on: if the session
	// is open on this server, the caller must be the identity that opened
	// it. nil: the request names no session.
	Session func(req proto.Message) string
	// Forwarded: the request may come from a fleet server acting for its
	// client (session requests forwarded to the session's home): the
	// identity is the one ForwardedIdentityKey names, believed from a
	// fleet server only.
	Forwarded bool
}

// Table is the Rules by full method name ("/doorman.Capacity/GetCapacity").
type Table map[string]Rule

// Options configures an Interceptor.
type Options struct {
	// Authorizer answers the questions; nil: identities are off and every
	// request passes unchecked (the table is still required to name it).
	Authorizer *identity.Authorizer
	// Rules are the RPCs' rules.
	Rules Table
	// Owner returns the identity that opened session id, if it is open on
	// this server ("" when it was opened without identities). nil: no
	// session is open here.
	Owner func(id string) (owner string, ok bool)
}

// Interceptor enforces a Table on every RPC. Its methods are safe for
// concurrent use.
type Interceptor struct {
	o Options
}

// New returns an Interceptor with o.
func New(o Options) *Interceptor { return &Interceptor{o: o} }

type whoKey struct{}

// Who returns the identity the request of ctx acts for, as the
// interceptor established it: the caller's certificate's, or on a
// forwarded session request the client's the fleet server names. ""
// with identities off, or on a context that did not go through the
// interceptor.
func Who(ctx context.Context) string {
	who, _ := ctx.Value(whoKey{}).(string)
	return who
}

// WithWho returns ctx with who as the identity its request acts for
// (Who): what the interceptor does, for a service that makes requests
// of another in-process on a client's behalf.
func WithWho(ctx context.Context, who string) context.Context {
	return context.WithValue(ctx, whoKey{}, who)
}

// errNoRule is the refusal of a method the table does not name.
func errNoRule(method string) error {
	return status.Errorf(codes.Internal, "%s has no authorization rule: the server refuses it (server/internal/authz)", method)
}

// identify returns the identity a request of rule r acts for (from ctx),
// without checking the message. Errors: identity's *Refusal.
func (i *Interceptor) identify(ctx context.Context, r Rule) (string, error) {
	a := i.o.Authorizer
	if !r.Forwarded {
		return a.Caller(ctx)
	}
	var claimed string
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get(ForwardedIdentityKey); len(v) > 0 {
			claimed = v[0]
		}
	}
	return a.Forwarded(ctx, claimed)
}

// check checks one request message of rule r from identity who. Errors:
// identity's *Refusal.
func (i *Interceptor) check(r Rule, who string, req proto.Message) error {
	a := i.o.Authorizer
	if r.Client != nil {
		field, id := r.Client(req)
		if err := a.CheckClient(who, field, id); err != nil {
			return err
		}
	}
	var resources []string
	if r.Resources != nil {
		resources = r.Resources(req)
	}
	for _, res := range resources {
		if err := a.UseAs(who, r.API, res); err != nil {
			return err
		}
	}
	if len(resources) == 0 {
		if err := a.UsesAny(who, r.API); err != nil {
			return err
		}
	}
	if r.Session != nil && i.o.Owner != nil {
		id := r.Session(req)
		if owner, ok := i.o.Owner(id); ok && owner != who {
			return &identity.Refusal{Msg: fmt.Sprintf("session_id: session %s belongs to the identity that opened it; identity %q may not use, transfer or close it", ShortID(id), who)}
		}
	}
	return nil
}

// ShortID returns a session id's first 8 characters after its epoch, for
// messages: enough to tell sessions apart, not enough to use one.
func ShortID(id string) string {
	if _, rest, ok := strings.Cut(id, "-"); ok {
		id = rest
	}
	if len(id) > 8 {
		return id[:8] + "…"
	}
	return id
}

// begin looks method up and establishes its caller: the rule, ctx with
// Who set, and whether the messages need checking (not when identities
// are off or the method is exempt). Errors: Internal for a method with no
// rule; identity's *Refusal.
func (i *Interceptor) begin(ctx context.Context, method string) (Rule, context.Context, bool, error) {
	r, ok := i.o.Rules[method]
	switch {
	case !ok:
		return r, ctx, false, errNoRule(method)
	case r.Exempt != "" || i.o.Authorizer == nil:
		return r, ctx, false, nil
	}
	who, err := i.identify(ctx, r)
	if err != nil {
		return r, ctx, false, err
	}
	return r, WithWho(ctx, who), true, nil
}

// GRPCStatus turns a refusal into the gRPC status error a client gets:
// Unauthenticated or PermissionDenied with its message; other errors
// pass unchanged.
func GRPCStatus(err error) error {
	var r *identity.Refusal
	if !errors.As(err, &r) {
		return err
	}
	if r.Unauthenticated {
		return status.Error(codes.Unauthenticated, r.Msg)
	}
	return status.Error(codes.PermissionDenied, r.Msg)
}

// connectError is GRPCStatus for Connect: a *connect.Error with the same
// code and message.
func connectError(err error) error {
	var r *identity.Refusal
	switch {
	case errors.As(err, &r) && r.Unauthenticated:
		return connect.NewError(connect.CodeUnauthenticated, errors.New(r.Msg))
	case errors.As(err, &r):
		return connect.NewError(connect.CodePermissionDenied, errors.New(r.Msg))
	}
	if st, ok := status.FromError(err); ok {
		return connect.NewError(connect.Code(st.Code()), errors.New(st.Message()))
	}
	return err
}

// Unary is the grpc-go unary server interceptor.
func (i *Interceptor) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	r, ctx, checked, err := i.begin(ctx, info.FullMethod)
	if err == nil && checked {
		err = i.checkAny(r, Who(ctx), req)
	}
	if err != nil {
		return nil, GRPCStatus(err)
	}
	return handler(ctx, req)
}

// checkAny is check for a message of unknown type (a request that is not
// a proto.Message is refused: the table's funcs read proto messages).
func (i *Interceptor) checkAny(r Rule, who string, req any) error {
	m, ok := req.(proto.Message)
	if !ok {
		return status.Errorf(codes.Internal, "authz: a request of type %T is not a protobuf message", req)
	}
	return i.check(r, who, m)
}

// Stream is the grpc-go stream server interceptor: the caller established
// at the stream's start, each message checked as it is received.
func (i *Interceptor) Stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	r, ctx, checked, err := i.begin(ss.Context(), info.FullMethod)
	if err != nil {
		return GRPCStatus(err)
	}
	if !checked {
		return handler(srv, ss)
	}
	return handler(srv, &checkedStream{ServerStream: ss, ctx: ctx, i: i, r: r})
}

// checkedStream is a grpc-go stream whose received messages are checked.
type checkedStream struct {
	grpc.ServerStream
	ctx context.Context
	i   *Interceptor
	r   Rule
}

func (s *checkedStream) Context() context.Context { return s.ctx }

func (s *checkedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return GRPCStatus(s.i.checkAny(s.r, Who(s.ctx), m))
}

// Connect returns the interceptor for Connect's handlers.
func (i *Interceptor) Connect() connect.Interceptor { return connectInterceptor{i} }

type connectInterceptor struct{ i *Interceptor }

func (c connectInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		r, ctx, checked, err := c.i.begin(ctx, req.Spec().Procedure)
		if err == nil && checked {
			err = c.i.checkAny(r, Who(ctx), req.Any())
		}
		if err != nil {
			return nil, connectError(err)
		}
		return next(ctx, req)
	}
}

func (connectInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (c connectInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		r, ctx, checked, err := c.i.begin(ctx, conn.Spec().Procedure)
		if err != nil {
			return connectError(err)
		}
		if !checked {
			return next(ctx, conn)
		}
		return next(ctx, &checkedConn{StreamingHandlerConn: conn, who: Who(ctx), i: c.i, r: r})
	}
}

// checkedConn is a Connect stream whose received messages are checked.
type checkedConn struct {
	connect.StreamingHandlerConn
	who string
	i   *Interceptor
	r   Rule
}

func (c *checkedConn) Receive(m any) error {
	if err := c.StreamingHandlerConn.Receive(m); err != nil {
		return err
	}
	if err := c.i.checkAny(c.r, c.who, m); err != nil {
		return connectError(err)
	}
	return nil
}
