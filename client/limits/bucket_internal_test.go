package limits

import (
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// TestPropertyLocalBucket: whatever the sequence of top-ups, takes and
// passing time, a local bucket's tokens are the sum of its lots, every
// token fetched is used, expired or still held (never two of these), and
// no token is held past its expiry once expire has run; a take reports
// a degraded top-up's tokens (store) exactly when it takes one of them.
func TestPropertyLocalBucket(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var b localBucket
		now := time.Unix(0, 0)
		ttl := time.Duration(rapid.Int64Range(1, 5000).Draw(t, "ttl ms")) * time.Millisecond
		var fetched, used, expired int64
		var store []bool // per token held, oldest first: from a degraded top-up
		for range rapid.IntRange(1, 60).Draw(t, "steps") {
			switch rapid.IntRange(0, 2).Draw(t, "op") {
			case 0:
				n := rapid.Int64Range(1, 20).Draw(t, "fetch")
				degraded := rapid.Bool().Draw(t, "degraded")
				b.add(n, now.Add(ttl), degraded)
				fetched += n
				for range n {
					store = append(store, degraded)
				}
			case 1:
				n := rapid.Int64Range(1, 30).Draw(t, "take")
				gone := b.expire(now)
				expired += gone
				store = store[gone:]
				for _, l := range b.lots {
					if !l.expires.After(now) {
						t.Fatalf("a lot expiring at %v is held at %v", l.expires, now)
					}
				}
				if b.tokens >= n {
					want := slices.Contains(store[:n], true)
					if got := b.take(n); got != want {
						t.Fatalf("take(%d) reported store %v, want %v", n, got, want)
					}
					store = store[n:]
					used += n
				}
			case 2:
				now = now.Add(time.Duration(rapid.Int64Range(0, 3000).Draw(t, "advance ms")) * time.Millisecond)
			}
			var sum int64
			for _, l := range b.lots {
				if l.n <= 0 {
					t.Fatalf("empty lot %+v", l)
				}
				sum += l.n
			}
			if sum != b.tokens || b.tokens < 0 {
				t.Fatalf("tokens %d, lots hold %d", b.tokens, sum)
			}
			if fetched != used+expired+b.tokens {
				t.Fatalf("fetched %d ≠ used %d + expired %d + held %d", fetched, used, expired, b.tokens)
			}
		}
	})
}
