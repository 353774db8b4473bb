// Package parentlink is the link of an intermediate Doorman server to its
// parent: it asks the parent node for capacity on behalf of the server's
// requesters with GetServerCapacity, one bulk request for every resource,
// on the parent's schedule (the shortest refresh interval among its
// leases), follows mastership redirects and fails over between the
// parent's addresses (to its master, found with Discovery), gives back
// resources nobody holds any more (ReleaseCapacity), and watches the
// parent for pushed leases (sluice.v1.Leases/Watch). Lease is one
// resource's lease from the parent and the configuration (algorithm,
// parameters, safe capacity) the parent forwards with it.
//
// The link knows nothing of the server's resources: the server (package
// server/capacity) gives it a Server, which condenses its state into a
// request and applies the answers under its own locks.
//
// Source: doorman-design.md, "Getting capacity for the server", "Master
// Election" (redirects), "Finding the algorithm to use".
package parentlink

import (
	"context"
	"crypto/tls"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	pb "github.com/sluice-rl/sluice/api/doorman"
	"github.com/sluice-rl/sluice/api/doorman/doormanconnect"
	v1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/internal/discovery"
	"github.com/sluice-rl/sluice/internal/refresh"
	"github.com/sluice-rl/sluice/internal/watch"
)

// Timing of the link.
const (
	// timeout bounds one RPC to the parent.
	timeout = 5 * time.Second
	// minBackoff and maxBackoff bound the wait after a failed refresh
	// (never longer than the last refresh interval, either).
	minBackoff = 100 * time.Millisecond
	maxBackoff = 5 * time.Second
)

// Server is the intermediate server a Link gets capacity for (package
// server/capacity's side of the link). R is the server's handle on one of
// its resources, handed back with the answer that concerns it. The link
// calls Request and Answered from one goroutine at a time, Pushed from
// another: each must be safe for concurrent use with the server's own
// work.
type Server[R any] interface {
	// Request condenses the server's state into a GetServerCapacity
	// request for every resource it holds state for: per resource, its
	// demand per priority band and what it holds; rs[i] is the handle of
	// req.Resource[i].
	Request() (req *pb.GetServerCapacityRequest, rs []R)
	// Answered applies the parent's answer for the resources rs (those of
	// one request; the answer may leave some out) and returns when to ask
	// again (> 0).
	Answered(rs []R, resp *pb.GetServerCapacityResponse) time.Duration
	// Pushed applies leases the parent pushed.
	Pushed(ls []*v1.PushedLease)
}

// Options configures a Link.
type Options struct {
	// ID is this server's id: the client_id of its ReleaseCapacity and the
	// holder of its watch. (Server.Request names it as server_id.)
	ID string
	// Addresses are the parent node's tasks ("host:port"; any of them:
	// the master is found with Discovery and redirects). At least one.
	Addresses []string
	// HTTP is the HTTP client for the parent; nil means one speaking gRPC
	// over HTTP/2, over TLS when TLS is set, else unencrypted.
	HTTP *http.Client
	// TLS, when set (and HTTP is not), makes the link speak gRPC over TLS
	// (RootCAs verify the parent; Certificates are presented for mTLS).
	TLS *tls.Config
	// Dial, when set, replaces HTTP and TLS: it returns the stub for a
	// parent address (the simulator's in-process servers). A link with
	// Dial watches nothing (Watch is ignored).
	Dial discovery.Dialer
	// Watch makes Run also watch the parent for pushed leases
	// (sluice.v1.Leases/Watch), applied with Server.Pushed.
	Watch bool
	// MaxResources is the most resources one request carries (the
	// parent's limit, capacity.MaxResourcesPerRequest); more are sent in
	// several requests. ≤ 0: no limit.
	MaxResources int
	// Rand is the source of retry jitter; nil is math/rand/v2's global
	// source.
	Rand *rand.Rand
	// Now returns the current time (when the parent last answered); nil
	// means time.Now.
	Now func() time.Time
	// Logger receives the link's warnings; nil means slog.Default().
	Logger *slog.Logger
}

// Status describes a link, for the status page and tests.
type Status struct {
	// Addresses are the configured parent addresses.
	Addresses []string
	// Current is the address in use (the parent's master when known).
	Current string
	// LastOK is when the parent last answered; zero if never.
	LastOK time.Time
	// LastError is the last failure, "" after a success.
	LastError string
}

// Link is an intermediate server's link to its parent. Run (or, for a
// caller that drives it on virtual time, Step) runs it; Release, Poke and
// Status are safe for concurrent use with it and each other.
type Link[R any] struct {
	srv   Server[R]
	opts  Options
	dial  discovery.Dialer
	watch watch.Dialer // nil: no pushed leases from the parent
	wake  refresh.Wake

	// Loop state, used only by Step (one caller at a time): the backoff
	// after failures, capped by the last answer's refresh interval.
	retry refresh.Retry

	mu       sync.Mutex
	addr     string
	stub     doormanconnect.CapacityClient
	lastOK   time.Time
	lastErr  string
	releases []string // resources the server no longer needs, to release at the parent
}

// New returns the link of srv to the parent at opts.Addresses, talking to
// the first address until a redirect or a failure moves it. It panics
// without an address (a programming error: the caller makes a link only
// for an intermediate server).
func New[R any](srv Server[R], opts Options) *Link[R] {
	if len(opts.Addresses) == 0 {
		panic("parentlink: no parent address")
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	dial := opts.Dial
	var wd watch.Dialer
	if dial == nil {
		hc := opts.HTTP
		if hc == nil {
			hc = &http.Client{Transport: discovery.Transport(opts.TLS, false)}
		}
		dial = discovery.NewDialer(hc, discovery.Scheme(opts.TLS), false)
		if opts.Watch {
			wd = watch.NewDialer(hc, discovery.Scheme(opts.TLS), false)
		}
	}
	l := &Link[R]{srv: srv, opts: opts, dial: dial, watch: wd, wake: refresh.NewWake(),
		retry: refresh.Retry{Min: minBackoff, Max: maxBackoff, Rand: opts.Rand}}
	l.use(opts.Addresses[0])
	return l
}

// Run refreshes until ctx is done, and watches the parent for pushed
// leases meanwhile (Options.Watch); it returns when both have stopped.
func (l *Link[R]) Run(ctx context.Context) {
	if l.watch != nil {
		watched := make(chan struct{})
		defer func() { <-watched }()
		go func() {
			defer close(watched)
			watch.Run(ctx, watch.Options{
				Holder: l.opts.ID,
				Server: func() string { addr, _ := l.current(); return addr },
				Dial:   l.watch,
				Apply:  l.srv.Pushed,
				Rand:   l.opts.Rand,
			})
		}()
	}
	refresh.Run(ctx, l.wake, l.Step)
}

// Step is one turn of the link: it gives back the resources queued by
// Release, sends one GetServerCapacity for every resource the server holds
// and applies the answer, and on failure backs off (never longer than the
// last refresh interval, so that a parent's failover is found while the
// leases it gave still run) and fails over to the parent's master, found
// with Discovery, or else to the next address. It returns when the next
// turn is due (0 once ctx is done). Not for concurrent use with itself:
// Run calls it, or the caller (hooks.Server.ManualParent) does.
func (l *Link[R]) Step(ctx context.Context) time.Duration {
	l.sendReleases(ctx)
	next, err := l.refresh(ctx)
	if ctx.Err() != nil {
		return 0
	}
	if err != nil {
		next = l.retry.Failed()
		l.mu.Lock()
		l.lastErr = err.Error()
		l.mu.Unlock()
		l.opts.Logger.Warn("parent refresh failed", "parent", l.opts.Addresses, "err", err, "retry_in", next)
		cur, _ := l.current()
		l.use(discovery.Next(ctx, l.dial, l.opts.Addresses, cur))
	} else {
		l.retry.Succeeded(next)
	}
	return next
}

// Poke asks Run to take its next turn now.
func (l *Link[R]) Poke() { l.wake.Poke() }

// Release queues resources the server holds no lease for any more, to be
// released at the parent on the link's next turn (which it triggers),
// rather than left booked there until they expire.
func (l *Link[R]) Release(ids []string) {
	l.mu.Lock()
	l.releases = append(l.releases, ids...)
	l.mu.Unlock()
	l.Poke()
}

// Status returns the link's state.
func (l *Link[R]) Status() Status {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Status{Addresses: append([]string(nil), l.opts.Addresses...), Current: l.addr, LastOK: l.lastOK, LastError: l.lastErr}
}

// Failing reports whether the link's last turn failed (the parent is down
// or cut off).
func (l *Link[R]) Failing() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastErr != ""
}

// use makes addr the parent address the link talks to and returns its stub.
func (l *Link[R]) use(addr string) doormanconnect.CapacityClient {
	l.mu.Lock()
	defer l.mu.Unlock()
	if addr != l.addr || l.stub == nil {
		l.addr = addr
		l.stub = l.dial(addr)
	}
	return l.stub
}

func (l *Link[R]) current() (string, doormanconnect.CapacityClient) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.addr, l.stub
}

// parts splits n items into runs of at most Options.MaxResources.
func (l *Link[R]) parts(n int, each func(start, end int) error) error {
	size := l.opts.MaxResources
	if size <= 0 {
		size = max(n, 1)
	}
	for start := 0; start < n; start += size {
		if err := each(start, min(start+size, n)); err != nil {
			return err
		}
	}
	return nil
}

// sendReleases gives the queued resources back to the parent (best effort:
// on failure their leases lapse at expiry).
func (l *Link[R]) sendReleases(ctx context.Context) {
	l.mu.Lock()
	ids := l.releases
	l.releases = nil
	l.mu.Unlock()
	_ = l.parts(len(ids), func(start, end int) error {
		part := ids[start:end]
		addr, stub := l.current()
		rctx, cancel := context.WithTimeout(ctx, timeout)
		_, err := stub.ReleaseCapacity(rctx, connect.NewRequest(&pb.ReleaseCapacityRequest{
			ClientId: proto.String(l.opts.ID), ResourceId: part,
		}))
		cancel()
		if err != nil {
			l.opts.Logger.Warn("releasing resources at the parent failed; their leases lapse at expiry", "parent", addr, "resources", len(part), "err", err)
		}
		return nil
	})
}

// refresh sends one GetServerCapacity for every resource the server holds
// state for (in parts of at most Options.MaxResources: the parent rejects
// more) and returns when to refresh next.
func (l *Link[R]) refresh(ctx context.Context) (time.Duration, error) {
	req, rs := l.srv.Request()
	if len(req.Resource) == 0 {
		return time.Second, nil
	}
	next := time.Duration(math.MaxInt64)
	err := l.parts(len(rs), func(start, end int) error {
		part := &pb.GetServerCapacityRequest{ServerId: req.ServerId, Resource: req.Resource[start:end]}
		d, err := l.send(ctx, part, rs[start:end])
		next = min(next, d)
		return err
	})
	if err != nil {
		return 0, err
	}
	return next, nil
}

// send sends one GetServerCapacity, following mastership redirects, and
// applies the answer.
func (l *Link[R]) send(ctx context.Context, req *pb.GetServerCapacityRequest, rs []R) (time.Duration, error) {
	cur, _ := l.current()
	creq := connect.NewRequest(req)
	resp, _, err := refresh.Follow(ctx, "GetServerCapacity", cur, func(ctx context.Context, addr string) (*pb.GetServerCapacityResponse, *pb.Mastership, error) {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		resp, err := l.use(addr).GetServerCapacity(ctx, creq)
		if err != nil {
			return nil, nil, err
		}
		return resp.Msg, resp.Msg.Mastership, nil
	})
	if err != nil {
		// The server's first requests keep waiting (up to its bound): the
		// retry, soon and on another address, may reach the master.
		return 0, err
	}
	l.mu.Lock()
	l.lastOK, l.lastErr = l.opts.Now(), ""
	l.mu.Unlock()
	return l.srv.Answered(rs, resp), nil
}
