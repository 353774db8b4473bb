package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestDemo runs the demo end to end on loopback (real server, real HTTP
// target, six clients) and checks the acceptance bounds: after the first
// lease round the target never sees more than 102% of capacity in a second,
// and mean utilization is at least 90%.
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for 12 s")
	}
	var out bytes.Buffer
	sum, err := Run(context.Background(), Options{Duration: 12 * time.Second, Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	PrintSummary(&out, sum)
	t.Log("\n" + out.String())
	for _, s := range sum.Seconds {
		if s.Counted && float64(s.Requests) > 1.02*sum.Capacity {
			t.Errorf("second %d: target saw %d requests, more than 102%% of capacity %v", s.Second, s.Requests, sum.Capacity)
		}
	}
	if sum.UtilizationMean < 0.90 {
		t.Errorf("mean utilization %.3f, want ≥ 0.90", sum.UtilizationMean)
	}
	if len(sum.Clients) != 6 {
		t.Fatalf("%d clients in the summary", len(sum.Clients))
	}
	// The small client (60 req/s, below its fair share) gets all it wants.
	if c := sum.Clients[4]; c.MeanRPS < 0.9*c.MeanFairRPS {
		t.Errorf("small client got %.1f req/s, fair share %.1f", c.MeanRPS, c.MeanFairRPS)
	}
	var js bytes.Buffer
	if err := PrintJSON(&js, sum, true); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(js.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"utilization_mean", "overshoot_max_percent", "capacity", "clients"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON summary lacks %q: %s", k, strings.TrimSpace(js.String()))
		}
	}
}
