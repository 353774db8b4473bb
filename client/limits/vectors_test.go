package limits_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc/codes"

	sluicev1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/client"
	"github.com/sluice-rl/sluice/client/limits"
	"github.com/sluice-rl/sluice/clients/vectors"
)

// arrivals records when each request of one RPC (the URL path's last
// element: "Allow", "Reserve") leaves a client, on the test's clock (a
// synctest bubble's: the pipe delivers it at once).
type arrivals struct {
	base   http.RoundTripper
	method string

	mu sync.Mutex
	at []time.Time
}

func (a *arrivals) RoundTrip(req *http.Request) (*http.Response, error) {
	if strings.HasSuffix(req.URL.Path, "/"+a.method) {
		a.mu.Lock()
		a.at = append(a.at, time.Now())
		a.mu.Unlock()
	}
	return a.base.RoundTrip(req)
}

func (a *arrivals) since(start time.Time) []float64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	var s []float64
	for _, t := range a.at {
		s = append(s, t.Sub(start).Seconds())
	}
	return s
}

// drawing returns the jitter source whose every draw is u.
func drawing(u float64) constSource { return constSource(uint64(u*(1<<53)) << 11) }

func readRetry(t *testing.T) vectors.CharonRetry {
	t.Helper()
	var v vectors.Retry
	if err := vectors.Read(vectors.RetryFile, &v); err != nil {
		t.Fatal(err)
	}
	return v.Charon
}

// TestCharonScheduleVectors runs the schedules of Charon's retry policy in
// clients/vectors/retry.json, on virtual time: Request ("api"/"strict"
// can never grant 3 tokens: REJECTED_TIMEOUT each time) and ReserveCopies
// (all 8 gpus held by another client: REJECTED_OVER_LIMIT each time) ask
// at the times of attempts_at, then end with the last rejection.
//
// Source: charon-paper.md, section 3.2.
func TestCharonScheduleVectors(t *testing.T) {
	for _, s := range readRetry(t).Schedules {
		t.Run(s.Name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newCharon(t)
				hc := startCharonPipe(t, h)
				method := map[string]string{"request": "Allow", "reserve_copies": "Reserve"}[s.Call]
				rec := &arrivals{base: hc().Transport, method: method}
				c, _ := newClient(t, "limits.test:1", limits.WithHTTPClient(&http.Client{Transport: rec}),
					limits.WithJitterSource(drawing(s.U)), limits.WithBackoffUnit(vectors.Duration(s.Unit)))
				ctx := context.Background()
				var attempts int
				var waited time.Duration
				var start time.Time
				switch s.Call {
				case "request":
					start = time.Now()
					_, err := c.Request(ctx, "api", "strict", 3, 0, vectors.Duration(s.MaxWait))
					var rej *limits.RejectedError
					if !errors.As(err, &rej) || rej.Status != sluicev1.AllowResponse_REJECTED_TIMEOUT {
						t.Fatalf("err = %v, want the last REJECTED_TIMEOUT", err)
					}
					attempts, waited = rej.Attempts, rej.Waited
				case "reserve_copies":
					other, _ := newClient(t, "limits.test:1", limits.WithHTTPClient(hc()))
					if _, err := other.ReserveCopies(ctx, "gpus", "acme", 8, 0, 0); err != nil {
						t.Fatal(err)
					}
					start = time.Now()
					_, err := c.ReserveCopies(ctx, "gpus", "initech", 1, 0, vectors.Duration(s.MaxWait))
					var over *limits.OverLimitError
					if !errors.As(err, &over) {
						t.Fatalf("err = %v, want the last REJECTED_OVER_LIMIT", err)
					}
					attempts, waited = over.Attempts, over.Waited
				default:
					t.Fatalf("unknown call %q", s.Call)
				}
				got := rec.since(start)
				if !equalSeconds(got, s.AttemptsAt) {
					t.Errorf("requests at %v s, want %v s", got, s.AttemptsAt)
				}
				last := s.AttemptsAt[len(s.AttemptsAt)-1]
				if attempts != len(s.AttemptsAt) || waited != vectors.Duration(last) || time.Since(start) != vectors.Duration(last) {
					t.Errorf("ended after %d attempts, waited %v, returned after %v; want %d, %v s",
						attempts, waited, time.Since(start), len(s.AttemptsAt), last)
				}
			})
		})
	}
}

func equalSeconds(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if vectors.Duration(a[i]) != vectors.Duration(b[i]) {
			return false
		}
	}
	return true
}

// TestCharonStatusVectors: Request asks again after the statuses
// retry.json retries, and ends at once on its final ones; every rejection
// status of AllowResponse is one or the other. (ReserveResponse has one
// rejection, REJECTED_OVER_LIMIT, which the schedules show retried.)
func TestCharonStatusVectors(t *testing.T) {
	ch := readRetry(t)
	if got, want := ch.RetriedStatuses["reserve_copies"], []string{sluicev1.ReserveResponse_REJECTED_OVER_LIMIT.String()}; !equalStrings(got, want) {
		t.Errorf("reserve_copies retries %v, want %v (ReserveResponse's rejections)", got, want)
	}
	classified := map[string]bool{}
	for _, tc := range []struct {
		statuses []string
		retried  bool
	}{{ch.RetriedStatuses["request"], true}, {ch.FinalStatuses["request"], false}} {
		for _, name := range tc.statuses {
			classified[name] = true
			st, ok := sluicev1.AllowResponse_Status_value[name]
			if !ok {
				t.Errorf("%s is no AllowResponse status", name)
				continue
			}
			t.Run(name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					h := newCharon(t)
					decorate := func(r *sluicev1.AllowResponse) { r.Status, r.Granted = sluicev1.AllowResponse_Status(st), 0 }
					h.decorate.Store(&decorate)
					c, _ := newClient(t, "limits.test:1", limits.WithHTTPClient(startCharonPipe(t, h)()), limits.WithJitterSource(jitterMid))
					_, err := c.Request(context.Background(), "api", "strict", 3, 0, 10*time.Second)
					var rej *limits.RejectedError
					if !errors.As(err, &rej) || rej.Status.String() != name {
						t.Fatalf("err = %v, want the rejection %s", err, name)
					}
					if retried := rej.Attempts > 1; retried != tc.retried {
						t.Errorf("%s: %d attempts, want retried %v", name, rej.Attempts, tc.retried)
					}
				})
			})
		}
	}
	for name, n := range sluicev1.AllowResponse_Status_value {
		if n > int32(sluicev1.AllowResponse_OK) && !classified[name] {
			t.Errorf("retry.json says nothing of the rejection %s", name)
		}
	}
}

func equalStrings(a, b []string) bool {
	return strings.Join(a, ",") == strings.Join(b, ",")
}

// TestErrorVectors runs clients/vectors/errors.json on Charon's calls:
// for every code the service may answer, Request raises a *ClientError
// carrying the code (and wrapping the sentinel named) for a caller's code,
// and fails open — granting its minimum by itself, or with fail-open off
// an error wrapping ErrUnavailable — for the others. The names are gRPC's
// (grpc-go's codes parse them), and the conditions' Go errors exist.
//
// Source: charon-paper.md, sections 3.1 (client errors) and 4.3
// (degraded modes).
func TestErrorVectors(t *testing.T) {
	var v vectors.Errors
	if err := vectors.Read(vectors.ErrorsFile, &v); err != nil {
		t.Fatal(err)
	}
	sentinels := map[string]error{
		"limits.ErrInvalidRequest":     limits.ErrInvalidRequest,
		"limits.ErrNotFound":           limits.ErrNotFound,
		"limits.ErrFailedPrecondition": limits.ErrFailedPrecondition,
	}
	for _, e := range v.Codes {
		t.Run(e.Code, func(t *testing.T) {
			var c codes.Code
			if err := c.UnmarshalJSON([]byte(`"` + e.Code + `"`)); err != nil || int(c) != e.Number {
				t.Fatalf("%s is gRPC's %v (%v), not number %d", e.Code, c, err, e.Number)
			}
			sentinel, ok := sentinels[e.Go]
			if e.Go != "" && !ok {
				t.Fatalf("Go's %s is not known to this test", e.Go)
			}
			synctest.Test(t, func(t *testing.T) {
				h := newCharon(t)
				hc := startCharonPipe(t, h)
				h.down.Store(int32(e.Number))
				open, _ := newClient(t, "limits.test:1", limits.WithHTTPClient(hc()))
				closed, _ := newClient(t, "limits.test:1", limits.WithHTTPClient(hc()), limits.WithFailOpen(false))
				ctx := context.Background()
				g, err := open.Request(ctx, "api", "strict", 1, 0, time.Second)
				errClosed := func() error { _, err := closed.Request(ctx, "api", "strict", 1, 0, time.Second); return err }()
				switch e.Charon {
				case "caller":
					var ce *limits.ClientError
					if !errors.As(err, &ce) || ce.Code != connect.Code(e.Number) {
						t.Fatalf("err = %v, want a *ClientError of %s", err, e.Code)
					}
					for name, s := range sentinels {
						if errors.Is(err, s) != (name == e.Go) {
							t.Errorf("errors.Is(err, %s) = %v", name, !(name == e.Go))
						}
					}
					if e.Go != "" && !errors.Is(errClosed, sentinel) {
						t.Errorf("with fail-open off: %v, want %s", errClosed, e.Go)
					}
				case "fail_open":
					if err != nil || g.Source != limits.FromDegraded || g.Granted != 1 {
						t.Errorf("Request = %+v, %v; want 1 granted by the client (failing open)", g, err)
					}
					if !errors.Is(errClosed, limits.ErrUnavailable) || connect.CodeOf(errClosed) != connect.Code(e.Number) {
						t.Errorf("with fail-open off: %v (code %v), want ErrUnavailable and %s", errClosed, connect.CodeOf(errClosed), e.Code)
					}
				default:
					t.Fatalf("charon %q", e.Charon)
				}
			})
		})
	}
	known := map[string]error{
		"client.ErrClosed":      client.ErrClosed,
		"limits.ErrClosed":      limits.ErrClosed,
		"limits.ErrSessionLost": limits.ErrSessionLost,
		"limits.OverLimitError": &limits.OverLimitError{},
	}
	for _, c := range v.Conditions {
		for _, name := range strings.Split(c.Go, ", ") {
			if known[name] == nil {
				t.Errorf("condition %s: Go's %s is not known to this test", c.Condition, name)
			}
		}
	}
	c, _ := newClient(t, "127.0.0.1:1")
	_ = c.Close()
	if _, err := c.Request(context.Background(), "api", "strict", 1, 0, 0); !errors.Is(err, limits.ErrClosed) {
		t.Errorf("Request on a closed client: %v, want limits.ErrClosed", err)
	}
}
