package chaos

import (
	"slices"
	"sync"
	"time"
)

// Outcome is what an operation's answer said.
type Outcome uint8

const (
	// Granted: the tokens, copies or lease were given (Op.N of them).
	Granted Outcome = iota + 1
	// Rejected: the limit said no (an answer, not an error).
	Rejected
	// Failed: an error (Op.Code names it) or no answer before the
	// request's deadline.
	Failed
)

// Op is one request and its answer, the unit of a history. Times are
// offsets from the run's start on the load generator's monotonic clock:
// the decision happened somewhere in [Start, End].
type Op struct {
	// Start is when the request was sent, End when its answer arrived.
	Start, End time.Duration
	// Worker is the load generator's client that sent it.
	Worker int
	// Key is what it asked for: a bucket, a resource and domain, a hold's
	// id.
	Key string
	// N is what was asked (tokens, copies, a lease's wants) and, when
	// Granted, given.
	N int64
	// Outcome is the answer's kind; Code, for Rejected and Failed, its
	// status or gRPC code.
	Outcome Outcome
	Code    string
	// Degraded: granted without a decision because the shared store
	// failed (the answer's degraded flag: a flagged fail-open).
	Degraded bool
	// Lapsed: a lease whose expiry had passed when it arrived, by the
	// client's clock: the client holds no lease (it falls back to its
	// safe capacity).
	Lapsed bool
}

// History records a run's operations. It is safe for concurrent use; each
// worker appends to its own log, so recording does not contend.
type History struct {
	mu   sync.Mutex
	logs []*[]Op
	t0   time.Time
}

// NewHistory starts a history whose offsets count from t0.
func NewHistory(t0 time.Time) *History { return &History{t0: t0} }

// Since is now as an offset of the history's clock.
func (h *History) Since(now time.Time) time.Duration { return now.Sub(h.t0) }

// Log is one worker's log: not safe for concurrent use (one worker, one
// goroutine).
type Log struct {
	h   *History
	ops *[]Op
}

// Log returns a new worker's log.
func (h *History) Log() Log {
	h.mu.Lock()
	defer h.mu.Unlock()
	ops := new([]Op)
	h.logs = append(h.logs, ops)
	return Log{h: h, ops: ops}
}

// Add records one operation.
func (l Log) Add(op Op) {
	l.h.mu.Lock()
	*l.ops = append(*l.ops, op)
	l.h.mu.Unlock()
}

// Ops returns every recorded operation, ordered by Start.
func (h *History) Ops() []Op {
	h.mu.Lock()
	defer h.mu.Unlock()
	var all []Op
	for _, l := range h.logs {
		all = append(all, *l...)
	}
	slices.SortStableFunc(all, func(a, b Op) int { return cmpDur(a.Start, b.Start) })
	return all
}

func cmpDur(a, b time.Duration) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
