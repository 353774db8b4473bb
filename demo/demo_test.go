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
// target, six clients) and checks outcomes that do not depend on how fast
// this machine is: the clients' leases never add up to more than the
// capacity, the target never saw more than the capacity allows over the
// run, and every client that stays to the end got requests through (one
// that leaves early may have left before its turn came). How close to the capacity
// the demo runs (its utilization) is the demo's own report, measured on
// an idle machine (docs/performance.md), not a test: under -race beside other tests the
// load generators cannot keep up.
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for 20 s")
	}
	// Its own server, target and clients on loopback, mostly waiting
	// out the run, and outcomes that a slow machine does not change: it
	// runs beside TestTiersDemo. (Not beside TestQuotaDemo: its naive client
	// falls back to a local limiter when an answer takes over 50 ms, so
	// its bound wants the CPU.)
	t.Parallel()
	// Four rounds of Doorman's 5 s minimum between requests: by the third
	// every client that stays holds its share.
	var out bytes.Buffer
	sum, err := Run(context.Background(), Options{Duration: 20 * time.Second, Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	PrintSummary(&out, sum)
	t.Log("\n" + out.String())
	var requests int64
	counted := 0
	for _, s := range sum.Seconds {
		if s.SumLeases > sum.Capacity+1e-9 {
			t.Errorf("second %d: Σ leases %v above capacity %v", s.Second, s.SumLeases, sum.Capacity)
		}
		if s.Counted {
			requests += s.Requests
			counted++
		}
	}
	// Over the counted seconds the target saw at most the capacity, plus
	// one second's worth (a limiter's burst, requests landing across a
	// second's boundary).
	if limit := sum.Capacity * float64(counted+1); float64(requests) > limit {
		t.Errorf("target saw %d requests in %d seconds, more than capacity %v allows (%v)", requests, counted, sum.Capacity, limit)
	}
	if sum.UtilizationMean <= 0 {
		t.Errorf("mean utilization %.3f: nothing got through", sum.UtilizationMean)
	}
	if len(sum.Clients) != 6 {
		t.Fatalf("%d clients in the summary", len(sum.Clients))
	}
	for i, c := range sum.Clients {
		if profiles[i%len(profiles)].leave == 0 && c.Requests == 0 {
			t.Errorf("%s (%s) got no request through", c.Name, c.Profile)
		}
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
