// Package refresh is the one refresh machinery of Sluice's lease keepers:
// the loop that runs a step when it is due or when woken (Run, Wake; and
// Every, the same loop at a fixed interval, which the servers' background
// work uses: sweeps, reaps, readiness), the
// failure bookkeeping that turns consecutive failures into a backoff
// (Retry), and the following of mastership redirects (Follow). The
// client's refresh loop, an intermediate server's link to its parent and
// `sluice get` use it, so that each rule lives in one place.
//
// Source: doorman-design.md, "Client operation" (redirects to the
// master), "Client library" (refresh loop, retries), "Getting capacity for
// the server".
package refresh

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	pb "github.com/sluice-rl/sluice/api/doorman"
	"github.com/sluice-rl/sluice/internal/retry"
)

// Wake asks a loop to take its next step at once. The zero value is not
// usable: make one with NewWake. Poke never blocks; pokes that arrive
// while one is pending merge into it. Safe for concurrent use.
type Wake chan struct{}

// NewWake returns a Wake with no poke pending.
func NewWake() Wake { return make(Wake, 1) }

// Poke makes the loop waiting on w step now (or as soon as its current
// step returns).
func (w Wake) Poke() {
	select {
	case w <- struct{}{}:
	default:
	}
}

// Run calls step at once, then again when the duration the last step
// returned has passed or w is poked, until ctx is done. It returns when ctx
// is done; a step in progress is not interrupted (step gets ctx and should
// honour it).
func Run(ctx context.Context, w Wake, step func(context.Context) time.Duration) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-w:
			timer.Stop() // Go ≥ 1.23: a stopped timer's channel delivers nothing stale
		}
		next := step(ctx)
		if ctx.Err() != nil {
			return
		}
		timer.Reset(next)
	}
}

// Every calls step every interval, the first time one interval after the
// call, until ctx is done: Run at a fixed interval, with no Wake.
func Every(ctx context.Context, interval time.Duration, step func(context.Context)) {
	first := true
	Run(ctx, nil, func(ctx context.Context) time.Duration {
		if !first {
			step(ctx)
		}
		first = false
		return interval
	})
}

// Retry is the failure bookkeeping of a refresh loop: after a failure the
// next attempt comes after a capped exponential backoff with jitter
// (internal/retry.Backoff between Min and Max), never later than the last
// refresh interval the server asked for, so that a failover is found while
// the leases that server gave still run. The zero value has no interval
// yet: until the first success a backoff is capped at Max. Not safe for
// concurrent use (one loop owns it).
type Retry struct {
	// Min and Max bound the backoff (Min after the first failure).
	Min, Max time.Duration
	// Rand is the jitter's source; nil is the global math/rand/v2 source.
	Rand *rand.Rand

	failures int
	interval time.Duration
}

// Failed records a failure and returns how long to wait before the next
// attempt.
func (r *Retry) Failed() time.Duration {
	r.failures++
	d := retry.Backoff(r.failures, r.Min, r.Max, r.Rand)
	if r.interval > 0 {
		d = min(d, r.interval)
	}
	return d
}

// Succeeded records an answer whose refresh interval was interval (bounded
// to [Min, Max] as a cap for later backoffs) and resets the failure count.
func (r *Retry) Succeeded(interval time.Duration) {
	r.failures = 0
	r.interval = max(min(interval, r.Max), r.Min)
}

// Failures returns the number of consecutive failures.
func (r *Retry) Failures() int { return r.failures }

// MaxRedirects is how many mastership redirects Follow follows for one
// request: a longer chain means the servers disagree about their master.
const MaxRedirects = 3

// Follow sends a request to addr with call and, while the answer is a
// mastership redirect (call returns a non-nil Mastership) naming another
// server, sends it again there, up to MaxRedirects times. It returns the
// master's answer and the address that gave it; on failure, the error and
// the last address tried (a caller keeps talking to the server it was sent
// to). what names the RPC in errors ("GetCapacity"). A redirect that names
// no master, or the server itself, or one past MaxRedirects, is an error
// that says "not the master".
//
// Source: doorman-design.md, "Client operation" ("… the server responds
// with the address of the current master").
func Follow[T any](ctx context.Context, what, addr string, call func(ctx context.Context, addr string) (T, *pb.Mastership, error)) (T, string, error) {
	for redirects := 0; ; redirects++ {
		resp, m, err := call(ctx, addr)
		if err != nil {
			var zero T
			return zero, addr, fmt.Errorf("%s to %s: %w", what, addr, err)
		}
		if m == nil {
			return resp, addr, nil
		}
		master := m.GetMasterAddress()
		if master == "" || master == addr || redirects >= MaxRedirects {
			var zero T
			return zero, addr, fmt.Errorf("%s to %s: not the master (master %q)", what, addr, master)
		}
		addr = master
	}
}
