package limits

import (
	"context"
	"errors"
	"slices"
	"time"
)

// Query selects one page of buckets for a status page: those Filter
// accepts, ordered by Less, from Offset, at most Limit of them.
//
// Source: ratelimiting-in-150-lines.md, "Introspection" ("show all
// RateLimiter buckets whose key begins with 'message_send_rate_limit',
// where the budget fraction is less than 50%").
type Query struct {
	// Filter keeps a bucket when it returns true (nil: every bucket). It
	// is called once per bucket, outside the store's locks.
	Filter func(*BucketInfo) bool
	// Less orders the buckets (nil: by resource, then domain); buckets
	// equal under it are ordered by resource, then domain, so that pages
	// follow each other exactly.
	Less func(a, b *BucketInfo) bool
	// Offset is how many buckets of the order to skip (≥ 0); Limit is the
	// most to return (≤ 0: none, only the total).
	Offset, Limit int
	// Budget is the most buckets the walk looks at (≤ 0: all of them), so
	// that a status page costs the same with ten million buckets as with
	// Budget: the page is then over the first Budget buckets the store
	// walks (in no particular order), and Page.Complete says so. (A store
	// may stop sooner, ErrWalkBudget: on Redis, after WalkScanCalls SCANs
	// whatever the keys hold.)
	Budget int
}

// ErrWalkBudget is returned by a Store's Walk (and rls.Store's) that
// stopped before the last key because it looked at as many keys as one
// walk may (limits/redis: WalkScanCalls SCANs a node, whatever the keys
// hold). What it called fn with is a correct part of the whole. Query
// and the status pages treat it as an incomplete page, not an error.
var ErrWalkBudget = errors.New("limits: the walk stopped at its budget")

// Page is the answer to a Query.
type Page struct {
	// Buckets are the page's buckets, in order.
	Buckets []BucketInfo
	// Total is the number of buckets Filter kept; Walked the number
	// looked at, and Complete whether that was every bucket (false when
	// Query.Budget stopped the walk).
	Total    int
	Walked   int
	Complete bool
}

// ByKey orders buckets by resource, then domain.
func ByKey(a, b *BucketInfo) bool {
	if a.Resource != b.Resource {
		return a.Resource < b.Resource
	}
	return a.Domain < b.Domain
}

// Query returns one page of the buckets at now. It walks every bucket
// once and keeps only the best Offset + Limit in a heap, so the first
// page of a million buckets costs one walk and little memory
// (BenchmarkQuery: 60 to 90 ms on a shared 2-core VM); a page deep in
// the order keeps as many buckets as its offset (0.6 to 0.95 s for a page
// 100 000 deep when every bucket ties on the sort key, the worst case).
// ctx is the request's, as for Walk.
func (e *Engine) Query(ctx context.Context, now time.Time, q Query) (Page, error) {
	less := ByKey
	if by := q.Less; by != nil {
		less = func(a, b *BucketInfo) bool {
			switch {
			case by(a, b):
				return true
			case by(b, a):
				return false
			}
			return ByKey(a, b)
		}
	}
	k := max(q.Offset, 0) + max(q.Limit, 0)
	if q.Limit <= 0 {
		k = 0
	}
	// kept holds the best k buckets so far; heap orders their indices with
	// the worst at the root, so that a better bucket replaces it in
	// O(log k) moves of an int.
	var (
		kept []BucketInfo
		hp   []int32
		cur  BucketInfo
		p    Page
	)
	worse := func(i, j int32) bool { return less(&kept[j], &kept[i]) }
	down := func(i int) {
		for {
			l := 2*i + 1
			if l >= len(hp) {
				return
			}
			if r := l + 1; r < len(hp) && worse(hp[r], hp[l]) {
				l = r
			}
			if !worse(hp[l], hp[i]) {
				return
			}
			hp[i], hp[l] = hp[l], hp[i]
			i = l
		}
	}
	p.Complete = true
	err := e.Walk(ctx, now, func(b BucketInfo) bool {
		if q.Budget > 0 && p.Walked == q.Budget {
			p.Complete = false
			return false
		}
		p.Walked++
		cur = b
		if q.Filter != nil && !q.Filter(&cur) {
			return true
		}
		p.Total++
		switch {
		case k == 0:
		case len(kept) < k:
			kept = append(kept, cur)
			hp = append(hp, int32(len(kept)-1))
			for i := len(hp) - 1; i > 0; {
				parent := (i - 1) / 2
				if !worse(hp[i], hp[parent]) {
					break
				}
				hp[i], hp[parent] = hp[parent], hp[i]
				i = parent
			}
		case less(&cur, &kept[hp[0]]):
			kept[hp[0]] = cur
			down(0)
		}
		return true
	})
	if errors.Is(err, ErrWalkBudget) {
		p.Complete, err = false, nil
	}
	if err != nil {
		return Page{}, err
	}
	slices.SortFunc(hp, func(i, j int32) int {
		switch {
		case less(&kept[i], &kept[j]):
			return -1
		case less(&kept[j], &kept[i]):
			return 1
		}
		return 0
	})
	if off := max(q.Offset, 0); off < len(hp) {
		p.Buckets = make([]BucketInfo, 0, len(hp)-off)
		for _, i := range hp[off:] {
			p.Buckets = append(p.Buckets, kept[i])
		}
	}
	return p, nil
}
