package lease

import (
	"runtime"
	"strconv"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/sluice-rl/sluice/algorithm"
)

// benchParams is the resource of ../shared/tools/doorman-bench: FAIR_SHARE,
// capacity 1000, leases of 600 s refreshed every 60 s, no learning mode,
// Doorman's 5 s between two requests of one client.
func benchParams() Params {
	return Params{
		Kind: algorithm.FairShare, Capacity: 1000,
		LeaseLength: 600 * time.Second, RefreshInterval: 60 * time.Second,
		MinRequestInterval: 5 * time.Second,
	}
}

// fillLikeServer records n clients ("c0", "c1", ...; wants 1..50) on r the
// way a server receives them: each id a string of its own, as a request
// decoded off the wire carries it, and decisions 50 µs apart (20 000 a
// second), so that the leases spread over many expiry seconds. It returns
// the time after the last decision.
func fillLikeServer(r *Resource, n int, now time.Time) time.Time {
	var buf []byte
	x := uint64(1)
	for i := 0; i < n; i++ {
		buf = strconv.AppendInt(append(buf[:0], 'c'), int64(i), 10)
		x = splitmix(x)
		r.Decide(now, Request{Client: string(buf), Priority: 1, Wants: float64(1 + x%50), Subclients: 1})
		now = now.Add(50 * time.Microsecond)
	}
	return now
}

// heapInUse returns the live heap after a full collection (bytes) and the
// number of live objects.
func heapInUse() (bytes, objects uint64) {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc, m.HeapObjects
}

// BenchmarkLeaseMemory reports what a resource holding 1 000 000 leases
// keeps in memory: live heap bytes per lease (B/lease) and heap objects per
// lease (objects/lease), ids included, after a full collection; a server's
// RSS is about twice the live heap at GOGC=100. It also reports the cost of
// a decision while the store fills (ns/fill). The load is doorman-bench's
// (fillLikeServer). Each iteration fills a fresh resource.
//
//	go test -run '^$' -bench LeaseMemory -benchtime 1x ./lease/
func BenchmarkLeaseMemory(b *testing.B) {
	const n = 1_000_000
	b.ReportAllocs()
	var perLease, objects, fill float64
	for b.Loop() {
		b.StopTimer()
		before, beforeObj := heapInUse()
		b.StartTimer()
		r := NewResource("r", benchParams(), t0.Add(-time.Hour))
		start := time.Now()
		fillLikeServer(r, n, t0)
		fill = float64(time.Since(start).Nanoseconds()) / n
		b.StopTimer()
		after, afterObj := heapInUse()
		if _, _, _, leases := r.Totals(); leases != n {
			b.Fatalf("%d leases, want %d", leases, n)
		}
		runtime.KeepAlive(r)
		perLease = float64(int64(after)-int64(before)) / n
		objects = float64(int64(afterObj)-int64(beforeObj)) / n
		b.StartTimer()
	}
	b.ReportMetric(perLease, "B/lease")
	b.ReportMetric(objects, "objects/lease")
	b.ReportMetric(fill, "ns/fill")
}

// The id table answers like a map through adds, removes (backward-shift
// deletion) and the byte arena's compactions.
func TestPropertyIDsMatchMap(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := newEntries()
		var tab ids
		want := map[string]int32{}
		steps := rapid.IntRange(1, 3000).Draw(t, "steps")
		for range steps {
			id := "client-" + strconv.Itoa(rapid.IntRange(0, 300).Draw(t, "id"))
			switch ei, ok := want[id]; {
			case ok && rapid.Bool().Draw(t, "remove"):
				tab.remove(&s, ei)
				s.release(ei)
				delete(want, id)
			case !ok:
				ei := s.add()
				tab.add(&s, id, ei)
				want[id] = ei
			}
			if tab.count != len(want) {
				t.Fatalf("%d ids, want %d", tab.count, len(want))
			}
		}
		for i := range 301 {
			id := "client-" + strconv.Itoa(i)
			if got := tab.find(&s, id); got != want[id] {
				t.Fatalf("find(%q) = %d, want %d", id, got, want[id])
			}
		}
	})
}

// Every index of an arena has an element of its own, and elements never
// move as the arena grows.
func TestArenaIndexes(t *testing.T) {
	a := arena[int64]{first: 2, last: 5}
	var ptrs []*int64
	for i := 1; i < 1000; i++ {
		j := a.add()
		if int(j) != i {
			t.Fatalf("add returned %d, want %d", j, i)
		}
		p := a.at(j)
		*p = int64(j)
		ptrs = append(ptrs, p)
	}
	for i, p := range ptrs {
		if *p != int64(i+1) || a.at(int32(i+1)) != p {
			t.Fatalf("element %d moved or was overwritten: holds %d", i+1, *p)
		}
	}
}
