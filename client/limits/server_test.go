package limits_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/types/known/durationpb"

	sluicev1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/api/sluice/v1/sluicev1connect"
	"github.com/sluice-rl/sluice/client/limits"
	"github.com/sluice-rl/sluice/internal/discovery"
	"github.com/sluice-rl/sluice/internal/testutil"
	limitsengine "github.com/sluice-rl/sluice/limits"
)

// TestMain checks that no test leaves a goroutine behind: every Client is
// closed, every server stopped.
// Property tests run 200 cases on a fixed seed (testutil.RapidChecks).
func TestMain(m *testing.M) {
	testutil.RapidChecks(200)
	goleak.VerifyTestMain(m)
}

// quiet is the clients' logger: silent unless SLUICE_TEST_LOG is set.
var quiet = testutil.Logger()

// testConfig is the limits configuration of the tests. Fill rates are
// tokens per second.
func testConfig() *limitsengine.Config {
	b := func(size int64, rate float64, wait, debt time.Duration, perRequest int64) limitsengine.Bucket {
		return limitsengine.Bucket{Size: size, FillRate: rate, WaitTimeout: wait, MaxDebt: debt, MaxTokensPerRequest: perRequest}
	}
	return &limitsengine.Config{Resources: map[string]*limitsengine.Resource{
		"api": {Buckets: map[string]limitsengine.Bucket{
			// plenty: never in the way.
			"fast": b(1000, 1000, time.Second, 10*time.Second, 1000),
			// one token at once, then one every 100 ms, waits up to 1 s.
			"slow": b(1, 10, time.Second, time.Second, 10),
			// two tokens, then one a second, no waiting: rejections.
			"strict": b(2, 1, 0, 0, 10),
			// a hundred tokens, ten a second, into debt for 10 s: reports.
			"cost": b(100, 10, time.Second, 10*time.Second, 1000),
			// the benchmarks: never in the way at any speed.
			"bench": b(1e9, 1e9, time.Second, 10*time.Second, 1e6),
		}},
		// a bucket per user, at most 2 users.
		"login": {Template: &limitsengine.Bucket{Size: 1, FillRate: 1, MaxTokensPerRequest: 1}, MaxDynamicBuckets: 2},
		// the naive gRPC and HTTP examples: every method or path of a
		// service shares its prefix's configuration, a bucket each.
		"grpc": {Buckets: map[string]limitsengine.Bucket{"grpc.health.v1.Health": b(2, 0.01, 0, 0, 1)}},
		"http": {Default: &limitsengine.Bucket{Size: 2, FillRate: 0.01, MaxTokensPerRequest: 1}},
		// Charon's rate-limited resources, as examples/charon.yaml has
		// them: cookbook/tiers has two tiers, cookbook/hard a hard limit
		// of 2 per domain and a global limit of 3 per second over one
		// large tier.
		"cookbook/tiers": {Algorithm: limitsengine.BurstTiers, Tiers: []limitsengine.Tier{
			{Limit: 3, Window: 2 * time.Second, Active: 6 * time.Second},
			{Limit: 4, Window: 2 * time.Second, Active: 2 * time.Second, Cooldown: 4 * time.Second},
		}},
		"cookbook/hard": {Algorithm: limitsengine.BurstTiers, HardLimit: 2, GlobalLimit: 3, Tiers: []limitsengine.Tier{
			{Limit: 1000, Window: time.Second, Active: time.Hour},
		}},
		// the examples, in the design's names: every method of UserService
		// gets 2 tokens, hardly refilled; "batch" takes reports.
		"Pinky_TheBrain": {Buckets: map[string]limitsengine.Bucket{
			"UserService": b(2, 0.01, 0, 0, 1),
			"batch":       b(100, 0.01, time.Second, 10*time.Second, 1000),
		}},
	}}
}

// service is sluice.v1.Limits over the real limits engine: the handler
// converts AllowRequest to limitsengine.Request and the Decision back, as the
// server does. Knobs let a test stall it or slow it down.
type service struct {
	sluicev1connect.UnimplementedLimitsHandler
	engine   *limitsengine.Engine
	requests atomic.Int64 // Allow calls received
	stall    atomic.Bool  // when set, calls wait until their context ends
	before   atomic.Int64 // ns to sleep before deciding (latency)
	after    atomic.Int64 // ns to sleep after deciding, before answering

	mu   sync.Mutex
	reqs []*sluicev1.AllowRequest // every request received
}

func newService(t testing.TB) *service {
	e, err := limitsengine.New(testConfig(), limitsengine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return &service{engine: e}
}

// serve serves s over real gRPC on 127.0.0.1 with a port from the kernel
// and returns its address and how to stop it.
func serve(s *service) (addr string, stop func(), err error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	mux := http.NewServeMux()
	mux.Handle(sluicev1connect.NewLimitsHandler(s))
	hs := h2c(mux)
	go func() { _ = hs.Serve(lis) }()
	return lis.Addr().String(), func() { _ = hs.Close() }, nil
}

var statuses = map[limitsengine.Status]sluicev1.AllowResponse_Status{
	limitsengine.StatusOK:                     sluicev1.AllowResponse_OK,
	limitsengine.StatusTimeout:                sluicev1.AllowResponse_REJECTED_TIMEOUT,
	limitsengine.StatusNoBucket:               sluicev1.AllowResponse_REJECTED_NO_BUCKET,
	limitsengine.StatusTooManyBuckets:         sluicev1.AllowResponse_REJECTED_TOO_MANY_BUCKETS,
	limitsengine.StatusTooManyTokensRequested: sluicev1.AllowResponse_REJECTED_TOO_MANY_TOKENS_REQUESTED,
}

func (s *service) Allow(ctx context.Context, req *connect.Request[sluicev1.AllowRequest]) (*connect.Response[sluicev1.AllowResponse], error) {
	s.requests.Add(1)
	s.mu.Lock()
	s.reqs = append(s.reqs, req.Msg)
	s.mu.Unlock()
	if s.stall.Load() {
		// Until the client gives up, or the deadline it sent (grpc-timeout)
		// passes: whichever the bubble's timers run first at that instant.
		<-ctx.Done()
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, connect.NewError(connect.CodeDeadlineExceeded, ctx.Err())
		}
		return nil, connect.NewError(connect.CodeCanceled, ctx.Err())
	}
	time.Sleep(time.Duration(s.before.Load()))
	m := req.Msg
	r := limitsengine.Request{Resource: m.GetResource(), Domain: m.GetDomain(), Tokens: m.GetTokens(), MinTokens: m.GetMinTokens()}
	if m.GetMaxWait() != nil {
		r.MaxWait, r.HasMaxWait = m.GetMaxWait().AsDuration(), true
	}
	d := s.engine.Allow(ctx, time.Now(), r)
	switch d.Status {
	case limitsengine.StatusInvalidRequest:
		return nil, connect.NewError(connect.CodeInvalidArgument, d.Err)
	case limitsengine.StatusServerError:
		return nil, connect.NewError(connect.CodeUnavailable, d.Err)
	}
	resp := &sluicev1.AllowResponse{
		Status: statuses[d.Status], Granted: d.Granted, Remaining: d.Remaining,
		Limit: d.Limit, Bucket: d.Bucket.String(), Unlimited: d.Unlimited,
	}
	if d.Algorithm == limitsengine.BurstTiers {
		// The burst-tier context (fields 8–18); a limit of 0 is unbounded.
		tc := d.Tiers
		if tc.HardLimit > 0 {
			resp.HardLimit = &tc.HardLimit
		}
		if tc.GlobalLimit > 0 {
			resp.GlobalLimit = &tc.GlobalLimit
		}
		resp.TierLimit, resp.Tier, resp.TierHits = tc.TierLimit, int32(tc.Tier), tc.TierHits
		resp.DomainHitsLastSecond, resp.GlobalHitsLastSecond = tc.DomainHitsLastSecond, tc.GlobalHitsLastSecond
		resp.Burst, resp.HardLimited, resp.GlobalLimited = tc.Burst, tc.HardLimited, tc.GlobalLimited
	}
	if d.Status == limitsengine.StatusOK {
		resp.Wait = durationpb.New(d.Wait)
	} else if !d.RetryNever {
		resp.RetryAfter = durationpb.New(d.RetryAfter)
	}
	time.Sleep(time.Duration(s.after.Load()))
	return connect.NewResponse(resp), nil
}

// received returns the requests received so far.
func (s *service) received() []*sluicev1.AllowRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*sluicev1.AllowRequest(nil), s.reqs...)
}

// h2c returns an HTTP server of h speaking HTTP/2 without TLS (gRPC's
// h2c), as the Sluice server does.
func h2c(h http.Handler) *http.Server {
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	p.SetHTTP1(true)
	return &http.Server{Handler: h, Protocols: p}
}

// startLoopback serves s over real gRPC on 127.0.0.1 with a port from the
// kernel and returns its address.
func startLoopback(t testing.TB, s *service) string {
	t.Helper()
	addr, stop, err := serve(s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return addr
}

// unreachable returns a loopback address nobody listens on.
func unreachable(t testing.TB) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close()
	return addr
}

// pipeListener is an in-memory network for testing/synctest bubbles (a
// real socket's reads are not durably blocking, so time would not
// advance): Dial hands the server one end of a net.Pipe. Everything above
// it — HTTP/2, gRPC framing, Connect, the handler — is the real thing.
type pipeListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (p *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-p.conns:
		return c, nil
	case <-p.done:
		return nil, net.ErrClosed
	}
}

func (p *pipeListener) Close() error {
	p.once.Do(func() { close(p.done) })
	return nil
}

func (p *pipeListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1} }

func (p *pipeListener) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	c, s := net.Pipe()
	select {
	case p.conns <- s:
		return c, nil
	case <-p.done:
	case <-ctx.Done():
	}
	_ = c.Close()
	_ = s.Close()
	return nil, errors.New("pipe: connection refused")
}

// startPipe serves s over the in-memory network, inside a synctest bubble,
// and returns the option giving a client its HTTP client. Cleanup closes
// the connections and the server (register it after the client's Close).
func startPipe(t *testing.T, s *service) limits.Option {
	t.Helper()
	lis := newPipeListener()
	mux := http.NewServeMux()
	mux.Handle(sluicev1connect.NewLimitsHandler(s))
	hs := h2c(mux)
	go func() { _ = hs.Serve(lis) }()
	tr := discovery.Transport(nil, false)
	tr.DialContext = lis.dial
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		_ = hs.Close()
	})
	return limits.WithHTTPClient(&http.Client{Transport: tr})
}

// newClient returns a client of addr closed at the test's end, with its
// metrics in a registry of its own. Charon's calls wait up to 30 s for an
// answer (a loaded machine's loopback can take seconds) unless opts say
// otherwise: a slower answer would fail open.
func newClient(t *testing.T, addr string, opts ...limits.Option) (*limits.Client, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	c, err := limits.New(addr, append([]limits.Option{limits.WithLogger(quiet), limits.WithRegisterer(reg), limits.WithCallTimeout(30 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, reg
}

// metric returns the value of the series of name whose labels are
// labels (name=value pairs), 0 if it has none yet.
func metric(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	v, _ := testutil.MetricValue(t, reg, name, labels...)
	return v
}
