package envoyrls_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/sluice-rl/sluice/server/envoyrls"
	"github.com/sluice-rl/sluice/server/status/view"
)

// The counters, for the buckets page: filtered by key prefix, by key,
// paged, each with the rule or override it counts for and what a request
// would be told now.
func TestCounters(t *testing.T) {
	r := start(t, envoyrls.Options{}, `
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: path
    descriptors:
      - key: method
        algorithm: fixed_window
        rate_limit: {unit: hour, requests_per_unit: 5}
`)
	for i := range 12 {
		r.ask(t, "edge", desc("remote_address", fmt.Sprintf("10.0.0.%02d", i)))
	}
	r.ask(t, "edge", desc("remote_address", "10.0.0.03")) // two hits: 8 left
	r.ask(t, "edge", desc("path", "/a", "method", "GET"))
	o := desc("remote_address", "10.9.9.9")
	o.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 3, Unit: typev3.RateLimitUnit_SECOND}
	if _, err := r.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{o}}); err != nil {
		t.Fatal(err)
	}
	r.clock.Advance(3 * time.Second) // half a hit back: 8.5 → 8

	p, err := r.svc.Counters(context.Background(), "edge/10.0.0.", 2, 3, 0)
	if err != nil {
		t.Fatal(err)
	}
	if p.Total != 14 || p.Matched != 12 || len(p.Rows) != 3 || !p.Complete {
		t.Fatalf("total %d, matched %d, %d rows, complete %v; want 14, 12, 3, true", p.Total, p.Matched, len(p.Rows), p.Complete)
	}
	// A budget of 5 looks at 5 counters and says so.
	if p, _ := r.svc.Counters(context.Background(), "edge/", 0, 100, 5); p.Total != 5 || p.Complete || len(p.Rows) != 5 {
		t.Fatalf("budget 5: total %d, complete %v, %d rows", p.Total, p.Complete, len(p.Rows))
	}
	want := view.CounterRow{Key: "edge/10.0.0.02", Domain: "edge", Entries: "remote_address=10.0.0.02", Rule: "remote_address",
		Algorithm: "token_bucket", Limit: "10/minute", Remaining: 9, ResetSeconds: 3}
	if p.Rows[0] != want || p.Rows[1].Key != "edge/10.0.0.03" || p.Rows[1].Remaining != 8 || p.Rows[2].Key != "edge/10.0.0.04" {
		t.Fatalf("rows %+v, want from %+v", p.Rows, want)
	}
	p, _ = r.svc.Counters(context.Background(), "edge/", 0, 100, 14)
	byKey := map[string]view.CounterRow{}
	for _, row := range p.Rows {
		byKey[row.Key] = row
	}
	if w := byKey["edge//a/GET"]; w.Rule != "path.method" || w.Algorithm != "fixed_window" || w.Limit != "5/hour" || w.Remaining != 4 {
		t.Fatalf("window: %+v", w)
	}
	if o := byKey["edge/10.9.9.9"]; o.Override != "3/second" || o.Rule != "" || o.Remaining != 3 || o.ResetSeconds != 0 {
		t.Fatalf("override: %+v (full again after 3 s)", o)
	}
}
