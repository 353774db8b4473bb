package limits_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluice-rl/sluice/client/limits"
)

// TestReportBatches: scenario 6 — reports are batched per target and sent
// once per interval, one request per target, and the service charges them.
func TestReportBatches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newService(t)
		c, reg := newClient(t, "limits.test:1", startPipe(t, s), limits.WithReportInterval(time.Second))
		for range 3 {
			if err := c.Report("api", "cost", 30); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.Report("api", "fast", 5); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if got := s.requests.Load(); got != 0 {
			t.Fatalf("%d requests before the interval, want 0", got)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		want := map[string]int64{"cost": 90, "fast": 5}
		reqs := s.received()
		if len(reqs) != 2 {
			t.Fatalf("%d requests, want 2 (one per target)", len(reqs))
		}
		for _, r := range reqs {
			if r.GetTokens() != want[r.GetDomain()] || r.GetMinTokens() != 1 {
				t.Errorf("request %v: want tokens %d, min_tokens 1", r, want[r.GetDomain()])
			}
		}
		if got := metric(t, reg, "sluice_quota_client_report_charged_tokens_total"); got != 95 {
			t.Errorf("charged %v, want 95", got)
		}
		if got := metric(t, reg, "sluice_quota_client_reported_tokens_total"); got != 95 {
			t.Errorf("reported %v, want 95", got)
		}
		// The service's bucket was charged: 100 − 90 left.
		g, err := c.Reserve(context.Background(), "api", "cost", 1)
		if err != nil || g.Remaining != 9 {
			t.Errorf("Reserve after the report = %+v, %v; want 9 left", g, err)
		}
	})
}

// TestReportCarriesOver: what the service does not charge at once (here,
// more than the bucket holds plus one second's wait) stays batched and is
// charged by later flushes, one request per flush.
func TestReportCarriesOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newService(t)
		c, reg := newClient(t, "limits.test:1", startPipe(t, s), limits.WithReportInterval(time.Second))
		if err := c.Report("api", "cost", 300); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		// 100 held plus 10 a second for the bucket's 1 s wait.
		if got := metric(t, reg, "sluice_quota_client_report_charged_tokens_total"); got != 110 {
			t.Errorf("charged %v after the first flush, want 110", got)
		}
		time.Sleep(30 * time.Second)
		synctest.Wait()
		if got := metric(t, reg, "sluice_quota_client_report_charged_tokens_total"); got != 300 {
			t.Errorf("charged %v after 31 flushes, want 300", got)
		}
		if got := s.requests.Load(); got > 31 {
			t.Errorf("%d requests, want at most one per flush", got)
		}
	})
}

// TestReportDrops: tokens the service can never charge, and invalid
// reports, are dropped and counted.
func TestReportDrops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, reg := newClient(t, "limits.test:1", startPipe(t, newService(t)), limits.WithReportInterval(time.Second))
		if err := c.Report("nothing", "here", 7); err != nil {
			t.Fatal(err)
		}
		if err := c.Report("api", "a b", 3); !errors.Is(err, limits.ErrInvalidRequest) {
			t.Errorf("invalid report: %v", err)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if got := metric(t, reg, "sluice_quota_client_report_dropped_tokens_total", "reason", "rejected"); got != 7 {
			t.Errorf("dropped (rejected) %v, want 7", got)
		}
		if got := metric(t, reg, "sluice_quota_client_report_dropped_tokens_total", "reason", "invalid"); got != 3 {
			t.Errorf("dropped (invalid) %v, want 3", got)
		}
	})
}

// TestReportCloseFlushes: Close sends what is batched.
func TestReportCloseFlushes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newService(t)
		c, reg := newClient(t, "limits.test:1", startPipe(t, s), limits.WithReportInterval(time.Hour))
		if err := c.Report("api", "cost", 5); err != nil {
			t.Fatal(err)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if got := metric(t, reg, "sluice_quota_client_report_charged_tokens_total"); got != 5 {
			t.Errorf("charged %v at Close, want 5", got)
		}
		if got := s.requests.Load(); got != 1 {
			t.Errorf("%d requests, want 1", got)
		}
	})
}

// TestReportWhileStalled: Report never blocks; while the service stalls
// (then the breaker is open) the tokens stay batched, and they are charged
// when a probe gets through.
func TestReportWhileStalled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newService(t)
		s.stall.Store(true)
		c, reg := newClient(t, "limits.test:1", startPipe(t, s), limits.WithReportInterval(time.Second),
			limits.WithBreaker(2, 5*time.Second))
		start := time.Now()
		if err := c.Report("api", "cost", 10); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took != 0 {
			t.Errorf("Report took %v", took)
		}
		time.Sleep(3 * time.Second) // flushes at 1 s and 2 s time out; the breaker opens
		synctest.Wait()
		if got := s.requests.Load(); got != 2 {
			t.Errorf("%d requests, want 2", got)
		}
		s.stall.Store(false)
		time.Sleep(5 * time.Second) // the breaker lets a probe through
		synctest.Wait()
		if got := metric(t, reg, "sluice_quota_client_report_charged_tokens_total"); got != 10 {
			t.Errorf("charged %v, want 10", got)
		}
		if got := metric(t, reg, "sluice_quota_client_requests_total", "call", "report", "result", "breaker_open"); got < 1 {
			t.Errorf("no flush was held back by the open breaker")
		}
	})
}

// TestReportBacklog: past MaxTargets targets, or MaxTokens in a target's
// batch, reports are dropped with ErrBacklog; Close drops what it cannot
// send, and counts it.
func TestReportBacklog(t *testing.T) {
	c, reg := newClient(t, unreachable(t), limits.WithReportInterval(time.Hour))
	for i := range limits.MaxTargets {
		if err := c.Report("api", "d"+strconv.Itoa(i), 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Report("api", "one-more", 1); !errors.Is(err, limits.ErrBacklog) {
		t.Errorf("past MaxTargets: %v, want ErrBacklog", err)
	}
	if err := c.Report("api", "d0", limits.MaxTokens-1); err != nil {
		t.Errorf("up to MaxTokens: %v", err)
	}
	if err := c.Report("api", "d0", 5); !errors.Is(err, limits.ErrBacklog) {
		t.Errorf("past MaxTokens: %v, want ErrBacklog", err)
	}
	if got := metric(t, reg, "sluice_quota_client_report_dropped_tokens_total", "reason", "backlog"); got != 6 {
		t.Errorf("dropped (backlog) %v, want 6", got)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if got := metric(t, reg, "sluice_quota_client_report_dropped_tokens_total", "reason", "closed"); got < limits.MaxTargets {
		t.Errorf("dropped (closed) %v, want everything batched", got)
	}
}
