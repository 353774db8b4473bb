package client_test

import (
	"context"
	"time"

	"github.com/sluice-rl/sluice/api/doorman/doormanconnect"
	"github.com/sluice-rl/sluice/client"
	"github.com/sluice-rl/sluice/internal/hooks"
)

// manualOf returns the option that makes a client talk to srv in process
// and refreshes only when the test steps it (internal/hooks).
func manualOf(srv doormanconnect.CapacityClient) client.Option {
	return hooks.ClientOption(hooks.Client{
		Dial:   func(string) doormanconnect.CapacityClient { return srv },
		Manual: true,
	}).(client.Option)
}

// step takes one turn of c's refresh loop and returns how long until the
// next is due.
func step(c *client.Client) time.Duration { return hooks.ClientStep(c, context.Background()) }
