package lease

import (
	"cmp"
	"math"
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

// same reports whether requester ei's entries hold exactly ps (one entry
// per group of each band: groupsOf).
func (q *requesterParts) same(ei int32, ps []Band) bool {
	if len(ps) == 1 && len(ps[0].Groups) == 0 { // a client: one entry
		x, p := q.ents.at(ei), ps[0]
		return !x.hasMore && x.priority == p.Priority && x.wants == p.Wants && x.subclients == float64(max(p.Clients, 1))
	}
	more := q.further(ei)
	i := 0
	for _, p := range ps {
		var one [1]algorithm.Requester
		for _, g := range groupsOf(p, &one) {
			if i > len(more) {
				return false
			}
			x := q.ents.at(ei)
			if i > 0 {
				x = q.ents.at(more[i-1])
			}
			if x.priority != p.Priority || x.wants != g.Wants || x.subclients != g.Subclients {
				return false
			}
			i++
		}
	}
	return i == 1+len(more)
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
// to out: one band per priority, with its entries as Groups when it has
// several (set makes the same entries from them).
func (q *requesterParts) current(ei int32, out []Band) []Band {
	add := func(m *entry) {
		g := algorithm.Requester{Wants: m.wants, Subclients: m.subclients}
		if n := len(out); n > 0 && out[n-1].Priority == m.priority {
			b := &out[n-1]
			if len(b.Groups) == 0 {
				b.Groups = []algorithm.Requester{{Wants: b.Wants, Subclients: float64(b.Clients)}}
			}
			b.Groups = append(b.Groups, g)
			b.Wants += g.Wants
			b.Clients = int64(math.Round(float64(b.Clients) + g.Subclients))
			return
		}
		b := Band{Priority: m.priority, Clients: int64(math.Round(g.Subclients)), Wants: g.Wants}
		if float64(b.Clients) != g.Subclients {
			b.Groups = []algorithm.Requester{g}
		}
		out = append(out, b)
	}
	add(q.ents.at(ei))
	for _, mi := range q.further(ei) {
		add(q.ents.at(mi))
	}
	return out
}

// set makes requester ei's entries, out of their trees, hold ps: one
// entry per group of each band (groupsOf), the first entry the first
// band's first group, further ones made anew.
func (q *requesterParts) set(ei int32, ps []Band) {
	e := q.ents.at(ei)
	if len(ps) == 1 && len(ps[0].Groups) == 0 && !e.hasMore { // a client: one entry
		e.priority, e.wants, e.subclients = ps[0].Priority, ps[0].Wants, float64(max(ps[0].Clients, 1))
		return
	}
	var one [1]algorithm.Requester
	first := groupsOf(ps[0], &one)
	e.priority, e.wants, e.subclients = ps[0].Priority, first[0].Wants, first[0].Subclients
	if !e.hasMore && len(ps) == 1 && len(first) == 1 {
		return
	}
	more := q.release(ei)
	for i, p := range ps {
		gs := groupsOf(p, &one)
		if i == 0 {
			gs = gs[1:]
		}
		for _, g := range gs {
			mi := q.ents.add()
			m := q.ents.at(mi)
			m.priority, m.wants, m.subclients = p.Priority, g.Wants, g.Subclients
			more = append(more, mi)
		}
	}
	if len(more) == 0 {
		return
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
// priority, with equal priorities merged (their groups joined) and
// subclients at least 1. buf is scratch space the result may use.
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
				if len(out[i].Groups) > 0 || len(b.Groups) > 0 {
					// A fresh slice: the request's own are not written.
					var one, other [1]algorithm.Requester
					gs := append([]algorithm.Requester(nil), groupsOf(out[i], &one)...)
					out[i].Groups = append(gs, groupsOf(b, &other)...)
				}
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
