package capacity

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/internal/names"
	"github.com/sluice-rl/sluice/lease"
)

// Watcher receives the leases this server decides for one holder without
// a request of its own (lease.Resource.Offer): the server side of a
// sluice.v1.Leases Watch stream.
type Watcher struct {
	// Deliver takes one pushed lease on resource, in decision order. It
	// is called with the resource's lock held: it must not block, and
	// reports whether it took the lease (a lease it did not take is not
	// recorded, and its holder keeps what it had).
	Deliver func(resource string, g lease.Grant) bool
	// Stop ends the stream (this server lost mastership, or another
	// Watch for the same holder replaced it). It must not block; it is
	// called at most once.
	Stop func()
}

// ErrNotMaster is returned by Watch on a server that is not the master.
var ErrNotMaster = errors.New("not the master")

// Watch registers w for holder (a client id, or the server id of an
// intermediate) until the returned cancel is called, replacing, and
// stopping, any watcher of the same holder. From then on, a decision that
// grants holder less than it wants makes the server push it what becomes
// free (see lease.Request.Watched).
// It fails with ErrNotMaster on a server that is not the master (the
// holder should watch the master it sends its requests to), when the
// server pushes no leases (Options.NoPush), or once it drains
// (EndWatches). Safe for concurrent use.
func (s *Service) Watch(holder string, w *Watcher) (cancel func(), err error) {
	if s.opts.NoPush {
		return nil, fmt.Errorf("this server pushes no leases (%s)", names.Setting(s.opts.Setting, "Leases.DisablePush"))
	}
	// Under the read lock: a loss of mastership (which stops every
	// watcher under the write lock) comes before or after, not during.
	s.mu.RLock()
	if !s.master.isMaster {
		s.mu.RUnlock()
		return nil, ErrNotMaster
	}
	if s.watchesEnded {
		s.mu.RUnlock()
		return nil, errors.New("draining")
	}
	old := s.push.add(holder, w)
	s.mu.RUnlock()
	if old != nil {
		old.Stop()
	}
	return func() { s.push.remove(holder, w) }, nil
}

// Watched reports whether holder has a watcher (see Watch). Safe for
// concurrent use.
func (s *Service) Watched(holder string) bool { return s.push.watched(holder) }

// EndWatches ends every watch and refuses new ones from then on: the
// server is draining, and its listener waits for the streams in flight to
// end. Safe for concurrent use.
func (s *Service) EndWatches() {
	s.mu.Lock()
	s.watchesEnded = true
	s.mu.Unlock()
	s.push.stopAll()
}

// pushes is the registry of a service's watchers (Watch), by holder, and
// what pushes them leases: offer. Safe for concurrent use.
type pushes struct {
	now    func() time.Time
	gate   *horizonGate
	pushed prometheus.Counter // leases pushed (set by New, before any push)

	mu       sync.RWMutex
	watchers map[string]*Watcher // by holder
	n        atomic.Int64        // len(watchers)
}

func newPushes(now func() time.Time, gate *horizonGate) *pushes {
	return &pushes{now: now, gate: gate, watchers: make(map[string]*Watcher)}
}

// add registers w for holder and returns the watcher it replaces (nil:
// none), for the caller to stop.
func (p *pushes) add(holder string, w *Watcher) (old *Watcher) {
	p.mu.Lock()
	defer p.mu.Unlock()
	old = p.watchers[holder]
	p.watchers[holder] = w
	p.n.Store(int64(len(p.watchers)))
	return old
}

// remove unregisters w for holder, unless another watcher replaced it.
func (p *pushes) remove(holder string, w *Watcher) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.watchers[holder] == w {
		delete(p.watchers, holder)
	}
	p.n.Store(int64(len(p.watchers)))
}

// watched reports whether holder has a watcher.
func (p *pushes) watched(holder string) bool {
	if p.n.Load() == 0 {
		return false // the polling path of a server nobody watches
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.watchers[holder] != nil
}

// count returns the number of watchers.
func (p *pushes) count() int64 { return p.n.Load() }

// stopAll ends every watch (mastership lost, or draining): the holders
// find the new master and watch it.
func (p *pushes) stopAll() {
	p.mu.Lock()
	ws := p.watchers
	p.watchers = make(map[string]*Watcher)
	p.n.Store(0)
	p.mu.Unlock()
	for _, w := range ws {
		w.Stop()
	}
}

// offer pushes what is free on r to its watched requesters waiting for
// capacity (lease.Resource.Offer); a lease of more than 0 only once the
// lease horizon is kept. The caller holds r.mu. Nobody watches a server
// with Options.NoPush (Watch refuses).
func (p *pushes) offer(r *resource) {
	if p.n.Load() == 0 {
		return
	}
	id := r.store.ID()
	held := p.gate.held()
	n := r.store.Offer(p.now(), func(holder string, g lease.Grant) bool {
		if g.Capacity > 0 && !held {
			return false // the lease horizon first (Options.Horizon)
		}
		p.mu.RLock()
		w := p.watchers[holder]
		p.mu.RUnlock()
		return w != nil && w.Deliver(id, g)
	})
	if n > 0 {
		p.pushed.Add(float64(n))
	}
}
