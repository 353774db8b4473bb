package client_test

import (
	"context"
	"sync"
	"time"

	"github.com/sluice-rl/sluice/api/doorman/doormanconnect"
	"github.com/sluice-rl/sluice/client"
	"github.com/sluice-rl/sluice/internal/hooks"
)

// manual maps each client made with manualOf to its hooks.
var manual sync.Map // *client.Client -> *hooks.Client

// manualOf returns the option that makes a client talk to srv in process
// and refreshes only when the test steps it (internal/hooks).
func manualOf(srv doormanconnect.CapacityClient) client.Option {
	h := &hooks.Client{
		Dial:   func(string) doormanconnect.CapacityClient { return srv },
		Manual: true,
	}
	with := client.WithHooks(h)
	return func(c *client.Client) {
		with(c)
		manual.Store(c, h)
	}
}

// step takes one turn of c's refresh loop and returns how long until the
// next is due.
func step(c *client.Client) time.Duration {
	h, _ := manual.Load(c)
	return h.(*hooks.Client).Step(context.Background())
}
