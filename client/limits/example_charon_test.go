package limits_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/sluice-rl/sluice/client/limits"
	limitsengine "github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/limits/copies"
	"github.com/sluice-rl/sluice/resources"
	"github.com/sluice-rl/sluice/server"
)

// exampleCharon starts a Sluice server on loopback with
// examples/charon.yaml's cookbook/sandboxes (copy-limited: domain limit 3,
// acme 4, global limit 5, group trusted = {acme, initech} with limit 4), a
// few gpus, and a rate-limited "api" whose every domain gets 3 tokens.
func exampleCharon() (addr string, stop func()) {
	s, err := server.New(context.Background(), server.Config{ID: "example", Listen: server.Listen{Address: "127.0.0.1:0"}, Runtime: server.Runtime{Logger: quiet}, Repository: server.Repository{Fixed: resources.Compose(nil, &limitsengine.Config{Resources: map[string]*limitsengine.Resource{
		"api": {Default: &limitsengine.Bucket{Size: 3, FillRate: 0.01, MaxTokensPerRequest: 10}},
	}}, &copies.Config{Resources: map[string]copies.Resource{
		"cookbook/sandboxes": copiesConfig().Resources["sandboxes"],
		"gpus":               {DomainLimit: 2, GlobalLimit: 8},
	}}, nil)}})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(ctx) }()
	return s.Addr(), func() { cancel(); <-done }
}

// Charon's rate-limited requests: the most hits in [min, n] available now,
// retried with exponential backoff within the max wait, or the last
// rejection.
func ExampleClient_Request() {
	addr, stop := exampleCharon()
	defer stop()
	// An answer slower than the call timeout (1 s by default) would fail
	// open: a generous one, for a loaded machine.
	c, err := limits.New(addr, limits.WithCallTimeout(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	g, err := c.Request(ctx, "api", "acme", 5, 1, 0) // at least 1 of 5 now
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("granted", g.Granted, "from the", g.Source)
	_, err = c.Request(ctx, "api", "acme", 1, 0, 0) // max wait 0: one attempt
	var rej *limits.RejectedError
	if errors.As(err, &rej) {
		fmt.Println("rejected after", rej.Attempts, "attempt:", rej.Status)
	}
	// Output:
	// granted 3 from the service
	// rejected after 1 attempt: REJECTED_TIMEOUT
}

// A copy-limited resource held for a block of work (the paper's Figure 5):
// Do releases what is left when the function returns, or panics.
func ExampleClient_ReserveCopies() {
	addr, stop := exampleCharon()
	defer stop()
	c, err := limits.New(addr, limits.WithCallTimeout(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close() // closes the session: the service releases anything left
	ctx := context.Background()
	// Up to 5 sandboxes, at least 2, retrying for up to 10 s.
	h, err := c.ReserveCopies(ctx, "cookbook/sandboxes", "acme", 5, 2, 10*time.Second)
	var over *limits.OverLimitError
	switch {
	case errors.As(err, &over):
		fmt.Println("no sandboxes:", over)
		return
	case err != nil:
		log.Fatal(err)
	}
	err = h.Do(ctx, func(ctx context.Context) error {
		fmt.Printf("working on %d sandboxes, counted in groups %v\n", h.Copies(), h.Groups())
		return h.Release(ctx, 1) // done with one early
	})
	fmt.Println("done:", err, "- held now:", h.Copies())
	// Output:
	// working on 4 sandboxes, counted in groups [trusted]
	// done: <nil> - held now: 0
}

// Copies handed from one process to another (the paper's Figure 6): the
// first stages some with Transfer and sends the id; the second Seizes
// them into its own session and releases them when done.
func ExampleHold_Transfer() {
	addr, stop := exampleCharon()
	defer stop()
	ctx := context.Background()
	first, err := limits.New(addr, limits.WithCallTimeout(10*time.Second)) // process 1
	if err != nil {
		log.Fatal(err)
	}
	defer first.Close()
	second, err := limits.New(addr, limits.WithCallTimeout(10*time.Second)) // process 2
	if err != nil {
		log.Fatal(err)
	}
	defer second.Close()

	h, err := first.ReserveCopies(ctx, "cookbook/sandboxes", "initech", 3, 0, 0)
	if err != nil {
		log.Fatal(err)
	}
	id, err := h.Transfer(ctx, 2, 30*time.Second) // unseized for 30 s: released
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("process 1 staged 2, keeps", h.Copies())

	seized, err := second.Seize(ctx, id) // id sent over any channel
	if err != nil {
		log.Fatal(err)
	}
	err = seized.Do(ctx, func(context.Context) error {
		fmt.Printf("process 2 holds %d of %s for %s\n", seized.Copies(), seized.Resource(), seized.Domain())
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	_, err = second.Seize(ctx, id)
	fmt.Println("seized twice:", errors.Is(err, limits.ErrNotFound))
	// Output:
	// process 1 staged 2, keeps 1
	// process 2 holds 2 of cookbook/sandboxes for initech
	// seized twice: true
}

// Several resources pseudo-atomically (the paper's section 3.3, Figure
// 7): the same number of each, the rate-limited one last.
func ExampleClient_ReserveMulti() {
	addr, stop := exampleCharon()
	defer stop()
	c, err := limits.New(addr, limits.WithCallTimeout(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	m, err := c.ReserveMulti(ctx, limits.MultiRequest{
		Domain:  "acme",
		Copies:  []string{"cookbook/sandboxes", "gpus"}, // acme: 4 sandboxes, 2 gpus
		Rate:    "api",
		Max:     4,
		Min:     1,
		MaxWait: 5 * time.Second,
	})
	if err != nil {
		log.Fatal(err)
	}
	err = m.Do(ctx, func(context.Context) error {
		fmt.Println("n =", m.N(), "of each; hits granted:", m.Grant().Granted)
		return nil
	})
	fmt.Println("released:", err == nil)
	// Output:
	// n = 2 of each; hits granted: 2
	// released: true
}

// The kill switch turns rejections into grants of the minimum, flagged:
// the service's limits are observed, not enforced.
func ExampleClient_SetKillSwitch() {
	addr, stop := exampleCharon()
	defer stop()
	c, err := limits.New(addr, limits.WithCallTimeout(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if _, err := c.Request(ctx, "api", "globex", 3, 0, 0); err != nil {
		log.Fatal(err)
	}
	c.SetKillSwitch(true)
	g, err := c.Request(ctx, "api", "globex", 2, 1, time.Minute) // over the limit
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("granted", g.Granted, "by the", g.Source, "- degraded:", g.Degraded())
	// Output:
	// granted 1 by the kill switch - degraded: true
}
