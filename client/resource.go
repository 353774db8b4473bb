package client

import (
	"context"
	"math"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/sluice-rl/sluice/api/doorman"
)

// Resource is a handle on one resource of a client: what this handle
// wants, and the lease the client holds for the resource and the capacity it
// may use now. Several Resource calls for one id in one process share one
// lease: their wants add up, and the lease is given back (ReleaseCapacity)
// when the last handle is released. It is safe for concurrent use.
//
// Source: doorman-design.md, "Client library".
type Resource struct {
	*resourceState
	hmu          sync.Mutex
	handleWants  float64
	handleClosed bool
}

// listener is a function registered with OnChange.
type listener struct {
	f   func(float64)
	seq uint64 // the notification last given to f (0: none yet)
}

// newResourceState returns the state of a new resource of c.
func newResourceState(c *Client, id string, wants float64, priority int64, now time.Time) *resourceState {
	return &resourceState{c: c, id: id, wants: wants, priority: priority, mode: c.mode,
		fallbackSince: now, handles: map[*Resource]struct{}{},
		seq: 1, chanSeq: 1, changes: make(chan float64, 1)}
}

// resourceState is one resource's lease, shared by its handles.
type resourceState struct {
	c        *Client
	id       string
	priority int64
	mode     Mode

	mu        sync.Mutex
	wants     float64
	hasLease  bool
	capacity  float64 // the lease's capacity, when hasLease
	expiry    time.Time
	refresh   time.Duration
	leaseSeq  int64 // the sequence of the newest lease applied (0: none known)
	safe      float64
	safeKnown bool
	released  bool
	handles   map[*Resource]struct{}
	askMu     sync.Mutex // serializes recomputing the handles' total wants

	// Notifications (see OnChange and deliver), under mu.
	current    float64 // effective capacity last reported
	seq        uint64  // the notification of current: 1 at creation, +1 per change
	listeners  []*listener
	delivering bool   // a goroutine is telling the listeners (deliver)
	chanSeq    uint64 // the notification last put on changes
	changes    chan float64

	// Doorman's 5-second rule (see the package doc).
	requested bool      // a request carrying the resource was answered by a master
	sentAt    time.Time // when its answer arrived, by the client's clock
	wantsGen  uint64    // +1 per change of wants
	sentGen   uint64    // the wantsGen that request carried

	// Time without a valid lease (in the fallback mode), for metrics.
	fallbackSince time.Time // zero while a lease is valid
	fallbackTotal time.Duration
}

// fallbackTime reports how long the resource has been without a valid lease
// in all, at now.
func (r *resourceState) fallbackTime(now time.Time) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	d := r.fallbackTotal
	since := r.fallbackSince
	if since.IsZero() && r.hasLease && !r.expiry.After(now) {
		since = r.expiry // ran out, not yet noticed by the refresh loop
	}
	if !since.IsZero() && now.After(since) {
		d += now.Sub(since)
	}
	return d
}

// trackFallbackLocked updates the fallback accounting after the lease
// changed; the caller holds r.mu.
func (r *resourceState) trackFallbackLocked(now time.Time) {
	valid := r.hasLease && r.expiry.After(now)
	switch {
	case valid && !r.fallbackSince.IsZero():
		if now.After(r.fallbackSince) {
			r.fallbackTotal += now.Sub(r.fallbackSince)
		}
		r.fallbackSince = time.Time{}
	case !valid && r.fallbackSince.IsZero():
		r.fallbackSince = now
		if r.hasLease && r.expiry.Before(now) {
			r.fallbackSince = r.expiry // it ran out then
		}
	}
}

// ID returns the resource id.
func (r *resourceState) ID() string { return r.id }

// TotalWants returns what all of the resource's handles in this process ask
// for together: what the client asks the server for.
func (r *resourceState) TotalWants() float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.wants
}

// Capacity returns the capacity the resource may use now: its lease's
// capacity while the lease is valid, else the fallback of its mode.
func (r *resourceState) Capacity() float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.effective(r.c.now())
}

// Lease returns the lease held (capacity, expiry, refresh interval) and
// whether one is held and unexpired.
func (r *resourceState) Lease() (capacity float64, expiry time.Time, refresh time.Duration, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.hasLease || !r.expiry.After(r.c.now()) {
		return 0, time.Time{}, 0, false
	}
	return r.capacity, r.expiry, r.refresh, true
}

// SafeCapacity returns the last safe capacity the server sent, and
// whether any was sent.
func (r *resourceState) SafeCapacity() (float64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.safe, r.safeKnown
}

func (r *resourceState) effective(now time.Time) float64 {
	if r.released {
		return 0
	}
	if r.c.killed.Load() {
		return math.Inf(1) // the kill switch: pass everything through
	}
	if r.hasLease && r.expiry.After(now) {
		return r.capacity
	}
	switch r.mode {
	case Optimistic:
		return r.wants
	case Pessimistic:
		return 0
	default:
		if r.safeKnown {
			if r.safe < 0 { // a negative safe capacity disables limiting (Charon §5.1)
				return math.Inf(1)
			}
			return r.safe
		}
		return 0
	}
}

// OnChange registers f to be called with the resource's capacity (permits
// per second, or units for a gauge) whenever it changes — a new lease, an
// expiry and its fallback, a change of wants that changes the fallback
// (Optimistic mode), the kill switch, a release — and once at registration
// with the current capacity.
//
// f runs on the goroutine that made the change: the refresh goroutine for
// leases, expiries and fallbacks; the caller of Ask, Client.Resource, Release, Client.Close or
// Client.SetKillSwitch for the changes they make; the caller of OnChange
// for the first call. It is never called with the client's or the
// resource's locks held, so it may call any method of the client and its
// resources, including ones that change the capacity again.
//
// The listeners of one resource are serialized: one call at a time, in
// registration order, each listener seeing ever newer capacities and the
// newest last (a value superseded before its turn is skipped). A change made
// while another goroutine is telling the listeners — or by a listener
// itself — is delivered by that goroutine as soon as its current calls
// return; the call that made the change may then return before the
// listeners have seen it. Listeners of different resources may run
// concurrently. f should return promptly: while it runs, the resource's
// other notifications, and the goroutine running it (possibly the refresh
// goroutine), wait.
func (r *resourceState) OnChange(f func(capacity float64)) {
	r.mu.Lock()
	r.changeLocked(r.c.now())
	r.listeners = append(r.listeners, &listener{f: f})
	r.mu.Unlock()
	r.deliver()
}

// Changes returns a channel that receives the new capacity after each
// change, once the listeners (OnChange) have been told of it; it holds only
// the latest value (a slow reader skips intermediate ones). Changes made
// before the first call are kept, so waiting for the first lease after
// Resource returns never misses it.
func (r *resourceState) Changes() <-chan float64 {
	return r.changes
}

// changeLocked records the effective capacity at now, as a new
// notification if it changed. The caller holds r.mu, and calls deliver
// once it holds no lock of the client or the resource.
func (r *resourceState) changeLocked(now time.Time) {
	cur := r.effective(now)
	if cur == r.current {
		return
	}
	r.current = cur
	r.seq++
}

// deliver tells the listeners, and then Changes, the newest notification,
// holding no lock while they run. One goroutine delivers at a time: one that
// finds another delivering leaves its notification to it, and the
// deliverer goes round again until every listener and the channel are up
// to date. So listeners are serialized, see newer values each time and the
// newest last, and may change the capacity themselves without deadlock.
func (r *resourceState) deliver() {
	r.mu.Lock()
	if r.delivering {
		r.mu.Unlock()
		return
	}
	r.delivering = true
	finished := false
	defer func() {
		if !finished { // a listener panicked: the next change delivers
			r.mu.Lock()
			r.delivering = false
			r.mu.Unlock()
		}
	}()
	for {
		seq, cur := r.seq, r.current
		var due []*listener
		for _, l := range r.listeners {
			if l.seq < seq {
				l.seq = seq
				due = append(due, l)
			}
		}
		toChan := r.chanSeq < seq
		r.chanSeq = seq
		if len(due) == 0 && !toChan {
			r.delivering = false
			finished = true
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
		for _, l := range due {
			l.f(cur)
		}
		if toChan {
			// Only the deliverer sends, so after the drain there is room.
			select {
			case <-r.changes:
			default:
			}
			r.changes <- cur
		}
		r.mu.Lock()
	}
}

// setWants changes what the resource asks for and triggers a prompt
// re-request if it changed. The caller holds r.askMu, and calls r.deliver
// once it has released it.
func (r *resourceState) setWants(wants float64) error {
	r.mu.Lock()
	if r.released {
		r.mu.Unlock()
		return ErrClosed
	}
	changed := r.wants != wants
	r.wants = wants
	if changed {
		r.wantsGen++
	}
	r.changeLocked(r.c.now())
	r.mu.Unlock()
	if changed {
		r.c.poke()
	}
	return nil
}

// askTotal asks for the sum of the handles' wants, then tells the
// listeners if that changed the capacity.
func (r *resourceState) askTotal() error {
	r.askMu.Lock()
	err := r.setWants(r.c.sumWants(r))
	r.askMu.Unlock()
	r.deliver()
	return err
}

// Wants returns what this handle asks for.
func (h *Resource) Wants() float64 {
	h.hmu.Lock()
	defer h.hmu.Unlock()
	return h.handleWants
}

// Ask changes what this handle wants; the client asks the server for the sum
// over the resource's handles if it changed: at once, or, if the resource
// was requested less than doorman.MinRequestInterval (5 s) ago, when those
// 5 s end (one request however many changes came meanwhile; see the
// package doc). It returns an error if wants is negative or not finite, or
// the handle was released. Safe for concurrent use; listeners it triggers
// run on the caller's goroutine (see OnChange).
func (h *Resource) Ask(wants float64) error {
	if err := checkWants(wants); err != nil {
		return err
	}
	h.hmu.Lock()
	if h.handleClosed {
		h.hmu.Unlock()
		return ErrClosed
	}
	h.handleWants = wants
	h.hmu.Unlock()
	return h.askTotal()
}

// Release releases this handle. When it is the resource's last, the lease is
// given back (a ReleaseCapacity RPC, bounded by ctx), the resource is
// unregistered and its capacity becomes 0; otherwise the client asks for the
// remaining handles' wants. Releasing twice does nothing.
func (h *Resource) Release(ctx context.Context) error {
	h.hmu.Lock()
	if h.handleClosed {
		h.hmu.Unlock()
		return nil
	}
	h.handleClosed = true
	h.hmu.Unlock()
	r := h.resourceState
	c := r.c
	c.mu.Lock()
	delete(r.handles, h)
	last := len(r.handles) == 0
	if last && c.resources[r.id] == r {
		delete(c.resources, r.id)
	}
	c.mu.Unlock()
	if !last {
		return r.askTotal()
	}
	if !r.markReleased() {
		return nil
	}
	return c.release(ctx, []string{r.id})
}

// markReleased marks r released; it reports whether it was not already.
func (r *resourceState) markReleased() bool {
	r.mu.Lock()
	if r.released {
		r.mu.Unlock()
		return false
	}
	r.released = true
	r.changeLocked(r.c.now())
	r.mu.Unlock()
	r.deliver()
	return true
}

// request returns the resource's part of a bulk request at now, and the
// generation of the wants it carries (for sent).
func (r *resourceState) request(now time.Time) (*pb.ResourceRequest, uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	req := &pb.ResourceRequest{
		ResourceId: proto.String(r.id),
		Priority:   proto.Int64(r.priority),
		Wants:      proto.Float64(r.wants),
	}
	if r.hasLease && r.expiry.After(now) {
		req.Has = &pb.Lease{
			ExpiryTime:      proto.Int64(r.expiry.Unix()),
			RefreshInterval: proto.Int64(int64(r.refresh / time.Second)),
			Capacity:        proto.Float64(r.capacity),
		}
	}
	return req, r.wantsGen
}

// sent records that a request carrying the resource's wants of generation
// gen was answered by a master at at (the client's clock).
func (r *resourceState) sent(at time.Time, gen uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requested, r.sentAt, r.sentGen = true, at, gen
}

// schedule says, at now, when the resource may next be sent (ready: the end
// of the MinRequestInterval window of its last request; now if it was never
// requested) and when it should be (due, not before ready): at once when
// new, as soon as the window ends when its wants changed or it holds no
// valid lease, else when its refresh interval (at least MinRequestInterval)
// has passed or ExpiryMargin before its lease expires, whichever is first.
// When it is due only for its refresh interval, latest is how long its
// request may wait to travel with others (ExpiryMargin before the lease
// expires); otherwise latest is zero: it must go when due.
func (r *resourceState) schedule(now time.Time) (ready, due, latest time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.requested {
		return now, now, time.Time{}
	}
	ready = r.sentAt.Add(pb.MinRequestInterval)
	if r.wantsGen != r.sentGen || !r.hasLease || !r.expiry.After(now) {
		return ready, ready, time.Time{}
	}
	interval := max(r.refresh, pb.MinRequestInterval)
	due = r.sentAt.Add(interval)
	latest = r.expiry.Add(-ExpiryMargin)
	if latest.Before(due) {
		if latest.Before(ready) {
			latest = ready
		}
		return ready, latest, time.Time{}
	}
	return ready, due, latest
}

func (r *resourceState) grant(capacity float64, expiry time.Time, refresh time.Duration, safe *float64, seq int64, pushed bool, now time.Time) {
	r.mu.Lock()
	if r.released || (pushed || seq != 0) && seq <= r.leaseSeq {
		// Released; or a lease decided before the one held (a push the
		// answer to a later request overtook, or that answer behind a
		// later push): the newer one stands.
		r.mu.Unlock()
		return
	}
	r.leaseSeq = max(r.leaseSeq, seq)
	r.hasLease, r.capacity, r.expiry, r.refresh = true, capacity, expiry, refresh
	if safe != nil {
		r.safe, r.safeKnown = *safe, true
	}
	r.trackFallbackLocked(now)
	r.changeLocked(now)
	r.mu.Unlock()
	r.deliver()
}

// expire drops the lease if it has expired, switching to the fallback.
func (r *resourceState) expire(now time.Time) {
	r.mu.Lock()
	if r.hasLease && !r.expiry.After(now) {
		r.trackFallbackLocked(now)
		r.hasLease = false
	}
	r.changeLocked(now)
	r.mu.Unlock()
	r.deliver()
}
