package capacity

import (
	"errors"

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
// holder should watch the master it sends its requests to), or when the
// server pushes no leases (Options.NoPush). Safe for concurrent use.
func (s *Service) Watch(holder string, w *Watcher) (cancel func(), err error) {
	if s.opts.NoPush {
		return nil, errors.New("this server pushes no leases (--push-leases=false)")
	}
	// Under the read lock: a loss of mastership (which stops every
	// watcher under the write lock) comes before or after, not during.
	s.mu.RLock()
	if !s.isMaster {
		s.mu.RUnlock()
		return nil, ErrNotMaster
	}
	if s.watchesEnded {
		s.mu.RUnlock()
		return nil, errors.New("draining")
	}
	s.wmu.Lock()
	old := s.watchers[holder]
	s.watchers[holder] = w
	s.nwatch.Store(int64(len(s.watchers)))
	s.wmu.Unlock()
	s.mu.RUnlock()
	if old != nil {
		old.Stop()
	}
	return func() {
		s.wmu.Lock()
		if s.watchers[holder] == w {
			delete(s.watchers, holder)
		}
		s.nwatch.Store(int64(len(s.watchers)))
		s.wmu.Unlock()
	}, nil
}

// Watched reports whether holder has a watcher (see Watch). Safe for
// concurrent use.
func (s *Service) Watched(holder string) bool {
	if s.nwatch.Load() == 0 {
		return false // the polling path of a server nobody watches
	}
	s.wmu.RLock()
	defer s.wmu.RUnlock()
	return s.watchers[holder] != nil
}

// EndWatches ends every watch and refuses new ones from then on: the
// server is draining, and its listener waits for the streams in flight to
// end. Safe for concurrent use.
func (s *Service) EndWatches() {
	s.mu.Lock()
	s.watchesEnded = true
	s.mu.Unlock()
	s.stopWatchers()
}

// stopWatchers ends every watch (mastership lost): the holders find the
// new master and watch it.
func (s *Service) stopWatchers() {
	s.wmu.Lock()
	ws := s.watchers
	s.watchers = make(map[string]*Watcher)
	s.nwatch.Store(0)
	s.wmu.Unlock()
	for _, w := range ws {
		w.Stop()
	}
}

// offer pushes what is free on r to its watched requesters waiting for
// capacity (lease.Resource.Offer). The caller holds r.mu. Nobody watches a
// server with Options.NoPush (Watch refuses).
func (s *Service) offer(r *resource) {
	if s.nwatch.Load() == 0 {
		return
	}
	id := r.store.ID()
	held := s.horizonHeld()
	n := r.store.Offer(s.now(), func(holder string, g lease.Grant) bool {
		if g.Capacity > 0 && !held {
			return false // the lease horizon first (SetHorizon)
		}
		s.wmu.RLock()
		w := s.watchers[holder]
		s.wmu.RUnlock()
		return w != nil && w.Deliver(id, g)
	})
	if n > 0 {
		s.metrics.pushes.Add(float64(n))
	}
}
