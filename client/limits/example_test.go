package limits_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/sluice-rl/sluice/client/limits"
	limitsengine "github.com/sluice-rl/sluice/limits"
)

// exampleService starts a limits service on loopback with the tests'
// configuration (testConfig): in "Pinky_TheBrain", the domain prefix
// "UserService" gives each of its methods 2 tokens, hardly refilled.
func exampleService() (addr string, stop func()) {
	e, err := limitsengine.New(testConfig(), limitsengine.Options{})
	if err != nil {
		log.Fatal(err)
	}
	addr, stop, err = serve(&service{engine: e})
	if err != nil {
		log.Fatal(err)
	}
	return addr, stop
}

// The manual mode (scenarios 1 and 4): ask before each call, and do not
// make the call when the answer is no.
func ExampleClient_Allow() {
	addr, stop := exampleService()
	defer stop()
	c, err := limits.New(addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	for range 3 {
		g, err := c.Allow(context.Background(), "Pinky_TheBrain", "UserService/getUser", 1)
		var rej *limits.RejectedError
		switch {
		case errors.As(err, &rej):
			fmt.Println("rejected:", rej.Status)
		case err != nil:
			log.Fatal(err)
		default:
			fmt.Printf("granted %d by the %q bucket\n", g.Granted, g.Bucket)
		}
	}
	// Output:
	// granted 1 by the "prefix UserService" bucket
	// granted 1 by the "prefix UserService" bucket
	// rejected: REJECTED_TIMEOUT
}

// The naive mode for gRPC: the interceptor asks before each call, as
// resource "grpc", domain "grpc.health.v1.Health/Check" (MethodTarget, the
// default; the service configures the prefix "grpc.health.v1.Health"); a
// rejected call is not sent and fails with ResourceExhausted.
func ExampleClient_UnaryClientInterceptor() {
	addr, stop := exampleService()
	defer stop()
	// The service called: a gRPC health server.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	gs := grpc.NewServer()
	healthpb.RegisterHealthServer(gs, health.NewServer())
	go func() { _ = gs.Serve(lis) }()
	defer gs.Stop()

	c, err := limits.New(addr, limits.WithTimeout(time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	conn, err := grpc.NewClient(lis.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(c.UnaryClientInterceptor(nil))) // resource "grpc"
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	for range 3 {
		_, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{})
		fmt.Println(status.Code(err))
	}
	// Output:
	// OK
	// OK
	// ResourceExhausted
}

// The naive mode for HTTP: the RoundTripper asks before each request
// (resource "http", domain host + path); a rejected request gets a 429
// made by the client, with Retry-After.
func ExampleClient_RoundTripper() {
	addr, stop := exampleService()
	defer stop()
	target := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer target.Close()

	c, err := limits.New(addr, limits.WithTimeout(time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	hc := &http.Client{Transport: c.RoundTripper(nil, nil)}
	for range 3 {
		resp, err := hc.Get(target.URL + "/users/42")
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
		fmt.Println(resp.StatusCode, resp.Header.Get("Retry-After") != "")
	}
	// Output:
	// 200 false
	// 200 false
	// 429 true
}

// The smart mode (scenario 5): calls take tokens from a local bucket that
// batched requests top up in the background; Acquire (like the
// interceptors and the RoundTripper) waits on the network only when the
// bucket is empty.
func ExampleWithSmart() {
	addr, stop := exampleService()
	defer stop()
	c, err := limits.New(addr, limits.WithTimeout(time.Second),
		limits.WithSmart(limits.Smart{Batch: 10, LowWater: 5, TTL: time.Second}))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	local := 0
	for range 100 {
		g, err := c.Acquire(context.Background(), "api", "fast", 1)
		if err != nil {
			log.Fatal(err)
		}
		if g.Source == limits.FromLocalBucket {
			local++
		}
	}
	fmt.Println(local, "of 100 calls took a local token")
	// Output:
	// 100 of 100 calls took a local token
}

// Post-accounting (scenario 6): charge what a call cost once it is done;
// Report batches per target and never blocks, Close flushes.
func ExampleClient_Report() {
	addr, stop := exampleService()
	defer stop()
	c, err := limits.New(addr, limits.WithReportInterval(time.Minute))
	if err != nil {
		log.Fatal(err)
	}
	for _, cost := range []time.Duration{12 * time.Millisecond, 7 * time.Millisecond, 11 * time.Millisecond} {
		// A token is a millisecond of work.
		if err := c.Report("Pinky_TheBrain", "batch", cost.Milliseconds()); err != nil {
			log.Fatal(err)
		}
	}
	c.Close() // sends the batch: one request for 30 tokens

	m, err := limits.New(addr)
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	g, err := m.Reserve(context.Background(), "Pinky_TheBrain", "batch", 1)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%.0f of %d tokens left\n", g.Remaining, g.Limit)
	// Output:
	// 69 of 100 tokens left
}
