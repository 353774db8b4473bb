package client_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/sluice-rl/sluice/client"
	"github.com/sluice-rl/sluice/config"
	"github.com/sluice-rl/sluice/server"
)

// startExampleServer runs a capacity server on loopback for the examples.
func startExampleServer() (addr string, stop func()) {
	repo, err := config.Parse([]byte(`
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
	hs := &http.Server{Handler: server.New(server.Options{Address: lis.Addr().String(), Config: repo}).Handler(), Protocols: p}
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
