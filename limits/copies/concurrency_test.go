package copies

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// 200 goroutines reserving against a global limit of 5 never hold more
// than 5 at once, while others expire, snapshot and hand copies over by
// transfer and seize. Run with -race.
func TestConcurrentReserves(t *testing.T) {
	const workers, rounds, limit = 200, 50, 5
	e, err := New(&Config{Resources: map[string]Resource{
		"sandboxes": {DomainLimit: 3, GlobalLimit: limit, Groups: []Group{{Name: "odd", Limit: 2, Domains: []string{"d1", "d3", "d5", "d7"}}}},
	}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var clock atomic.Int64
	clock.Store(t0.UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Add(1)) }
	var inUse, most, granted, rejected atomic.Int64
	domains := []string{"d0", "d1", "d2", "d3", "d4", "d5", "d6", "d7"}
	handoff := make(chan string, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			s, err := e.Open(now(), time.Hour)
			if err != nil {
				t.Error(err)
				return
			}
			defer e.Close(t.Context(), now(), s.ID)
			dom := domains[w%len(domains)]
			for i := range rounds {
				r, err := e.Reserve(t.Context(), now(), s.ID, "sandboxes", dom, 1, 0)
				if err != nil {
					t.Error(err)
					return
				}
				if r.Granted == 0 {
					rejected.Add(1)
					continue
				}
				granted.Add(1)
				n := inUse.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				if r.GlobalHolds > limit {
					t.Errorf("%d held", r.GlobalHolds)
				}
				time.Sleep(20 * time.Microsecond) // use the copy
				groups := make([]string, len(r.Groups))
				for j, g := range r.Groups {
					groups[j] = g.Name
				}
				if i%10 == 9 {
					// Hand the copy to whoever seizes it; it stays counted.
					inUse.Add(-1)
					tr, err := e.Transfer(t.Context(), now(), s.ID, "sandboxes", dom, 1, groups, time.Minute)
					if err != nil {
						t.Error(err)
						return
					}
					handoff <- tr.ID
					continue
				}
				inUse.Add(-1)
				if err := e.Release(t.Context(), now(), s.ID, "sandboxes", dom, 1, groups); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	done := make(chan struct{})
	var side sync.WaitGroup
	side.Go(func() {
		s, _ := e.Open(now(), time.Hour)
		for {
			select {
			case id := <-handoff:
				got, err := e.Seize(t.Context(), now(), s.ID, id)
				if err != nil {
					t.Error(err)
					continue
				}
				if err := e.Release(t.Context(), now(), s.ID, got.Resource, got.Domain, got.Copies, got.Groups); err != nil {
					t.Error(err)
				}
			case <-done:
				e.Close(t.Context(), now(), s.ID)
				return
			}
		}
	})
	side.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			e.Expire(t.Context(), now())
			snap := e.Snapshot()
			if err := consistent(snap); err != nil {
				t.Error(err)
			}
			if r := snap.Resources[0]; r.GlobalHolds > limit {
				t.Errorf("%d held", r.GlobalHolds)
			}
		}
	})
	wg.Wait()
	// Drain the hand-offs, then stop the side goroutines.
	for len(handoff) > 0 {
		time.Sleep(time.Millisecond)
	}
	close(done)
	side.Wait()
	if most.Load() > limit {
		t.Fatalf("%d held at once", most.Load())
	}
	if granted.Load() == 0 || granted.Load()+rejected.Load() != workers*rounds {
		t.Fatalf("granted %d, rejected %d", granted.Load(), rejected.Load())
	}
	r, _ := e.Resource("sandboxes")
	if st := e.Stats(); r.GlobalHolds != 0 || st.Sessions != 0 || st.Transfers != 0 || st.Released != uint64(granted.Load()) {
		t.Fatalf("at the end: %+v %+v; granted %d", r, st, granted.Load())
	}
	t.Logf("granted %d, rejected %d, at most %d at once", granted.Load(), rejected.Load(), most.Load())
}
