package sessions

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	v1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/internal/testutil/fixture"
	"github.com/sluice-rl/sluice/limits/copies"
)

// fleetModel is a model of the shared copy log's learning mode on one
// resource (limits/redis.CopyLog: copies_learn.lua), for the virtual-time
// tests of readiness: no record yet (a new fleet), then a learning period
// that waits for the members live when it started, each leaving it with
// its first Learn, or runs out after period. (The log on a real Redis is
// tested in limits/redis and fleet.)
type fleetModel struct {
	mu      sync.Mutex
	members []string
	period  time.Duration
	record  bool
	waiting map[string]bool
	until   time.Time
}

// learning returns the time left of the period, now.
func (m *fleetModel) learning() time.Duration {
	if len(m.waiting) == 0 {
		return 0
	}
	return max(0, time.Until(m.until))
}

// memberLog is one member's view of a fleetModel: a copies.Log granting
// every reserve outside the learning period (counts are not modelled).
type memberLog struct {
	m     *fleetModel
	epoch string
}

func (l *memberLog) learn(holding bool) time.Duration {
	if !l.m.record {
		l.m.record = true
		l.m.waiting = map[string]bool{}
		for _, e := range l.m.members {
			if e != l.epoch || holding {
				l.m.waiting[e] = true
			}
		}
		l.m.until = time.Now().Add(l.m.period)
	} else if !holding {
		delete(l.m.waiting, l.epoch)
	}
	return l.m.learning()
}

func (l *memberLog) Reserve(_ context.Context, q copies.LogReserve) (copies.LogCounts, error) {
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	left := l.m.learning()
	if !l.m.record {
		left = l.learn(q.Holding)
	}
	if left > 0 {
		return copies.LogCounts{}, fmt.Errorf("model: %w for %v more", copies.ErrLearning, left)
	}
	return copies.LogCounts{Granted: q.Copies, DomainHolds: q.Copies, GlobalHolds: q.Copies, GroupHolds: make([]int64, len(q.Groups))}, nil
}

func (l *memberLog) Learn(_ context.Context, checks []copies.LearnCheck) ([]time.Duration, error) {
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	left := make([]time.Duration, len(checks))
	for i := range checks {
		left[i] = l.learn(false) // holds are written at once in the model
	}
	return left, nil
}

func (l *memberLog) Release(context.Context, []copies.Hold) error { return nil }
func (l *memberLog) Stage(context.Context, string, string, copies.Hold, time.Duration) (time.Time, error) {
	return time.Time{}, copies.ErrUnavailable
}
func (l *memberLog) Seize(context.Context, string) (copies.Hold, error) {
	return copies.Hold{}, copies.ErrUnknownTransfer
}
func (l *memberLog) ExpireTransfers(context.Context) ([]copies.Ended, error) { return nil, nil }
func (l *memberLog) Restore(context.Context, string, []copies.Hold) error    { return nil }
func (l *memberLog) Lost(context.Context, []string) ([]string, error)        { return nil, nil }
func (l *memberLog) Epoch() string                                           { return l.epoch }

// TestReadyNewFleet, on virtual time: a new fleet of three members whose
// engines are unfenced (their fleet epochs) at 0, 30 ms and 70 ms, Run
// reconciling each. None is ready before it has looked at the resource's
// learning mode, none is ready while its Reserves would be refused, and
// each is ready, and its Reserve granted, within 2 × learnEvery of the
// last member's epoch (each looks within learnEvery of getting its epoch,
// and sees the period end within learnEvery of the last look): the
// learning period the first look started (LearningPeriod, 3 s here) ends
// as soon as every member has looked, not when it runs out. With a member
// that never looks (it died), the fleet is ready within learnEvery of the
// period's end (the period starting by the last member's epoch).
func TestReadyNewFleet(t *testing.T) {
	const period = 3 * time.Second
	for _, tc := range []struct {
		name    string
		members []string // the fleet's members; the first three run
		within  time.Duration
	}{
		{"every member looks", []string{"e0", "e1", "e2"}, 70*time.Millisecond + 2*learnEvery},
		{"a member died", []string{"e0", "e1", "e2", "dead"}, 70*time.Millisecond + period + learnEvery},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				model := &fleetModel{members: tc.members, period: period}
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				var services []*Service
				var sessions []string
				var wg sync.WaitGroup
				for _, epoch := range tc.members[:3] {
					s, err := New(Options{Config: fixture.Sandboxes(), Logger: testutil.Logger(), Log: &memberLog{m: model, epoch: epoch}})
					if err != nil {
						t.Fatal(err)
					}
					if ok, why := s.Ready(); ok {
						t.Fatalf("%s ready while fenced (no epoch)", epoch)
					} else {
						t.Logf("%s before its epoch: %s", epoch, why)
					}
					services = append(services, s)
					wg.Go(func() { s.Run(ctx) })
				}
				ready := make([]time.Duration, len(services))
				for i, at := range []time.Duration{0, 30 * time.Millisecond, 70 * time.Millisecond} {
					time.Sleep(time.Until(start.Add(at)))
					services[i].Engine().Unfence()
					r, err := services[i].OpenSession(ctx, &v1.OpenSessionRequest{})
					if err != nil {
						t.Fatal(err)
					}
					sessions = append(sessions, r.GetSessionId())
				}
				for time.Since(start) < period+time.Second {
					for i, s := range services {
						ok, why := s.Ready()
						res, err := s.Reserve(ctx, &v1.ReserveRequest{SessionId: sessions[i], Resource: "cookbook/sandboxes", Domain: "globex", Copies: 1})
						switch {
						case ok && err != nil:
							t.Fatalf("%s ready at %v while its Reserve fails: %v", tc.members[i], time.Since(start), err)
						case !ok && err != nil && status.Code(err) != codes.Unavailable:
							t.Fatalf("%s: Reserve: %v, want granted or Unavailable (%s)", tc.members[i], err, why)
						case err == nil:
							if res.GetGranted() != 1 {
								t.Fatalf("%s: Reserve: %v", tc.members[i], res)
							}
							if _, err := s.Release(ctx, &v1.ReleaseRequest{SessionId: sessions[i], Resource: "cookbook/sandboxes", Domain: "globex", Copies: 1}); err != nil {
								t.Fatal(err)
							}
						}
						if ok && ready[i] == 0 {
							ready[i] = time.Since(start)
						}
					}
					// Not a divisor of learnEvery: a look (Reconcile) that
					// finds a Reserve in flight leaves the resource to the
					// next look, and on virtual time the two would meet at
					// every look.
					time.Sleep(7 * time.Millisecond)
				}
				for i, at := range ready {
					if at == 0 || at > tc.within {
						t.Errorf("%s ready at %v (0: never), want within %v", tc.members[i], at, tc.within)
					}
				}
				t.Logf("ready at %v (virtual time; learning period %v)", ready, period)
				cancel()
				wg.Wait()
			})
		})
	}
}
