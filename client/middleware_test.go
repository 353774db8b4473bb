package client_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluice-rl/sluice/client"
	"github.com/sluice-rl/sluice/resources"
	"github.com/sluice-rl/sluice/server/capacity"
)

// limiterAt returns a rate limiter (no stored permits) holding a lease of
// rate permits per second from an in-process server.
func limiterAt(t *testing.T, rate float64) *client.RateLimiter {
	t.Helper()
	cfg, err := resources.Parse([]byte("resources:\n  - {identifier_glob: r, capacity: " + formatFloat(rate) +
		", algorithm: {kind: FAIR_SHARE, lease_length: 300, refresh_interval: 60, learning_mode_duration: 0}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	srv := capacity.New(capacity.Options{Address: "s:1", Config: cfg, Logger: quiet})
	c, err := client.New("s:1", manualOf(capacity.InProcessClient(srv)), client.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Resource("r", rate)
	if err != nil {
		t.Fatal(err)
	}
	l := client.NewRateLimiter(res, 0)
	step(c)
	if l.Rate() != rate {
		t.Fatalf("limiter rate %v, want %v", l.Rate(), rate)
	}
	return l
}

func formatFloat(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

func TestHTTPMiddleware(t *testing.T) {
	l := limiterAt(t, 1)
	var served atomic.Int64
	h := client.HTTPMiddleware(func(*http.Request) *client.RateLimiter { return l }, 0)(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { served.Add(1) }))
	ts := httptest.NewServer(h)
	defer ts.Close()
	get := func() *http.Response {
		resp, err := http.Get(ts.URL)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	if resp := get(); resp.StatusCode != 200 || resp.Header.Get("RateLimit-Limit") != "1" {
		t.Fatalf("first request: %d %v", resp.StatusCode, resp.Header)
	}
	resp := get()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" ||
		resp.Header.Get("RateLimit-Remaining") != "0" || resp.Header.Get("RateLimit-Reset") != "1" {
		t.Fatalf("second request at once: %d %v", resp.StatusCode, resp.Header)
	}
	if served.Load() != 1 {
		t.Fatalf("handler ran %d times, want 1", served.Load())
	}
	// With a wait allowed, the request waits for its permit instead.
	h2 := client.HTTPMiddleware(func(*http.Request) *client.RateLimiter { return limiterAt(t, 1000) }, time.Second)(
		http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	rec := httptest.NewRecorder()
	h2.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Code != 200 {
		t.Fatalf("waiting middleware: %d", rec.Code)
	}
}

func TestRoundTripper(t *testing.T) {
	l := limiterAt(t, 1)
	var hits atomic.Int64
	ts := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	defer ts.Close()
	hc := &http.Client{Transport: client.RoundTripper(nil, func(*http.Request) *client.RateLimiter { return l })}
	if _, err := hc.Get(ts.URL); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", ts.URL, nil)
	_, err := hc.Do(req)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second request within 100 ms at 1/s: %v, want DeadlineExceeded at once", err)
	}
	if hits.Load() != 1 {
		t.Fatalf("server saw %d requests, want 1", hits.Load())
	}
}

// gRPC: the server interceptor answers ResourceExhausted with retry-after;
// the client interceptors wait for permits (unary and stream) and fail at
// once when the wait would pass the deadline.
func TestGRPCInterceptors(t *testing.T) {
	serverLim := limiterAt(t, 1)
	var serverLimits atomic.Bool // the server limits calls while set
	serverLimits.Store(true)
	var calls atomic.Int64
	count := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		calls.Add(1)
		return h(ctx, req)
	}
	gs := grpc.NewServer(
		grpc.ChainUnaryInterceptor(count, client.UnaryServerInterceptor(func(string) *client.RateLimiter {
			if serverLimits.Load() {
				return serverLim
			}
			return nil
		}, 0)),
		grpc.StreamInterceptor(client.StreamServerInterceptor(func(string) *client.RateLimiter { return nil }, 0)),
	)
	healthpb.RegisterHealthServer(gs, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(lis) }()
	defer gs.Stop()

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	ctx := context.Background()
	if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	var md metadata.MD
	_, err = hc.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&md))
	if status.Code(err) != codes.ResourceExhausted || len(md.Get("retry-after")) != 1 || md.Get("retry-after")[0] != "1" {
		t.Fatalf("second call at once: %v, headers %v", err, md)
	}

	// Client side.
	clientLim := limiterAt(t, 1)
	pick := func(string) *client.RateLimiter { return clientLim }
	conn2, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(client.UnaryClientInterceptor(pick)), grpc.WithStreamInterceptor(client.StreamClientInterceptor(pick)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close()
	hc2 := healthpb.NewHealthClient(conn2)
	before := calls.Load()
	serverLimits.Store(false) // from here on only the client's limiter counts
	if _, err := hc2.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	dctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := hc2.Check(dctx, &healthpb.HealthCheckRequest{}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("unary call over the client's limit: %v", err)
	}
	if _, err := hc2.Watch(dctx, &healthpb.HealthCheckRequest{}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("stream over the client's limit: %v", err)
	}
	if got := calls.Load() - before; got != 1 {
		t.Fatalf("server saw %d unary calls from the limited client, want 1", got)
	}
}

// The client interceptors and the RoundTripper report a context that ends
// (cancelled, or past its deadline) as that, not as a rate limit:
// codes.Canceled and codes.DeadlineExceeded for gRPC, as the server
// interceptors do; only a wait that would pass a deadline still ahead is
// codes.ResourceExhausted. Nothing is sent in any of these cases.
func TestClientInterceptorErrorCodes(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	ahead, cancel3 := context.WithTimeout(context.Background(), time.Hour)
	defer cancel3()
	// Cancelled while the calls wait (or before: either way Canceled).
	waiting, cancel4 := context.WithCancel(context.Background())
	defer time.AfterFunc(20*time.Millisecond, cancel4).Stop()
	for _, tt := range []struct {
		name string
		ctx  context.Context
		want codes.Code
	}{
		{"cancelled", cancelled, codes.Canceled},
		{"deadline passed", expired, codes.DeadlineExceeded},
		{"cancelled while waiting", waiting, codes.Canceled},
		// At 1 permit per 10 000 s with the permit taken, the next is
		// more than an hour away.
		{"wait would pass the deadline", ahead, codes.ResourceExhausted},
	} {
		t.Run(tt.name, func(t *testing.T) {
			lim := limiterAt(t, 0.0001)
			if !lim.Allow() {
				t.Fatal("the first permit was refused")
			}
			pick := func(string) *client.RateLimiter { return lim }
			sent := 0
			invoker := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
				sent++
				return nil
			}
			err := client.UnaryClientInterceptor(pick)(tt.ctx, "/svc/M", nil, nil, nil, invoker)
			if status.Code(err) != tt.want {
				t.Errorf("unary: %v, want %v", err, tt.want)
			}
			streamer := func(context.Context, *grpc.StreamDesc, *grpc.ClientConn, string, ...grpc.CallOption) (grpc.ClientStream, error) {
				sent++
				return nil, nil
			}
			_, err = client.StreamClientInterceptor(pick)(tt.ctx, &grpc.StreamDesc{}, nil, "/svc/S", streamer)
			if status.Code(err) != tt.want {
				t.Errorf("stream: %v, want %v", err, tt.want)
			}
			rt := client.RoundTripper(roundTripFunc(func(*http.Request) (*http.Response, error) {
				sent++
				return nil, errors.New("sent")
			}), func(*http.Request) *client.RateLimiter { return lim })
			req, _ := http.NewRequestWithContext(tt.ctx, "GET", "http://example.invalid/", nil)
			_, err = rt.RoundTrip(req)
			wantErr := map[codes.Code]error{codes.Canceled: context.Canceled, codes.DeadlineExceeded: context.DeadlineExceeded,
				codes.ResourceExhausted: context.DeadlineExceeded}[tt.want]
			if !errors.Is(err, wantErr) {
				t.Errorf("RoundTripper: %v, want an error wrapping %v", err, wantErr)
			}
			if sent != 0 {
				t.Errorf("%d calls were sent", sent)
			}
		})
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
