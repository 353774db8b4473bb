package limits_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	sluicev1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/api/sluice/v1/sluicev1connect"
	"github.com/sluice-rl/sluice/internal/discovery"
	"github.com/sluice-rl/sluice/limits/copies"
)

// copiesConfig is the copy-limited resources of the tests.
func copiesConfig() *copies.Config {
	return &copies.Config{Resources: map[string]copies.Resource{
		// cookbook/sandboxes of examples/charon.yaml (docs/charon.md):
		// domain limit 3 (acme: 4), global limit 5, group trusted =
		// {acme, initech} with limit 4.
		"sandboxes": {DomainLimit: 3, DomainLimits: map[string]int64{"acme": 4}, GlobalLimit: 5,
			Groups: []copies.Group{{Name: "trusted", Limit: 4, Domains: []string{"acme", "initech"}}}},
		// plenty per domain, 8 in all.
		"gpus": {DomainLimit: 8, GlobalLimit: 8},
		// a global limit of 5 for crowds of callers.
		"seats": {DomainLimit: 1000, GlobalLimit: 5},
	}, AllowUnconfigured: []string{"open/"}}
}

// charon is sluice.v1.Limits with Charon's operations, over the real
// engines, doing what the server does in its essentials: Allow from the
// limits engine (service), sessions, holds and transfers from
// limits/copies; a resource of the wrong kind is FailedPrecondition; the
// engines' errors map to their gRPC codes, with the engine's message
// ("session_id: no session …"); sessions whose keep-alive stream breaks
// end at once, and Expire runs every 50 ms. Knobs make it fail, break
// streams, or decorate Allow's answers.
type charon struct {
	*service
	copies *copies.Engine

	down        atomic.Int32 // a connect.Code every RPC answers (0: none)
	keepOnBreak atomic.Bool  // a broken keep-alive stream leaves its sessions alone
	opened      atomic.Int64 // OpenSession calls
	decorate    atomic.Pointer[func(*sluicev1.AllowResponse)]

	mu      sync.Mutex
	kicks   []chan struct{} // one per keep-alive stream: closing it breaks the stream
	allowAt []time.Time     // when each Allow arrived

	stop chan struct{}
	done chan struct{}
}

func newCharon(t testing.TB) *charon {
	e, err := copies.New(copiesConfig(), copies.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := &charon{service: newService(t), copies: e, stop: make(chan struct{}), done: make(chan struct{})}
	go h.expire()
	t.Cleanup(h.close)
	return h
}

func (h *charon) expire() {
	defer close(h.done)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-h.stop:
			return
		case now := <-tick.C:
			h.copies.Expire(context.Background(), now)
		}
	}
}

func (h *charon) close() {
	select {
	case <-h.stop:
	default:
		close(h.stop)
	}
	<-h.done
}

// breakStreams breaks every keep-alive stream open now.
func (h *charon) breakStreams() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, k := range h.kicks {
		close(k)
	}
	h.kicks = nil
}

// allows returns when each Allow arrived.
func (h *charon) allows() []time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]time.Time(nil), h.allowAt...)
}

// held returns the copies of resource held (or staged) globally and by
// domain, from the engine's copy log.
func (h *charon) held(resource, domain string) (global, byDomain int64) {
	r, _ := h.copies.Resource(resource)
	for _, d := range r.Domains {
		if d.Domain == domain {
			byDomain = d.Holds
		}
	}
	return r.GlobalHolds, byDomain
}

func (h *charon) failing() error {
	if c := connect.Code(h.down.Load()); c != 0 {
		return connect.NewError(c, errors.New("the store failed"))
	}
	return nil
}

// codeOf maps the copies engine's errors to gRPC codes, keeping the
// engine's message.
func codeOf(err error) error {
	codes := map[copies.Class]connect.Code{
		copies.ClassInvalidArgument:    connect.CodeInvalidArgument,
		copies.ClassNotFound:           connect.CodeNotFound,
		copies.ClassFailedPrecondition: connect.CodeFailedPrecondition,
		copies.ClassInternal:           connect.CodeInternal,
	}
	return connect.NewError(codes[copies.ClassOf(err)], err)
}

// rateLimited reports whether resource is configured in the limits
// engine (a rate-limited resource).
func (h *charon) rateLimited(resource string) bool {
	_, ok := testConfig().Resources[resource]
	return ok
}

func (h *charon) Allow(ctx context.Context, req *connect.Request[sluicev1.AllowRequest]) (*connect.Response[sluicev1.AllowResponse], error) {
	h.mu.Lock()
	h.allowAt = append(h.allowAt, time.Now())
	h.mu.Unlock()
	if err := h.failing(); err != nil {
		return nil, err
	}
	if _, ok := copiesConfig().Resources[req.Msg.GetResource()]; ok {
		return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("resource: \""+req.Msg.GetResource()+"\" is copy-limited, not rate-limited"))
	}
	resp, err := h.service.Allow(ctx, req)
	if err == nil {
		if d := h.decorate.Load(); d != nil {
			(*d)(resp.Msg)
		}
	}
	return resp, err
}

func (h *charon) OpenSession(_ context.Context, req *connect.Request[sluicev1.OpenSessionRequest]) (*connect.Response[sluicev1.OpenSessionResponse], error) {
	if err := h.failing(); err != nil {
		return nil, err
	}
	h.opened.Add(1)
	s, err := h.copies.Open(time.Now(), req.Msg.GetTtl().AsDuration())
	if err != nil {
		return nil, codeOf(err)
	}
	return connect.NewResponse(&sluicev1.OpenSessionResponse{SessionId: s.ID, Ttl: durationpb.New(s.TTL)}), nil
}

func (h *charon) KeepAlive(ctx context.Context, st *connect.BidiStream[sluicev1.KeepAliveRequest, sluicev1.KeepAliveResponse]) error {
	kick := make(chan struct{})
	h.mu.Lock()
	h.kicks = append(h.kicks, kick)
	h.mu.Unlock()
	kept := map[string]bool{}
	defer func() {
		if !h.keepOnBreak.Load() {
			for id := range kept {
				_, _ = h.copies.Close(ctx, time.Now(), id)
			}
		}
	}()
	type msg struct {
		req *sluicev1.KeepAliveRequest
		err error
	}
	msgs := make(chan msg)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		for {
			req, err := st.Receive()
			select {
			case msgs <- msg{req, err}:
			case <-rctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	for {
		select {
		case <-kick:
			return connect.NewError(connect.CodeUnavailable, errors.New("stream broken by the test"))
		case <-ctx.Done():
			return ctx.Err()
		case m := <-msgs:
			if errors.Is(m.err, io.EOF) {
				return nil
			}
			if m.err != nil {
				return m.err
			}
			if err := h.failing(); err != nil {
				return err
			}
			s, err := h.copies.KeepAlive(time.Now(), m.req.GetSessionId())
			if err != nil {
				return codeOf(err)
			}
			kept[s.ID] = true
			if err := st.Send(&sluicev1.KeepAliveResponse{SessionId: s.ID, Ttl: durationpb.New(s.TTL)}); err != nil {
				return err
			}
		}
	}
}

func (h *charon) CloseSession(ctx context.Context, req *connect.Request[sluicev1.CloseSessionRequest]) (*connect.Response[sluicev1.CloseSessionResponse], error) {
	if err := h.failing(); err != nil {
		return nil, err
	}
	if _, err := h.copies.Close(ctx, time.Now(), req.Msg.GetSessionId()); err != nil {
		return nil, codeOf(err)
	}
	return connect.NewResponse(&sluicev1.CloseSessionResponse{}), nil
}

func (h *charon) Reserve(ctx context.Context, req *connect.Request[sluicev1.ReserveRequest]) (*connect.Response[sluicev1.ReserveResponse], error) {
	if err := h.failing(); err != nil {
		return nil, err
	}
	m := req.Msg
	if h.rateLimited(m.GetResource()) {
		return nil, codeOf(copies.WrongKind(m.GetResource(), "rate-limited"))
	}
	r, err := h.copies.Reserve(ctx, time.Now(), m.GetSessionId(), m.GetResource(), m.GetDomain(), m.GetCopies(), m.GetMinCopies())
	if err != nil {
		return nil, codeOf(err)
	}
	resp := &sluicev1.ReserveResponse{Status: sluicev1.ReserveResponse_OK, Granted: r.Granted, DomainLimit: r.DomainLimit,
		DomainHolds: r.DomainHolds, GlobalHolds: r.GlobalHolds, Unlimited: r.Unlimited}
	if r.Granted == 0 {
		resp.Status = sluicev1.ReserveResponse_REJECTED_OVER_LIMIT
	}
	if r.GlobalLimit != copies.Unbounded {
		resp.GlobalLimit = &r.GlobalLimit
	}
	for _, g := range r.Groups {
		resp.Groups = append(resp.Groups, &sluicev1.GroupHolds{Name: g.Name, Limit: g.Limit, Holds: g.Holds})
	}
	return connect.NewResponse(resp), nil
}

func (h *charon) Release(ctx context.Context, req *connect.Request[sluicev1.ReleaseRequest]) (*connect.Response[sluicev1.ReleaseResponse], error) {
	if err := h.failing(); err != nil {
		return nil, err
	}
	m := req.Msg
	if err := h.copies.Release(ctx, time.Now(), m.GetSessionId(), m.GetResource(), m.GetDomain(), m.GetCopies(), m.GetGroups()); err != nil {
		return nil, codeOf(err)
	}
	return connect.NewResponse(&sluicev1.ReleaseResponse{}), nil
}

func (h *charon) Transfer(ctx context.Context, req *connect.Request[sluicev1.TransferRequest]) (*connect.Response[sluicev1.TransferResponse], error) {
	if err := h.failing(); err != nil {
		return nil, err
	}
	m := req.Msg
	st, err := h.copies.Transfer(ctx, time.Now(), m.GetSessionId(), m.GetResource(), m.GetDomain(), m.GetCopies(), m.GetGroups(), m.GetTtl().AsDuration())
	if err != nil {
		return nil, codeOf(err)
	}
	return connect.NewResponse(&sluicev1.TransferResponse{TransferId: st.ID}), nil
}

func (h *charon) Seize(ctx context.Context, req *connect.Request[sluicev1.SeizeRequest]) (*connect.Response[sluicev1.SeizeResponse], error) {
	if err := h.failing(); err != nil {
		return nil, err
	}
	s, err := h.copies.Seize(ctx, time.Now(), req.Msg.GetSessionId(), req.Msg.GetTransferId())
	if err != nil {
		return nil, codeOf(err)
	}
	return connect.NewResponse(&sluicev1.SeizeResponse{Resource: s.Resource, Domain: s.Domain, Groups: s.Groups, Copies: s.Copies}), nil
}

// serveCharon serves h over real gRPC on 127.0.0.1 with a port from the
// kernel and returns its address and how to stop it.
func serveCharon(h *charon) (addr string, stop func(), err error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	mux := http.NewServeMux()
	mux.Handle(sluicev1connect.NewLimitsHandler(h))
	hs := h2c(mux)
	go func() { _ = hs.Serve(lis) }()
	return lis.Addr().String(), func() { _ = hs.Close() }, nil
}

// startCharon serves h on loopback until the test ends and returns its
// address.
func startCharon(t testing.TB, h *charon) string {
	t.Helper()
	addr, stop, err := serveCharon(h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return addr
}

// startCharonPipe serves h over the in-memory network inside a synctest
// bubble (see startPipe) and returns the option giving a client its HTTP
// client. Cleanup closes the connections and the server.
func startCharonPipe(t *testing.T, h *charon) (withHTTP func() *http.Client) {
	t.Helper()
	lis := newPipeListener()
	mux := http.NewServeMux()
	mux.Handle(sluicev1connect.NewLimitsHandler(h))
	hs := h2c(mux)
	go func() { _ = hs.Serve(lis) }()
	var trs []*http.Transport
	var mu sync.Mutex
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, tr := range trs {
			tr.CloseIdleConnections()
		}
		_ = hs.Close()
	})
	return func() *http.Client {
		tr := discovery.Transport(nil, false)
		tr.DialContext = lis.dial
		mu.Lock()
		trs = append(trs, tr)
		mu.Unlock()
		return &http.Client{Transport: tr}
	}
}
