package capacity

import (
	"sync"
	"time"

	"github.com/sluice-rl/sluice/server/status/view"
)

// History bounds: samples per resource (one per Sweep, normally a second)
// and resources with a history.
const (
	HistoryLength    = 600
	HistoryResources = 1000
)

// history keeps the last HistoryLength samples of up to HistoryResources
// resources.
type history struct {
	mu   sync.Mutex
	byID map[string]*ring
}

// ring is one resource's samples, oldest first from next once it is full:
// adding costs O(1), not a shift of every sample.
type ring struct {
	ps   []view.Point // at most HistoryLength
	next int          // where the next sample goes once ps is full
}

func (h *history) add(id string, p view.Point) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.byID == nil {
		h.byID = map[string]*ring{}
	}
	r, ok := h.byID[id]
	if !ok {
		if len(h.byID) >= HistoryResources {
			return
		}
		r = &ring{}
		h.byID[id] = r
	}
	if len(r.ps) < HistoryLength {
		r.ps = append(r.ps, p)
		return
	}
	r.ps[r.next] = p
	r.next = (r.next + 1) % len(r.ps)
}

// get returns a copy of id's samples, oldest first.
func (h *history) get(id string) []view.Point {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.byID[id]
	if r == nil {
		return nil
	}
	out := make([]view.Point, 0, len(r.ps))
	out = append(out, r.ps[r.next:]...)
	return append(out, r.ps[:r.next]...)
}

func (h *history) drop(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.byID, id)
}

// sample records one history point for each resource, ids[i] naming
// rs[i] (Service.resourceList; Sweep calls it).
func (h *history) sample(now time.Time, ids []string, rs []*resource) {
	for i, r := range rs {
		r.mu.Lock()
		p := r.store.Params()
		w, has, _, _ := r.store.Totals()
		r.mu.Unlock()
		h.add(ids[i], view.Point{T: now.Unix(), Capacity: finite(p.Capacity), Has: has, Wants: w})
	}
}
