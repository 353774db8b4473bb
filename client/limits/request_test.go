package limits_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"connectrpc.com/connect"

	sluicev1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/client/limits"
)

// constSource is a jitter source that always answers the same: 0 makes
// every sleep 3/4 of 2^i units, 1<<63 exactly 2^i units.
type constSource uint64

func (s constSource) Uint64() uint64 { return uint64(s) }

const (
	jitterLow = constSource(0)       // u = 0: sleeps of 0.75 × 2^i
	jitterMid = constSource(1 << 63) // u = 0.5: sleeps of 2^i
)

// offsets returns the times as offsets from start.
func offsets(start time.Time, ts []time.Time) []time.Duration {
	out := make([]time.Duration, len(ts))
	for i, t := range ts {
		out[i] = t.Sub(start)
	}
	return out
}

func equalDurations(a, b []time.Duration) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestRequestBackoff: Request retries a rejection after exactly
// min(max_wait − elapsed, jitter(2^i)) for the i-th failure, jitter from
// the seeded source, and gives up with the last rejection once the sleep
// would be ≤ 0 (virtual time; "api"/"strict" can never grant 3 tokens, so
// every answer is REJECTED_TIMEOUT).
func TestRequestBackoff(t *testing.T) {
	s := time.Second
	tests := []struct {
		name    string
		src     constSource
		unit    time.Duration
		maxWait time.Duration
		want    []time.Duration // when each request arrives
	}{
		{name: "no max wait: one request", src: jitterLow, maxWait: 0, want: []time.Duration{0}},
		{name: "negative max wait: one request", src: jitterLow, maxWait: -s, want: []time.Duration{0}},
		{name: "low jitter: 1.5 s, 3 s, then the rest", src: jitterLow, maxWait: 10 * s,
			want: []time.Duration{0, 1500 * time.Millisecond, 4500 * time.Millisecond, 10 * s}},
		{name: "mid jitter: 2 s, 4 s, then the rest", src: jitterMid, maxWait: 10 * s,
			want: []time.Duration{0, 2 * s, 6 * s, 10 * s}},
		{name: "max wait below the first sleep", src: jitterLow, maxWait: s, want: []time.Duration{0, s}},
		{name: "unit of 100 ms", src: jitterMid, unit: 100 * time.Millisecond, maxWait: s,
			want: []time.Duration{0, 200 * time.Millisecond, 600 * time.Millisecond, s}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newCharon(t)
				hc := startCharonPipe(t, h)
				opts := []limits.Option{limits.WithHTTPClient(hc()), limits.WithJitterSource(tc.src)}
				if tc.unit > 0 {
					opts = append(opts, limits.WithBackoffUnit(tc.unit))
				}
				c, reg := newClient(t, "limits.test:1", opts...)
				start := time.Now()
				_, err := c.Request(context.Background(), "api", "strict", 3, 0, tc.maxWait)
				var rej *limits.RejectedError
				if !errors.As(err, &rej) || rej.Status != sluicev1.AllowResponse_REJECTED_TIMEOUT {
					t.Fatalf("err = %v, want the last REJECTED_TIMEOUT", err)
				}
				got := offsets(start, h.allows())
				if !equalDurations(got, tc.want) {
					t.Errorf("requests at %v, want %v", got, tc.want)
				}
				last := tc.want[len(tc.want)-1]
				if rej.Attempts != len(tc.want) || rej.Waited != last || time.Since(start) != last {
					t.Errorf("rejection after %d attempts, waited %v, returned after %v; want %d, %v",
						rej.Attempts, rej.Waited, time.Since(start), len(tc.want), last)
				}
				if got := metric(t, reg, "sluice_quota_client_requests_total", "call", "request", "result", "rejected"); got != float64(len(tc.want)) {
					t.Errorf("rejected requests counted = %v, want %d", got, len(tc.want))
				}
				if got := metric(t, reg, "sluice_quota_client_decisions_total", "mode", "request", "outcome", "rejected"); got != 1 {
					t.Errorf("rejected decisions = %v, want 1", got)
				}
			})
		})
	}
}

// TestRequestRetrySucceeds: a rejection retried after the backoff is
// granted once the bucket has refilled; the grant says how long it took.
func TestRequestRetrySucceeds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newCharon(t)
		hc := startCharonPipe(t, h)
		c, _ := newClient(t, "limits.test:1", limits.WithHTTPClient(hc()), limits.WithJitterSource(jitterLow))
		ctx := context.Background()
		if _, err := c.Allow(ctx, "api", "strict", 2); err != nil { // empties the bucket (1 token a second)
			t.Fatal(err)
		}
		start := time.Now()
		g, err := c.Request(ctx, "api", "strict", 1, 1, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		want := limits.Grant{Granted: 1, Remaining: 0.5, Limit: 2, Bucket: "named", Source: limits.FromService,
			Waited: 1500 * time.Millisecond, Attempts: 2}
		if g != want || time.Since(start) != want.Waited {
			t.Errorf("grant = %+v after %v, want %+v", g, time.Since(start), want)
		}
	})
}

// TestRequestPartialGrant: the most in [min, tokens] now, without a wait
// even on a token bucket that would grant one.
func TestRequestPartialGrant(t *testing.T) {
	h := newCharon(t)
	c, _ := newClient(t, startCharon(t, h))
	g, err := c.Request(context.Background(), "api", "strict", 5, 1, 0)
	if err != nil || g.Granted != 2 || g.Wait != 0 || g.Attempts != 1 {
		t.Fatalf("Request(5, min 1) = %+v, %v; want 2 granted at once", g, err)
	}
	reqs := h.received()
	if last := reqs[len(reqs)-1]; last.GetMinTokens() != 1 || last.GetMaxWait() == nil || last.GetMaxWait().AsDuration() != 0 {
		t.Errorf("sent min_tokens %d, max_wait %v; want 1 and 0", last.GetMinTokens(), last.GetMaxWait())
	}
}

// TestRequestDeadline: a sleep that would pass ctx's deadline ends the
// call at once, with an error wrapping DeadlineExceeded and the last
// rejection.
func TestRequestDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newCharon(t)
		hc := startCharonPipe(t, h)
		c, _ := newClient(t, "limits.test:1", limits.WithHTTPClient(hc()), limits.WithJitterSource(jitterLow))
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		start := time.Now()
		_, err := c.Request(ctx, "api", "strict", 3, 0, 10*time.Second)
		var rej *limits.RejectedError
		if !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &rej) {
			t.Fatalf("err = %v, want DeadlineExceeded with the last rejection", err)
		}
		if took := time.Since(start); took != 1500*time.Millisecond || rej.Attempts != 2 {
			t.Errorf("returned after %v and %d attempts, want 1.5s (the next sleep, 3 s, passes the deadline) and 2", took, rej.Attempts)
		}
	})
}

// TestRequestNotRetried: rejections no wait can change end Request at
// once.
func TestRequestNotRetried(t *testing.T) {
	h := newCharon(t)
	c, _ := newClient(t, startCharon(t, h))
	tests := []struct {
		name             string
		resource, domain string
		tokens           int64
		status           limits.Status
	}{
		{name: "no bucket", resource: "nothing", domain: "here", tokens: 1, status: sluicev1.AllowResponse_REJECTED_NO_BUCKET},
		{name: "too many tokens", resource: "api", domain: "slow", tokens: 11, status: sluicev1.AllowResponse_REJECTED_TOO_MANY_TOKENS_REQUESTED},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			_, err := c.Request(context.Background(), tc.resource, tc.domain, tc.tokens, 0, time.Hour)
			var rej *limits.RejectedError
			if !errors.As(err, &rej) || rej.Status != tc.status || rej.Attempts != 1 {
				t.Fatalf("err = %v, want %v after one attempt", err, tc.status)
			}
			if time.Since(start) > 10*time.Second {
				t.Errorf("took %v: retried", time.Since(start))
			}
		})
	}
}

// TestRequestTierContext: the burst-tier context of Allow's answer (fields
// 8–18) reaches the grant and the rejection.
func TestRequestTierContext(t *testing.T) {
	h := newCharon(t)
	c, _ := newClient(t, startCharon(t, h))
	hard, global := int64(2), int64(3)
	decorate := func(r *sluicev1.AllowResponse) {
		r.HardLimit, r.GlobalLimit = &hard, &global
		r.TierLimit, r.Tier, r.TierHits = 4, 2, 3
		r.DomainHitsLastSecond, r.GlobalHitsLastSecond = 2, 3
		r.Burst, r.HardLimited, r.GlobalLimited, r.Unlimited = true, r.GetStatus() != sluicev1.AllowResponse_OK, false, true
	}
	h.decorate.Store(&decorate)
	want := limits.Tier{Index: 2, Limit: 4, Hits: 3, HardLimit: 2, GlobalLimit: 3, HasHardLimit: true, HasGlobalLimit: true,
		DomainHitsLastSecond: 2, GlobalHitsLastSecond: 3, Burst: true}
	g, err := c.Request(context.Background(), "api", "fast", 1, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if g.Tier != want || !g.Unlimited {
		t.Errorf("grant's tier = %+v, unlimited %v; want %+v, true", g.Tier, g.Unlimited, want)
	}
	// Allow carries it too.
	if g, err := c.Allow(context.Background(), "api", "fast", 1); err != nil || g.Tier != want {
		t.Errorf("Allow's tier = %+v, %v", g.Tier, err)
	}
	_, err = c.Request(context.Background(), "api", "strict", 3, 0, 0)
	var rej *limits.RejectedError
	want.HardLimited = true
	if !errors.As(err, &rej) || rej.Tier != want {
		t.Errorf("rejection = %v, tier %+v; want %+v", err, rej.Tier, want)
	}
}

// TestFailOpen: when the service cannot be reached or answers a server
// error, Request grants its minimum and ReserveCopies a hold of its
// minimum of copies, at once, flagged and counted by reason; with
// WithFailOpen(false), both fail with ErrUnavailable.
func TestFailOpen(t *testing.T) {
	tests := []struct {
		name   string
		code   connect.Code // the service's answer; 0: unreachable
		stall  bool         // Allow never answers (the call timeout passes)
		reason string
	}{
		{name: "unreachable", reason: "unavailable"},
		{name: "Unavailable", code: connect.CodeUnavailable, reason: "unavailable"},
		{name: "Internal", code: connect.CodeInternal, reason: "server_error"},
		{name: "Unknown", code: connect.CodeUnknown, reason: "unavailable"},
		{name: "no answer in time", stall: true, reason: "timeout"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			addr := unreachable(t)
			if tc.code != 0 || tc.stall {
				h := newCharon(t)
				h.down.Store(int32(tc.code))
				h.stall.Store(tc.stall)
				addr = startCharon(t, h)
			}
			var opts []limits.Option
			if tc.stall {
				opts = append(opts, limits.WithCallTimeout(200*time.Millisecond))
			}
			c, reg := newClient(t, addr, opts...)
			ctx := context.Background()
			g, err := c.Request(ctx, "api", "fast", 5, 2, time.Hour)
			if err != nil || g.Granted != 2 || g.Source != limits.FromDegraded || !g.Degraded() || g.Attempts != 1 {
				t.Fatalf("Request = %+v, %v; want 2 granted, degraded, after one attempt", g, err)
			}
			if got := metric(t, reg, "sluice_quota_client_degraded_total", "call", "request", "reason", tc.reason); got != 1 {
				t.Errorf("degraded requests (%s) = %v, want 1", tc.reason, got)
			}
			if got := metric(t, reg, "sluice_quota_client_decisions_total", "mode", "request", "outcome", "degraded"); got != 1 {
				t.Errorf("degraded decisions = %v, want 1", got)
			}
			if tc.stall {
				return // the hold's calls do not stall
			}
			hold, err := c.ReserveCopies(ctx, "sandboxes", "acme", 3, 1, time.Hour)
			if err != nil || hold.Copies() != 1 || hold.Source() != limits.FromDegraded || !hold.Degraded() || hold.Session() != "" {
				t.Fatalf("ReserveCopies = %v, %v; want a degraded hold of 1", hold, err)
			}
			if got := metric(t, reg, "sluice_quota_client_degraded_total", "call", "reserve", "reason", tc.reason); got != 1 {
				t.Errorf("degraded reserves (%s) = %v, want 1", tc.reason, got)
			}
			if _, err := hold.Transfer(ctx, 1, 0); !errors.Is(err, limits.ErrDegraded) {
				t.Errorf("Transfer of a degraded hold: %v, want ErrDegraded", err)
			}
			if err := hold.Do(ctx, func(context.Context) error { return nil }); err != nil || hold.Copies() != 0 {
				t.Errorf("Do: %v, %d copies left", err, hold.Copies())
			}

			strict, _ := newClient(t, addr, limits.WithFailOpen(false))
			if _, err := strict.Request(ctx, "api", "fast", 5, 2, time.Hour); !errors.Is(err, limits.ErrUnavailable) {
				t.Errorf("Request without fail-open: %v, want ErrUnavailable", err)
			}
			if _, err := strict.ReserveCopies(ctx, "sandboxes", "acme", 3, 1, time.Hour); !errors.Is(err, limits.ErrUnavailable) {
				t.Errorf("ReserveCopies without fail-open: %v, want ErrUnavailable", err)
			}
		})
	}
}

// TestFailOpenMidSession: a service that fails after the session opened
// still makes reserves fail open; once it answers again, they do not.
func TestFailOpenMidSession(t *testing.T) {
	h := newCharon(t)
	c, reg := newClient(t, startCharon(t, h))
	ctx := context.Background()
	first, err := c.ReserveCopies(ctx, "gpus", "acme", 2, 0, 0)
	if err != nil || first.Degraded() {
		t.Fatalf("first reserve: %v, %v", first, err)
	}
	h.down.Store(int32(connect.CodeUnavailable))
	hold, err := c.ReserveCopies(ctx, "gpus", "acme", 2, 1, 0)
	if err != nil || !hold.Degraded() || hold.Copies() != 1 {
		t.Fatalf("reserve while failing: %v, %v; want a degraded hold of 1", hold, err)
	}
	h.down.Store(0)
	again, err := c.ReserveCopies(ctx, "gpus", "acme", 2, 1, 0)
	if err != nil || again.Degraded() || again.Copies() != 2 || again.Session() != first.Session() {
		t.Fatalf("reserve once answering: %v, %v; want 2 from the service, same session", again, err)
	}
	if _, byDomain := h.held("gpus", "acme"); byDomain != 4 {
		t.Errorf("service holds %d gpus for acme, want 4 (the degraded hold is the client's alone)", byDomain)
	}
	if got := metric(t, reg, "sluice_quota_client_degraded_total", "call", "reserve", "reason", "unavailable"); got != 1 {
		t.Errorf("degraded reserves = %v, want 1", got)
	}
}

// TestClientErrorsNeverFailOpen: the paper's client errors are typed
// errors, whether the service is healthy or not, and never degraded
// grants.
func TestClientErrorsNeverFailOpen(t *testing.T) {
	h := newCharon(t)
	c, reg := newClient(t, startCharon(t, h))
	ctx := context.Background()
	tests := []struct {
		name     string
		call     func() error
		sentinel error
		code     connect.Code
	}{
		{name: "request of a copy-limited resource", sentinel: limits.ErrFailedPrecondition, code: connect.CodeFailedPrecondition,
			call: func() error { _, err := c.Request(ctx, "sandboxes", "acme", 1, 0, time.Hour); return err }},
		{name: "reserve of a rate-limited resource", sentinel: limits.ErrFailedPrecondition, code: connect.CodeFailedPrecondition,
			call: func() error { _, err := c.ReserveCopies(ctx, "api", "fast", 1, 0, time.Hour); return err }},
		{name: "reserve of an unknown resource", sentinel: limits.ErrNotFound, code: connect.CodeNotFound,
			call: func() error { _, err := c.ReserveCopies(ctx, "nothing", "acme", 1, 0, time.Hour); return err }},
		{name: "seize of an unknown transfer", sentinel: limits.ErrNotFound, code: connect.CodeNotFound,
			call: func() error { _, err := c.Seize(ctx, "0123456789abcdef0123456789abcdef"); return err }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			var ce *limits.ClientError
			if !errors.Is(err, tc.sentinel) || !errors.As(err, &ce) || ce.Code != tc.code || ce.Message == "" {
				t.Fatalf("err = %v, want a *ClientError %v wrapping %v", err, tc.code, tc.sentinel)
			}
		})
	}
	local := []struct {
		name string
		call func() error
	}{
		{name: "min above copies", call: func() error { _, err := c.ReserveCopies(ctx, "gpus", "acme", 1, 2, 0); return err }},
		{name: "no copies", call: func() error { _, err := c.ReserveCopies(ctx, "gpus", "acme", 0, 0, 0); return err }},
		{name: "bad domain", call: func() error { _, err := c.ReserveCopies(ctx, "gpus", "a b", 1, 0, 0); return err }},
		{name: "negative min tokens", call: func() error { _, err := c.Request(ctx, "api", "fast", 1, -1, 0); return err }},
		{name: "empty transfer id", call: func() error { _, err := c.Seize(ctx, ""); return err }},
	}
	for _, tc := range local {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); !errors.Is(err, limits.ErrInvalidRequest) {
				t.Fatalf("err = %v, want ErrInvalidRequest", err)
			}
		})
	}
	for _, call := range []string{"request", "reserve"} {
		for _, reason := range []string{"unavailable", "timeout", "server_error", "kill_switch"} {
			if got := metric(t, reg, "sluice_quota_client_degraded_total", "call", call, "reason", reason); got != 0 {
				t.Errorf("degraded %s (%s) = %v, want 0", call, reason, got)
			}
		}
	}
}

// TestKillSwitch: with the kill switch on, rejections become grants of the
// minimum, at once, flagged and counted; the service still decides (it
// holds nothing for a kill-switch hold); off again, rejections are
// rejections.
func TestKillSwitch(t *testing.T) {
	h := newCharon(t)
	c, reg := newClient(t, startCharon(t, h), limits.WithKillSwitch(true))
	ctx := context.Background()
	if !c.KillSwitch() {
		t.Fatal("WithKillSwitch(true): the switch is off")
	}
	if _, err := c.Allow(ctx, "api", "strict", 2); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	g, err := c.Request(ctx, "api", "strict", 3, 1, time.Hour)
	if err != nil || g.Granted != 1 || g.Source != limits.FromKillSwitch || !g.Degraded() || g.Attempts != 1 {
		t.Fatalf("Request with the kill switch = %+v, %v; want 1 granted by the kill switch at once", g, err)
	}
	if time.Since(start) > 10*time.Second {
		t.Errorf("took %v: retried", time.Since(start))
	}
	full, err := c.ReserveCopies(ctx, "sandboxes", "globex", 3, 0, 0)
	if err != nil || full.Source() != limits.FromService || full.Copies() != 3 {
		t.Fatalf("reserve of globex's 3: %v, %v", full, err)
	}
	extra, err := c.ReserveCopies(ctx, "sandboxes", "globex", 2, 1, time.Hour)
	if err != nil || extra.Source() != limits.FromKillSwitch || extra.Copies() != 1 || !extra.Degraded() {
		t.Fatalf("reserve over the limit with the kill switch = %v, %v; want 1 copy from the kill switch", extra, err)
	}
	if _, byDomain := h.held("sandboxes", "globex"); byDomain != 3 {
		t.Errorf("the service holds %d for globex, want 3", byDomain)
	}
	for _, call := range []string{"request", "reserve"} {
		if got := metric(t, reg, "sluice_quota_client_degraded_total", "call", call, "reason", "kill_switch"); got != 1 {
			t.Errorf("kill-switch %ss = %v, want 1", call, got)
		}
	}
	c.SetKillSwitch(false)
	if _, err := c.Request(ctx, "api", "strict", 3, 1, 0); !errors.As(err, new(*limits.RejectedError)) {
		t.Errorf("Request with the switch off: %v, want a rejection", err)
	}
	_, err = c.ReserveCopies(ctx, "sandboxes", "globex", 1, 0, 0)
	var over *limits.OverLimitError
	if !errors.As(err, &over) || over.Reservation.DomainHolds != 3 || over.Reservation.DomainLimit != 3 || over.Attempts != 1 {
		t.Errorf("ReserveCopies with the switch off: %v, want over limit (3 of 3)", err)
	}
}

// TestRequestBurstTiers: Request against the real burst-tier engine
// (virtual time): the answer's context — tier, its limit and hits,
// bursts, the hard and global limits and which held the request back —
// and a rejection by the hard limit retried into the next second.
func TestRequestBurstTiers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newCharon(t)
		hc := startCharonPipe(t, h)
		c, _ := newClient(t, "limits.test:1", limits.WithHTTPClient(hc()), limits.WithJitterSource(jitterLow))
		ctx := context.Background()
		steps := []struct {
			name             string
			resource, domain string
			tokens, min      int64
			maxWait          time.Duration
			granted          int64
			tier             limits.Tier
			attempts         int
		}{
			{name: "into tier 1", resource: "cookbook/tiers", domain: "acme", tokens: 3, granted: 3,
				tier: limits.Tier{Index: 1, Limit: 3, Hits: 3, DomainHitsLastSecond: 3, Burst: true}, attempts: 1},
			{name: "tier 1 full: burst into tier 2", resource: "cookbook/tiers", domain: "acme", tokens: 1, granted: 1,
				tier: limits.Tier{Index: 2, Limit: 4, Hits: 1, DomainHitsLastSecond: 4, Burst: true}, attempts: 1},
			{name: "the hard limit cuts a request", resource: "cookbook/hard", domain: "a", tokens: 3, min: 1, granted: 2,
				tier: limits.Tier{Index: 1, Limit: 1000, Hits: 2, HardLimit: 2, GlobalLimit: 3, HasHardLimit: true, HasGlobalLimit: true,
					DomainHitsLastSecond: 2, GlobalHitsLastSecond: 2, Burst: true, HardLimited: true}, attempts: 1},
			{name: "the global limit cuts another domain's", resource: "cookbook/hard", domain: "b", tokens: 2, min: 1, granted: 1,
				tier: limits.Tier{Index: 1, Limit: 1000, Hits: 1, HardLimit: 2, GlobalLimit: 3, HasHardLimit: true, HasGlobalLimit: true,
					DomainHitsLastSecond: 1, GlobalHitsLastSecond: 3, Burst: true, GlobalLimited: true}, attempts: 1},
			{name: "rejected until the second has passed", resource: "cookbook/hard", domain: "a", tokens: 1, maxWait: 5 * time.Second, granted: 1,
				// a hit in tier 1's 1 s window, which has moved on
				tier: limits.Tier{Index: 1, Limit: 1000, Hits: 1, HardLimit: 2, GlobalLimit: 3, HasHardLimit: true, HasGlobalLimit: true,
					DomainHitsLastSecond: 1, GlobalHitsLastSecond: 1}, attempts: 2},
		}
		for _, st := range steps {
			g, err := c.Request(ctx, st.resource, st.domain, st.tokens, st.min, st.maxWait)
			if err != nil {
				t.Fatalf("%s: %v", st.name, err)
			}
			if g.Granted != st.granted || g.Tier != st.tier || g.Attempts != st.attempts {
				t.Errorf("%s: granted %d after %d attempts, tier %+v; want %d, %d, %+v", st.name, g.Granted, g.Attempts, g.Tier, st.granted, st.attempts, st.tier)
			}
		}
	})
}
