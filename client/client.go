// Package client is Sluice's Go client library: it leases capacity for a
// process's resources from a capacity server (Sluice or Doorman) and keeps
// the leases fresh, so the process can enforce them locally with the
// limiters of package ratelimit.
//
// One Client carries its resources in one bulk GetCapacity request, sent at
// the smallest refresh interval among its leases — stretched to at least 5 s
// (doorman.MinRequestInterval), as Doorman's own client does — and at once
// when a resource is added. It keeps Doorman's 5-second rule: it never sends
// a resource's request more often than once every 5 s. A resource requested
// less than 5 s ago is left out of a request (one sent for a new resource,
// say), and a change of wants inside those 5 s is sent when they end (the
// whole rule is below). It follows mastership redirects, retries failures
// with capped exponential backoff and jitter (a retry is not held back by
// the 5 s: the master never answered), and when a lease expires without
// renewal falls back to its mode: pessimistic (0), optimistic (what it
// wants) or safe (the server's safe capacity, the default).
//
// # Doorman's 5-second rule
//
// A resource is never sent more often than once every MinRequestInterval
// (doorman.MinRequestInterval, 5 s), counted from the arrival of the
// master's answer to the last request carrying it (so the master, which saw
// that request earlier, never sees two within 5 s; that span is the
// resource's window). A request is due when a resource is new (never
// requested: it is sent at once), when a resource's wants changed or it
// holds no valid lease (sent as soon as its window ends), when a lease's
// refresh interval has passed (the client refreshes at max(granted refresh
// interval, MinRequestInterval), as Doorman's client stretches shorter
// intervals), or ExpiryMargin before a lease expires (but not before its
// window ends: a lease shorter than 5 s runs out before it can be renewed,
// and the fallback applies meanwhile). The request carries every resource
// outside its window, and leaves out those inside it. A request due only for
// refreshes waits, for less than MinRequestInterval and never past those
// leases' ExpiryMargin, until the resources inside their windows may go too,
// so a resource sent on its own (new, or its wants changed) rejoins the
// others in one bulk request. A request that failed, or was redirected by a
// server that is not the master, was not answered by the master: its retry
// (after the backoff, or at once to the new master) is not held back by the
// window. A resource released and added again is new.
//
// Source: doorman-design.md, "Client operation" (at most one request per
// resource every five seconds), "Client library", "Optimistic, pessimistic
// and safe mode operation".
package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/prometheus/client_golang/prometheus"
	pb "github.com/sluice-rl/sluice/api/doorman"
	"github.com/sluice-rl/sluice/api/doorman/doormanconnect"
	v1 "github.com/sluice-rl/sluice/api/sluice/v1"

	"github.com/sluice-rl/sluice/internal/discovery"
	"github.com/sluice-rl/sluice/internal/hooks"
	"github.com/sluice-rl/sluice/internal/refresh"
	"github.com/sluice-rl/sluice/internal/watch"
)

// Mode is what a resource does when its lease has expired without renewal.
//
// Source: doorman-design.md, "Optimistic, pessimistic and safe mode
// operation".
type Mode int

const (
	// Safe uses the safe capacity the server last sent (the template's, or
	// the server's capacity ÷ clients). It is the default. Before any
	// answer from a server the safe capacity is unknown and counts as 0.
	Safe Mode = iota
	// Pessimistic behaves as if capacity 0 was granted.
	Pessimistic
	// Optimistic behaves as if what the resource wants was granted.
	Optimistic
)

// String returns "safe", "pessimistic" or "optimistic".
func (m Mode) String() string {
	switch m {
	case Safe:
		return "safe"
	case Pessimistic:
		return "pessimistic"
	case Optimistic:
		return "optimistic"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// ParseMode parses "safe", "pessimistic" or "optimistic".
func ParseMode(s string) (Mode, error) {
	for _, m := range []Mode{Safe, Pessimistic, Optimistic} {
		if strings.EqualFold(s, m.String()) {
			return m, nil
		}
	}
	return 0, fmt.Errorf("unknown mode %q (want safe, pessimistic or optimistic)", s)
}

// Backoff limits for failed RPCs: the delay starts at MinBackoff, doubles
// per failure up to MaxBackoff, with equal jitter (uniform in [d/2, d]; the
// same in every client: clients/vectors/retry.json).
const (
	MinBackoff = 100 * time.Millisecond
	MaxBackoff = 10 * time.Second
)

// DefaultRefreshInterval is the refresh interval of a lease whose answer
// gave none, and how long the refresh loop waits when the client has no
// resources.
const DefaultRefreshInterval = 5 * time.Second

// Option configures a Client.
type Option func(*Client)

// WithMode sets the fallback mode of every resource (default Safe).
func WithMode(m Mode) Option { return func(c *Client) { c.mode = m } }

// WithID sets the client id instead of the generated host:pid:n.
func WithID(id string) Option { return func(c *Client) { c.id = id } }

// WithHTTPClient sets the HTTP client used for RPCs (for TLS, say). It
// must speak HTTP/2 for the gRPC protocol.
func WithHTTPClient(h *http.Client) Option { return func(c *Client) { c.http = h } }

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(c *Client) { c.log = l } }

// WithTLS makes the client speak gRPC over TLS with cfg (its RootCAs
// verify the servers; its Certificates, if any, are presented for mTLS).
// Addresses without a scheme get https://. Ignored with WithHTTPClient.
func WithTLS(cfg *tls.Config) Option { return func(c *Client) { c.tls = cfg } }

// WithClock sets the clock (default time.Now); leases, expiries and
// fallbacks are judged by it.
func WithClock(now func() time.Time) Option { return func(c *Client) { c.now = now } }

// WithRegisterer registers the client's Prometheus metrics with reg: RPCs
// by method and code, their latency, and per resource (up to
// MaxResourceSeries, the rest as "other") the capacity in use and the
// time spent without a valid lease (in the fallback mode). It panics if
// another client registered the same metrics with reg (use one registry,
// or prometheus.WrapRegistererWith a distinguishing label, per client).
func WithRegisterer(reg prometheus.Registerer) Option {
	return func(c *Client) { c.registerer = reg }
}

// WithJSON makes the client speak Connect's JSON over HTTP/1.1 instead of
// gRPC (for proxies that do not pass gRPC). Doorman servers need gRPC.
func WithJSON() Option { return func(c *Client) { c.json = true } }

// Client leases capacity for a set of resources from a capacity server.
// It is safe for concurrent use. Close it to release its leases.
type Client struct {
	id         string
	mode       Mode
	http       *http.Client
	log        *slog.Logger
	json       bool
	addrs      []string
	ownHTTP    bool             // c.http was made here: Close closes its connections
	dial       discovery.Dialer // hooks.Dial, or gRPC over http
	tls        *tls.Config
	now        func() time.Time
	registerer prometheus.Registerer
	metrics    *clientMetrics
	hooks      hooks.Client // the simulator's and the tests' knobs
	noPush     bool         // WithoutPush

	// Refresh-loop state, used only by step (one caller at a time): the
	// backoff after failures, capped by the last answer's refresh interval.
	retry refresh.Retry

	mu        sync.Mutex
	addr      string // current master (or candidate) address
	stub      doormanconnect.CapacityClient
	resources map[string]*resourceState
	closed    bool

	killed atomic.Bool // the kill switch (SetKillSwitch)

	wake   refresh.Wake
	cancel context.CancelFunc
	done   chan struct{}
}

var clientSeq atomic.Int64

// NewID returns a client id unique in this process and across hosts and
// processes: host:pid:n.
//
// Source: doorman-design.md, "Client identifier".
func NewID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	return fmt.Sprintf("%s:%d:%d", host, os.Getpid(), clientSeq.Add(1))
}

// New returns a client of the server at addr (host:port, or several
// separated by commas: it uses the first and moves on to the next when one
// fails or redirects it). It starts the refresh loop; it does not wait for
// the server.
func New(addr string, opts ...Option) (*Client, error) {
	var addrs []string
	for _, a := range strings.Split(addr, ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	if len(addrs) == 0 {
		return nil, errors.New("client: no server address")
	}
	c := &Client{
		addrs:     addrs,
		resources: make(map[string]*resourceState),
		wake:      refresh.NewWake(),
		done:      make(chan struct{}),
	}
	for _, o := range opts {
		o(c)
	}
	if c.id == "" {
		c.id = NewID()
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	if c.now == nil {
		c.now = time.Now
	}
	c.dial = c.hooks.Dial
	if c.http == nil && c.dial == nil {
		c.http = &http.Client{Transport: discovery.Transport(c.tls, c.json)}
		c.ownHTTP = true
	}
	if c.dial == nil {
		c.dial = discovery.NewDialer(c.http, discovery.Scheme(c.tls), c.json)
	}
	if c.registerer != nil {
		c.metrics = newClientMetrics(c)
		c.registerer.MustRegister(c.metrics)
	}
	c.retry = refresh.Retry{Min: MinBackoff, Max: MaxBackoff, Rand: c.hooks.Rand}
	c.use(addrs[0])
	if c.hooks.Manual {
		c.cancel = func() {}
		close(c.done)
		return c, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	watching := make(chan struct{})
	go func() {
		defer close(c.done)
		defer func() { <-watching }()
		refresh.Run(ctx, c.wake, c.step)
	}()
	go func() {
		defer close(watching)
		if c.noPush {
			return
		}
		dial := watch.NewDialer(c.http, discovery.Scheme(c.tls), c.json)
		if c.hooks.WatchDial != nil {
			dial = c.hooks.WatchDial
		}
		watch.Run(ctx, watch.Options{Holder: c.id, Server: c.Server, Dial: dial, Apply: c.applyPushed, Rand: c.hooks.Rand})
	}()
	return c, nil
}

// WithoutPush makes the client only poll, as Doorman's clients do: it
// opens no sluice.v1.Leases Watch stream, so capacity another client
// gives back reaches it only at its next request.
func WithoutPush() Option { return func(c *Client) { c.noPush = true } }

// applyPushed applies leases the server pushed (sluice.v1.Leases/Watch):
// each replaces its resource's lease if it is newer than the one held (see
// resourceState.grant).
func (c *Client) applyPushed(ls []*v1.PushedLease) {
	now := c.now()
	for _, l := range ls {
		c.mu.Lock()
		r := c.resources[l.GetResourceId()]
		c.mu.Unlock()
		if r == nil {
			continue
		}
		ri := time.Duration(l.GetRefreshInterval()) * time.Second
		if ri <= 0 {
			ri = DefaultRefreshInterval
		}
		r.grant(l.GetCapacity(), time.Unix(l.GetExpiryTime(), 0), ri, nil, l.GetSequence(), true, now)
	}
}

// ID returns the client id.
func (c *Client) ID() string { return c.id }

// Server returns the address the client currently talks to.
func (c *Client) Server() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.addr
}

// use makes addr the server the client talks to and returns its stub.
func (c *Client) use(addr string) doormanconnect.CapacityClient {
	c.mu.Lock()
	defer c.mu.Unlock()
	if addr != c.addr || c.stub == nil {
		c.addr = addr
		c.stub = c.dial(addr)
		if c.metrics != nil {
			c.stub = c.metrics.wrap(c.stub)
		}
	}
	return c.stub
}

// Resource returns a handle on resource id asking for wants (priority 0).
// The first handle registers the resource and triggers a prompt request
// (a new resource is sent at once: see the package doc);
// until the first lease arrives the resource's capacity is its fallback (see
// Mode). Further handles for the same id share its lease and add their wants
// (reference counted: see Resource.Release). It returns an error if the
// client is closed, the id is empty, or wants is negative or not finite.
func (c *Client) Resource(id string, wants float64) (*Resource, error) {
	return c.ResourceWithPriority(id, wants, 0)
}

// ResourceWithPriority is Resource with a priority (higher is more
// important; how it is used is up to the resource's algorithm).
func (c *Client) ResourceWithPriority(id string, wants float64, priority int64) (*Resource, error) {
	if id == "" {
		return nil, errors.New("client: empty resource id")
	}
	if err := checkWants(wants); err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	h := &Resource{handleWants: wants}
	if r, ok := c.resources[id]; ok {
		if r.priority != priority {
			c.mu.Unlock()
			return nil, fmt.Errorf("client: resource %q is held at priority %d, not %d", id, r.priority, priority)
		}
		h.resourceState = r
		r.handles[h] = struct{}{}
		c.mu.Unlock()
		if err := r.askTotal(); err != nil {
			return nil, err
		}
		return h, nil
	}
	r := newResourceState(c, id, wants, priority, c.now())
	h.resourceState = r
	r.handles[h] = struct{}{}
	c.resources[id] = r
	c.mu.Unlock()
	c.poke()
	return h, nil
}

// sumWants returns the sum of the wants of r's handles.
func (c *Client) sumWants(r *resourceState) float64 {
	c.mu.Lock()
	hs := make([]*Resource, 0, len(r.handles))
	for h := range r.handles {
		hs = append(hs, h)
	}
	c.mu.Unlock()
	sum := 0.0
	for _, h := range hs {
		sum += h.Wants()
	}
	return sum
}

// SetKillSwitch turns the client's kill switch on or off. While it is on,
// every resource's capacity is +Inf: limiters and gauges bound to them admit
// everything, whatever the leases say (the client keeps refreshing them, so
// turning it off restores the leases at once). For when the capacity servers
// misbehave in production. Listeners are told of the change on the
// caller's goroutine, with no lock held (see Resource.OnChange). Safe for
// concurrent use.
//
// Source: Charon §4.3, "kill switch".
func (c *Client) SetKillSwitch(on bool) {
	if c.killed.Swap(on) == on {
		return
	}
	c.mu.Lock()
	rs := make([]*resourceState, 0, len(c.resources))
	for _, r := range c.resources {
		rs = append(rs, r)
	}
	c.mu.Unlock()
	now := c.now()
	for _, r := range rs {
		r.mu.Lock()
		r.changeLocked(now)
		r.mu.Unlock()
		r.deliver()
	}
}

// KillSwitch reports whether the kill switch is on.
func (c *Client) KillSwitch() bool { return c.killed.Load() }

// ErrClosed is returned when using a closed client or released resource.
var ErrClosed = errors.New("client: closed")

func checkWants(w float64) error {
	if math.IsNaN(w) || math.IsInf(w, 0) || w < 0 {
		return fmt.Errorf("client: wants %v must be finite and ≥ 0", w)
	}
	return nil
}

// poke makes the refresh loop send a request now.
func (c *Client) poke() { c.wake.Poke() }

// Close releases every resource (one ReleaseCapacity RPC, best effort,
// bounded by a 2 s timeout) and stops the
// refresh loop. Every resource's capacity becomes 0 and its listeners are
// told so on the caller's goroutine, with no lock held (see
// Resource.OnChange). It returns the ReleaseCapacity RPC's error, if any.
// Closing twice does nothing.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	ids := make([]string, 0, len(c.resources))
	rs := make([]*resourceState, 0, len(c.resources))
	for id, r := range c.resources {
		ids = append(ids, id)
		rs = append(rs, r)
	}
	c.resources = map[string]*resourceState{}
	c.mu.Unlock()
	// Listeners never run under c.mu: they may call back into the client.
	for _, r := range rs {
		r.markReleased()
	}
	c.cancel()
	<-c.done
	if c.ownHTTP {
		defer c.http.CloseIdleConnections()
	}
	if len(ids) == 0 || c.hooks.Manual {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return c.release(ctx, ids)
}

func (c *Client) release(ctx context.Context, ids []string) error {
	c.mu.Lock()
	stub := c.stub
	c.mu.Unlock()
	_, err := stub.ReleaseCapacity(ctx, connect.NewRequest(&pb.ReleaseCapacityRequest{
		ClientId: proto.String(c.id), ResourceId: ids,
	}))
	return err
}

// step is one turn of the refresh loop, at the client's clock: it applies
// the fallback to leases that have expired, sends one bulk GetCapacity
// request if one is due by the 5-second rule of the package doc
// (following mastership redirects; after a failure it backs off and fails
// over to the master named by Discovery), and returns how long until the
// next turn is due. The background loop calls it (at once after Resource
// and a change of wants, and when the previous turn said); with
// hooks.Client.Manual the caller does (hooks.Client.Step). Calling it more
// often sends nothing more: the schedule is kept by step itself. Not for
// concurrent use.
//
// The returned duration is the time until the next request is due; after
// a failure, the backoff (capped exponential with jitter, never longer than
// the last refresh interval); never past the earliest lease expiry, when
// the fallback must apply.
//
// Source: doorman-design.md, "Client operation" ("a client may not send
// more GetCapacity requests for a given resource than once every five
// seconds"), "Client library".
func (c *Client) step(ctx context.Context) time.Duration {
	next, interval, sent, err := c.refresh(ctx)
	if ctx.Err() != nil {
		return 0
	}
	switch {
	case err != nil:
		next = c.retry.Failed()
		c.log.Debug("sluice client: refresh failed", "client", c.id, "server", c.Server(), "err", err, "retry_in", next)
		c.rotate(ctx)
	case sent:
		c.retry.Succeeded(interval)
	}
	// Never sleep past an expiry: the fallback must apply then.
	if exp, ok := c.nextExpiry(); ok {
		next = max(min(next, exp.Sub(c.now())), 0)
	}
	return next
}

// ExpiryMargin is how long before a lease's expiry the client refreshes it
// at the latest, so that a lease whose server could not extend it for a
// while (its own parent was failing over) is renewed without a gap.
const ExpiryMargin = 500 * time.Millisecond

// rotate moves, after a failure, to the master named by Discovery on the
// configured addresses, or else to the next address.
func (c *Client) rotate(ctx context.Context) {
	c.mu.Lock()
	addrs, cur := c.addrs, c.addr
	c.mu.Unlock()
	if len(addrs) < 2 {
		return
	}
	c.use(discovery.Next(ctx, c.dial, addrs, cur))
}

func (c *Client) nextExpiry() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var exp time.Time
	now := c.now()
	for _, r := range c.resources {
		r.mu.Lock()
		if r.hasLease && r.expiry.After(now) && (exp.IsZero() || r.expiry.Before(exp)) {
			exp = r.expiry
		}
		r.mu.Unlock()
	}
	return exp, !exp.IsZero()
}

// resourceList returns the client's resources.
func (c *Client) resourceList() []*resourceState {
	c.mu.Lock()
	defer c.mu.Unlock()
	rs := make([]*resourceState, 0, len(c.resources))
	for _, r := range c.resources {
		rs = append(rs, r)
	}
	return rs
}

// plan decides at now, by the 5-second rule (package doc), whether a bulk request is due
// and what it carries: every resource outside its MinRequestInterval
// window. wait is how long until one is due; 0 means now (send is then not
// empty).
func plan(rs []*resourceState, now time.Time) (send []*resourceState, wait time.Duration) {
	// next: the earliest due time not yet reached; join: the latest end of
	// a window still running; limit: how long a request due only for
	// refreshes may wait (zero: it may not).
	var next, join, limit time.Time
	due, mustGo := false, false
	for _, r := range rs {
		ready, at, latest := r.schedule(now)
		if ready.After(now) {
			join = later(join, ready)
			next = earlier(next, at)
			continue
		}
		send = append(send, r)
		if at.After(now) {
			next = earlier(next, at)
			continue
		}
		due = true
		if latest.IsZero() {
			mustGo = true
		} else {
			limit = earlier(limit, latest)
		}
	}
	switch {
	case !due:
		if next.IsZero() { // no resources
			return nil, DefaultRefreshInterval
		}
		return nil, next.Sub(now)
	case !mustGo && !join.IsZero() && !join.After(limit):
		return nil, join.Sub(now) // wait for the others' windows to end
	}
	return send, 0
}

// earlier returns the earlier of a and b; a zero time counts as unset.
func earlier(a, b time.Time) time.Time {
	if a.IsZero() || b.Before(a) {
		return b
	}
	return a
}

// later returns the later of a and b; a zero time counts as unset.
func later(a, b time.Time) time.Time {
	if a.IsZero() || b.After(a) {
		return b
	}
	return a
}

// refresh sends a bulk GetCapacity if one is due (see step and plan),
// following mastership redirects, and returns how long until the next is
// due, the refresh interval the answer asked for, and whether a request
// was answered.
func (c *Client) refresh(ctx context.Context) (next, interval time.Duration, sent bool, err error) {
	now := c.now()
	rs := c.resourceList()
	for _, r := range rs {
		r.expire(now)
	}
	send, wait := plan(rs, now)
	if wait > 0 {
		return wait, 0, false, nil
	}
	req := connect.NewRequest(&pb.GetCapacityRequest{ClientId: proto.String(c.id)})
	gens := make([]uint64, len(send))
	for i, r := range send {
		var rr *pb.ResourceRequest
		rr, gens[i] = r.request(now)
		req.Msg.Resource = append(req.Msg.Resource, rr)
	}
	resp, _, err := refresh.Follow(ctx, "GetCapacity", c.Server(), func(ctx context.Context, addr string) (*pb.GetCapacityResponse, *pb.Mastership, error) {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		resp, err := c.use(addr).GetCapacity(ctx, req)
		if err != nil {
			return nil, nil, err
		}
		if m := resp.Msg.Mastership; m != nil {
			c.log.Debug("sluice client: following mastership redirect", "from", addr, "to", m.GetMasterAddress())
		}
		return resp.Msg, resp.Msg.Mastership, nil
	})
	if err != nil {
		return 0, 0, false, err
	}
	// The window runs from the answer: the master saw the request
	// earlier, so it never sees two within MinRequestInterval.
	now = c.now()
	for i, r := range send {
		r.sent(now, gens[i])
	}
	interval = c.apply(resp, send, now)
	_, next = plan(c.resourceList(), now)
	return next, interval, true, nil
}

// apply stores the leases of a response and returns the smallest refresh
// interval among them, stretched to MinRequestInterval (the default
// refresh interval if there are none).
func (c *Client) apply(resp *pb.GetCapacityResponse, rs []*resourceState, now time.Time) time.Duration {
	byID := make(map[string]*resourceState, len(rs))
	for _, r := range rs {
		byID[r.id] = r
	}
	next := time.Duration(0)
	for _, rr := range resp.GetResponse() {
		r := byID[rr.GetResourceId()]
		if r == nil {
			continue
		}
		g := rr.GetGets()
		ri := time.Duration(g.GetRefreshInterval()) * time.Second
		if ri <= 0 {
			ri = DefaultRefreshInterval
		}
		r.grant(g.GetCapacity(), time.Unix(g.GetExpiryTime(), 0), ri, rr.SafeCapacity, g.GetSequence(), false, now)
		if ri = max(ri, pb.MinRequestInterval); next == 0 || ri < next {
			next = ri
		}
	}
	if next == 0 {
		next = DefaultRefreshInterval
	}
	return next
}

// WithHooks installs the simulator's and the tests' knobs (package
// internal/hooks: only Sluice's own packages can build them; nil means
// none) and sets h.Step to the client's refresh step.
func WithHooks(h *hooks.Client) Option {
	return func(c *Client) {
		if h == nil {
			return
		}
		c.hooks = *h
		h.Step = c.step
		h.Push = c.applyPushed
	}
}
