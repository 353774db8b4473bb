package demo

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// The quota demo end to end on loopback: every bucket's calls that reached
// the target stay within what the bucket can grant (its size plus its fill
// rate over the run), whichever client mode asked, and every service and
// every user gets calls through. Outcomes only: no rate is asserted, the
// machine may be loaded.
func TestQuotaDemo(t *testing.T) {
	var out bytes.Buffer
	sum, err := RunQuota(t.Context(), QuotaOptions{Duration: 6 * time.Second, Users: 5, Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	if len(sum.Buckets) != 3 {
		t.Fatalf("buckets %+v", sum.Buckets)
	}
	var loginFallback int64 // logins the client's fallback limiter let through
	for _, b := range sum.Buckets {
		var reached int64
		for _, n := range b.PerSecond {
			reached += n
		}
		if b.Name == "logins/<user>" {
			reached = b.Granted // the busiest user
			loginFallback = b.Fallback
		}
		// (Calls the client's fallback limiter let through, when the
		// server answered late on a loaded machine, are not the bucket's.)
		if float64(reached-b.Fallback) > b.MaxAllowed {
			t.Errorf("%s: %d calls reached the target (%d of them by the client's fallback), more than the bucket allows over the run (%v)", b.Name, reached, b.Fallback, b.MaxAllowed)
		}
		if reached == 0 {
			t.Errorf("%s: no call got through", b.Name)
		}
		t.Logf("%s (%s): %.1f/s granted at %v/s, %d rejected, %d by the fallback", b.Name, b.Client, b.MeanRate, b.FillRate, b.Rejected, b.Fallback)
	}
	if len(sum.LoginRates) != 5 || sum.LoginRates[0] == 0 {
		t.Errorf("login rates %v: every user should log in", sum.LoginRates)
	}
	// Every user whose logins reached the server has a bucket made on the
	// fly: all 5 when none went to the client's fallback limiter (which
	// decides when the server answers later than the client's timeout, or
	// its breaker is open, on a loaded machine), never more.
	switch {
	case sum.DynamicBuckets > 5:
		t.Errorf("%d per-user buckets, want at most 5 (5 users)", sum.DynamicBuckets)
	case loginFallback == 0 && sum.DynamicBuckets != 5:
		t.Errorf("%d per-user buckets with no login left to the fallback, want 5", sum.DynamicBuckets)
	}
	var sumOut bytes.Buffer
	PrintQuotaSummary(&sumOut, sum)
	if !strings.Contains(out.String(), "naive (100/s)") || !strings.Contains(sumOut.String(), "target/smart") {
		t.Errorf("output:\n%s\n%s", out.String(), sumOut.String())
	}
}
