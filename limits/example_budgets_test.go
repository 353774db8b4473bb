package limits_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/limits/rls"
)

// A tenant's monthly token budget behind a token bucket of ten a second:
// the month's last tokens go, partially, to a request that accepts fewer;
// then the budget refuses until the month ends, however full the bucket.
func ExampleBudget() {
	perTenant := limits.Bucket{Size: 10, FillRate: 10, Budgets: []limits.Budget{
		{Limit: 25, Unit: rls.Month, Calendar: time.UTC},
	}}
	e, err := limits.New(&limits.Config{Resources: map[string]*limits.Resource{"llm_tokens": {Template: &perTenant}}}, limits.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	now := time.Date(2026, 1, 31, 23, 0, 0, 0, time.UTC)
	for _, tokens := range []int64{10, 10, 10, 1} {
		d := e.Allow(context.Background(), now, limits.Request{Resource: "llm_tokens", Domain: "acme", Tokens: tokens, MinTokens: 1})
		fmt.Println(d.Status, d.Granted, d.RetryAfter)
		now = now.Add(time.Second) // the bucket refills
	}
	// Output:
	// OK 10 0s
	// OK 10 0s
	// OK 5 0s
	// TIMEOUT 0 59m57s
}
