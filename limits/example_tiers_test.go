package limits_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/limits/limitsyaml"
)

// Charon's burst tiers (charon-paper.md, section 2.1): a tenant may make
// 3 requests per 2 s; a burst beyond that enters tier 2 (4 more per 2 s),
// for 2 s only, after which tier 2 cools down for 4 s and blocks further
// bursts.
func ExampleEngine_Allow_burstTiers() {
	cfg, err := limitsyaml.ParseSection([]byte(`
resources:
  cookbook/tiers:
    algorithm: burst_tiers
    tiers:
      - {limit: 3, window: 2s, active: 6s}
      - {limit: 4, window: 2s, active: 2s, cooldown: 4s}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	e, _ := limits.New(cfg, limits.Options{})
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	request := func(at time.Duration, hits int64) {
		d := e.Allow(context.Background(), start.Add(at), limits.Request{Resource: "cookbook/tiers", Domain: "acme", Tokens: hits, MinTokens: 1})
		c := d.Tiers
		fmt.Printf("at %v: %s granted %d, tier %d (%d of %d), burst %v", at, d.Status, d.Granted, c.Tier, c.TierHits, c.TierLimit, c.Burst)
		if d.Status == limits.StatusTimeout {
			fmt.Printf(", retry after %v", d.RetryAfter)
		}
		fmt.Println()
	}
	request(0, 2)               // tier 0 always bursts: into tier 1
	request(time.Second, 4)     // fills tier 1, bursts into tier 2
	request(time.Second, 5)     // tier 2 holds 3 more
	request(time.Second, 1)     // both full: until tier 2's active period ends
	request(3*time.Second+1, 5) // fallback to tier 1; tier 2 in cooldown
	request(5*time.Second+2, 5) // tier 1's window emptied; still no burst
	request(7*time.Second+2, 5) // both tiers anew
	// Output:
	// at 0s: OK granted 2, tier 1 (2 of 3), burst true
	// at 1s: OK granted 4, tier 2 (3 of 4), burst true
	// at 1s: OK granted 1, tier 2 (4 of 4), burst false
	// at 1s: TIMEOUT granted 0, tier 2 (4 of 4), burst false, retry after 2s
	// at 3.000000001s: OK granted 3, tier 1 (3 of 3), burst false
	// at 5.000000002s: OK granted 3, tier 1 (3 of 3), burst false
	// at 7.000000002s: OK granted 5, tier 2 (2 of 4), burst true
}

// Normalize reports what the engine changes in a configuration's tiers
// (charon-paper.md, section 4.1).
func ExampleConfig_Normalize() {
	cfg, _ := limitsyaml.ParseSection([]byte(`
resources:
  api:
    algorithm: burst_tiers
    tiers:
      - {limit: 10, window: 1m, active: 30s}
      - {limit: 50, window: 1m, active: 150s, cooldown: 1h}
      - {limit: 99, window: 1s, active: 0s}
`))
	for _, note := range cfg.Normalize() {
		fmt.Println(note)
	}
	// Output:
	// resources.api.tiers[0].window: 1m0s is longer than the active time 30s: shortened to 30s
	// resources.api.tiers[1].active: 2m30s is not a whole number of 1m0s windows: trimmed to 2m0s (no partial window at the end of the active period)
	// resources.api.tiers[2]: active time 0s: the tier is removed (it could never be active)
}
