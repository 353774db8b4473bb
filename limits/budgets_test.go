package limits

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/limits/rls"
)

// budgeted returns a bucket that never limits (a million tokens, a
// million a second, no wait) with budgets bs.
func budgeted(bs ...Budget) Bucket {
	return Bucket{Size: 1 << 20, FillRate: 1 << 20, Budgets: bs}
}

// budgetStep is one request of a budget scenario at the clock's time, after
// moving it by advance.
type budgetStep struct {
	advance     time.Duration
	tokens, min int64
	domain      string // "": "d"
	want        Status
	granted     int64
	// retryAfter and never are checked when want is StatusTimeout.
	retryAfter time.Duration
	never      bool
	// remaining is checked when checkRemained.
	remaining     float64
	checkRemained bool
}

// runSteps runs steps on resource "r" of e from start, on a hand-moved
// clock.
func runSteps(t *testing.T, e *Engine, start time.Time, steps []budgetStep) {
	t.Helper()
	clk := testutil.NewClock(start)
	for i, s := range steps {
		clk.Advance(s.advance)
		domain := s.domain
		if domain == "" {
			domain = "d"
		}
		d := e.Allow(t.Context(), clk.Now(), Request{Resource: "r", Domain: domain, Tokens: s.tokens, MinTokens: s.min})
		if d.Status != s.want || d.Granted != s.granted {
			t.Fatalf("step %d at %v (%d tokens, min %d): %v granted %d (retry %v never %v, %v), want %v granted %d",
				i, clk.Now(), s.tokens, s.min, d.Status, d.Granted, d.RetryAfter, d.RetryNever, d.Err, s.want, s.granted)
		}
		if s.want == StatusTimeout && (d.RetryAfter != s.retryAfter || d.RetryNever != s.never) {
			t.Fatalf("step %d at %v: retry after %v never %v, want %v never %v", i, clk.Now(), d.RetryAfter, d.RetryNever, s.retryAfter, s.never)
		}
		if s.checkRemained && d.Remaining != s.remaining {
			t.Fatalf("step %d at %v: remaining %v, want %v", i, clk.Now(), d.Remaining, s.remaining)
		}
	}
}

func TestBudgets(t *testing.T) {
	paris := testutil.Zone(t, "Europe/Paris")
	utc := time.UTC
	date := func(loc *time.Location, y int, m time.Month, d, h, min int) time.Time {
		return time.Date(y, m, d, h, min, 0, 0, loc)
	}
	tests := []struct {
		name   string
		bucket Bucket
		start  time.Time
		steps  []budgetStep
	}{
		{
			name:   "a calendar month across its end (a leap February next)",
			bucket: budgeted(Budget{Limit: 100, Unit: rls.Month, Calendar: utc}),
			start:  date(utc, 2024, 1, 31, 23, 59),
			steps: []budgetStep{
				{tokens: 60, want: StatusOK, granted: 60, checkRemained: true, remaining: 40},
				{tokens: 50, want: StatusTimeout, retryAfter: time.Minute, checkRemained: true, remaining: 40},
				{advance: 59 * time.Second, tokens: 40, want: StatusOK, granted: 40},
				{tokens: 1, want: StatusTimeout, retryAfter: time.Second},
				{advance: time.Second, tokens: 100, want: StatusOK, granted: 100},
				{tokens: 1, want: StatusTimeout, retryAfter: 29 * 24 * time.Hour},
				{advance: 29*24*time.Hour - time.Nanosecond, tokens: 1, want: StatusTimeout, retryAfter: time.Microsecond},
				{advance: time.Nanosecond, tokens: 100, want: StatusOK, granted: 100},
			},
		},
		{
			name:   "an ISO week starts on Monday",
			bucket: budgeted(Budget{Limit: 10, Unit: rls.Week, Calendar: utc}),
			start:  date(utc, 2024, 3, 10, 23, 0), // a Sunday
			steps: []budgetStep{
				{tokens: 10, want: StatusOK, granted: 10},
				{tokens: 1, want: StatusTimeout, retryAfter: time.Hour},
				{advance: time.Hour, tokens: 10, want: StatusOK, granted: 10}, // Monday 00:00
				{advance: 6*24*time.Hour + 23*time.Hour, tokens: 1, want: StatusTimeout, retryAfter: time.Hour},
			},
		},
		{
			name:   "a day of 23 hours in Paris (daylight saving starts)",
			bucket: budgeted(Budget{Limit: 5, Unit: rls.Day, Calendar: paris}),
			start:  date(paris, 2024, 3, 31, 0, 30),
			steps: []budgetStep{
				{tokens: 5, want: StatusOK, granted: 5},
				// 00:30 to midnight on a 23-hour day: 22h30m.
				{tokens: 1, want: StatusTimeout, retryAfter: 22*time.Hour + 30*time.Minute},
				{advance: 22*time.Hour + 30*time.Minute, tokens: 5, want: StatusOK, granted: 5},
			},
		},
		{
			name:   "a day of 25 hours in Paris (daylight saving ends)",
			bucket: budgeted(Budget{Limit: 5, Unit: rls.Day, Calendar: paris}),
			start:  date(paris, 2024, 10, 27, 0, 30),
			steps: []budgetStep{
				{tokens: 5, want: StatusOK, granted: 5},
				{tokens: 1, want: StatusTimeout, retryAfter: 24*time.Hour + 30*time.Minute},
				{advance: 24 * time.Hour, tokens: 1, want: StatusTimeout, retryAfter: 30 * time.Minute},
				{advance: 30 * time.Minute, tokens: 5, want: StatusOK, granted: 5},
			},
		},
		{
			name:   "an epoch-aligned window of 5 minutes",
			bucket: budgeted(Budget{Limit: 3, Unit: rls.Minute, UnitMultiplier: 5}),
			start:  date(utc, 2024, 5, 1, 10, 2),
			steps: []budgetStep{
				{tokens: 3, want: StatusOK, granted: 3},
				{tokens: 1, want: StatusTimeout, retryAfter: 3 * time.Minute},
				{advance: 3 * time.Minute, tokens: 3, want: StatusOK, granted: 3},
			},
		},
		{
			name:   "a token-bucket budget with a burst",
			bucket: budgeted(Budget{Limit: 60, Unit: rls.Minute, Algorithm: rls.TokenBucket, Burst: 5}),
			start:  date(utc, 2024, 5, 1, 10, 0),
			steps: []budgetStep{
				{tokens: 5, want: StatusOK, granted: 5},
				{tokens: 1, want: StatusTimeout, retryAfter: time.Second},
				{tokens: 6, want: StatusTimeout, never: true},
				{advance: 2 * time.Second, tokens: 2, want: StatusOK, granted: 2},
				{advance: time.Minute, tokens: 5, want: StatusOK, granted: 5},
			},
		},
		{
			name: "every budget must fit; the least left answers",
			bucket: budgeted(
				Budget{Limit: 100, Unit: rls.Month, Calendar: utc},
				Budget{Limit: 10, Unit: rls.Day, Calendar: utc},
			),
			start: date(utc, 2024, 5, 30, 12, 0),
			steps: []budgetStep{
				{tokens: 10, want: StatusOK, granted: 10, checkRemained: true, remaining: 0},
				{tokens: 1, want: StatusTimeout, retryAfter: 12 * time.Hour},
				{advance: 12 * time.Hour, tokens: 10, want: StatusOK, granted: 10},
				{tokens: 1, want: StatusTimeout, retryAfter: 24 * time.Hour}, // June: the month's window renews too
			},
		},
		{
			name:   "partial grants: the least left, if at least MinTokens",
			bucket: budgeted(Budget{Limit: 10, Unit: rls.Hour}),
			start:  date(utc, 2024, 5, 1, 10, 0),
			steps: []budgetStep{
				{tokens: 8, want: StatusOK, granted: 8},
				{tokens: 5, min: 1, want: StatusOK, granted: 2},
				{tokens: 5, min: 1, want: StatusTimeout, retryAfter: time.Hour},
				{advance: time.Hour, tokens: 20, min: 5, want: StatusOK, granted: 10}, // lowered to the limit
				{advance: time.Hour, tokens: 20, want: StatusTimeout, never: true},    // all of 20: never
				{tokens: 20, min: 11, want: StatusTimeout, never: true},
			},
		},
		{
			name:   "a template's budgets are per domain",
			bucket: budgeted(Budget{Limit: 2, Unit: rls.Day, Calendar: utc}),
			start:  date(utc, 2024, 5, 1, 0, 0),
			steps: []budgetStep{
				{tokens: 2, want: StatusOK, granted: 2},
				{tokens: 1, want: StatusTimeout, retryAfter: 24 * time.Hour},
				{tokens: 2, domain: "other", want: StatusOK, granted: 2},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := &Config{Resources: map[string]*Resource{"r": {Template: bp(tc.bucket)}}}
			runSteps(t, newEngine(t, cfg, nil), tc.start, tc.steps)
		})
	}
}

// TestBudgetRefund: the token bucket refuses after the budget took its
// tokens; they are given back, so that a later request still fits, and
// a partial grant gives back what the bucket did not grant.
func TestBudgetRefund(t *testing.T) {
	b := Bucket{Size: 2, FillRate: 1, MaxTokensPerRequest: 2, Budgets: []Budget{{Limit: 3, Unit: rls.Day, Calendar: time.UTC}}}
	cfg := &Config{Resources: map[string]*Resource{"r": {Template: &b}}}
	e := newEngine(t, cfg, nil)
	start := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	runSteps(t, e, start, []budgetStep{
		{tokens: 2, want: StatusOK, granted: 2},
		// The bucket is empty: refused by the bucket (a second to one
		// token), the budget's token given back.
		{tokens: 1, want: StatusTimeout, retryAfter: time.Second},
		{tokens: 1, want: StatusTimeout, retryAfter: time.Second},
		{advance: time.Second, tokens: 1, want: StatusOK, granted: 1},
		// The budget is spent (3 a day): refused until midnight.
		{advance: 10 * time.Second, tokens: 1, want: StatusTimeout, retryAfter: 12*time.Hour - 11*time.Second},
	})

	// A partial grant: the budget takes 5, the bucket grants 2, 3 go
	// back.
	b2 := Bucket{Size: 2, FillRate: 1, MaxTokensPerRequest: 10, Budgets: []Budget{{Limit: 100, Unit: rls.Day, Calendar: time.UTC}}}
	e = newEngine(t, &Config{Resources: map[string]*Resource{"r": {Template: &b2}}}, nil)
	d := e.Allow(t.Context(), start, Request{Resource: "r", Domain: "d", Tokens: 5, MinTokens: 1})
	if d.Status != StatusOK || d.Granted != 2 {
		t.Fatalf("partial: %v granted %d, want OK 2", d.Status, d.Granted)
	}
	if n := budgetCount(t, e, Key{"r", "d"}, 0); n != 2 {
		t.Fatalf("the budget counts %d, want 2 (5 taken, 3 given back)", n)
	}
}

// budgetCount returns the tokens counted in budget i of bucket k's
// current window (a fixed window's count), from the engine's budgets'
// store.
func budgetCount(t *testing.T, e *Engine, k Key, i int) int64 {
	t.Helper()
	want, n := BudgetCounter(k, i), int64(-1)
	if err := e.Budgets().Walk(t.Context(), func(c rls.Counter) bool {
		if c.Bucket == want {
			n = c.State.N
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestBudgetSharedDefault: a resource's default bucket is one bucket, so
// its budgets are counted once for every domain; the global default's
// too.
func TestBudgetSharedDefault(t *testing.T) {
	bg := []Budget{{Limit: 3, Unit: rls.Hour}}
	cfg := &Config{
		GlobalDefault: &Bucket{Size: 100, FillRate: 100, Budgets: bg},
		Resources:     map[string]*Resource{"r": {Default: &Bucket{Size: 100, FillRate: 100, Budgets: bg}}},
	}
	e := newEngine(t, cfg, nil)
	for _, res := range []string{"r", "unknown"} {
		for i, d := range []string{"a", "b", "c", "d"} {
			got := e.Allow(t.Context(), at(0), Request{Resource: res, Domain: d})
			if want := i < 3; (got.Status == StatusOK) != want {
				t.Fatalf("%s/%s: %v, want granted %v", res, d, got.Status, want)
			}
		}
	}
	if n := budgetCount(t, e, Key{"r", ""}, 0); n != 3 {
		t.Fatalf("r's default bucket's budget counts %d, want 3", n)
	}
	if n := budgetCount(t, e, Key{}, 0); n != 3 {
		t.Fatalf("the global default's budget counts %d, want 3", n)
	}
}

// TestBudgetEvents: a budget's refusal is a timeout event, a grant a
// tokens-served one.
func TestBudgetEvents(t *testing.T) {
	var evs []Event
	cfg := &Config{Resources: map[string]*Resource{"r": {Buckets: map[string]Bucket{"d": budgeted(Budget{Limit: 1, Unit: rls.Hour})}}}}
	e := newEngine(t, cfg, ListenerFunc(func(ev Event) { evs = append(evs, ev) }))
	e.Allow(t.Context(), at(0), Request{Resource: "r", Domain: "d"})
	e.Allow(t.Context(), at(0), Request{Resource: "r", Domain: "d", Tokens: 1})
	var types []string
	for _, ev := range evs {
		types = append(types, ev.Type.String()+"/"+ev.Status.String())
	}
	if got, want := strings.Join(types, " "), "bucket_created/UNSPECIFIED tokens_served/OK timeout/TIMEOUT"; got != want {
		t.Fatalf("events %s, want %s", got, want)
	}
}

// TestBudgetUnlimited: under a namespace that ignores configured limits,
// budgets refuse nothing and count what they have room for.
func TestBudgetUnlimited(t *testing.T) {
	cfg := &Config{
		Resources:  map[string]*Resource{"m/r": {Template: bp(budgeted(Budget{Limit: 2, Unit: rls.Hour}))}},
		Namespaces: map[string]Namespace{"m/": {IgnoreConfigured: true}},
	}
	e := newEngine(t, cfg, nil)
	for i := range 4 {
		d := e.Allow(t.Context(), at(0), Request{Resource: "m/r", Domain: "d"})
		if d.Status != StatusOK || !d.Unlimited {
			t.Fatalf("request %d: %v unlimited %v", i, d.Status, d.Unlimited)
		}
	}
	if n := budgetCount(t, e, Key{"m/r", "d"}, 0); n != 2 {
		t.Fatalf("the budget counts %d, want 2 (its limit)", n)
	}
}

// failingRLS is an rls.Store whose Decide fails: Redis down.
type failingRLS struct{ rls.Store }

var errRLSDown = errors.New("rls store down")

func (failingRLS) Decide(context.Context, int64, string, []rls.Hit, []rls.Result) (bool, error) {
	return false, errRLSDown
}

// TestBudgetStoreErrors: a budgets' store that fails is the resource's
// OnStoreError, as the bucket's store.
func TestBudgetStoreErrors(t *testing.T) {
	for _, mode := range []OnStoreError{FailClosed, FailOpen} {
		t.Run(mode.String(), func(t *testing.T) {
			cfg := &Config{Resources: map[string]*Resource{"r": {Template: bp(budgeted(Budget{Limit: 2, Unit: rls.Hour})), OnStoreError: mode}}}
			e, err := New(cfg, Options{Budgets: failingRLS{rls.NewMemoryStore()}})
			if err != nil {
				t.Fatal(err)
			}
			d := e.Allow(t.Context(), at(0), Request{Resource: "r", Domain: "d", Tokens: 3})
			if !errors.Is(d.Err, errRLSDown) {
				t.Fatalf("err %v, want the store's", d.Err)
			}
			switch mode {
			case FailClosed:
				if d.Status != StatusServerError || !d.RetryNever {
					t.Fatalf("%+v, want SERVER_ERROR", d)
				}
			case FailOpen:
				if d.Status != StatusOK || !d.Degraded || d.Granted != 3 {
					t.Fatalf("%+v, want a degraded grant of 3", d)
				}
			}
			if n := bucketCount(e); n != 0 {
				t.Fatalf("%d buckets: the token bucket was asked", n)
			}
		})
	}
}

// TestBudgetReap: the memory store's counters whose window is over go
// with Reap.
func TestBudgetReap(t *testing.T) {
	cfg := &Config{Resources: map[string]*Resource{"r": {Template: bp(budgeted(Budget{Limit: 2, Unit: rls.Minute}))}}}
	e := newEngine(t, cfg, nil)
	now := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	for _, d := range []string{"a", "b"} {
		e.Allow(t.Context(), now, Request{Resource: "r", Domain: d})
	}
	mem := e.Budgets().(*rls.MemoryStore)
	if _, err := e.Reap(t.Context(), now.Add(59*time.Second)); err != nil || mem.Len() != 2 {
		t.Fatalf("within the window: %d counters (%v), want 2", mem.Len(), err)
	}
	if _, err := e.Reap(t.Context(), now.Add(time.Minute)); err != nil || mem.Len() != 0 {
		t.Fatalf("after the window: %d counters (%v), want 0", mem.Len(), err)
	}
}

func TestBudgetValidate(t *testing.T) {
	paris := testutil.Zone(t, "Europe/Paris")
	tests := []struct {
		name   string
		budget Budget
		want   []string // substrings of the error, each its path
	}{
		{"valid month", Budget{Limit: 1, Unit: rls.Month, Calendar: paris}, nil},
		{"valid token bucket", Budget{Limit: 60, Unit: rls.Minute, UnitMultiplier: 2, Algorithm: rls.TokenBucket, Burst: 5}, nil},
		{"limit 0", Budget{Unit: rls.Second}, []string{"budgets[0].limit: 0 must be ≥ 1"}},
		{"limit too big", Budget{Limit: 1 << 32, Unit: rls.Second}, []string{"budgets[0].limit: 4294967296 exceeds"}},
		{"no unit", Budget{Limit: 1}, []string{"budgets[0].unit: unknown is not a unit"}},
		{"bad unit", Budget{Limit: 1, Unit: 99}, []string{"budgets[0].unit: Unit(99) is not a unit"}},
		{"negative multiplier", Budget{Limit: 1, Unit: rls.Second, UnitMultiplier: -1}, []string{"budgets[0].unit_multiplier: -1 is negative"}},
		{"window too long", Budget{Limit: 1, Unit: rls.Year, UnitMultiplier: 11}, []string{"budgets[0].unit_multiplier: a window of 11 years"}},
		{"bad algorithm", Budget{Limit: 1, Unit: rls.Second, Algorithm: 7}, []string{"budgets[0].algorithm: Algorithm(7)"}},
		{"burst of a window", Budget{Limit: 1, Unit: rls.Second, Burst: 2}, []string{"budgets[0].burst: a burst is a token bucket's depth"}},
		{"negative burst", Budget{Limit: 1, Unit: rls.Second, Algorithm: rls.TokenBucket, Burst: -2}, []string{"budgets[0].burst: -2 is negative"}},
		{"calendar of minutes", Budget{Limit: 1, Unit: rls.Minute, Calendar: time.UTC}, []string{"budgets[0].calendar: a calendar aligns a day"}},
		{"calendar with a multiplier", Budget{Limit: 1, Unit: rls.Day, UnitMultiplier: 2, Calendar: time.UTC}, []string{"budgets[0].unit_multiplier: 2: a calendar's window is one unit"}},
		{"calendar token bucket", Budget{Limit: 1, Unit: rls.Day, Algorithm: rls.TokenBucket, Calendar: time.UTC}, []string{"budgets[0].algorithm: a calendar counts a fixed window"}},
		{"local zone", Budget{Limit: 1, Unit: rls.Day, Calendar: time.Local}, []string{"budgets[0].calendar: Local is each server's own zone"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := &Config{Resources: map[string]*Resource{"r": {Template: bp(budgeted(tc.budget))}}}
			err := cfg.Validate()
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("Validate: %v, want ErrInvalidConfig", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), "resources.r.template."+w) {
					t.Errorf("error %q lacks %q", err, "resources.r.template."+w)
				}
			}
		})
	}
	// Too many, and the quota service's vocabulary for the bucket's path.
	cfg := &Config{Resources: map[string]*Resource{"r": {Buckets: map[string]Bucket{"d": budgeted(make([]Budget, MaxBudgets+1)...)}}}}
	err := cfg.ValidateIn(Vocabulary{Names: map[string]string{"resources": "namespaces", "domains": "buckets"}})
	if err == nil || !strings.Contains(err.Error(), "namespaces.r.buckets.d.budgets: 17 budgets; at most 16") {
		t.Fatalf("too many: %v", err)
	}
}

// TestBudgetConfigCopies: Clone copies budgets; String shows them.
func TestBudgetConfigCopies(t *testing.T) {
	b := budgeted(Budget{Limit: 100000, Unit: rls.Month, Calendar: time.UTC}, Budget{Limit: 60, Unit: rls.Minute, Algorithm: rls.TokenBucket, Burst: 5})
	cfg := &Config{GlobalDefault: bp(b), Resources: map[string]*Resource{"r": {Buckets: map[string]Bucket{"d": b}, Template: bp(b)}}}
	c := cfg.Clone()
	c.GlobalDefault.Budgets[0].Limit = 1
	c.Resources["r"].Buckets["d"].Budgets[0].Limit = 1
	c.Resources["r"].Template.Budgets[0].Limit = 1
	if cfg.GlobalDefault.Budgets[0].Limit != 100000 || cfg.Resources["r"].Buckets["d"].Budgets[0].Limit != 100000 || cfg.Resources["r"].Template.Budgets[0].Limit != 100000 {
		t.Fatal("Clone shares budgets with the original")
	}
	want := "budgets=[100000/month in UTC, 60/minute token_bucket burst 5]"
	if s := b.String(); !strings.HasSuffix(s, want) {
		t.Fatalf("String: %q, want it to end in %q", s, want)
	}
	e := newEngine(t, cfg, nil)
	if got := e.Config(); got.Resources["r"].Template.Budgets[1].Burst != 5 {
		t.Fatalf("Config: %v", got.Resources["r"].Template)
	}
}

// TestPropertyBudgets: whatever the requests, a fixed-window budget in
// front of a token bucket grants at most its limit in any window, its
// counter is exactly what was granted in the current window (every
// refund landed), and every grant is in [MinTokens, Tokens].
func TestPropertyBudgets(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		limit := rapid.Int64Range(1, 50).Draw(t, "limit")
		size := rapid.Int64Range(1, 20).Draw(t, "size")
		rate := rapid.Float64Range(0.1, 20).Draw(t, "rate")
		b := Bucket{Size: size, FillRate: rate, MaxTokensPerRequest: 30, MaxDebt: time.Second,
			WaitTimeout: rapid.SampledFrom([]time.Duration{0, 500 * time.Millisecond}).Draw(t, "wait"),
			Budgets:     []Budget{{Limit: limit, Unit: rls.Minute}}}
		e, err := New(&Config{Resources: map[string]*Resource{"r": {Template: &b}}}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		now := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
		granted := map[int64]int64{} // by minute
		for i := range rapid.IntRange(1, 60).Draw(t, "n") {
			now = now.Add(time.Duration(rapid.Int64Range(0, int64(20*time.Second)).Draw(t, "dt")))
			tokens := rapid.Int64Range(1, 30).Draw(t, "tokens")
			lo := rapid.Int64Range(1, tokens).Draw(t, "min")
			d := e.Allow(context.Background(), now, Request{Resource: "r", Domain: "d", Tokens: tokens, MinTokens: lo})
			w := now.Unix() / 60
			if d.Status == StatusOK {
				if d.Granted < lo || d.Granted > tokens {
					t.Fatalf("request %d: granted %d, want [%d, %d]", i, d.Granted, lo, tokens)
				}
				granted[w] += d.Granted
			}
			if granted[w] > limit {
				t.Fatalf("request %d: %d granted in minute %d, limit %d", i, granted[w], w, limit)
			}
			want := BudgetCounter(Key{"r", "d"}, 0)
			var n int64
			_ = e.Budgets().Walk(context.Background(), func(c rls.Counter) bool {
				if c.Bucket == want && c.State.A == w {
					n = c.State.N
				}
				return true
			})
			if n != granted[w] {
				t.Fatalf("request %d (%v): the budget counts %d in minute %d, %d granted", i, d.Status, n, w, granted[w])
			}
		}
	})
}

// TestBudgetReset: Engine.Reset forgets a bucket's budgets' counters with
// its bucket (and only its).
func TestBudgetReset(t *testing.T) {
	cfg := &Config{Resources: map[string]*Resource{"r": {Template: bp(budgeted(Budget{Limit: 2, Unit: rls.Day, Calendar: time.UTC}, Budget{Limit: 5, Unit: rls.Month}))}}}
	e := newEngine(t, cfg, nil)
	now := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	for _, d := range []string{"a", "b"} {
		if got := e.Allow(t.Context(), now, Request{Resource: "r", Domain: d, Tokens: 2}); got.Status != StatusOK {
			t.Fatalf("%s: %v", d, got.Status)
		}
	}
	held, err := e.Reset(t.Context(), "r", "a")
	if err != nil || !held {
		t.Fatalf("Reset: %v %v, want held", held, err)
	}
	if got := e.Allow(t.Context(), now, Request{Resource: "r", Domain: "a", Tokens: 2}); got.Status != StatusOK {
		t.Fatalf("a after the reset: %v", got.Status)
	}
	if got := e.Allow(t.Context(), now, Request{Resource: "r", Domain: "b"}); got.Status != StatusTimeout {
		t.Fatalf("b (not reset): %v", got.Status)
	}
	if held, err := e.Reset(t.Context(), "r", "c"); err != nil || held {
		t.Fatalf("an unused bucket: %v %v", held, err)
	}
}
