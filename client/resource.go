package client

import (
	"context"
	"math"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/sluice-rl/sluice/api/doorman"
)

// Resource is a client's handle on one resource: what it wants, the lease
// it holds and the capacity it may use now. It is safe for concurrent use.
type Resource struct {
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
	safe      float64
	safeKnown bool
	released  bool
	current   float64 // effective capacity last reported
	listeners []func(float64)
	changes   chan float64

	// Time without a valid lease (in the fallback mode), for metrics.
	fallbackSince time.Time // zero while a lease is valid
	fallbackTotal time.Duration
}

// fallbackTime reports how long the resource has been without a valid lease
// in all, at now.
func (r *Resource) fallbackTime(now time.Time) time.Duration {
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
func (r *Resource) trackFallbackLocked(now time.Time) {
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
func (r *Resource) ID() string { return r.id }

// Wants returns the capacity the resource asks for.
func (r *Resource) Wants() float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.wants
}

// Capacity returns the capacity the resource may use now: its lease's
// capacity while the lease is valid, else the fallback of its mode.
func (r *Resource) Capacity() float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.effective(r.c.now())
}

// Lease returns the lease held (capacity, expiry, refresh interval) and
// whether one is held and unexpired.
func (r *Resource) Lease() (capacity float64, expiry time.Time, refresh time.Duration, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.hasLease || !r.expiry.After(r.c.now()) {
		return 0, time.Time{}, 0, false
	}
	return r.capacity, r.expiry, r.refresh, true
}

// SafeCapacity returns the last safe capacity the server sent, and
// whether any was sent.
func (r *Resource) SafeCapacity() (float64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.safe, r.safeKnown
}

func (r *Resource) effective(now time.Time) float64 {
	if r.released {
		return 0
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

// OnChange registers f to be called with the new capacity whenever the
// resource's capacity changes (a new lease, an expiry, a release). f runs
// on the refresh goroutine and must not block; it is called once at
// registration with the current capacity.
func (r *Resource) OnChange(f func(capacity float64)) {
	r.mu.Lock()
	r.listeners = append(r.listeners, f)
	cur := r.effective(r.c.now())
	r.current = cur
	r.mu.Unlock()
	f(cur)
}

// Changes returns a channel that receives the new capacity after each
// change; it holds only the latest value (a slow reader skips
// intermediate ones). Changes made before the first call are kept, so
// waiting for the first lease after Resource returns never misses it.
func (r *Resource) Changes() <-chan float64 {
	return r.changes
}

// notify reports the effective capacity to listeners if it changed. The
// caller holds r.mu; listeners run after it is released.
func (r *Resource) notifyLocked(now time.Time) func() {
	cur := r.effective(now)
	if cur == r.current {
		return func() {}
	}
	r.current = cur
	ls := append([]func(float64){}, r.listeners...)
	if r.changes != nil {
		select {
		case <-r.changes:
		default:
		}
		r.changes <- cur
	}
	return func() {
		for _, f := range ls {
			f(cur)
		}
	}
}

// Ask changes what the resource wants and triggers a prompt re-request.
// It returns an error if wants is negative or not finite, or the resource
// was released.
func (r *Resource) Ask(wants float64) error {
	if err := checkWants(wants); err != nil {
		return err
	}
	r.mu.Lock()
	if r.released {
		r.mu.Unlock()
		return ErrClosed
	}
	changed := r.wants != wants
	r.wants = wants
	after := r.notifyLocked(r.c.now())
	r.mu.Unlock()
	after()
	if changed {
		r.c.poke()
	}
	return nil
}

// Release gives the resource's lease back (a ReleaseCapacity RPC, bounded
// by ctx) and unregisters it; its capacity becomes 0.
func (r *Resource) Release(ctx context.Context) error {
	c := r.c
	c.mu.Lock()
	if c.resources[r.id] == r {
		delete(c.resources, r.id)
	}
	c.mu.Unlock()
	if !r.markReleased() {
		return nil
	}
	return c.release(ctx, []string{r.id})
}

// markReleased marks r released; it reports whether it was not already.
func (r *Resource) markReleased() bool {
	r.mu.Lock()
	if r.released {
		r.mu.Unlock()
		return false
	}
	r.released = true
	after := r.notifyLocked(r.c.now())
	r.mu.Unlock()
	after()
	return true
}

func (r *Resource) request(now time.Time) *pb.ResourceRequest {
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
	return req
}

func (r *Resource) grant(capacity float64, expiry time.Time, refresh time.Duration, safe *float64, now time.Time) {
	r.mu.Lock()
	if r.released {
		r.mu.Unlock()
		return
	}
	r.hasLease, r.capacity, r.expiry, r.refresh = true, capacity, expiry, refresh
	if safe != nil {
		r.safe, r.safeKnown = *safe, true
	}
	r.trackFallbackLocked(now)
	after := r.notifyLocked(now)
	r.mu.Unlock()
	after()
}

// expire drops the lease if it has expired, switching to the fallback.
func (r *Resource) expire(now time.Time) {
	r.mu.Lock()
	if r.hasLease && !r.expiry.After(now) {
		r.trackFallbackLocked(now)
		r.hasLease = false
	}
	after := r.notifyLocked(now)
	r.mu.Unlock()
	after()
}
