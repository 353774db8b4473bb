package redisstore

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/limits/rls"
)

// budgetEngine returns an engine whose buckets and budgets are in st's
// Redis, on a template bucket b.
func budgetEngine(t *testing.T, st *Store, b limits.Bucket) *limits.Engine {
	t.Helper()
	e, err := limits.New(&limits.Config{Resources: map[string]*limits.Resource{"r": {Template: &b}}}, limits.Options{Store: st, Budgets: NewRLS(st)})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestBudgetsRedis: the engine's budgets on Redis decide as in memory
// (limits' TestBudgets), on virtual time: a month across its end, a day
// of 23 hours in Paris, a burst, and a refund after the token bucket
// refused.
func TestBudgetsRedis(t *testing.T) {
	paris := testutil.Zone(t, "Europe/Paris")
	big := func(bs ...limits.Budget) limits.Bucket {
		return limits.Bucket{Size: 1 << 20, FillRate: 1 << 20, Budgets: bs}
	}
	type req struct {
		advance    time.Duration
		tokens     int64
		want       limits.Status
		granted    int64
		retryAfter time.Duration
	}
	tests := []struct {
		name   string
		bucket limits.Bucket
		start  time.Time
		reqs   []req
	}{
		{"month end", big(limits.Budget{Limit: 100, Unit: rls.Month, Calendar: time.UTC}), time.Date(2024, 1, 31, 23, 59, 0, 0, time.UTC), []req{
			{0, 60, limits.StatusOK, 60, 0},
			{0, 50, limits.StatusTimeout, 0, time.Minute},
			{time.Minute, 100, limits.StatusOK, 100, 0},
			{0, 1, limits.StatusTimeout, 0, 29 * 24 * time.Hour},
		}},
		{"a 23-hour day in Paris", big(limits.Budget{Limit: 5, Unit: rls.Day, Calendar: paris}), time.Date(2024, 3, 31, 0, 30, 0, 0, paris), []req{
			{0, 5, limits.StatusOK, 5, 0},
			{0, 1, limits.StatusTimeout, 0, 22*time.Hour + 30*time.Minute},
			{22*time.Hour + 30*time.Minute, 5, limits.StatusOK, 5, 0},
		}},
		{"a burst", big(limits.Budget{Limit: 60, Unit: rls.Minute, Algorithm: rls.TokenBucket, Burst: 5}), time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC), []req{
			{0, 5, limits.StatusOK, 5, 0},
			{0, 1, limits.StatusTimeout, 0, time.Second},
			{2 * time.Second, 2, limits.StatusOK, 2, 0},
		}},
		{"refunded when the bucket refuses", limits.Bucket{Size: 2, FillRate: 1, MaxTokensPerRequest: 2, Budgets: []limits.Budget{{Limit: 3, Unit: rls.Day, Calendar: time.UTC}}},
			time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC), []req{
				{0, 2, limits.StatusOK, 2, 0},
				{0, 1, limits.StatusTimeout, 0, time.Second}, // the bucket's refusal
				{0, 1, limits.StatusTimeout, 0, time.Second},
				{time.Second, 1, limits.StatusOK, 1, 0},
				{10 * time.Second, 1, limits.StatusTimeout, 0, 12*time.Hour - 11*time.Second}, // the budget's
			}},
	}
	c := client(t)
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := New(c, Options{Prefix: fmt.Sprintf("%s%d:", prefix(t), i), callerTime: true})
			e := budgetEngine(t, st, tc.bucket)
			now := tc.start
			for j, r := range tc.reqs {
				now = now.Add(r.advance)
				d := e.Allow(t.Context(), now, limits.Request{Resource: "r", Domain: "d", Tokens: r.tokens})
				if d.Status != r.want || d.Granted != r.granted || (r.want == limits.StatusTimeout && d.RetryAfter != r.retryAfter) {
					t.Fatalf("request %d at %v: %v granted %d retry %v (%v), want %v granted %d retry %v",
						j, now, d.Status, d.Granted, d.RetryAfter, d.Err, r.want, r.granted, r.retryAfter)
				}
			}
		})
	}
}

// TestBudgetsRedisExact: three engines (three servers) sharing one Redis,
// each with its own client and store, on Redis's clock, eight goroutines
// each: a budget of 100 a month grants exactly 100 tokens of 240 asked;
// behind a token bucket of 50 that refuses the rest, exactly 50, every
// refund landing (the budget counts 50 at the end).
func TestBudgetsRedisExact(t *testing.T) {
	const engines, workers, each = 3, 8, 10
	budget := []limits.Budget{{Limit: 100, Unit: rls.Month, Calendar: time.UTC}}
	tests := []struct {
		name   string
		bucket limits.Bucket
		want   int64
	}{
		{"the budget limits", limits.Bucket{Size: 1 << 20, FillRate: 1 << 20, Budgets: budget}, 100},
		{"the bucket limits, the budget refunded", limits.Bucket{Size: 50, FillRate: 1e-3, MaxTokensPerRequest: 1, Budgets: budget}, 50},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var es []*limits.Engine
			var stores []*Store
			for range engines {
				c := redis.NewClient(&redis.Options{Addr: redisAddr})
				t.Cleanup(func() { c.Close() })
				st := New(c, Options{Prefix: prefix(t)})
				t.Cleanup(func() { st.Close() })
				stores = append(stores, st)
				es = append(es, budgetEngine(t, st, tc.bucket))
			}
			var granted, errs atomic.Int64
			var wg sync.WaitGroup
			for _, e := range es {
				for range workers {
					wg.Go(func() {
						for range each {
							d := e.Allow(context.Background(), time.Now(), limits.Request{Resource: "r", Domain: "tenant"})
							switch d.Status {
							case limits.StatusOK:
								granted.Add(d.Granted)
							case limits.StatusTimeout:
							default:
								errs.Add(1)
								t.Errorf("%v: %v", d.Status, d.Err)
							}
						}
					})
				}
			}
			wg.Wait()
			if got := granted.Load(); got != tc.want {
				t.Fatalf("granted %d of %d, want exactly %d", got, engines*workers*each, tc.want)
			}
			// Every refund landed, unless the month ended meanwhile.
			now := time.Now().UTC()
			if end := time.Date(now.Year(), now.Month()+1, 1, 0, 0, 0, 0, time.UTC); end.Sub(now) < time.Minute {
				t.Skip("too near the month's end to read its count")
			}
			want := limits.BudgetCounter(limits.Key{Resource: "r", Domain: "tenant"}, 0)
			n := int64(-1)
			if err := NewRLS(stores[0]).Walk(t.Context(), func(c rls.Counter) bool {
				if c.Bucket == want {
					n = c.State.N
				}
				return true
			}); err != nil {
				t.Fatal(err)
			}
			if n != tc.want {
				t.Fatalf("the budget counts %d, want %d", n, tc.want)
			}
		})
	}
}

// TestBudgetsRedisCluster: a bucket's budgets are under its resource's
// hash tag, so one script decides them on a Redis Cluster (a script over
// several slots would get CROSSSLOT).
func TestBudgetsRedisCluster(t *testing.T) {
	st := New(clusterClient(t), Options{Prefix: prefix(t), callerTime: true})
	b := limits.Bucket{Size: 100, FillRate: 100, Budgets: []limits.Budget{
		{Limit: 3, Unit: rls.Day, Calendar: time.UTC}, {Limit: 10, Unit: rls.Hour}, {Limit: 5, Unit: rls.Minute, Algorithm: rls.TokenBucket},
	}}
	e := budgetEngine(t, st, b)
	now := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	for _, domain := range []string{"a", "b", "c/d"} {
		for i := range 4 {
			d := e.Allow(t.Context(), now, limits.Request{Resource: "r", Domain: domain})
			if want := i < 3; (d.Status == limits.StatusOK) != want || d.Err != nil {
				t.Fatalf("%s, request %d: %v (%v), want granted %v", domain, i, d.Status, d.Err, want)
			}
		}
	}
}
