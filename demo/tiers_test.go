package demo

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"
)

// The tiers demo end to end on loopback, outcomes only: bob's bursts reach
// tier 2, mallory lands in the prison tier (3) and is refused, alice and
// bob get calls through, and the sandbox holders never hold more than the
// domain limit (2) each nor the global limit (3) together.
func TestTiersDemo(t *testing.T) {
	// Its own server, target and clients on loopback, mostly waiting
	// out the run, and outcomes that a slow machine does not change: it
	// runs beside TestDemo. (Not beside TestQuotaDemo: its naive client
	// falls back to a local limiter when an answer takes over 50 ms, so
	// its bound wants the CPU.)
	t.Parallel()
	var out bytes.Buffer
	sum, err := RunTiers(t.Context(), TiersOptions{Duration: 12 * time.Second, Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]Tenant{}
	for _, tn := range sum.Tenants {
		by[tn.Name] = tn
	}
	total := func(xs []int64) (n int64) {
		for _, x := range xs {
			n += x
		}
		return n
	}
	if total(by["alice"].Granted) == 0 || total(by["bob"].Granted) == 0 {
		t.Errorf("alice %v, bob %v: both should get calls through", by["alice"].Granted, by["bob"].Granted)
	}
	if !slices.Contains(by["bob"].Tier, 2) {
		t.Errorf("bob's tiers %v never reached 2", by["bob"].Tier)
	}
	if !slices.Contains(by["mallory"].Tier, 3) || by["mallory"].Rejected == 0 {
		t.Errorf("mallory's tiers %v, %d refused: she should land in the prison tier", by["mallory"].Tier, by["mallory"].Rejected)
	}
	carol, dave := by["carol"].Holds, by["dave"].Holds
	for s := range carol {
		if carol[s] > 2 || dave[s] > 2 || carol[s]+dave[s] > 3 {
			t.Errorf("second %d: carol holds %d, dave %d (domain limit 2, global 3)", s, carol[s], dave[s])
		}
	}
	var sumOut bytes.Buffer
	PrintTiersSummary(&sumOut, sum)
	if !strings.Contains(out.String(), "mallory (tier)") || !strings.Contains(sumOut.String(), "seconds per tier") {
		t.Errorf("output:\n%s\n%s", out.String(), sumOut.String())
	}
}
