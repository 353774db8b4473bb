package capacity

import (
	"time"

	"github.com/sluice-rl/sluice/algorithm"
	"github.com/sluice-rl/sluice/resources"
)

// templates is the resource repository in force at a root (Options.
// Config, SetConfig), as resources are matched against it: the repository
// (nil: none, every resource is granted what it asks) and what the
// service reads of it. It is a value, replaced whole by SetConfig: the
// Service's mu guards the field holding it, and a repository does not
// change once loaded, so a copy taken under the lock may be read after.
type templates struct{ repo *resources.Repository }

// find returns the template matching resource id (resources.Repository's
// Find); ok is false when none does, or there is no configuration.
func (t templates) find(id string) (_ resources.Template, ok bool) {
	if t.repo == nil {
		return resources.Template{}, false
	}
	return t.repo.Find(id)
}

// longestLease is the configuration's longest lease_length, and at least
// FallbackLeaseLength (a resource no template matches).
func (t templates) longestLease() time.Duration {
	longest := FallbackLeaseLength
	if t.repo != nil {
		for _, tp := range t.repo.Templates() {
			longest = max(longest, tp.Algorithm.LeaseLength)
		}
	}
	return longest
}

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
	cfg := s.cfg
	s.mu.RUnlock()
	if !intermediate {
		_, configured = cfg.find(id)
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
