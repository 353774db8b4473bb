// Package retry is Sluice's one backoff rule for retrying a failed call to
// another server (the client's refresh, an intermediate's parent link, the
// etcd election and configuration watch): capped exponential with jitter.
package retry

import (
	"math/rand/v2"
	"time"
)

// Backoff returns the delay after n ≥ 1 consecutive failures: lo doubled
// n-1 times, at most hi, then jittered to between half of it and all of it
// ("equal jitter"), so that many retrying callers spread out. r is the
// source of the jitter; nil means math/rand/v2's global source (a
// simulator passes a seeded one for deterministic runs). It is safe for
// concurrent use when r is nil.
func Backoff(n int, lo, hi time.Duration, r *rand.Rand) time.Duration {
	d := lo << min(max(n, 1)-1, 20)
	if d > hi || d <= 0 {
		d = hi
	}
	if r != nil {
		return d/2 + time.Duration(r.Int64N(int64(d/2+1)))
	}
	return d/2 + rand.N(d/2+1)
}
