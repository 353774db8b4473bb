package limits_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"connectrpc.com/connect"

	"github.com/sluice-rl/sluice/client/limits"
)

// TestHoldLifecycle drives a hold over real gRPC on loopback against the
// real copies engine: reserve (the paper's context), partial release,
// transfer, seize by another client (its own session), release of the
// seized copies, a second seize refused, and Close releasing the rest.
func TestHoldLifecycle(t *testing.T) {
	h := newCharon(t)
	addr := startCharon(t, h)
	c, reg := newClient(t, addr)
	other, _ := newClient(t, addr)
	ctx := context.Background()

	hold, err := c.ReserveCopies(ctx, "sandboxes", "acme", 5, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := limits.Reservation{DomainLimit: 4, GlobalLimit: 5, HasGlobalLimit: true, DomainHolds: 4, GlobalHolds: 4,
		Groups: []limits.GroupHolds{{Name: "trusted", Limit: 4, Holds: 4}}}
	r := hold.Reservation()
	if hold.Copies() != 4 || !slices.Equal(hold.Groups(), []string{"trusted"}) || hold.Source() != limits.FromService ||
		hold.Degraded() || hold.Err() != nil || hold.Session() == "" || hold.Attempts() != 1 ||
		r.DomainLimit != want.DomainLimit || r.GlobalLimit != want.GlobalLimit || !r.HasGlobalLimit ||
		r.DomainHolds != want.DomainHolds || r.GlobalHolds != want.GlobalHolds || !slices.Equal(r.Groups, want.Groups) {
		t.Fatalf("hold: %d copies, groups %v, reservation %+v, source %v, err %v", hold.Copies(), hold.Groups(), r, hold.Source(), hold.Err())
	}
	if err := hold.Release(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if g, d := h.held("sandboxes", "acme"); g != 3 || d != 3 || hold.Copies() != 3 {
		t.Fatalf("after releasing 1: service holds %d (acme %d), hold %d; want 3", g, d, hold.Copies())
	}
	if err := hold.Release(ctx, 4); !errors.Is(err, limits.ErrFailedPrecondition) {
		t.Errorf("releasing 4 of 3: %v, want ErrFailedPrecondition", err)
	}
	if err := hold.Release(ctx, 0); !errors.Is(err, limits.ErrInvalidRequest) {
		t.Errorf("releasing 0: %v, want ErrInvalidRequest", err)
	}
	id, err := hold.Transfer(ctx, 2, 30*time.Second)
	if err != nil || id == "" {
		t.Fatalf("Transfer: %q, %v", id, err)
	}
	if g, _ := h.held("sandboxes", "acme"); g != 3 || hold.Copies() != 1 {
		t.Fatalf("after staging 2: service holds %d, hold %d; want 3 (staged copies stay counted) and 1", g, hold.Copies())
	}
	seized, err := other.Seize(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if seized.Resource() != "sandboxes" || seized.Domain() != "acme" || seized.Copies() != 2 ||
		!slices.Equal(seized.Groups(), []string{"trusted"}) || seized.Session() == hold.Session() || seized.Session() == "" {
		t.Fatalf("seized %s/%s: %d copies in %v, session %q", seized.Resource(), seized.Domain(), seized.Copies(), seized.Groups(), seized.Session())
	}
	if _, err := other.Seize(ctx, id); !errors.Is(err, limits.ErrNotFound) {
		t.Errorf("seizing twice: %v, want ErrNotFound", err)
	}
	if err := seized.Release(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if g, _ := h.held("sandboxes", "acme"); g != 1 {
		t.Fatalf("after the seized copies' release: service holds %d, want 1", g)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if g, _ := h.held("sandboxes", "acme"); g != 0 {
		t.Errorf("after Close: service holds %d, want 0", g)
	}
	if !errors.Is(hold.Err(), limits.ErrClosed) || hold.Copies() != 0 {
		t.Errorf("hold after Close: err %v, %d copies; want ErrClosed, 0", hold.Err(), hold.Copies())
	}
	if err := hold.Release(ctx, 1); !errors.Is(err, limits.ErrClosed) {
		t.Errorf("Release after Close: %v, want ErrClosed", err)
	}
	for event, n := range map[string]float64{"opened": 1, "closed": 1, "lost": 0} {
		if got := metric(t, reg, "sluice_quota_client_session_events_total", "event", event); got != n {
			t.Errorf("session events %s = %v, want %v", event, got, n)
		}
	}
}

// TestOverLimitRetried: ReserveCopies retries an over-limit answer with
// the backoff and is granted once copies are released (virtual time).
func TestOverLimitRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newCharon(t)
		hc := startCharonPipe(t, h)
		a, _ := newClient(t, "limits.test:1", limits.WithHTTPClient(hc()), limits.WithJitterSource(jitterMid))
		b, _ := newClient(t, "limits.test:1", limits.WithHTTPClient(hc()), limits.WithJitterSource(jitterMid))
		ctx := context.Background()
		all, err := a.ReserveCopies(ctx, "gpus", "acme", 8, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		time.AfterFunc(5*time.Second, func() { _ = all.Release(ctx, 3) })
		start := time.Now()
		got, err := b.ReserveCopies(ctx, "gpus", "initech", 4, 2, 20*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		// Asked at 0, 2 s (rejected), 6 s: 3 free, granted 3 of [2, 4].
		if got.Copies() != 3 || got.Attempts() != 3 || got.Waited() != 6*time.Second || time.Since(start) != 6*time.Second {
			t.Errorf("granted %d after %d attempts, waited %v; want 3, 3, 6s", got.Copies(), got.Attempts(), got.Waited())
		}
		_, err = b.ReserveCopies(ctx, "gpus", "initech", 1, 0, 3*time.Second)
		var over *limits.OverLimitError
		// Asked at 0, 2 s, and 3 s (the second sleep, 4 s, cut to what is
		// left of the 3 s); then nothing is left.
		if !errors.As(err, &over) || over.Attempts != 3 || over.Waited != 3*time.Second || over.Reservation.GlobalHolds != 8 {
			t.Errorf("err = %v, want over limit after 3 attempts in 3s", err)
		}
	})
}

// TestHoldDo: Do releases what is left when f returns, when f fails, and
// when f panics (and panics again with the same value).
func TestHoldDo(t *testing.T) {
	h := newCharon(t)
	c, _ := newClient(t, startCharon(t, h))
	ctx := context.Background()
	boom := errors.New("boom")
	tests := []struct {
		name    string
		f       func(ctx context.Context, hold *limits.Hold) error
		wantErr error
		panics  bool
	}{
		{name: "returns", f: func(context.Context, *limits.Hold) error { return nil }},
		{name: "fails", f: func(context.Context, *limits.Hold) error { return boom }, wantErr: boom},
		{name: "releases some itself", f: func(ctx context.Context, hold *limits.Hold) error { return hold.Release(ctx, 2) }},
		{name: "releases all itself", f: func(ctx context.Context, hold *limits.Hold) error { return hold.Release(ctx, 3) }},
		{name: "panics", f: func(context.Context, *limits.Hold) error { panic(boom) }, panics: true},
		{name: "ctx cancelled", f: func(context.Context, *limits.Hold) error { return nil }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hold, err := c.ReserveCopies(ctx, "gpus", "acme", 3, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			dctx := ctx
			if tc.name == "ctx cancelled" {
				cctx, cancel := context.WithCancel(ctx)
				cancel()
				dctx = cctx
			}
			var recovered any
			func() {
				defer func() { recovered = recover() }()
				err = hold.Do(dctx, func(ctx context.Context) error {
					if _, d := h.held("gpus", "acme"); d != 3 {
						t.Errorf("inside Do: service holds %d, want 3", d)
					}
					return tc.f(ctx, hold)
				})
			}()
			if tc.panics != (recovered == boom) {
				t.Errorf("recovered %v, want a panic %v", recovered, tc.panics)
			}
			if !tc.panics && !errors.Is(err, tc.wantErr) || tc.wantErr == nil && err != nil {
				t.Errorf("Do = %v, want %v", err, tc.wantErr)
			}
			if _, d := h.held("gpus", "acme"); d != 0 || hold.Copies() != 0 {
				t.Errorf("after Do: service holds %d, hold %d; want 0", d, hold.Copies())
			}
		})
	}
}

// TestSessionKeptAlive: a session with a 1 s ttl outlives many ttls while
// the client runs (virtual time), and a keep-alive stream broken by the
// service is resumed at once when the service kept the session.
func TestSessionKeptAlive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newCharon(t)
		hc := startCharonPipe(t, h)
		c, reg := newClient(t, "limits.test:1", limits.WithHTTPClient(hc()), limits.WithSessionTTL(time.Second))
		ctx := context.Background()
		hold, err := c.ReserveCopies(ctx, "gpus", "acme", 2, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(30 * time.Second)
		if _, d := h.held("gpus", "acme"); d != 2 || hold.Err() != nil {
			t.Fatalf("after 30 ttls: service holds %d, hold err %v; want 2, nil", d, hold.Err())
		}
		h.keepOnBreak.Store(true)
		h.breakStreams()
		time.Sleep(5 * time.Second)
		if _, d := h.held("gpus", "acme"); d != 2 || hold.Err() != nil {
			t.Fatalf("after a broken stream: service holds %d, hold err %v; want 2, nil", d, hold.Err())
		}
		if got := metric(t, reg, "sluice_quota_client_session_events_total", "event", "reconnected"); got != 1 {
			t.Errorf("reconnected = %v, want 1", got)
		}
		if err := hold.Release(ctx, 2); err != nil {
			t.Fatal(err)
		}
		if h.opened.Load() != 1 {
			t.Errorf("sessions opened = %d, want 1", h.opened.Load())
		}
	})
}

// TestSessionLost: when the service ends the session (its keep-alive
// stream broke; its ttl passed), the client says so — the holds' Err, the
// callback, a running Do's context — and the next reserve opens a new
// session.
func TestSessionLost(t *testing.T) {
	tests := []struct {
		name string
		end  func(h *charon, id string)
	}{
		{name: "stream broken", end: func(h *charon, _ string) { h.breakStreams() }},
		{name: "closed by the service", end: func(h *charon, id string) { _, _ = h.copies.Close(t.Context(), time.Now(), id) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newCharon(t)
				hc := startCharonPipe(t, h)
				var lost []string
				var lostErr error
				var mu sync.Mutex
				c, reg := newClient(t, "limits.test:1", limits.WithHTTPClient(hc()), limits.WithSessionTTL(3*time.Second),
					limits.WithSessionLost(func(id string, err error) {
						mu.Lock()
						defer mu.Unlock()
						lost, lostErr = append(lost, id), err
					}))
				ctx := context.Background()
				hold, err := c.ReserveCopies(ctx, "gpus", "acme", 2, 0, 0)
				if err != nil {
					t.Fatal(err)
				}
				id := hold.Session()
				var cause error
				done := make(chan error)
				go func() {
					done <- hold.Do(ctx, func(ctx context.Context) error {
						<-ctx.Done()
						cause = context.Cause(ctx)
						return nil
					})
				}()
				synctest.Wait()
				tc.end(h, id)
				err = <-done
				if !errors.Is(cause, limits.ErrSessionLost) || !errors.Is(err, limits.ErrSessionLost) {
					t.Errorf("Do's context cause %v, Do = %v; want ErrSessionLost", cause, err)
				}
				if !errors.Is(hold.Err(), limits.ErrSessionLost) || hold.Copies() != 0 {
					t.Errorf("hold: err %v, %d copies; want ErrSessionLost, 0", hold.Err(), hold.Copies())
				}
				synctest.Wait() // the callback's goroutine
				mu.Lock()
				if !slices.Equal(lost, []string{id}) || !errors.Is(lostErr, limits.ErrSessionLost) {
					t.Errorf("callback got %v, %v; want [%s], ErrSessionLost", lost, lostErr, id)
				}
				mu.Unlock()
				if _, d := h.held("gpus", "acme"); d != 0 {
					t.Errorf("service holds %d, want 0", d)
				}
				again, err := c.ReserveCopies(ctx, "gpus", "acme", 1, 0, 0)
				if err != nil || again.Session() == id || again.Session() == "" || h.opened.Load() != 2 {
					t.Fatalf("reserve after the loss: %v, session %q (lost %q), opened %d", err, again.Session(), id, h.opened.Load())
				}
				if got := metric(t, reg, "sluice_quota_client_session_events_total", "event", "lost"); got != 1 {
					t.Errorf("lost = %v, want 1", got)
				}
			})
		})
	}
}

// TestSessionLostReserveReopens: a reserve that finds its session gone
// (before the keep-alive noticed) opens a new one and asks again.
func TestSessionLostReserveReopens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newCharon(t)
		hc := startCharonPipe(t, h)
		h.keepOnBreak.Store(true)
		c, _ := newClient(t, "limits.test:1", limits.WithHTTPClient(hc()), limits.WithSessionTTL(time.Hour))
		ctx := context.Background()
		first, err := c.ReserveCopies(ctx, "gpus", "acme", 1, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if _, err := h.copies.Close(ctx, time.Now(), first.Session()); err != nil { // the keep-alive renews only every 20 min
			t.Fatal(err)
		}
		second, err := c.ReserveCopies(ctx, "gpus", "acme", 1, 0, 0)
		if err != nil || second.Session() == first.Session() || h.opened.Load() != 2 {
			t.Fatalf("reserve: %v, session %q (first %q), opened %d", err, second.Session(), first.Session(), h.opened.Load())
		}
		if !errors.Is(first.Err(), limits.ErrSessionLost) {
			t.Errorf("first hold: %v, want ErrSessionLost", first.Err())
		}
	})
}

// TestSessionUnreachable: a client cut off from the service for longer
// than its session's ttl loses the session.
func TestSessionUnreachable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newCharon(t)
		hc := startCharonPipe(t, h)
		h.keepOnBreak.Store(true)
		c, _ := newClient(t, "limits.test:1", limits.WithHTTPClient(hc()), limits.WithSessionTTL(5*time.Second))
		hold, err := c.ReserveCopies(context.Background(), "gpus", "acme", 1, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		h.down.Store(int32(connect.CodeUnavailable)) // keep-alives and new streams fail
		h.breakStreams()
		time.Sleep(4 * time.Second)
		if hold.Err() != nil {
			t.Fatalf("lost before the ttl: %v", hold.Err())
		}
		time.Sleep(2 * time.Second)
		if !errors.Is(hold.Err(), limits.ErrSessionLost) {
			t.Fatalf("after the ttl: %v, want ErrSessionLost", hold.Err())
		}
	})
}

// TestOneSessionForConcurrentCalls: concurrent first reserves share one
// session.
func TestOneSessionForConcurrentCalls(t *testing.T) {
	h := newCharon(t)
	c, _ := newClient(t, startCharon(t, h))
	var wg sync.WaitGroup
	ids := make([]string, 20)
	for i := range ids {
		wg.Go(func() {
			hold, err := c.ReserveCopies(context.Background(), "open/things", fmt.Sprint("d", i), 1, 0, 0)
			if err != nil {
				t.Error(err)
				return
			}
			ids[i] = hold.Session()
		})
	}
	wg.Wait()
	distinct := slices.Compact(ids)
	if h.opened.Load() != 1 || len(distinct) != 1 || distinct[0] == "" {
		t.Errorf("sessions opened %d, ids %v; want one", h.opened.Load(), distinct)
	}
}

// TestConcurrentReservesGlobalLimit: 200 concurrent reserves from 4
// clients against a global limit of 5 are granted 5 copies in all; the
// service never holds more.
func TestConcurrentReservesGlobalLimit(t *testing.T) {
	h := newCharon(t)
	addr := startCharon(t, h)
	clients := make([]*limits.Client, 4)
	for i := range clients {
		clients[i], _ = newClient(t, addr)
	}
	var granted, peak atomic.Int64
	var wg sync.WaitGroup
	holds := make(chan *limits.Hold, 200)
	for i := range 200 {
		wg.Go(func() {
			hold, err := clients[i%4].ReserveCopies(context.Background(), "seats", fmt.Sprint("d", i%7), 1, 0, 0)
			if errors.As(err, new(*limits.OverLimitError)) {
				return
			}
			if err != nil || hold.Degraded() {
				t.Error(hold, err)
				return
			}
			granted.Add(1)
			holds <- hold
			if g, _ := h.held("seats", ""); g > peak.Load() {
				peak.Store(g)
			}
		})
	}
	wg.Wait()
	close(holds)
	if granted.Load() != 5 || peak.Load() > 5 {
		t.Errorf("granted %d, service peak %d; want 5, ≤ 5", granted.Load(), peak.Load())
	}
	for hold := range holds {
		if err := hold.Release(context.Background(), 1); err != nil {
			t.Error(err)
		}
	}
	if g, _ := h.held("seats", ""); g != 0 {
		t.Errorf("after the releases: %d held", g)
	}
}

// TestSessionLostFoundByRelease: a Release that finds its session gone
// reports the loss; the callback may use the hold (it runs on its own
// goroutine: no deadlock on the hold's lock).
func TestSessionLostFoundByRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newCharon(t)
		hc := startCharonPipe(t, h)
		var hold *limits.Hold
		inCallback := make(chan error, 1)
		c, _ := newClient(t, "limits.test:1", limits.WithHTTPClient(hc()), limits.WithSessionTTL(time.Hour),
			limits.WithSessionLost(func(string, error) { inCallback <- hold.Release(context.Background(), 1) }))
		ctx := context.Background()
		var err error
		hold, err = c.ReserveCopies(ctx, "gpus", "acme", 2, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if _, err := h.copies.Close(ctx, time.Now(), hold.Session()); err != nil { // the keep-alive renews only every 20 min
			t.Fatal(err)
		}
		if err := hold.Release(ctx, 1); !errors.Is(err, limits.ErrSessionLost) {
			t.Errorf("Release: %v, want ErrSessionLost", err)
		}
		if err := <-inCallback; !errors.Is(err, limits.ErrSessionLost) {
			t.Errorf("Release in the callback: %v, want ErrSessionLost", err)
		}
	})
}
