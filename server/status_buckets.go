package server

import (
	"cmp"
	"container/heap"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/limits"
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
// one pass over the buckets whatever their number; it never holds them all.
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
}

// BucketsPage is the buckets page's data (and its JSON).
type BucketsPage struct {
	Prefix  string `json:"prefix"`
	Where   string `json:"where"`
	Sort    string `json:"sort"`
	Desc    bool   `json:"desc"`
	Page    int    `json:"page"`
	PerPage int    `json:"per_page"`
	// Total is every bucket; Matched those the filter kept.
	Total   int         `json:"total"`
	Matched int         `json:"matched"`
	Rows    []BucketRow `json:"rows"`
	// Hottest and MostRejected are the TopBuckets buckets with the most
	// grants and the most rejections, over all buckets.
	Hottest      []BucketRow `json:"hottest"`
	MostRejected []BucketRow `json:"most_rejected"`
	Took         float64     `json:"took_seconds"`
}

// bucketColumns are the sortable columns and their values; strings sort
// as strings, the rest as numbers.
var bucketColumns = map[string]func(BucketRow) (float64, string){
	"key":          func(r BucketRow) (float64, string) { return 0, "" }, // compareKeys
	"resource":     func(r BucketRow) (float64, string) { return 0, r.Resource },
	"domain":       func(r BucketRow) (float64, string) { return 0, r.Domain },
	"bucket":       func(r BucketRow) (float64, string) { return 0, r.Bucket },
	"size":         func(r BucketRow) (float64, string) { return float64(r.Size), "" },
	"fill_rate":    func(r BucketRow) (float64, string) { return r.FillRate, "" },
	"tokens":       func(r BucketRow) (float64, string) { return r.Tokens, "" },
	"fraction":     func(r BucketRow) (float64, string) { return r.Fraction, "" },
	"debt_seconds": func(r BucketRow) (float64, string) { return r.DebtSeconds, "" },
	"idle_seconds": func(r BucketRow) (float64, string) { return r.IdleSeconds, "" },
	"grants":       func(r BucketRow) (float64, string) { return float64(r.Grants), "" },
	"rejections":   func(r BucketRow) (float64, string) { return float64(r.Rejections), "" },
}

// isText reports whether a column sorts as text.
func isText(col string) bool {
	switch col {
	case "key", "resource", "domain", "bucket":
		return true
	}
	return false
}

// predicate is one numeric condition of the where filter: column op value.
type predicate struct {
	col   string
	get   func(BucketRow) (float64, string)
	op    string
	value float64
}

func (p predicate) match(r BucketRow) bool {
	x, _ := p.get(r)
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
		get, ok := bucketColumns[col]
		if !ok || isText(col) {
			return nil, fmt.Errorf("where: %q: %q is not a numeric column (want one of %s)", part, col, strings.Join(numericColumns(), ", "))
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(rest[len(op):]), 64)
		if err != nil {
			return nil, fmt.Errorf("where: %q: %q is not a number", part, strings.TrimSpace(rest[len(op):]))
		}
		ps = append(ps, predicate{col: col, get: get, op: op, value: v})
	}
	return ps, nil
}

func numericColumns() []string {
	var cols []string
	for c := range bucketColumns {
		if !isText(c) {
			cols = append(cols, c)
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

// bucketRow describes one bucket at now, but for its Key (set only on the
// rows shown: building it for every bucket would be most of the walk).
func bucketRow(b limits.BucketInfo, now time.Time) BucketRow {
	return BucketRow{
		Resource: b.Resource, Domain: b.Domain, Bucket: b.Bucket.String(),
		Size: b.Size, FillRate: b.FillRate, Tokens: b.Tokens, Fraction: b.Fraction,
		DebtSeconds: b.Debt.Seconds(), IdleSeconds: max(now.Sub(b.LastUsed).Seconds(), 0), LastUsed: b.LastUsed,
		Grants: b.Grants, Rejections: b.Rejections,
	}
}

// BucketsPage returns the buckets page for a query (the URL's: prefix,
// where, sort, desc, page, per_page); an error names the bad parameter.
func (s *Server) BucketsPage(q url.Values) (BucketsPage, error) {
	bq, err := parseBucketQuery(q)
	if err != nil {
		return BucketsPage{}, err
	}
	start := time.Now()
	now := s.now()
	get := bucketColumns[bq.sort]
	// before orders rows as the page shows them; ties by key.
	before := func(a, b BucketRow) bool {
		var c int
		switch {
		case bq.sort == "key":
			c = compareKeys(a, b)
		case isText(bq.sort):
			_, sa := get(a)
			_, sb := get(b)
			c = strings.Compare(sa, sb)
		default:
			na, _ := get(a)
			nb, _ := get(b)
			c = cmp.Compare(na, nb)
		}
		if bq.desc {
			c = -c
		}
		if c == 0 {
			return compareKeys(a, b) < 0
		}
		return c < 0
	}
	page := newTopK(bq.page*bq.perPage, before)
	hottest := newTopK(TopBuckets, func(a, b BucketRow) bool {
		return a.Grants > b.Grants || a.Grants == b.Grants && compareKeys(a, b) < 0
	})
	rejected := newTopK(TopBuckets, func(a, b BucketRow) bool {
		return a.Rejections > b.Rejections || a.Rejections == b.Rejections && compareKeys(a, b) < 0
	})
	out := BucketsPage{Prefix: bq.prefix, Where: bq.where, Sort: bq.sort, Desc: bq.desc, Page: bq.page, PerPage: bq.perPage}
	err = s.limits.Walk(now, func(b limits.BucketInfo) bool {
		out.Total++
		r := bucketRow(b, now)
		if r.Grants > 0 {
			hottest.push(r)
		}
		if r.Rejections > 0 {
			rejected.push(r)
		}
		if !hasKeyPrefix(r, bq.prefix) {
			return true
		}
		for _, p := range bq.preds {
			if !p.match(r) {
				return true
			}
		}
		out.Matched++
		page.push(r)
		return true
	})
	if err != nil {
		return BucketsPage{}, fmt.Errorf("walking the buckets: %w", err)
	}
	rows := page.sorted()
	from := min((bq.page-1)*bq.perPage, len(rows))
	out.Rows = withKeys(rows[from:])
	out.Hottest, out.MostRejected = withKeys(hottest.sorted()), withKeys(rejected.sorted())
	out.Took = time.Since(start).Seconds()
	return out, nil
}

// withKeys sets the rows' keys.
func withKeys(rows []BucketRow) []BucketRow {
	for i := range rows {
		rows[i].Key = rows[i].Resource + "/" + rows[i].Domain
	}
	return rows
}

// keyByte is byte i of a row's key, resource/domain, without building it.
func keyByte(r BucketRow, i int) byte {
	switch {
	case i < len(r.Resource):
		return r.Resource[i]
	case i == len(r.Resource):
		return '/'
	}
	return r.Domain[i-len(r.Resource)-1]
}

// compareKeys compares two rows' keys as strings.Compare would.
func compareKeys(a, b BucketRow) int {
	la, lb := len(a.Resource)+1+len(a.Domain), len(b.Resource)+1+len(b.Domain)
	if a.Resource == b.Resource {
		return strings.Compare(a.Domain, b.Domain)
	}
	for i := range min(la, lb) {
		if ca, cb := keyByte(a, i), keyByte(b, i); ca != cb {
			return cmp.Compare(ca, cb)
		}
	}
	return cmp.Compare(la, lb)
}

// hasKeyPrefix reports whether a row's key starts with prefix.
func hasKeyPrefix(r BucketRow, prefix string) bool {
	if len(prefix) <= len(r.Resource) {
		return strings.HasPrefix(r.Resource, prefix)
	}
	return strings.HasPrefix(prefix, r.Resource) && prefix[len(r.Resource)] == '/' &&
		strings.HasPrefix(r.Domain, prefix[len(r.Resource)+1:])
}

func (s *Server) handleBuckets(w http.ResponseWriter, r *http.Request) {
	p, err := s.BucketsPage(r.URL.Query())
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
		s.log.Warn("rendering the buckets page", "err", err)
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

// topK keeps the k first rows in the order before, of all it is given, in
// O(log k) a row: a heap whose root is the last row kept.
type topK struct {
	k      int
	before func(a, b BucketRow) bool
	rows   []BucketRow
}

func newTopK(k int, before func(a, b BucketRow) bool) *topK {
	return &topK{k: k, before: before}
}

func (t *topK) Len() int           { return len(t.rows) }
func (t *topK) Less(i, j int) bool { return t.before(t.rows[j], t.rows[i]) } // the last kept at the root
func (t *topK) Swap(i, j int)      { t.rows[i], t.rows[j] = t.rows[j], t.rows[i] }
func (t *topK) Push(x any)         { t.rows = append(t.rows, x.(BucketRow)) }
func (t *topK) Pop() any {
	r := t.rows[len(t.rows)-1]
	t.rows = t.rows[:len(t.rows)-1]
	return r
}

// push offers r: kept if fewer than k are kept or it comes before the last.
func (t *topK) push(r BucketRow) {
	switch {
	case t.k <= 0:
	case len(t.rows) < t.k:
		heap.Push(t, r)
	case t.before(r, t.rows[0]):
		t.rows[0] = r
		heap.Fix(t, 0)
	}
}

// sorted returns the rows kept, in order.
func (t *topK) sorted() []BucketRow {
	out := slices.Clone(t.rows)
	slices.SortFunc(out, func(a, b BucketRow) int {
		if t.before(a, b) {
			return -1
		}
		if t.before(b, a) {
			return 1
		}
		return 0
	})
	return out
}
