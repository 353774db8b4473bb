package capacity

import "github.com/sluice-rl/sluice/algorithm"

// Configured reports what a service leasing on behalf of its own clients
// (package rlqs) needs to know of resource id besides a lease: whether it
// is configured, and whether it is in learning mode. At the root a
// resource is configured when a template matches it; at an intermediate
// server, when its parent's lease names an algorithm other than
// NO_ALGORITHM, and, until the parent answered for it, it counts as
// configured (the parent decides). learning is false for a resource this
// server holds no state for. Safe for concurrent use; O(templates) at the
// root (a glob match each).
func (s *Service) Configured(id string) (configured, learning bool) {
	s.mu.RLock()
	r := s.resources[id]
	intermediate := s.parent != nil
	s.mu.RUnlock()
	if !intermediate {
		configured = s.matches(id)
	}
	if r == nil {
		return configured || intermediate, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if intermediate {
		configured = !r.parent.OK || r.store.Params().Kind != algorithm.NoAlgorithm
	}
	return configured, r.store.Learning(s.now())
}

// matches reports whether a template matches resource id (find, under
// the service's read lock).
func (s *Service) matches(id string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	_, ok := s.find(id)
	return ok
}
