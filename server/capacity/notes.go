package capacity

import (
	"sync"
	"time"
)

// maxLoggedOnce bounds the (condition, resource) pairs logged once each.
const maxLoggedOnce = 10_000

// unrecordedLogEvery is the least time between two logs of a claimed lease
// without a record (the counter counts every one).
const unrecordedLogEvery = 10 * time.Second

// notes paces the service's warnings, which its metrics count in full:
// some are logged once per resource, the claim of a lease without a record
// at most once every unrecordedLogEvery. The zero value is ready. Safe for
// concurrent use.
type notes struct {
	mu     sync.Mutex
	logged map[string]struct{} // see once
	// unrecorded is when (by the service's clock) a claim without a
	// record was last logged; zero: never.
	unrecorded time.Time
}

// once reports whether this is the first time (what, id) is seen, for
// logging a condition once per resource: true at most once per pair, and
// for at most maxLoggedOnce pairs in all (memory stays bounded; the metrics
// count every occurrence).
func (n *notes) once(what, id string) bool {
	k := what + "\x00" + id
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.logged == nil {
		n.logged = make(map[string]struct{})
	}
	if _, seen := n.logged[k]; seen || len(n.logged) >= maxLoggedOnce {
		return false
	}
	n.logged[k] = struct{}{}
	return true
}

// unrecordedDue reports whether a claim without a record seen at now may
// be logged: the first one, then one at least unrecordedLogEvery after the
// last one logged (a clock that steps back logs nothing until it has
// passed that again).
func (n *notes) unrecordedDue(now time.Time) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.unrecorded.IsZero() && now.Sub(n.unrecorded) < unrecordedLogEvery {
		return false
	}
	n.unrecorded = now
	return true
}
