package lease

import (
	"cmp"
	"slices"

	"github.com/sluice-rl/sluice/algorithm"
)

// requesterParts is the requesters' demand per priority band, entry by
// entry: a requester's first entry (the one Resource.ids finds) holds its
// highest band and its lease; a requester asking in several bands (a
// downstream server) has one further entry per further band, listed here
// by first entry (entry.hasMore marks the first entries listed). It owns
// those lists, and makes and frees the further entries in the resource's
// arena (ents, shared with Resource and bandSet); placing entries in their
// bands' trees is bandSet's, and callers take a requester's entries out of
// their trees before changing them here. It is not safe for concurrent
// use: like the rest of the Resource holding it, the server's lock on the
// resource guards it.
//
// Source: doorman-design.md, "Server state" (the PriorityBandAggregates
// of a downstream server).
type requesterParts struct {
	ents *entries          // the resource's entries
	more map[int32][]int32 // further bands' entries, by first entry
}

// further returns the entries of requester ei's further bands (ei is its
// first entry).
func (q *requesterParts) further(ei int32) []int32 {
	if !q.ents.at(ei).hasMore {
		return nil
	}
	return q.more[ei]
}

// same reports whether requester ei's entries hold exactly ps.
func (q *requesterParts) same(ei int32, ps []Band) bool {
	more := q.further(ei)
	if len(ps) != 1+len(more) {
		return false
	}
	for i, p := range ps {
		x := q.ents.at(ei)
		if i > 0 {
			x = q.ents.at(more[i-1])
		}
		if x.priority != p.Priority || x.wants != p.Wants || x.subclients != float64(p.Clients) {
			return false
		}
	}
	return true
}

// fewerClients reports whether ps stands for fewer clients than
// requester ei does.
func (q *requesterParts) fewerClients(ps []Band, ei int32) bool {
	var n float64
	for _, p := range ps {
		n += float64(p.Clients)
	}
	return n < q.total(ei).Subclients
}

// current returns requester ei's bands, highest priority first, appended
// to out.
func (q *requesterParts) current(ei int32, out []Band) []Band {
	e := q.ents.at(ei)
	out = append(out, Band{Priority: e.priority, Clients: int64(e.subclients), Wants: e.wants})
	for _, mi := range q.further(ei) {
		m := q.ents.at(mi)
		out = append(out, Band{Priority: m.priority, Clients: int64(m.subclients), Wants: m.wants})
	}
	return out
}

// set makes requester ei's entries, out of their trees, hold ps (the
// first entry takes the first band; further ones are made anew).
func (q *requesterParts) set(ei int32, ps []Band) {
	e := q.ents.at(ei)
	e.priority, e.wants, e.subclients = ps[0].Priority, ps[0].Wants, float64(ps[0].Clients)
	if !e.hasMore && len(ps) == 1 {
		return
	}
	more := q.release(ei)
	if len(ps) == 1 {
		return
	}
	for _, p := range ps[1:] {
		mi := q.ents.add()
		m := q.ents.at(mi)
		m.priority, m.wants, m.subclients = p.Priority, p.Wants, float64(p.Clients)
		more = append(more, mi)
	}
	if q.more == nil {
		q.more = make(map[int32][]int32)
	}
	q.more[ei] = more
	q.ents.at(ei).hasMore = true
}

// release returns requester ei's further entries, out of their trees, to
// the arena, and returns their list emptied for reuse.
func (q *requesterParts) release(ei int32) []int32 {
	more := q.further(ei)
	for _, mi := range more {
		q.ents.release(mi)
	}
	delete(q.more, ei)
	q.ents.at(ei).hasMore = false
	return more[:0]
}

// total returns requester ei's demand over all its bands.
func (q *requesterParts) total(ei int32) algorithm.Requester {
	e := q.ents.at(ei)
	t := algorithm.Requester{Wants: e.wants, Subclients: e.subclients}
	for _, mi := range q.further(ei) {
		m := q.ents.at(mi)
		t.Wants += m.wants
		t.Subclients += m.subclients
	}
	return t
}

// algo returns requester ei's parts for the algorithms.
func (q *requesterParts) algo(ei int32) []algorithm.Part {
	e, more := q.ents.at(ei), q.further(ei)
	out := make([]algorithm.Part, 0, 1+len(more))
	out = append(out, algorithm.Part{Priority: e.priority, Requester: algorithm.Requester{Wants: e.wants, Subclients: e.subclients}})
	for _, mi := range more {
		m := q.ents.at(mi)
		out = append(out, algorithm.Part{Priority: m.priority, Requester: algorithm.Requester{Wants: m.wants, Subclients: m.subclients}})
	}
	return out
}

// parts returns the request's demand as bands sorted by descending
// priority, with equal priorities merged and subclients at least 1.
// buf is scratch space the result may use.
func parts(req Request, buf []Band) []Band {
	out := buf[:0]
	if len(req.Bands) == 0 {
		return append(out, Band{Priority: req.Priority, Clients: max(req.Subclients, 1), Wants: req.Wants})
	}
	for _, b := range req.Bands {
		b.Clients = max(b.Clients, 1)
		merged := false
		for i := range out {
			if out[i].Priority == b.Priority {
				out[i].Clients += b.Clients
				out[i].Wants += b.Wants
				merged = true
			}
		}
		if !merged {
			out = append(out, b)
		}
	}
	slices.SortFunc(out, func(a, b Band) int { return cmp.Compare(b.Priority, a.Priority) })
	return out
}
