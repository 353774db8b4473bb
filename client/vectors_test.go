package client_test

import (
	"context"
	"errors"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	pb "github.com/sluice-rl/sluice/api/doorman"
	"github.com/sluice-rl/sluice/api/doorman/doormanconnect"
	"github.com/sluice-rl/sluice/client"
	"github.com/sluice-rl/sluice/client/limits"
	"github.com/sluice-rl/sluice/clients/vectors"
	"github.com/sluice-rl/sluice/internal/hooks"
	"github.com/sluice-rl/sluice/internal/refresh"
	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/internal/watch"
)

// scripted is the server of clients/vectors/refresh.json: it answers every
// resource of a GetCapacity with the case's lease for it, and records
// when each request came (seconds since the epoch's t = 0) with the wants
// it carried. fail makes every request fail (Unavailable) instead.
type scripted struct {
	doormanconnect.CapacityClient // nil: the methods a client does not call
	clock                         *testutil.Clock
	epoch                         time.Time
	leases                        map[string]vectors.ServerLease
	fail                          bool

	mu   sync.Mutex
	reqs []vectors.RefreshRequest
}

func (s *scripted) GetCapacity(_ context.Context, req *connect.Request[pb.GetCapacityRequest]) (*connect.Response[pb.GetCapacityResponse], error) {
	now := s.clock.Now()
	if s.fail {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("down"))
	}
	rec := vectors.RefreshRequest{At: now.Sub(s.epoch).Seconds(), Wants: map[string]float64{}}
	resp := &pb.GetCapacityResponse{}
	for _, rr := range req.Msg.GetResource() {
		id := rr.GetResourceId()
		rec.Wants[id] = rr.GetWants()
		l, ok := s.leases[id]
		if !ok {
			return nil, connect.NewError(connect.CodeNotFound, errors.New("no lease scripted for "+id))
		}
		resp.Response = append(resp.Response, &pb.ResourceResponse{
			ResourceId: proto.String(id),
			Gets: &pb.Lease{
				ExpiryTime:      proto.Int64(now.Unix() + l.LeaseLength), // floor(epoch + t) + lease_length
				RefreshInterval: proto.Int64(l.RefreshInterval),
				Capacity:        proto.Float64(l.Capacity),
			},
			SafeCapacity: l.SafeCapacity,
		})
	}
	s.mu.Lock()
	s.reqs = append(s.reqs, rec)
	s.mu.Unlock()
	return connect.NewResponse(resp), nil
}

func (s *scripted) ReleaseCapacity(context.Context, *connect.Request[pb.ReleaseCapacityRequest]) (*connect.Response[pb.ReleaseCapacityResponse], error) {
	return connect.NewResponse(&pb.ReleaseCapacityResponse{}), nil
}

func (s *scripted) requests() []vectors.RefreshRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.reqs)
}

// TestRefreshVectors runs clients/vectors/refresh.json — the refresh
// planner every client shares — on a client stepped by hand on a fake
// clock (hooks.Client.Manual), as the file's schema says: at each time
// visited, the events, then one step, then the capacity checks; the next
// time is the earliest of what the step asked, the next event and the
// next check.
//
// Source: doorman-design.md, "Client operation", "Client library",
// "Optimistic, pessimistic and safe mode operation".
func TestRefreshVectors(t *testing.T) {
	var v vectors.Refresh
	if err := vectors.Read(vectors.RefreshFile, &v); err != nil {
		t.Fatal(err)
	}
	epoch := time.Unix(v.Epoch, 0)
	for _, c := range v.Cases {
		t.Run(c.Name, func(t *testing.T) {
			mode, err := client.ParseMode(c.Mode)
			if err != nil {
				t.Fatal(err)
			}
			clock := testutil.NewClock(epoch)
			srv := &scripted{clock: clock, epoch: epoch, leases: c.Server}
			cl := clientOf(t, srv, clock, client.WithMode(mode), client.WithID("vectors"))
			handles := map[string]*client.Resource{}
			events, checks := c.Events, c.Capacity
			at := 0.0
			for steps := 0; ; steps++ {
				if steps > 10_000 {
					t.Fatalf("still stepping at %v s", at)
				}
				for len(events) > 0 && events[0].At == at {
					e := events[0]
					events = events[1:]
					switch e.Op {
					case "add":
						h, err := cl.Resource(e.Resource, e.Wants)
						if err != nil {
							t.Fatalf("at %v s: add %s: %v", at, e.Resource, err)
						}
						handles[e.Resource] = h
					case "set_wants":
						if err := handles[e.Resource].Ask(e.Wants); err != nil {
							t.Fatalf("at %v s: set_wants %s: %v", at, e.Resource, err)
						}
					case "release":
						if err := handles[e.Resource].Release(context.Background()); err != nil {
							t.Fatalf("at %v s: release %s: %v", at, e.Resource, err)
						}
					default:
						t.Fatalf("unknown op %q", e.Op)
					}
				}
				wait := step(cl).Seconds()
				for len(checks) > 0 && checks[0].At == at {
					k := checks[0]
					checks = checks[1:]
					if got := handles[k.Resource].Capacity(); got != float64(k.Capacity) {
						t.Errorf("capacity of %s at %v s = %v, want %v", k.Resource, at, got, float64(k.Capacity))
					}
				}
				next := at + wait
				if len(events) > 0 {
					next = min(next, events[0].At)
				}
				if len(checks) > 0 {
					next = min(next, checks[0].At)
				}
				if next > c.Until {
					break
				}
				clock.Advance(vectors.Duration(next) - vectors.Duration(at))
				at = next
			}
			if len(events) > 0 || len(checks) > 0 {
				t.Errorf("events %v and checks %v never came", events, checks)
			}
			got := srv.requests()
			same := len(got) == len(c.Requests)
			for i := 0; same && i < len(got); i++ {
				same = got[i].At == c.Requests[i].At && maps.Equal(got[i].Wants, c.Requests[i].Wants)
			}
			if !same {
				t.Errorf("requests:\n got  %v\n want %v", got, c.Requests)
			}
		})
	}
}

// constSource is a random source that always answers the same value.
type constSource uint64

func (s constSource) Uint64() uint64 { return uint64(s) }

// Jitter sources for internal/retry.Backoff's equal jitter: ones draws the
// bottom of its range (d/2), top the top (d), as retry.json's u = 0 and 1.
const (
	ones = constSource(1)
	top  = constSource(math.MaxUint64)
)

// TestBackoffVectors runs the "leases" part of clients/vectors/retry.json:
// the backoff after failed requests, on the rule the client and its push
// stream use (refresh.Retry between MinBackoff and MaxBackoff): each end
// of the jitter exactly, and draws of a seeded source within it, reaching
// both ends' tenths.
//
// Source: doorman-design.md, "Client library" (retries).
func TestBackoffVectors(t *testing.T) {
	var v vectors.Retry
	if err := vectors.Read(vectors.RetryFile, &v); err != nil {
		t.Fatal(err)
	}
	l := v.Leases
	for _, b := range []struct {
		name     string
		min, max time.Duration
	}{
		{"client", client.MinBackoff, client.MaxBackoff},
		{"watch", watch.MinBackoff, watch.MaxBackoff},
	} {
		if b.min != vectors.Duration(l.MinBackoff) || b.max != vectors.Duration(l.MaxBackoff) {
			t.Errorf("%s backs off within [%v, %v], retry.json [%v s, %v s]", b.name, b.min, b.max, l.MinBackoff, l.MaxBackoff)
		}
	}
	// after returns the delay after k.Failures failures with jitter from src.
	after := func(failures int, interval float64, src rand.Source) float64 {
		r := refresh.Retry{Min: client.MinBackoff, Max: client.MaxBackoff, Rand: rand.New(src)}
		if interval > 0 {
			r.Succeeded(vectors.Duration(interval))
		}
		var d time.Duration
		for range failures {
			d = r.Failed()
		}
		return d.Seconds()
	}
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9 }
	for _, k := range l.Cases {
		if got := after(k.Failures, k.Interval, ones); !near(got, k.Min) {
			t.Errorf("%d failures, interval %v s, bottom draw: %v s, want %v s", k.Failures, k.Interval, got, k.Min)
		}
		if got := after(k.Failures, k.Interval, top); !near(got, k.Max) {
			t.Errorf("%d failures, interval %v s, top draw: %v s, want %v s", k.Failures, k.Interval, got, k.Max)
		}
		src := rand.NewPCG(uint64(k.Failures), math.Float64bits(k.Interval))
		lo, hi := math.Inf(1), math.Inf(-1)
		for range 200 {
			d := after(k.Failures, k.Interval, src)
			if d < k.Min-1e-9 || d > k.Max+1e-9 {
				t.Fatalf("%d failures, interval %v s: %v s, want in [%v s, %v s]", k.Failures, k.Interval, d, k.Min, k.Max)
			}
			lo, hi = min(lo, d), max(hi, d)
		}
		if tenth := (k.Max - k.Min) / 10; lo > k.Min+tenth || hi < k.Max-tenth {
			t.Errorf("%d failures, interval %v s: 200 draws in [%v s, %v s], want both tenths of [%v s, %v s] reached", k.Failures, k.Interval, lo, hi, k.Min, k.Max)
		}
	}
}

// TestBackoffVectorsThroughTheClient: a client whose server fails steps
// again after the delays of retry.json's uncapped cases (no answer yet),
// so the client does use that rule.
func TestBackoffVectorsThroughTheClient(t *testing.T) {
	var v vectors.Retry
	if err := vectors.Read(vectors.RetryFile, &v); err != nil {
		t.Fatal(err)
	}
	for _, k := range v.Leases.Cases {
		if k.Interval != 0 {
			continue
		}
		for _, end := range []struct {
			src  constSource
			want float64
		}{{ones, k.Min}, {top, k.Max}} {
			clock := newFakeClock()
			srv := &scripted{clock: clock, fail: true}
			h := &hooks.Client{Dial: func(string) doormanconnect.CapacityClient { return srv }, Manual: true, Rand: rand.New(end.src)}
			c, err := client.New("s:1", client.WithHooks(h), client.WithClock(clock.Now), client.WithLogger(quiet))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Resource("a", 1); err != nil {
				t.Fatal(err)
			}
			var d time.Duration
			for range k.Failures {
				d = h.Step(context.Background())
				clock.Advance(d)
			}
			if math.Abs(d.Seconds()-end.want) > 1e-9 {
				t.Errorf("after %d failed requests the client steps again in %v, want %v s", k.Failures, d, end.want)
			}
			_ = c.Close()
		}
	}
}

// TestConstantVectors: the Go values of clients/vectors/constants.json.
// A constant the file names for Go must be known here, and every one
// known here must be in the file.
func TestConstantVectors(t *testing.T) {
	var v vectors.Constants
	if err := vectors.Read(vectors.ConstantsFile, &v); err != nil {
		t.Fatal(err)
	}
	known := map[string]float64{
		"doorman.MinRequestInterval":    pb.MinRequestInterval.Seconds(),
		"client.ExpiryMargin":           client.ExpiryMargin.Seconds(),
		"client.DefaultRefreshInterval": client.DefaultRefreshInterval.Seconds(),
		"client.MinBackoff":             client.MinBackoff.Seconds(),
		"client.MaxBackoff":             client.MaxBackoff.Seconds(),
		"watch.MinBackoff":              watch.MinBackoff.Seconds(),
		"watch.MaxBackoff":              watch.MaxBackoff.Seconds(),
		"watch.Unsupported":             watch.Unsupported.Seconds(),
		"refresh.MaxRedirects":          refresh.MaxRedirects,
		"limits.DefaultBackoffUnit":     limits.DefaultBackoffUnit.Seconds(),
		"limits.DefaultSessionTTL":      limits.DefaultSessionTTL.Seconds(),
		"limits.DefaultCallTimeout":     limits.DefaultCallTimeout.Seconds(),
		"limits.MaxTokens":              limits.MaxTokens,
	}
	used := map[string]bool{}
	for _, c := range v.Constants {
		if c.Go == "" {
			continue
		}
		got, ok := known[c.Go]
		if !ok {
			t.Errorf("%s: Go's %s is not known to this test", c.Name, c.Go)
			continue
		}
		used[c.Go] = true
		if got != c.Value {
			t.Errorf("%s: Go's %s is %v, constants.json %v", c.Name, c.Go, got, c.Value)
		}
	}
	for name := range known {
		if !used[name] {
			t.Errorf("%s is not in constants.json", name)
		}
	}
}
