// Package watch is the holder's side of sluice.v1.Leases/Watch, shared by
// the client library and an intermediate server's link to its parent: one
// stream to the master the holder sends its requests to, opened again
// after it ends, whose leases the holder applies as they come.
package watch

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"time"

	"connectrpc.com/connect"

	v1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/api/sluice/v1/sluicev1connect"
	"github.com/sluice-rl/sluice/internal/discovery"
	"github.com/sluice-rl/sluice/internal/refresh"
)

// Unsupported is how long a holder waits before it asks again a server
// that does not push leases (a Doorman server, an older Sluice, or one
// started with --push-leases=false): it polls meanwhile, as Doorman's
// clients do.
const Unsupported = 5 * time.Minute

// Backoff bounds the wait before a stream that failed is opened again.
const (
	MinBackoff = 100 * time.Millisecond
	MaxBackoff = 10 * time.Second
)

// Dialer returns the sluice.v1.Leases stub of the server at addr.
type Dialer func(addr string) sluicev1connect.LeasesClient

// NewDialer returns a Dialer speaking gRPC (or, with json, Connect's
// protocol) through hc; addresses without a scheme get scheme.
func NewDialer(hc *http.Client, scheme string, json bool) Dialer {
	opts := discovery.ClientOptions(json)
	return func(addr string) sluicev1connect.LeasesClient {
		return sluicev1connect.NewLeasesClient(hc, discovery.Target(scheme, addr), opts...)
	}
}

// Options configure Run.
type Options struct {
	// Holder is the holder's id: its client_id or server_id.
	Holder string
	// Server returns the address the holder sends its requests to (the
	// master, as far as it knows).
	Server func() string
	// Dial reaches a server.
	Dial Dialer
	// Apply applies the leases of one message, in order.
	Apply func([]*v1.PushedLease)
	// Rand is the backoff's jitter source; nil is math/rand/v2's global
	// source.
	Rand *rand.Rand
}

// Run watches until ctx ends: it opens a stream to o.Server(), applies
// what comes on it, and when it ends opens another (at once if the first
// message had arrived — a stream that worked and was ended by the server
// on a loss of mastership or a newer watch — else after a backoff; after
// Unsupported if the server does not push leases).
func Run(ctx context.Context, o Options) {
	retry := refresh.Retry{Min: MinBackoff, Max: MaxBackoff, Rand: o.Rand}
	for ctx.Err() == nil {
		opened, err := once(ctx, o)
		if ctx.Err() != nil {
			return
		}
		if opened {
			retry.Succeeded(MinBackoff) // the next one soon, but not in a tight loop
		}
		// Not the master (FailedPrecondition): the refresh loop finds it
		// meanwhile.
		wait := retry.Failed()
		if connect.CodeOf(err) == connect.CodeUnimplemented {
			wait = Unsupported // no pushes here
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// once opens one stream and reads it until it ends; opened reports
// whether its first message arrived.
func once(ctx context.Context, o Options) (opened bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := o.Dial(o.Server()).Watch(ctx, connect.NewRequest(&v1.WatchRequest{HolderId: o.Holder}))
	if err != nil {
		return false, err
	}
	defer stream.Close()
	for stream.Receive() {
		opened = true
		if ls := stream.Msg().GetLeases(); len(ls) > 0 {
			o.Apply(ls)
		}
	}
	if err := stream.Err(); err != nil {
		return opened, err
	}
	return opened, errors.New("the watch ended")
}
