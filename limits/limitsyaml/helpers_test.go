package limitsyaml

import (
	"os"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/limits"
)

// t0 is an arbitrary instant, in Unix nanoseconds.
var t0 = time.Unix(1_700_000_000, 0).UnixNano()

// at returns the instant d after t0.
func at(d time.Duration) time.Time { return time.Unix(0, t0).Add(d) }

func bp(b limits.Bucket) *limits.Bucket { return &b }

// newEngine returns an engine on cfg, failing t if cfg is refused.
func newEngine(t *testing.T, cfg *limits.Config) *limits.Engine {
	t.Helper()
	e, err := limits.New(cfg, limits.Options{})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return e
}

// tier returns a tier of limit hits per window, active for active, with a
// cooldown.
func tier(limit int64, window, active, cooldown time.Duration) limits.Tier {
	return limits.Tier{Limit: limit, Window: window, Active: active, Cooldown: cooldown}
}

func skippable(t limits.Tier) limits.Tier { t.Skippable = true; return t }

const (
	sec = time.Second
	mn  = time.Minute
	hr  = time.Hour
)

func readFile(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
