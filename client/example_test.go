package client_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/sluice-rl/sluice/client"
	"github.com/sluice-rl/sluice/resources"
	"github.com/sluice-rl/sluice/server"
)

// startExampleServer runs a capacity server on loopback for the examples.
func startExampleServer() (addr string, stop func()) {
	repo, err := resources.Parse([]byte(`
resources:
  - identifier_glob: "db/*"
    capacity: 100
    algorithm: {kind: FAIR_SHARE, lease_length: 60, refresh_interval: 5, learning_mode_duration: 0}
`))
	if err != nil {
		panic(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	srv, err := server.New(context.Background(), server.Config{Listen: server.Listen{Advertise: lis.Addr().String()}, Repository: server.Repository{Fixed: repo}, Runtime: server.Runtime{Logger: slog.New(slog.DiscardHandler)}})
	if err != nil {
		panic(err)
	}
	hs := &http.Server{Handler: srv.Handler(), Protocols: p}
	go func() { _ = hs.Serve(lis) }()
	return lis.Addr().String(), func() { hs.Close() }
}

// A process limits its queries to a shared database replica: it leases a
// share of the replica's capacity and enforces it with a rate limiter.
func ExampleNewRateLimiter() {
	addr, stop := startExampleServer()
	defer stop()

	c, _ := client.New(addr)
	defer c.Close()
	res, _ := c.Resource("db/replica-1", 30) // wants 30 queries per second
	lim := client.NewRateLimiter(res, 0.1)

	<-res.Changes() // wait for the first lease
	fmt.Println("rate:", lim.Rate())
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := lim.Wait(ctx); err == nil {
		fmt.Println("query sent")
	}
	// Output:
	// rate: 30
	// query sent
}

// A process limits its in-flight transactions with a gauge resource.
func ExampleNewGauge() {
	addr, stop := startExampleServer()
	defer stop()

	c, _ := client.New(addr)
	defer c.Close()
	res, _ := c.Resource("db/tx-pool", 4) // wants 4 transactions in flight
	g := client.NewGauge(res)
	<-res.Changes()

	_ = g.Do(context.Background(), func() error {
		fmt.Println("in flight:", g.InUse(), "of", g.Capacity())
		return nil
	})
	// Output: in flight: 1 of 4
}

// Several parts of one process share one lease on a resource: their wants
// add up, and the lease is given back with the last handle.
func ExampleClient_Resource() {
	addr, stop := startExampleServer()
	defer stop()
	c, _ := client.New(addr)
	defer c.Close()

	reports, _ := c.Resource("db/replica-2", 10)
	exports, _ := c.Resource("db/replica-2", 15)
	fmt.Println("the client asks for", reports.TotalWants())
	<-reports.Changes() // the first lease
	fmt.Println("one lease for both:", reports.Capacity() == exports.Capacity())
	_ = exports.Release(context.Background())
	fmt.Println("after one handle is released it asks for", reports.TotalWants())
	// Output:
	// the client asks for 25
	// one lease for both: true
	// after one handle is released it asks for 10
}

// A resource in adaptive mode asks the server for what the process uses.
func ExampleRateLimiter_Adapt() {
	addr, stop := startExampleServer()
	defer stop()
	c, _ := client.New(addr)
	defer c.Close()
	res, _ := c.Resource("db/replica-3", 1) // a first guess
	lim := client.NewRateLimiter(res, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Measure every 100 ms what the process asks of the limiter, and ask
	// the server for that plus 20 %.
	lim.Adapt(ctx, client.AdaptiveOptions{Interval: 100 * time.Millisecond, Headroom: 0.2, Max: 100})
	for range 30 {
		lim.Allow() // the process's own demand
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Println("wants more than the first guess:", res.Wants() > 1)
	// Output: wants more than the first guess: true
}

// A limiter that warms up after disuse, like Guava's SmoothWarmingUp.
func ExampleNewWarmingUpRateLimiter() {
	addr, stop := startExampleServer()
	defer stop()
	c, _ := client.New(addr)
	defer c.Close()
	res, _ := c.Resource("db/cache-fill", 50)
	lim := client.NewWarmingUpRateLimiter(res, 2*time.Second, 3)
	<-res.Changes()
	fmt.Println("stable rate:", lim.Rate())
	// Output: stable rate: 50
}

// The kill switch turns a client into a pass-through.
func ExampleClient_SetKillSwitch() {
	addr, stop := startExampleServer()
	defer stop()
	c, _ := client.New(addr)
	defer c.Close()
	res, _ := c.Resource("db/replica-4", 5)
	<-res.Changes()
	c.SetKillSwitch(true)
	fmt.Println("capacity with the kill switch on:", res.Capacity())
	c.SetKillSwitch(false)
	fmt.Println("and off:", res.Capacity())
	// Output:
	// capacity with the kill switch on: +Inf
	// and off: 5
}

// An outgoing HTTP client that takes a permit before each request.
func ExampleRoundTripper() {
	addr, stop := startExampleServer()
	defer stop()
	c, _ := client.New(addr)
	defer c.Close()
	res, _ := c.Resource("db/http-api", 20)
	lim := client.NewRateLimiter(res, 0)
	<-res.Changes()

	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "ok") }))
	defer target.Close()
	hc := &http.Client{Transport: client.RoundTripper(nil, func(*http.Request) *client.RateLimiter { return lim })}
	resp, err := hc.Get(target.URL)
	if err == nil {
		fmt.Println(resp.Status)
		resp.Body.Close()
	}
	// Output: 200 OK
}

// A server answers 429 with Retry-After when its share of a global limit
// is used up.
func ExampleHTTPMiddleware() {
	addr, stop := startExampleServer()
	defer stop()
	c, _ := client.New(addr)
	defer c.Close()
	res, _ := c.Resource("db/frontend", 1) // one request per second
	lim := client.NewRateLimiter(res, 0)
	<-res.Changes()

	h := client.HTTPMiddleware(func(*http.Request) *client.RateLimiter { return lim }, 0)(
		http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for range 2 {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		fmt.Printf("%d Retry-After=%q\n", rec.Code, rec.Header().Get("Retry-After"))
	}
	// Output:
	// 200 Retry-After=""
	// 429 Retry-After="1"
}

// A gRPC client takes a permit before each call. A call that would have
// to wait past its deadline fails at once with ResourceExhausted, and a
// call whose context is already cancelled fails with Canceled; neither is
// sent.
func ExampleUnaryClientInterceptor() {
	addr, stop := startExampleServer()
	defer stop()
	c, _ := client.New(addr)
	defer c.Close()
	res, _ := c.Resource("db/grpc-backend", 0.01) // one call per 100 s, to make the point
	lim := client.NewRateLimiter(res, 0)
	<-res.Changes()
	pick := func(method string) *client.RateLimiter { return lim } // or by method

	// The backend: a gRPC server with the standard health service.
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	backend := grpc.NewServer()
	healthpb.RegisterHealthServer(backend, health.NewServer())
	go func() { _ = backend.Serve(lis) }()
	defer backend.Stop()

	conn, _ := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(client.UnaryClientInterceptor(pick)),
		grpc.WithStreamInterceptor(client.StreamClientInterceptor(pick)))
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)

	resp, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{})
	fmt.Println("first call:", resp.GetStatus(), err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err = hc.Check(ctx, &healthpb.HealthCheckRequest{})
	fmt.Println("second call:", status.Code(err))
	cancelled, cancel2 := context.WithCancel(context.Background())
	cancel2()
	_, err = hc.Check(cancelled, &healthpb.HealthCheckRequest{})
	fmt.Println("cancelled call:", status.Code(err))
	// Output:
	// first call: SERVING <nil>
	// second call: ResourceExhausted
	// cancelled call: Canceled
}
