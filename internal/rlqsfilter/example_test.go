package rlqsfilter_test

import (
	"fmt"
	"time"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/sluice-rl/sluice/internal/rlqsfilter"
)

// A server assigns 10 requests a second with a second's burst; the
// filter admits the burst at once, then the rate.
func Example() {
	now := time.Unix(1_000_000, 0)
	tb := rlqsfilter.Encode(10, time.Second)
	fmt.Printf("on the wire: max_tokens %d, tokens_per_fill %d, fill_interval %v; fills at %v a second\n",
		tb.MaxTokens, tb.TokensPerFill, tb.FillInterval, tb.Rate())

	b := rlqsfilter.Bucket{NoAssignment: typev3.RateLimitStrategy_DENY_ALL, Expired: typev3.RateLimitStrategy_DENY_ALL} // no assignment yet: DENY_ALL
	b.Assign(now, rlqsfilter.Strategy{TokenBucket: &tb}, 20*time.Second)
	admitted := 0
	for range 15 {
		if b.Allow(now) {
			admitted++
		}
	}
	fmt.Println("at once:", admitted)
	fmt.Println("half a second later:", b.Admit(now.Add(500*time.Millisecond), 100))
	// Output:
	// on the wire: max_tokens 10, tokens_per_fill 1000, fill_interval 1m40.0000001s; fills at 10 a second
	// at once: 10
	// half a second later: 5
}
