package status

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/limits/copies"
	"github.com/sluice-rl/sluice/server/status/view"
)

// The buckets page: the limits engine's token buckets, one row each,
// filtered by key prefix and numeric predicates, sorted by any column,
// paged; with the hottest and the most rejected buckets beside them.
//
//	GET /debug/status/buckets?prefix=api/&where=fraction<0.5&sort=tokens&desc=1&page=2&per_page=100
//
// A bucket's key is resource/domain ("api/small"; a resource's shared
// default bucket is "api/", the global default "/"). The page walks every
// bucket once and keeps only what it shows (bounded heaps), so its cost is
// one pass over the buckets whatever their number (limits.Engine.Query); it
// never holds them all.
//
// Source: ratelimiting-in-150-lines.md, "Introspection" (bucket key, fill
// rate, current budget, maximum budget, time since last use, budget
// fraction; filter and sort); quotaservice-wire.md's /api/stats (hottest
// and most-rejected buckets).

// Paging bounds of the buckets page.
const (
	DefaultBucketsPerPage = 100
	MaxBucketsPerPage     = 1000
	// MaxBucketsRows bounds page × per_page, the rows one request keeps.
	MaxBucketsRows = 100_000
	// TopBuckets is the length of the hottest and most-rejected lists.
	TopBuckets = 10
)

// BucketRow is one bucket on the buckets page.
type BucketRow struct {
	Key      string  `json:"key"`
	Resource string  `json:"resource"`
	Domain   string  `json:"domain"`
	Bucket   string  `json:"bucket"` // which configuration: named, prefix P, dynamic, default, global default
	Size     int64   `json:"size"`
	FillRate float64 `json:"fill_rate"` // tokens per second
	Tokens   float64 `json:"tokens"`    // now, fractional
	Fraction float64 `json:"fraction"`  // tokens ÷ size
	// DebtSeconds is how long the bucket owes tokens: a request now waits
	// at least this long.
	DebtSeconds float64 `json:"debt_seconds"`
	// IdleSeconds is the time since the bucket's last request.
	IdleSeconds float64   `json:"idle_seconds"`
	LastUsed    time.Time `json:"last_used"`
	Grants      uint64    `json:"grants"`
	Rejections  uint64    `json:"rejections"`
	// Algorithm is token_bucket or burst_tiers. For burst tiers (Charon):
	// the domain's current tier (0: the fake tier, none active), its
	// phase and the seconds left in it, its limit and the hits in its
	// window, the hits in the last second, and the highest tier cooling
	// down with the seconds left of its cooldown (0: none).
	Algorithm        string  `json:"algorithm"`
	Tier             int     `json:"tier,omitempty"`
	TierPhase        string  `json:"tier_phase,omitempty"`
	TierLeftSeconds  float64 `json:"tier_left_seconds,omitempty"`
	TierLimit        int64   `json:"tier_limit,omitempty"`
	TierHits         int64   `json:"tier_hits,omitempty"`
	HitsLastSecond   int64   `json:"hits_last_second,omitempty"`
	CooldownTier     int     `json:"cooldown_tier,omitempty"`
	CooldownLeftSecs float64 `json:"cooldown_left_seconds,omitempty"`
}

// BucketsPage is the buckets page's data (and its JSON).
type BucketsPage struct {
	Prefix  string `json:"prefix"`
	Where   string `json:"where"`
	Sort    string `json:"sort"`
	Desc    bool   `json:"desc"`
	Page    int    `json:"page"`
	PerPage int    `json:"per_page"`
	// Total is every bucket looked at; Matched those the filter kept.
	// Complete is false when there were more than WalkBudget buckets: the
	// page is then over the first WalkBudget the store walked (in no
	// particular order), and Estimate is the store's estimate of them all
	// (limits.Engine.EstimateLen; 0 when it failed).
	Total    int         `json:"total"`
	Matched  int         `json:"matched"`
	Complete bool        `json:"complete"`
	Estimate int         `json:"estimate,omitempty"`
	Rows     []BucketRow `json:"rows"`
	// Hottest and MostRejected are the TopBuckets buckets with the most
	// grants and the most rejections, over the buckets looked at.
	Hottest      []BucketRow `json:"hottest"`
	MostRejected []BucketRow `json:"most_rejected"`
	// Copies is the copy-limited resources whose name starts with the
	// resource part of Prefix: holds per domain, group and session, and the
	// staged transfers. Session and transfer ids are cut to their first 8
	// hex digits: a whole id is a capability (it can release or seize).
	Copies copies.Snapshot `json:"copies"`
	// Fleet is this server's membership of the fleet sharing copy-limited
	// resources on Redis (nil: the copy log is this server's own). Then
	// Copies' counts are this server's contributions, and Fenced says
	// whether it serves holds now.
	Fleet *FleetState `json:"fleet,omitempty"`
	// Envoy is the counters of Envoy's rate limit service whose key,
	// domain/value/value, starts with Prefix: the same page of them, by
	// key (Where and Sort apply to the token buckets only). Nil when the
	// server has no such service.
	Envoy *view.CounterPage `json:"envoy,omitempty"`
	Took  float64           `json:"took_seconds"`
}

// FleetState is the fleet membership's state on the buckets page.
type FleetState struct {
	view.FleetStatus
	// Fenced: the engine serves no holds (no epoch yet, or its etcd
	// session ended: rejoining).
	Fenced bool
	// Degraded counts reserves granted fail-open while the copy log
	// failed; Fenced counts the fences.
	Degraded, Fences uint64
}

// idShown is how much of a session or transfer id the page shows.
const idShown = 8

// copiesShown is the copy log for the page: the holds whose key,
// resource/domain, starts with prefix (hasKeyPrefix, as the buckets), ids
// cut to idShown.
func copiesShown(snap copies.Snapshot, prefix string) copies.Snapshot {
	keep := func(resource, domain string) bool { return hasKeyPrefix(resource, domain, prefix) }
	cut := func(id string) string { return id[:min(len(id), idShown)] + "…" }
	var out copies.Snapshot
	for _, r := range snap.Resources {
		if strings.HasPrefix(r.Resource, prefix) || strings.HasPrefix(prefix, r.Resource+"/") {
			if !strings.HasPrefix(r.Resource, prefix) {
				var ds []copies.DomainHolds
				for _, d := range r.Domains {
					if keep(r.Resource, d.Domain) {
						ds = append(ds, d)
					}
				}
				r.Domains = ds
			}
			out.Resources = append(out.Resources, r)
		}
	}
	for _, sh := range snap.Sessions {
		var hs []copies.Hold
		for _, h := range sh.Holds {
			if keep(h.Resource, h.Domain) {
				hs = append(hs, h)
			}
		}
		if len(hs) > 0 || prefix == "" {
			sh.ID, sh.Holds = cut(sh.ID), hs
			out.Sessions = append(out.Sessions, sh)
		}
	}
	for _, t := range snap.Transfers {
		if keep(t.Hold.Resource, t.Hold.Domain) {
			t.ID, t.Session = cut(t.ID), cut(t.Session)
			out.Transfers = append(out.Transfers, t)
		}
	}
	return out
}

// bucketColumn is one sortable column: text columns compare text, the
// rest numbers (the bucket described at the page's now).
type bucketColumn struct {
	text func(*limits.BucketInfo) string
	num  func(b *limits.BucketInfo, now time.Time) float64
}

// bucketColumns are the columns of the buckets page, by JSON name.
var bucketColumns = map[string]bucketColumn{
	"key":          {}, // limits.ByKey: resource, then domain
	"resource":     {text: func(b *limits.BucketInfo) string { return b.Resource }},
	"domain":       {text: func(b *limits.BucketInfo) string { return b.Domain }},
	"bucket":       {text: func(b *limits.BucketInfo) string { return b.Bucket.String() }},
	"size":         {num: func(b *limits.BucketInfo, _ time.Time) float64 { return float64(b.Size) }},
	"fill_rate":    {num: func(b *limits.BucketInfo, _ time.Time) float64 { return b.FillRate }},
	"tokens":       {num: func(b *limits.BucketInfo, _ time.Time) float64 { return b.Tokens }},
	"fraction":     {num: func(b *limits.BucketInfo, _ time.Time) float64 { return b.Fraction }},
	"debt_seconds": {num: func(b *limits.BucketInfo, _ time.Time) float64 { return b.Debt.Seconds() }},
	"idle_seconds": {num: func(b *limits.BucketInfo, now time.Time) float64 { return idle(b, now) }},
	"grants":       {num: func(b *limits.BucketInfo, _ time.Time) float64 { return float64(b.Grants) }},
	"rejections":   {num: func(b *limits.BucketInfo, _ time.Time) float64 { return float64(b.Rejections) }},
	"tier":         {num: func(b *limits.BucketInfo, _ time.Time) float64 { return float64(b.Tier) }},
	"tier_hits":    {num: func(b *limits.BucketInfo, _ time.Time) float64 { return float64(b.TierHits) }},
}

func idle(b *limits.BucketInfo, now time.Time) float64 { return max(now.Sub(b.LastUsed).Seconds(), 0) }

// predicate is one numeric condition of the where filter: column op value.
type predicate struct {
	num   func(*limits.BucketInfo, time.Time) float64
	op    string
	value float64
}

func (p predicate) match(b *limits.BucketInfo, now time.Time) bool {
	x := p.num(b, now)
	switch p.op {
	case "<":
		return x < p.value
	case "<=":
		return x <= p.value
	case ">":
		return x > p.value
	case ">=":
		return x >= p.value
	case "=", "==":
		return x == p.value
	case "!=":
		return x != p.value
	}
	return false
}

// parseWhere parses "fraction<0.5,grants>=10": numeric conditions on the
// numeric columns, all of which must hold.
func parseWhere(s string) ([]predicate, error) {
	var ps []predicate
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		i := strings.IndexAny(part, "<>=!")
		if i <= 0 {
			return nil, fmt.Errorf("where: %q: want COLUMN OP NUMBER, e.g. fraction<0.5", part)
		}
		col := strings.TrimSpace(part[:i])
		rest := part[i:]
		op := rest[:1]
		if len(rest) > 1 && rest[1] == '=' {
			op = rest[:2]
		}
		if op == "!" {
			return nil, fmt.Errorf("where: %q: unknown operator (want <, <=, >, >=, =, !=)", part)
		}
		c, ok := bucketColumns[col]
		if !ok || c.num == nil {
			return nil, fmt.Errorf("where: %q: %q is not a numeric column (want one of %s)", part, col, strings.Join(numericColumns(), ", "))
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(rest[len(op):]), 64)
		if err != nil {
			return nil, fmt.Errorf("where: %q: %q is not a number", part, strings.TrimSpace(rest[len(op):]))
		}
		ps = append(ps, predicate{num: c.num, op: op, value: v})
	}
	return ps, nil
}

func numericColumns() []string {
	var cols []string
	for name, c := range bucketColumns {
		if c.num != nil {
			cols = append(cols, name)
		}
	}
	slices.Sort(cols)
	return cols
}

// bucketQuery is a parsed request for the buckets page.
type bucketQuery struct {
	prefix, where, sort string
	desc                bool
	page, perPage       int
	preds               []predicate
}

func parseBucketQuery(q url.Values) (bucketQuery, error) {
	bq := bucketQuery{prefix: q.Get("prefix"), where: q.Get("where"), sort: q.Get("sort"),
		desc: q.Get("desc") == "1" || q.Get("desc") == "true", page: 1, perPage: DefaultBucketsPerPage}
	if bq.sort == "" {
		bq.sort = "key"
	}
	if _, ok := bucketColumns[bq.sort]; !ok {
		return bq, fmt.Errorf("sort: unknown column %q", bq.sort)
	}
	var err error
	if bq.preds, err = parseWhere(bq.where); err != nil {
		return bq, err
	}
	for _, p := range []struct {
		name string
		dst  *int
		max  int
	}{{"page", &bq.page, MaxBucketsRows}, {"per_page", &bq.perPage, MaxBucketsPerPage}} {
		if v := q.Get(p.name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > p.max {
				return bq, fmt.Errorf("%s: %q: want a whole number from 1 to %d", p.name, v, p.max)
			}
			*p.dst = n
		}
	}
	if bq.page*bq.perPage > MaxBucketsRows {
		return bq, fmt.Errorf("page: %d × per_page %d is beyond the first %d rows; narrow the filter", bq.page, bq.perPage, MaxBucketsRows)
	}
	return bq, nil
}

// less returns the page's order (nil: by key), descending with desc.
func (bq bucketQuery) less(now time.Time) func(a, b *limits.BucketInfo) bool {
	c := bucketColumns[bq.sort]
	var less func(a, b *limits.BucketInfo) bool
	switch {
	case c.text != nil:
		less = func(a, b *limits.BucketInfo) bool { return c.text(a) < c.text(b) }
	case c.num != nil:
		less = func(a, b *limits.BucketInfo) bool { return c.num(a, now) < c.num(b, now) }
	default:
		less = limits.ByKey
	}
	if bq.desc {
		return func(a, b *limits.BucketInfo) bool { return less(b, a) }
	}
	return less
}

// bucketRow describes one bucket at now.
func bucketRow(b *limits.BucketInfo, now time.Time) BucketRow {
	r := BucketRow{
		Key: b.Resource + "/" + b.Domain, Resource: b.Resource, Domain: b.Domain, Bucket: b.Bucket.String(),
		Size: b.Size, FillRate: b.FillRate, Tokens: b.Tokens, Fraction: b.Fraction,
		DebtSeconds: b.Debt.Seconds(), IdleSeconds: idle(b, now), LastUsed: b.LastUsed,
		Grants: b.Grants, Rejections: b.Rejections, Algorithm: b.Algorithm.String(),
	}
	if b.Algorithm == limits.BurstTiers {
		r.Tier, r.TierPhase, r.TierLeftSeconds = b.Tier, b.TierPhase.String(), b.TierLeft.Seconds()
		r.TierLimit, r.TierHits, r.HitsLastSecond = b.TierLimit, b.TierHits, b.HitsLastSecond
		r.CooldownTier, r.CooldownLeftSecs = b.CooldownTier, b.CooldownLeft.Seconds()
	}
	return r
}

// WalkBudget is the most buckets (and the most Envoy counters) one view of
// the buckets page looks at, so that it costs the same with ten million
// buckets as with fifty thousand (on Redis, about a hundred SCANs and
// their GETs).
const WalkBudget = 50_000

// BucketsPage returns the buckets page for a query (the URL's: prefix,
// where, sort, desc, page, per_page); an error names the bad parameter.
// It is one limits.Engine.Query: one walk over at most WalkBudget
// buckets, keeping only the rows up to the page, and the hottest and most
// rejected on the way; and one walk over at most WalkBudget Envoy rate
// limit counters (envoyrls.Counters).
func (s *Site) BucketsPage(ctx context.Context, q url.Values) (BucketsPage, error) {
	bq, err := parseBucketQuery(q)
	if err != nil {
		return BucketsPage{}, err
	}
	start := time.Now()
	now := s.v.Now()
	out := BucketsPage{Prefix: bq.prefix, Where: bq.where, Sort: bq.sort, Desc: bq.desc, Page: bq.page, PerPage: bq.perPage}
	hottest := newTopK(TopBuckets, func(a, b *limits.BucketInfo) bool {
		return a.Grants > b.Grants || a.Grants == b.Grants && limits.ByKey(a, b)
	})
	rejected := newTopK(TopBuckets, func(a, b *limits.BucketInfo) bool {
		return a.Rejections > b.Rejections || a.Rejections == b.Rejections && limits.ByKey(a, b)
	})
	page, err := s.v.Limits.Query(ctx, now, limits.Query{
		Filter: func(b *limits.BucketInfo) bool {
			out.Total++
			if b.Grants > 0 {
				hottest.push(b)
			}
			if b.Rejections > 0 {
				rejected.push(b)
			}
			if !hasKeyPrefix(b.Resource, b.Domain, bq.prefix) {
				return false
			}
			for _, p := range bq.preds {
				if !p.match(b, now) {
					return false
				}
			}
			return true
		},
		Less:   bq.less(now),
		Offset: (bq.page - 1) * bq.perPage,
		Limit:  bq.perPage,
		Budget: WalkBudget,
	})
	if err != nil {
		return BucketsPage{}, fmt.Errorf("walking the buckets: %w", err)
	}
	out.Matched, out.Complete = page.Total, page.Complete
	if !out.Complete {
		out.Estimate, _ = s.v.Limits.EstimateLen(ctx)
	}
	out.Rows = rows(page.Buckets, now)
	out.Hottest, out.MostRejected = rows(hottest.sorted(), now), rows(rejected.sorted(), now)
	if ss := s.v.Sessions; ss != nil {
		out.Copies = copiesShown(ss.Snapshot(), bq.prefix)
		if fs, ok := ss.Fleet(); ok {
			st := ss.Stats()
			out.Fleet = &FleetState{FleetStatus: fs, Fenced: ss.Fenced(), Degraded: st.Degraded, Fences: st.Fenced}
		}
	}
	if e := s.v.Envoy; e != nil {
		ep, err := e.Counters(ctx, bq.prefix, (bq.page-1)*bq.perPage, bq.perPage, WalkBudget)
		if err != nil {
			return BucketsPage{}, fmt.Errorf("walking the Envoy rate limit counters: %w", err)
		}
		out.Envoy = &ep
	}
	out.Took = time.Since(start).Seconds()
	return out, nil
}

// rows describes buckets at now.
func rows(bs []limits.BucketInfo, now time.Time) []BucketRow {
	out := make([]BucketRow, len(bs))
	for i := range bs {
		out[i] = bucketRow(&bs[i], now)
	}
	return out
}

// hasKeyPrefix reports whether the key resource/domain starts with
// prefix, without building the key.
func hasKeyPrefix(resource, domain, prefix string) bool {
	if len(prefix) <= len(resource) {
		return strings.HasPrefix(resource, prefix)
	}
	return strings.HasPrefix(prefix, resource) && prefix[len(resource)] == '/' &&
		strings.HasPrefix(domain, prefix[len(resource)+1:])
}

func (s *Site) handleBuckets(w http.ResponseWriter, r *http.Request) {
	p, err := s.BucketsPage(r.Context(), r.URL.Query())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if wantsJSON(r) {
		writeJSON(w, p)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := pages.ExecuteTemplate(w, "buckets.html", p); err != nil {
		s.v.Logger.Warn("rendering the buckets page", "err", err)
	}
}

// bucketsURL is the buckets page's URL with one parameter changed.
func bucketsURL(p BucketsPage, key, value string) string {
	q := url.Values{}
	for k, v := range map[string]string{"prefix": p.Prefix, "where": p.Where, "sort": p.Sort} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if p.Desc {
		q.Set("desc", "1")
	}
	if p.PerPage != DefaultBucketsPerPage {
		q.Set("per_page", strconv.Itoa(p.PerPage))
	}
	switch key {
	case "sort": // toggles the direction on the current column; page 1
		if p.Sort == value && !p.Desc {
			q.Set("desc", "1")
		} else {
			q.Del("desc")
		}
		q.Set("sort", value)
	case "page":
		q.Set("page", value)
	}
	return "/debug/status/buckets?" + q.Encode()
}

// topK keeps the k first buckets in the order before, of all it is
// given, sorted (k is small: the page's top lists).
type topK struct {
	k      int
	before func(a, b *limits.BucketInfo) bool
	rows   []limits.BucketInfo
}

func newTopK(k int, before func(a, b *limits.BucketInfo) bool) *topK {
	return &topK{k: k, before: before}
}

// push offers b: kept, in order, if fewer than k are kept or it comes
// before the last.
func (t *topK) push(b *limits.BucketInfo) {
	n := len(t.rows)
	if t.k <= 0 || n == t.k && !t.before(b, &t.rows[n-1]) {
		return
	}
	i := sort.Search(n, func(i int) bool { return t.before(b, &t.rows[i]) })
	t.rows = slices.Insert(t.rows, i, *b)
	if len(t.rows) > t.k {
		t.rows = t.rows[:t.k]
	}
}

// sorted returns the buckets kept, in order.
func (t *topK) sorted() []limits.BucketInfo { return t.rows }
