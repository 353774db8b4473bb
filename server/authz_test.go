package server

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"connectrpc.com/connect"
	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"

	v1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/api/sluice/v1/sluicev1connect"
)

// registeredMethods returns the full method names of every RPC s serves
// on grpc-go's transport, sorted, and checks that every service it serves
// through Connect is among them (so they cover both transports).
func registeredMethods(t *testing.T, s *Server) []string {
	t.Helper()
	gs := grpc.NewServer()
	s.registerGRPC(gs)
	info := gs.GetServiceInfo()
	var methods []string
	for svc, si := range info {
		for _, m := range si.Methods {
			methods = append(methods, "/"+svc+"/"+m.Name)
		}
	}
	sort.Strings(methods)
	for _, h := range s.connectHandlers() {
		// A service's path ("/doorman.Capacity/"), or one method's.
		svc, method, _ := strings.Cut(strings.Trim(h.path, "/"), "/")
		if _, ok := info[svc]; !ok || method != "" && !slices.Contains(methods, h.path) {
			t.Errorf("Connect serves %s, which grpc-go does not: the method enumeration misses it", h.path)
		}
	}
	return methods
}

// Every RPC the server registers has an authorization rule, and every
// rule names a registered RPC; a method without one is refused.
func TestAuthzRulesCoverEveryMethod(t *testing.T) {
	p := newPeers(t)
	s := identityServer(t, p, "", Config{})
	methods := registeredMethods(t, s)
	if len(methods) < 15 {
		t.Fatalf("only %d methods registered: %v", len(methods), methods)
	}
	registered := map[string]bool{}
	for _, m := range methods {
		registered[m] = true
		if _, ok := authzRules[m]; !ok {
			t.Errorf("%s has no entry in authzRules (server/authz.go): say what it checks, or why it is exempt", m)
		}
	}
	for m := range authzRules {
		if !registered[m] {
			t.Errorf("authzRules names %s, which the server does not register", m)
		}
	}
	// A method missing from the table is refused, not let through.
	saved := authzRules[v1.Limits_Allow_FullMethodName]
	delete(authzRules, v1.Limits_Allow_FullMethodName)
	defer func() { authzRules[v1.Limits_Allow_FullMethodName] = saved }()
	_, err := v1.NewLimitsClient(dialTLS(t, s.Addr(), p.alice)).Allow(t.Context(), &v1.AllowRequest{Resource: "users", Domain: "d", Tokens: 1})
	if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "no authorization rule") {
		t.Errorf("Allow without a rule: %v, want Internal", err)
	}
}

// With a policy that grants the caller nothing, every RPC that is not
// exempt is PermissionDenied, on both transports (grpc-go's, and
// Connect's JSON over net/http), streams included — even when the
// request claims the caller's own client id.
func TestAuthzPolicyGrantingNothing(t *testing.T) {
	p := newPeers(t)
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, []byte("identities:\n  somebody-else:\n    lease: [\"**\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := identityServer(t, p, policy, Config{})
	conn := dialTLS(t, s.Addr(), p.alice)
	ctx := t.Context()
	h2 := &http.Client{Transport: &http.Transport{TLSClientConfig: p.alice, ForceAttemptHTTP2: true}}
	base := "https://" + s.Addr()

	checked := 0
	for _, m := range registeredMethods(t, s) {
		rule := authzRules[m]
		if rule.Exempt != "" {
			continue
		}
		checked++
		md := methodDescriptor(t, m)
		req := ownRequest(t, md.Input(), "alice")
		resp := dynamicpb.NewMessage(md.Output())
		var err error
		if md.IsStreamingClient() || md.IsStreamingServer() {
			err = grpcStream(ctx, conn, m, req, resp)
		} else {
			err = conn.Invoke(ctx, m, req, resp)
		}
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("%s over grpc-go: %v, want PermissionDenied", m, err)
		}
		if md.IsStreamingClient() || md.IsStreamingServer() {
			continue // Connect's streams: below
		}
		body, _ := protojson.Marshal(req)
		r, err := h2.Post(base+m, "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatalf("%s over Connect: %v", m, err)
		}
		got, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if r.StatusCode != http.StatusForbidden || !strings.Contains(string(got), "permission_denied") {
			t.Errorf("%s over Connect: %d %s, want 403 permission_denied", m, r.StatusCode, got)
		}
	}
	if checked < 15 {
		t.Errorf("checked %d methods, want every non-exempt one", checked)
	}

	// Connect's streams: a server stream's one request, a bidi stream's
	// first message.
	watch, err := sluicev1connect.NewLeasesClient(h2, base).Watch(ctx, connect.NewRequest(&v1.WatchRequest{HolderId: "alice"}))
	if err == nil {
		watch.Receive()
		err = watch.Err()
	}
	wantConnectDenied(t, "Watch over Connect", err)
	ka := sluicev1connect.NewLimitsClient(h2, base).KeepAlive(ctx)
	wantConnectDenied(t, "KeepAlive over Connect", bidi(ka.Send(&v1.KeepAliveRequest{SessionId: "x"}), ka.CloseRequest, func() error { _, err := ka.Receive(); return err }))
	q := connect.NewClient[rlqspb.RateLimitQuotaUsageReports, rlqspb.RateLimitQuotaResponse](h2, base+rlqspb.RateLimitQuotaService_StreamRateLimitQuotas_FullMethodName).CallBidiStream(ctx)
	wantConnectDenied(t, "StreamRateLimitQuotas over Connect", bidi(q.Send(&rlqspb.RateLimitQuotaUsageReports{Domain: "fixed"}), q.CloseRequest, func() error { _, err := q.Receive(); return err }))
}

// bidi returns the first error of a bidi stream's send, then of its
// receive after closing the request side.
func bidi(sendErr error, closeReq func() error, recv func() error) error {
	if sendErr != nil && !errors.Is(sendErr, io.EOF) {
		return sendErr
	}
	_ = closeReq()
	return recv()
}

func wantConnectDenied(t *testing.T, what string, err error) {
	t.Helper()
	if connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("%s: %v, want PermissionDenied", what, err)
	}
}

// methodDescriptor returns the descriptor of full method name m
// ("/pkg.Service/Method") from the linked-in protobuf registry.
func methodDescriptor(t *testing.T, m string) protoreflect.MethodDescriptor {
	t.Helper()
	svc, name, _ := strings.Cut(strings.TrimPrefix(m, "/"), "/")
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(svc))
	if err != nil {
		t.Fatalf("%s: %v", m, err)
	}
	md := d.(protoreflect.ServiceDescriptor).Methods().ByName(protoreflect.Name(name))
	if md == nil {
		t.Fatalf("%s: no such method in its service's descriptor", m)
	}
	return md
}

// ownRequest returns an empty request of type d whose client id fields
// (client_id, server_id, holder_id) are who: only the policy can refuse
// it.
func ownRequest(t *testing.T, d protoreflect.MessageDescriptor, who string) proto.Message {
	t.Helper()
	m := dynamicpb.NewMessage(d)
	for _, f := range []protoreflect.Name{"client_id", "server_id", "holder_id"} {
		if fd := d.Fields().ByName(f); fd != nil && fd.Kind() == protoreflect.StringKind {
			m.Set(fd, protoreflect.ValueOfString(who))
		}
	}
	return m
}

// grpcStream sends req as the one message of stream method m and returns
// the error of its first answer.
func grpcStream(ctx context.Context, conn *grpc.ClientConn, m string, req, resp proto.Message) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, m)
	if err != nil {
		return err
	}
	if err := st.SendMsg(req); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	_ = st.CloseSend()
	return st.RecvMsg(resp)
}
