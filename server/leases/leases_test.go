package leases_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	v1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/lease"
	"github.com/sluice-rl/sluice/resources"
	"github.com/sluice-rl/sluice/server/capacity"
	"github.com/sluice-rl/sluice/server/leases"
)

func service(t *testing.T) *capacity.Service {
	t.Helper()
	repo, err := resources.Parse([]byte(`
resources:
  - identifier_glob: r
    capacity: 100
    algorithm: {kind: FAIR_SHARE, lease_length: 60, refresh_interval: 30, learning_mode_duration: 0}
`))
	if err != nil {
		t.Fatal(err)
	}
	return capacity.New(capacity.Options{ID: "s", Config: repo, Logger: testutil.Logger()})
}

// watch runs one Watch in the background and returns its messages and its
// end.
func watch(ctx context.Context, s *leases.Service, holder string) (<-chan *v1.WatchResponse, <-chan error) {
	msgs := make(chan *v1.WatchResponse, 100)
	done := make(chan error, 1)
	go func() {
		done <- s.Stream(ctx, &v1.WatchRequest{HolderId: holder}, func(m *v1.WatchResponse) error {
			msgs <- m
			return nil
		})
	}()
	return msgs, done
}

func next[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatal("nothing came")
	}
	panic("unreachable")
}

func TestWatch(t *testing.T) {
	c := service(t)
	s := leases.New(c)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	msgs, done := watch(ctx, s, "b")
	if m := next(t, msgs); len(m.GetLeases()) != 0 {
		t.Fatalf("first message %v, want empty", m)
	}
	// a takes everything, b (watching) gets nothing; when a leaves, b's
	// lease comes on the stream.
	c.GetCapacity(ctx, capacityRequest("a", 100))
	c.GetCapacity(ctx, capacityRequest("b", 100))
	c.ReleaseCapacity(ctx, releaseRequest("a"))
	m := next(t, msgs)
	if len(m.GetLeases()) != 1 || m.GetLeases()[0].GetResourceId() != "r" || m.GetLeases()[0].GetCapacity() != 100 || m.GetLeases()[0].GetSequence() == 0 {
		t.Fatalf("pushed %v, want r: 100 with a sequence", m)
	}
	// A second watch of b replaces the first, which ends Unavailable.
	msgs2, done2 := watch(ctx, s, "b")
	next(t, msgs2)
	if err := next(t, done); status.Code(err) != codes.Unavailable {
		t.Fatalf("replaced watch ended with %v, want Unavailable", err)
	}
	// Losing mastership ends it too; a non-master refuses.
	c.SetMastership(false, "other:1")
	if err := next(t, done2); status.Code(err) != codes.Unavailable {
		t.Fatalf("watch on a lost master ended with %v, want Unavailable", err)
	}
	_, done3 := watch(ctx, s, "b")
	if err := next(t, done3); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("watch on a non-master: %v, want FailedPrecondition", err)
	}
	_, done4 := watch(ctx, s, "")
	if err := next(t, done4); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("empty holder: %v, want InvalidArgument", err)
	}
}

// A lease a watcher cannot take (its holder fell behind) is not recorded:
// the server never counts capacity as held that its holder was not told
// of.
func TestWatchLeaseNotTaken(t *testing.T) {
	c := service(t)
	ended := make(chan struct{})
	cancel, err := c.Watch("b", &capacity.Watcher{
		Deliver: func(string, lease.Grant) bool { return false },
		Stop:    func() { close(ended) },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cancel()
	ctx := context.Background()
	c.GetCapacity(ctx, capacityRequest("a", 100))
	c.GetCapacity(ctx, capacityRequest("b", 100))
	c.ReleaseCapacity(ctx, releaseRequest("a"))
	st, err := c.Status("r")
	if err != nil {
		t.Fatal(err)
	}
	if st.SumHas != 0 {
		t.Fatalf("Σ has %v after an undelivered push, want 0", st.SumHas)
	}
	select {
	case <-ended:
		t.Fatal("the service stopped a watcher that refused a lease (the watcher decides)")
	default:
	}
}

// A draining server ends every watch and refuses new ones, so that its
// listener is not held open by streams until the grace ends.
func TestWatchEndsOnDrain(t *testing.T) {
	c := service(t)
	s := leases.New(c)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	msgs, done := watch(ctx, s, "b")
	next(t, msgs)
	c.EndWatches()
	if err := next(t, done); status.Code(err) != codes.Unavailable {
		t.Fatalf("watch on a draining server ended with %v, want Unavailable", err)
	}
	_, done2 := watch(ctx, s, "b")
	if err := next(t, done2); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("new watch on a draining server: %v, want FailedPrecondition", err)
	}
}
