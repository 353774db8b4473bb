package limits_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/limits/limitsyaml"
)

// The keyed limiter of ratelimiting-in-150-lines.md: any client IP may
// make one request per second with bursts of 10, 192.168.11.3 a hundred
// per second with bursts of 500; each IP has a bucket of its own.
func Example() {
	cfg, err := limitsyaml.ParseSection([]byte(`
resources:
  frontend:
    max_dynamic_buckets: 100000
    domains:
      rate_limit: {size: 10, fill_rate: 1, wait_timeout: 0s}
      rate_limit/192.168.11.3: {size: 500, fill_rate: 100, wait_timeout: 0s}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	e, err := limits.New(cfg, limits.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	consume := func(ip string) limits.Decision {
		return e.Allow(context.Background(), now, limits.Request{Resource: "frontend", Domain: "rate_limit/" + ip})
	}
	for range 10 {
		consume("10.0.0.1")
	}
	d := consume("10.0.0.1")
	fmt.Println(d.Status, d.Bucket, "retry after", d.RetryAfter)
	d = consume("192.168.11.3")
	fmt.Println(d.Status, d.Bucket, d.Remaining, "of", d.Limit)
	// Output:
	// TIMEOUT prefix rate_limit retry after 1s
	// OK named 499 of 500
}

// A request may take future tokens and wait for them, within the bucket's
// wait timeout; a partial request takes what it can.
func ExampleEngine_Allow() {
	bucket := limits.Bucket{Size: 10, FillRate: 10, WaitTimeout: 500 * time.Millisecond, MaxDebt: time.Second}
	e, _ := limits.New(&limits.Config{Resources: map[string]*limits.Resource{
		"TheBrain_userLogins": {Template: &bucket, MaxDynamicBuckets: 100000},
	}}, limits.Options{})
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ask := func(tokens, atLeast int64) {
		d := e.Allow(context.Background(), now, limits.Request{Resource: "TheBrain_userLogins", Domain: "user-42", Tokens: tokens, MinTokens: atLeast})
		fmt.Printf("%s granted %d wait %v\n", d.Status, d.Granted, d.Wait)
	}
	ask(10, 0) // all it holds
	ask(3, 0)  // three tokens from the future: 300 ms
	ask(5, 0)  // five more would take 800 ms
	ask(5, 1)  // but two fit within 500 ms
	// Output:
	// OK granted 10 wait 0s
	// OK granted 3 wait 300ms
	// TIMEOUT granted 0 wait 0s
	// OK granted 2 wait 500ms
}

// Listeners hear every event, synchronously.
func ExampleListener() {
	l := limits.ListenerFunc(func(ev limits.Event) {
		fmt.Println(ev.Type, ev.Resource, ev.Domain, ev.Bucket, ev.Tokens)
	})
	e, _ := limits.New(&limits.Config{Resources: map[string]*limits.Resource{
		"api": {Template: &limits.Bucket{Size: 1, FillRate: 1}, MaxDynamicBuckets: 1},
	}}, limits.Options{Listener: l})
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	e.Allow(context.Background(), now, limits.Request{Resource: "api", Domain: "alice"})
	e.Allow(context.Background(), now, limits.Request{Resource: "api", Domain: "alice"})
	e.Allow(context.Background(), now, limits.Request{Resource: "api", Domain: "bob"})
	// Output:
	// bucket_created api alice dynamic 0
	// tokens_served api alice dynamic 1
	// timeout api alice dynamic 1
	// bucket_miss api bob dynamic 1
}
