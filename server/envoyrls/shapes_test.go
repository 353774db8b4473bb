package envoyrls_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/internal/testutil/redistest"
	redisstore "github.com/sluice-rl/sluice/limits/redis"
	"github.com/sluice-rl/sluice/limits/rls"
	"github.com/sluice-rl/sluice/server/envoyrls"
)

// The limit shapes of Sluice's extensions to the format.
const shapes = `
domain: shapes
descriptors:
  - key: user                          # 5 a second and 8 a minute
    rate_limits:
      - {unit: second, requests_per_unit: 5}
      - {unit: minute, requests_per_unit: 8, name: per-minute}
  - key: window                        # 3 per 10 seconds
    algorithm: fixed_window
    rate_limit: {unit: second, unit_multiplier: 10, requests_per_unit: 3}
  - key: bucket                        # 60 a minute, at most 5 at once
    rate_limit: {unit: minute, requests_per_unit: 60, burst: 5}
  - key: tenant                        # a monthly budget in Paris, and 4 a second
    rate_limits:
      - {unit: month, requests_per_unit: 10, calendar: Europe/Paris}
      - {unit: second, requests_per_unit: 4}
  - key: plain
    rate_limit: {unit: month, requests_per_unit: 2}
`

// grants counts the OK answers of n requests of descriptor d, one at a
// time.
func grants(t *testing.T, r *rig, n int, d *ratelimitv3.RateLimitDescriptor) int {
	t.Helper()
	ok := 0
	for range n {
		if r.ask(t, "shapes", d).OverallCode == rlsv3.RateLimitResponse_OK {
			ok++
		}
	}
	return ok
}

// TestShapes: each extension decides as its documentation says, on a
// hand-moved clock: several limits on one descriptor (the binding one
// reported, each counted in its own metrics), a window of N units, a
// burst apart from the rate, a calendar month across its end, and
// USE_CALENDAR_MONTH_RATE_LIMIT's calendar months.
func TestShapes(t *testing.T) {
	r := start(t, envoyrls.Options{}, shapes)
	u := desc("user", "ann")
	if got := grants(t, r, 10, u); got != 5 {
		t.Fatalf("10 at once against 5 a second and 8 a minute: %d granted, want 5", got)
	}
	r.clock.Advance(time.Second)
	resp := r.ask(t, "shapes", u)
	st := resp.Statuses[0]
	if st.Code != rlsv3.RateLimitResponse_OK || st.CurrentLimit.Name != "per-minute" || st.LimitRemaining != 2 {
		t.Fatalf("a second later: %v, want OK with the binding per-minute limit, 2 left", st)
	}
	if got := grants(t, r, 5, u); got != 2 {
		t.Fatalf("5 more: %d granted, want the minute's last 2", got)
	}
	st = r.ask(t, "shapes", u).Statuses[0]
	if st.Code != rlsv3.RateLimitResponse_OVER_LIMIT || st.CurrentLimit.Name != "per-minute" || st.CurrentLimit.Unit != rlsv3.RateLimitResponse_RateLimit_MINUTE {
		t.Fatalf("over the minute: %v, want OVER_LIMIT naming per-minute", st)
	}
	for _, c := range []struct {
		rule, result string
		want         float64
	}{{"user", "over_limit", 9}, {"user/rate_limits[0]", "over_limit", 5}, {"user/per-minute", "over_limit", 4},
		// (a limit's hits refused by another count as within it)
		{"user/per-minute", "within_limit", 11}, {"user/per-minute", "near_limit", 2}} {
		if got := counter(t, r, "shapes", c.rule, c.result); got != c.want {
			t.Errorf("hits{rule=%q, result=%q} = %v, want %v", c.rule, c.result, got, c.want)
		}
	}

	// 3 per 10 seconds, windows aligned to the epoch (1 800 000 000 s is
	// a multiple of 10).
	w := desc("window", "x")
	if got := grants(t, r, 5, w); got != 3 {
		t.Fatalf("window: %d granted, want 3", got)
	}
	st = r.ask(t, "shapes", w).Statuses[0]
	if d := st.DurationUntilReset.AsDuration(); d <= 0 || d > 10*time.Second {
		t.Fatalf("window: reset in %v, want within the 10-second window", d)
	}
	r.clock.Advance(10 * time.Second)
	if got := grants(t, r, 5, w); got != 3 {
		t.Fatalf("the next window: %d granted, want 3", got)
	}

	// 60 a minute, at most 5 at once.
	b := desc("bucket", "x")
	if got := grants(t, r, 8, b); got != 5 {
		t.Fatalf("burst: %d granted at once, want 5", got)
	}
	r.clock.Advance(time.Second)
	if got := grants(t, r, 3, b); got != 1 {
		t.Fatalf("a second later: %d granted, want 1 (60 a minute)", got)
	}
	r.clock.Advance(time.Hour)
	if st := r.ask(t, "shapes", &ratelimitv3.RateLimitDescriptor{Entries: b.Entries, HitsAddend: wrapperspb.UInt64(6)}).Statuses[0]; st.Code != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("6 at once in a full bucket of depth 5: %v, want OVER_LIMIT", st)
	}
}

// counter reads sluice_envoy_ratelimit_hits_total{domain, rule, result}.
func counter(t *testing.T, r *rig, domain, rule, result string) float64 {
	t.Helper()
	mfs, err := r.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "sluice_envoy_ratelimit_hits_total" {
			continue
		}
	next:
		for _, m := range mf.Metric {
			want := map[string]string{"domain": domain, "rule": rule, "result": result}
			for _, l := range m.Label {
				if want[l.GetName()] != l.GetValue() {
					continue next
				}
			}
			return m.Counter.GetValue()
		}
	}
	return 0
}

// TestCalendarMonth: a tenant's monthly budget in Paris, with 4 a second,
// spent by hits_addend and refunded with is_negative_hits; whole again at
// midnight on the first in Paris (23:00 UTC), not before; and a plain
// month's 30 days become a calendar month in UTC with CalendarMonths.
func TestCalendarMonth(t *testing.T) {
	paris := testutil.Zone(t, "Europe/Paris")
	r := start(t, envoyrls.Options{}, shapes)
	r.clock.Advance(time.Date(2026, 11, 30, 22, 0, 0, 0, time.UTC).Sub(r.clock.Now())) // 23:00 in Paris
	ten := func(n uint64, refund bool) *ratelimitv3.RateLimitDescriptor {
		return &ratelimitv3.RateLimitDescriptor{Entries: desc("tenant", "acme").Entries, HitsAddend: wrapperspb.UInt64(n), IsNegativeHits: refund}
	}
	if st := r.ask(t, "shapes", ten(4, false)).Statuses[0]; st.Code != rlsv3.RateLimitResponse_OK || st.CurrentLimit.RequestsPerUnit != 4 || st.LimitRemaining != 0 {
		t.Fatalf("4 tokens: %v, want OK, the second's limit binding with 0 left", st)
	}
	r.clock.Advance(time.Second)
	r.ask(t, "shapes", ten(4, false))
	r.clock.Advance(time.Second)
	r.ask(t, "shapes", ten(3, true)) // the response used fewer: 3 back
	r.clock.Advance(time.Second)
	if st := r.ask(t, "shapes", ten(4, false)).Statuses[0]; st.Code != rlsv3.RateLimitResponse_OK || st.CurrentLimit.Unit != rlsv3.RateLimitResponse_RateLimit_SECOND || st.LimitRemaining != 0 {
		t.Fatalf("9 of 10 spent: %v, want OK, the second's limit binding (none left)", st)
	}
	r.clock.Advance(time.Second)
	st := r.ask(t, "shapes", ten(1, false)).Statuses[0]
	want := time.Date(2026, 12, 1, 0, 0, 0, 0, paris).Sub(r.clock.Now())
	if st.Code != rlsv3.RateLimitResponse_OK || st.LimitRemaining != 0 || st.CurrentLimit.Unit != rlsv3.RateLimitResponse_RateLimit_MONTH || st.DurationUntilReset.AsDuration() != want {
		t.Fatalf("the month's last: %v, want OK, the month binding with none left, reset in %v (at midnight in Paris)", st, want)
	}
	r.clock.Advance(time.Second)
	if st := r.ask(t, "shapes", ten(2, false)).Statuses[0]; st.Code != rlsv3.RateLimitResponse_OVER_LIMIT || st.DurationUntilReset.AsDuration() != want-time.Second {
		t.Fatalf("2 more: %v, want OVER_LIMIT until the month's end", st)
	}
	r.clock.Advance(time.Date(2026, 11, 30, 23, 0, 0, 0, time.UTC).Sub(r.clock.Now())) // midnight in Paris, still November in UTC
	if st := r.ask(t, "shapes", ten(4, false)).Statuses[0]; st.Code != rlsv3.RateLimitResponse_OK || st.LimitRemaining != 0 {
		t.Fatalf("December in Paris: %v, want OK", st)
	}

	// The same rules, with envoyproxy/ratelimit's calendar months: a
	// plain month ends at the month's end in UTC, not 30 days on.
	c := start(t, envoyrls.Options{CalendarMonths: true}, shapes)
	c.clock.Advance(time.Date(2026, 11, 30, 23, 59, 0, 0, time.UTC).Sub(c.clock.Now()))
	p := desc("plain", "x")
	st = c.ask(t, "shapes", p).Statuses[0]
	if st.DurationUntilReset.AsDuration() != time.Minute {
		t.Fatalf("a calendar month: reset in %v, want a minute (the month's end)", st.DurationUntilReset.AsDuration())
	}
	c.ask(t, "shapes", p)
	if grants(t, c, 1, p) != 0 {
		t.Fatal("a third in November: granted")
	}
	c.clock.Advance(time.Minute)
	if grants(t, c, 3, p) != 2 {
		t.Fatal("December: want 2 granted")
	}
	// Without it a month is 30 days from the epoch's windows.
	if st := r.ask(t, "shapes", p).Statuses[0]; st.DurationUntilReset.AsDuration() == time.Minute {
		t.Fatalf("without calendar months, a month reset at the calendar's end: %v", st)
	}
}

// The shapes, slow enough that none refills during a test's burst.
const slowShapes = `
domain: shapes
descriptors:
  - key: user
    rate_limits:
      - {unit: hour, requests_per_unit: 5}
      - {unit: day, requests_per_unit: 8}
  - key: window
    algorithm: fixed_window
    rate_limit: {unit: hour, unit_multiplier: 10, requests_per_unit: 3}
  - key: bucket
    rate_limit: {unit: hour, requests_per_unit: 60, burst: 5}
  - key: tenant
    rate_limits:
      - {unit: month, requests_per_unit: 10, calendar: Europe/Paris}
      - {unit: hour, requests_per_unit: 100}
`

// TestShapesRedis: the shapes on one real Redis shared by three services
// (three servers), 30 requests spread over them at once: exactly the
// binding limit's grants.
func TestShapesRedis(t *testing.T) {
	srv := redistest.StartT(t)
	var rigs []*rig
	for range 3 {
		c := srv.Client()
		t.Cleanup(func() { c.Close() })
		rigs = append(rigs, start(t, envoyrls.Options{Store: redisstore.NewRLS(redisstore.New(c, redisstore.Options{Prefix: "shapes:"}))}, slowShapes))
	}
	cases := []struct {
		name string
		d    *ratelimitv3.RateLimitDescriptor
		want int64
	}{
		{"5 an hour and 8 a day", desc("user", "bob"), 5},
		{"3 per 10 hours", desc("window", "y"), 3},
		{"a burst of 5 at 60 an hour", desc("bucket", "y"), 5},
		{"a monthly budget of 10 in Paris, 100 an hour", desc("tenant", "globex"), 10},
	}
	for _, tc := range cases {
		var granted atomic.Int64
		var wg sync.WaitGroup
		for i := range 30 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := rigs[i%3].client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "shapes", Descriptors: []*ratelimitv3.RateLimitDescriptor{tc.d}})
				if err != nil {
					t.Error(err)
					return
				}
				if resp.OverallCode == rlsv3.RateLimitResponse_OK {
					granted.Add(1)
				}
			}()
		}
		wg.Wait()
		if got := granted.Load(); got != tc.want {
			t.Errorf("%s: %d of 30 granted across three servers, want %d", tc.name, got, tc.want)
		}
	}
	// The month's counter lives until the month's end in Paris (and the
	// three seconds every counter is kept past its end): the month the
	// servers' clock is in, its end counted down by Redis's clock.
	_, monthEnd := rls.Calendar{Unit: rls.Month, Location: testutil.Zone(t, "Europe/Paris")}.Window(rigs[0].clock.Now().UnixMicro())
	ctx := context.Background()
	redisNow := srv.Client().Time(ctx).Val()
	keys := srv.Client().Keys(ctx, "shapes:{eshapes}w*").Val()
	found := false
	for _, k := range keys {
		want := time.UnixMicro(monthEnd).Sub(redisNow) + 3*time.Second
		ttl := srv.Client().PTTL(ctx, k).Val()
		if ttl <= want && ttl > want-time.Minute {
			found = true
		}
	}
	if !found {
		t.Errorf("no window key of %q expires at the month's end in Paris", keys)
	}
}
