package limits

import (
	"context"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/limits/rls"
)

// Budget is one more limit on a token bucket (Bucket.Budgets): a number
// of tokens per window — "100 000 tokens a calendar month", "20 000 a
// day in Europe/Paris" — that every grant of the bucket must also fit,
// with a counter of its own per bucket (for a template's or a prefix's
// buckets, per domain; for a shared default bucket, one for all its
// domains). The counters are Envoy's rate limit service's (package
// limits/rls): the same arithmetic (rls.Decide) and the same stores
// (Options.Budgets). A Budget is a value; its zero value is invalid
// (Limit 0, no Unit).
//
// Source: envoyproxy/ratelimit's requests_per_unit, unit and its
// calendar-aligned month, gubernator's DURATION_IS_GREGORIAN
// (docs/references.md); limits/rls's Limit, whose fields these are.
type Budget struct {
	// Limit is the tokens the bucket may grant per window (≥ 1, ≤
	// MaxBudgetLimit); for Algorithm TokenBucket, the tokens it refills
	// per window.
	Limit int64
	// Unit is the window's unit: rls.Second, Minute, Hour, Day, Week,
	// Month or Year (required). Without a Calendar a unit has a fixed
	// length (rls.Unit.Duration: a month is 30 days, a year 365).
	Unit rls.Unit
	// UnitMultiplier makes the window UnitMultiplier units long (0 and
	// 1: one unit; ≤ MaxBudgetLimit; the window at most MaxDuration).
	// Windows are aligned to the Unix epoch. Not with a Calendar.
	UnitMultiplier int64
	// Calendar, when set, aligns the windows to the calendar of this
	// zone (time.UTC, or an IANA zone from time.LoadLocation; not
	// time.Local, which differs between servers): Unit Day, Week (ISO
	// 8601: Monday to Sunday), Month or Year, each starting at local
	// midnight, as long as the calendar makes it — months of 28 to 31
	// days, days of 23 or 25 hours where daylight saving starts or ends
	// (rls.Calendar). nil: the unit's fixed length.
	Calendar *time.Location
	// Algorithm counts the budget: rls.FixedWindow (the default, also
	// rls.AlgorithmDefault: at most Limit tokens in each window) or
	// rls.TokenBucket (Limit tokens refilled per window, continuously,
	// up to Burst; not with a Calendar).
	Algorithm rls.Algorithm
	// Burst is, for Algorithm TokenBucket, the budget's depth in tokens
	// (0: Limit; ≤ MaxBudgetLimit): "at most 5 at once, 60 a minute".
	// Only with TokenBucket.
	Burst int64
}

// Bounds on budgets.
const (
	// MaxBudgetLimit bounds a budget's Limit, Burst and UnitMultiplier:
	// 2³² − 1, what an rls counter holds.
	MaxBudgetLimit = math.MaxUint32
	// MaxBudgets bounds the budgets of one bucket.
	MaxBudgets = 16
)

// budgetRefundMargin is how long before its window ends a fixed window's
// hit may still be given back on a store that runs on its own clock
// (Redis): see Engine.Allow.
const budgetRefundMargin = time.Second

// Policy returns the budget's counter policy (rls.Policy): its
// algorithm, limit, period in microseconds (the unit's fixed length times
// UnitMultiplier), burst and calendar. It is meaningful only for a valid
// budget (Config.Validate).
func (b Budget) Policy() rls.Policy {
	p := rls.Policy{
		Algorithm: rls.FixedWindow,
		Limit:     uint32(min(max(b.Limit, 0), MaxBudgetLimit)),
		Period:    (b.Unit.Duration() * time.Duration(max(1, b.UnitMultiplier))).Microseconds(),
	}
	switch {
	case b.Calendar != nil:
		p.Calendar = rls.Calendar{Unit: b.Unit, Location: b.Calendar}
	case b.Algorithm == rls.TokenBucket:
		p.Algorithm, p.Burst = rls.TokenBucket, uint32(min(max(b.Burst, 0), MaxBudgetLimit))
	}
	return p
}

// depth returns the most tokens one grant may take from the budget: a
// token bucket's Burst (else Limit), a window's Limit.
func (b Budget) depth() int64 {
	if b.Calendar == nil && b.Algorithm == rls.TokenBucket && b.Burst > 0 {
		return b.Burst
	}
	return b.Limit
}

// String returns a one-line summary of b: "100000/month in UTC",
// "20/5 minute", "60/minute token_bucket burst 5".
func (b Budget) String() string {
	var sb strings.Builder
	sb.WriteString(strconv.FormatInt(b.Limit, 10))
	sb.WriteByte('/')
	if b.UnitMultiplier > 1 {
		sb.WriteString(strconv.FormatInt(b.UnitMultiplier, 10))
		sb.WriteByte(' ')
	}
	sb.WriteString(b.Unit.String())
	if b.Calendar != nil {
		sb.WriteString(" in ")
		sb.WriteString(b.Calendar.String())
	}
	if b.Algorithm != rls.AlgorithmDefault && b.Algorithm != rls.FixedWindow {
		sb.WriteByte(' ')
		sb.WriteString(b.Algorithm.String())
	}
	if b.Burst != 0 {
		sb.WriteString(" burst ")
		sb.WriteString(strconv.FormatInt(b.Burst, 10))
	}
	return sb.String()
}

// validateBudgets reports every problem of a bucket's budgets at path
// (the bucket's budgets field).
func validateBudgets(budgets []Budget, path string, bad func(path, format string, args ...any)) {
	if len(budgets) > MaxBudgets {
		bad(path, "%d budgets; at most %d", len(budgets), MaxBudgets)
	}
	for i, b := range budgets {
		bp := path + "[" + strconv.Itoa(i) + "]"
		switch {
		case b.Limit < 1:
			bad(bp+".limit", "%d must be ≥ 1 (tokens per window)", b.Limit)
		case b.Limit > MaxBudgetLimit:
			bad(bp+".limit", "%d exceeds %d (2^32 - 1) tokens per window", b.Limit, int64(MaxBudgetLimit))
		}
		unitOK := b.Unit > rls.UnitUnknown && b.Unit <= rls.Week
		if !unitOK {
			bad(bp+".unit", "%v is not a unit (want second, minute, hour, day, week, month or year)", b.Unit)
		}
		switch m := b.UnitMultiplier; {
		case m < 0:
			bad(bp+".unit_multiplier", "%d is negative (0 and 1: one unit)", m)
		case m > MaxBudgetLimit:
			bad(bp+".unit_multiplier", "%d exceeds %d (2^32 - 1)", m, int64(MaxBudgetLimit))
		case unitOK && float64(b.Unit.Duration())*float64(max(1, m)) > float64(MaxDuration):
			bad(bp+".unit_multiplier", "a window of %d %ss is longer than %v (ten years)", m, b.Unit, MaxDuration)
		}
		alg := b.Algorithm
		switch alg {
		case rls.AlgorithmDefault, rls.FixedWindow, rls.TokenBucket:
		default:
			bad(bp+".algorithm", "%v is not an algorithm (want fixed_window or token_bucket)", alg)
		}
		switch {
		case b.Burst < 0:
			bad(bp+".burst", "%d is negative (0: the limit)", b.Burst)
		case b.Burst > MaxBudgetLimit:
			bad(bp+".burst", "%d exceeds %d (2^32 - 1) tokens", b.Burst, int64(MaxBudgetLimit))
		case b.Burst > 0 && alg != rls.TokenBucket:
			bad(bp+".burst", "a burst is a token bucket's depth: only with algorithm token_bucket (this budget's is fixed_window)")
		}
		if loc := b.Calendar; loc != nil {
			switch {
			case loc == time.Local || loc.String() == "Local":
				bad(bp+".calendar", "Local is each server's own zone: name the zone (UTC, or an IANA name such as Europe/Paris)")
			case unitOK && !rls.CalendarUnit(b.Unit):
				bad(bp+".calendar", "a calendar aligns a day, week, month or year (this budget's unit is %s)", b.Unit)
			}
			if b.UnitMultiplier > 1 {
				bad(bp+".unit_multiplier", "%d: a calendar's window is one unit (want 1 or none with a calendar)", b.UnitMultiplier)
			}
			if alg == rls.TokenBucket {
				bad(bp+".algorithm", "a calendar counts a fixed window: token_bucket is not allowed with a calendar")
			}
		}
	}
}

// window reports whether b counts fixed windows (a refund may land in a
// later window than its charge).
func (b Budget) window() bool { return b.Calendar != nil || b.Algorithm != rls.TokenBucket }

// budgetTags are the counters' tags, "budgets[i]", by index.
var budgetTags = func() (t [MaxBudgets]string) {
	for i := range t {
		t[i] = "budgets[" + strconv.Itoa(i) + "]"
	}
	return t
}()

// leastDepth returns the fewest tokens one grant may take from any of
// bs (math.MaxInt64 when none).
func leastDepth(bs []Budget) int64 {
	m := int64(math.MaxInt64)
	for _, b := range bs {
		m = min(m, b.depth())
	}
	return m
}

// BudgetCounter returns the counter (an rls bucket string) of budget i of
// the bucket with key k, in the budgets' store (Options.Budgets), under
// rls domain k.Resource (on Redis, the hash tag every budget of the
// resource shares): rls.TaggedBucket with the empty rls domain — which
// Envoy's counters never have, so the two never collide in one store —
// the entry {k.Resource, k.Domain} and the tag "budgets[i]". A counter
// is kept by its index and algorithm (docs/quotaservice.md, "Budgets"):
// a budget whose limit changes keeps its window's count; one whose unit,
// multiplier or calendar changes keeps or drops it depending on where
// the old and new windows start; one whose algorithm changes has another
// counter; one that moves to another index takes that index's counter.
func BudgetCounter(k Key, i int) string {
	tag := "budgets[" + strconv.Itoa(i) + "]"
	if i >= 0 && i < MaxBudgets {
		tag = budgetTags[i] // (made once)
	}
	return rls.TaggedBucket("", []rls.Entry{{Key: k.Resource, Value: k.Domain}}, tag)
}

// budgetRun is one request's hits on a bucket's budgets.
type budgetRun struct {
	hits []rls.Hit
	res  []rls.Result // the last decision's results
	hbuf [4]rls.Hit
	rbuf [4]rls.Result
}

// init sets r up for bucket k with (valid) budgets bs.
func (r *budgetRun) init(k Key, bs []Budget) {
	r.hits, r.res = r.hbuf[:0], r.rbuf[:0]
	for i, b := range bs {
		r.hits = append(r.hits, rls.Hit{Bucket: BudgetCounter(k, i), Policy: b.Policy()})
		r.res = append(r.res, rls.Result{})
	}
}

// decideBudgets takes n tokens from every budget of r at now (Unix µs),
// all or nothing (rls.Store.Decide), leaving the answers in r.res.
func (e *Engine) decideBudgets(ctx context.Context, now int64, k Key, r *budgetRun, n int64) (bool, error) {
	for i := range r.hits {
		r.hits[i].Hits, r.hits[i].Refund, r.hits[i].Soft = uint64(n), false, false
	}
	return e.budgets.Decide(ctx, now, k.Resource, r.hits, r.res)
}

// least returns the fewest tokens any budget has left after the last
// decision.
func (r *budgetRun) least() int64 {
	m := int64(math.MaxInt64)
	for _, res := range r.res {
		m = min(m, int64(res.Remaining))
	}
	return m
}

// retryAfter returns when a refused grant of lo tokens would fit every
// budget of bs, from the last decision's results, in nanoseconds
// (RetryNever: never, lo being above a budget's depth).
func (r *budgetRun) retryAfter(bs []Budget, lo int64) int64 {
	var after int64
	for i, b := range bs {
		res, depth := r.res[i], b.depth()
		switch {
		case lo > depth:
			return RetryNever
		case int64(res.Remaining) >= lo:
		case b.window():
			after = max(after, res.Reset)
		default:
			// A token bucket is full Reset µs from now, and lacks
			// (depth − lo) × period ÷ limit µs of fill less at lo.
			p := r.hits[i].Policy
			spare := math.Floor(float64(float64(depth-lo)*float64(p.Period)) / float64(p.Limit))
			after = max(after, res.Reset-int64(spare), 1)
		}
	}
	return after * int64(time.Microsecond)
}

// refundBudgets gives n tokens back to every budget of r at now (Unix
// µs), after the token bucket refused them. On a store that decides on
// its own clock (Redis) a fixed window whose window ended less than
// budgetRefundMargin after the charge keeps them (a refund reaching the
// store in the next window would free tokens that window never gave):
// conservative. A store's error is ignored: the tokens stay spent. It
// runs on ctx without its cancellation, so that a request that ends
// meanwhile still gives back what it took.
func (e *Engine) refundBudgets(ctx context.Context, now int64, k Key, l *Limit, r *budgetRun, n int64) {
	var hbuf [4]rls.Hit
	var rbuf [4]rls.Result
	hits := hbuf[:0]
	for i, h := range r.hits {
		if l.Bucket.Budgets[i].window() && !e.budgetsExact && r.res[i].Reset <= budgetRefundMargin.Microseconds() {
			continue
		}
		h.Hits, h.Refund, h.Soft = uint64(n), true, false
		hits = append(hits, h)
	}
	if len(hits) == 0 {
		return
	}
	res := rbuf[:0]
	for range hits {
		res = append(res, rls.Result{})
	}
	_, _ = e.budgets.Decide(context.WithoutCancel(ctx), now, k.Resource, hits, res)
}

// recordBudgets counts n tokens granted without limits (Limit.Unlimited)
// against every budget of r at now (Unix µs), as soft hits: a budget that
// has room counts them, one that has not stays as it is, nothing is
// refused. A store's error is ignored (the grant does not depend on it).
func (e *Engine) recordBudgets(ctx context.Context, now int64, k Key, r *budgetRun, n int64) {
	for i := range r.hits {
		r.hits[i].Hits, r.hits[i].Refund, r.hits[i].Soft = uint64(n), false, true
	}
	_, _ = e.budgets.Decide(ctx, now, k.Resource, r.hits, r.res)
}

// resetBudgets forgets the budgets' counters of bucket k under l (a
// token bucket with budgets; else it does nothing): every index up to
// MaxBudgets, so that a budget added later at an index a removed one had
// starts afresh too. It reports whether the store held any. Errors: the
// budgets' store's (rls.Store.Reset). Engine.Reset's step for budgets.
func (e *Engine) resetBudgets(ctx context.Context, k Key, l *Limit) (bool, error) {
	if l == nil || l.Tiers != nil || len(l.Bucket.Budgets) == 0 {
		return false, nil
	}
	var buckets [MaxBudgets]string
	for i := range buckets {
		buckets[i] = BudgetCounter(k, i)
	}
	n, err := e.budgets.Reset(ctx, k.Resource, buckets[:])
	return n > 0, err
}
