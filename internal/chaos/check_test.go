package chaos

import (
	"fmt"
	"math"
	"testing"
	"time"

	"pgregory.net/rapid"
)

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

func TestCheckBucket(t *testing.T) {
	grant := func(start, end int, n int64) Op {
		return Op{Start: ms(start), End: ms(end), N: n, Outcome: Granted}
	}
	for _, tc := range []struct {
		name      string
		ops       []Op
		violated  bool
		smallest  [2]int // ms
		worstExc  float64
		degraded  int64
		size, per float64
	}{
		{name: "empty", size: 5, per: 1, worstExc: -5},
		{name: "a burst of size", size: 5, per: 0, worstExc: 0,
			ops: []Op{grant(0, 1, 1), grant(0, 1, 1), grant(0, 1, 1), grant(0, 1, 2)}},
		{name: "one over size at once", size: 5, per: 0, violated: true, smallest: [2]int{0, 1}, worstExc: 1,
			ops: []Op{grant(0, 1, 3), grant(0, 1, 3)}},
		{name: "the refill allows more later", size: 2, per: 1, worstExc: -0.001,
			ops: []Op{grant(0, 1, 2), grant(1000, 1001, 1), grant(2000, 2001, 1)}},
		{name: "too soon after a burst", size: 2, per: 1, violated: true, smallest: [2]int{0, 501},
			ops: []Op{grant(0, 1, 2), grant(500, 501, 1), grant(900, 901, 1)}, worstExc: 2 - 0.901},
		{name: "only certain windows count", size: 1, per: 10, worstExc: 0,
			// Both happened within [0, 100ms] (bound 2), not certainly
			// within [50ms, 100ms] (bound 1.5): the first may have been
			// decided at 0.
			ops: []Op{grant(0, 100, 1), grant(50, 60, 1)}},
		{name: "degraded grants apart", size: 1, per: 0, worstExc: 0, degraded: 2,
			ops: []Op{grant(0, 1, 1), {Start: 0, End: 1, N: 5, Outcome: Granted, Degraded: true}, {Start: 2, End: 3, N: 5, Outcome: Granted, Degraded: true},
				{Start: 0, End: 1, N: 9, Outcome: Rejected}, {Start: 0, End: 1, N: 9, Outcome: Failed}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := CheckBucket(tc.ops, tc.size, tc.per)
			if c.Violated() != tc.violated {
				t.Fatalf("violated %v, want %v (worst %v)", c.Violated(), tc.violated, c.Worst)
			}
			if math.Abs(c.Worst.Excess()-tc.worstExc) > 1e-6 {
				t.Errorf("worst excess %v (%v), want %v", c.Worst.Excess(), c.Worst, tc.worstExc)
			}
			if c.Degraded != tc.degraded {
				t.Errorf("degraded %d, want %d", c.Degraded, tc.degraded)
			}
			if tc.violated && (c.Smallest.From != ms(tc.smallest[0]) || c.Smallest.To != ms(tc.smallest[1])) {
				t.Errorf("smallest window %v, want [%dms, %dms]", c.Smallest, tc.smallest[0], tc.smallest[1])
			}
		})
	}
}

// TestCheckBucketBruteForce compares CheckBucket with trying every window.
func TestCheckBucketBruteForce(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 30).Draw(t, "n")
		size := float64(rapid.IntRange(0, 6).Draw(t, "size"))
		rate := float64(rapid.IntRange(0, 20).Draw(t, "rate"))
		var ops []Op
		for i := range n {
			s := rapid.IntRange(0, 2000).Draw(t, "start")
			d := rapid.IntRange(0, 300).Draw(t, "latency")
			ops = append(ops, Op{Start: ms(s), End: ms(s + d), N: int64(rapid.IntRange(1, 3).Draw(t, "n")), Outcome: Granted, Worker: i})
		}
		worst, shortest := math.Inf(-1), time.Duration(-1)
		for _, a := range ops {
			for _, b := range ops {
				if b.End < a.Start {
					continue
				}
				var got int64
				for _, o := range ops {
					if o.Start >= a.Start && o.End <= b.End {
						got += o.N
					}
				}
				exc := float64(got) - size - rate*(b.End-a.Start).Seconds()
				worst = max(worst, exc)
				if exc > 1e-9 && (shortest < 0 || b.End-a.Start < shortest) {
					shortest = b.End - a.Start
				}
			}
		}
		c := CheckBucket(ops, size, rate)
		if math.Abs(c.Worst.Excess()-worst) > 1e-6 {
			t.Fatalf("worst excess %v (%v), brute force %v", c.Worst.Excess(), c.Worst, worst)
		}
		if (shortest >= 0) != c.Violated() {
			t.Fatalf("violated %v, brute force shortest %v", c.Violated(), shortest)
		}
		if c.Violated() {
			if got := c.Smallest.To - c.Smallest.From; got != shortest {
				t.Fatalf("smallest window %v, brute force length %v", c.Smallest, shortest)
			}
			if c.Smallest.Excess() <= 0 {
				t.Fatalf("smallest window %v does not exceed its bound", c.Smallest)
			}
		}
	})
}

func TestCheckCount(t *testing.T) {
	for _, tc := range []struct {
		name  string
		holds []Hold
		max   int64
	}{
		{"none", nil, 0},
		{"overlapping", []Hold{{N: 2, Acquired: ms(0), Released: ms(10)}, {N: 3, Acquired: ms(5), Released: ms(20)}}, 5},
		{"back to back", []Hold{{N: 2, Acquired: ms(0), Released: ms(10)}, {N: 3, Acquired: ms(10), Released: ms(20)}}, 3},
		{"still held at the end", []Hold{{N: 2, Acquired: ms(0)}, {N: 3, Acquired: ms(30), Released: ms(40)}}, 5},
		{"released before acquired: never certain", []Hold{{N: 9, Acquired: ms(10), Released: ms(5)}}, 0},
		{"degraded apart", []Hold{{N: 9, Acquired: ms(0), Released: ms(5), Degraded: true}, {N: 1, Acquired: ms(0), Released: ms(5)}}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if c := CheckCount(tc.holds, ms(100)); c.Max != tc.max {
				t.Errorf("max %d at %v, want %d", c.Max, c.At, tc.max)
			}
		})
	}
}

func TestMeanCount(t *testing.T) {
	holds := []Hold{
		{N: 2, Acquired: ms(0), Released: ms(1000)},
		{N: 4, Acquired: ms(500)}, // held to the end
		{N: 9, Acquired: ms(0), Released: ms(1000), Degraded: true},
	}
	for _, tc := range []struct {
		from, to int
		want     float64
	}{
		{0, 1000, 2 + 4*0.5},
		{1000, 2000, 4},
		{500, 1500, (2*0.5 + 4*1)},
		{2000, 2000, 0},
	} {
		if got := MeanCount(holds, ms(tc.from), ms(tc.to), ms(2000)); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("[%d, %d] ms: mean %v, want %v", tc.from, tc.to, got, tc.want)
		}
	}
}

func TestCheckOutlived(t *testing.T) {
	id := func(i int) string { return fmt.Sprintf("mid-%d", i) }
	polls := []rootLease{
		{At: ms(1000), Client: "mid-1", Expiry: 104},
		{At: ms(1000), Client: "mid-2", Expiry: 110},
		{At: ms(5000), Client: "mid-1", Expiry: 108},
	}
	for _, tc := range []struct {
		name                string
		answer              leaseAnswer
		outlived, unchecked int
	}{
		{"within its parent's", leaseAnswer{Server: 1, At: ms(1200), Expiry: 104}, 0, 0},
		{"beyond it", leaseAnswer{Server: 1, At: ms(1200), Expiry: 105}, 1, 0},
		{"another intermediate's lease does not count", leaseAnswer{Server: 1, At: ms(1200), Expiry: 110}, 1, 0},
		{"a renewal seen within the grace", leaseAnswer{Server: 1, At: ms(4500), Expiry: 108}, 0, 0},
		{"a renewal seen too late", leaseAnswer{Server: 1, At: ms(3000), Expiry: 108}, 1, 0},
		{"before any poll", leaseAnswer{Server: 2, At: ms(-2000), Expiry: 110}, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := CheckOutlived([]leaseAnswer{tc.answer}, polls, id)
			if c.Outlived != tc.outlived || c.Unchecked != tc.unchecked {
				t.Errorf("outlived %d, unchecked %d; want %d, %d", c.Outlived, c.Unchecked, tc.outlived, tc.unchecked)
			}
			if (c.First != nil) != (tc.outlived > 0) {
				t.Errorf("first %v", c.First)
			}
		})
	}
}

// TestClockSkewUntil: a client holds its lease until its own clock reads
// the expiry, across the steps of its skew.
func TestClockSkewUntil(t *testing.T) {
	var c clockSkew
	c.set(ms(3000), -3*time.Second) // 3 s behind from 3 s on
	c.set(ms(8000), 0)              // healed at 8 s
	for _, tc := range []struct {
		from, e, want int
	}{
		{0, 2000, 2000},    // before the skew
		{0, 4000, 7000},    // behind from 3 s: reads 4 s at 7 s
		{0, 6000, 8000},    // would read 6 s at 9 s, but the clock steps forward at 8 s
		{4000, 9000, 9000}, // after the heal
		{4000, 1000, 4000}, // already ended
		{9000, 8500, 9000}, // already ended, after the heal
	} {
		if got := c.until(ms(tc.from), ms(tc.e)); got != ms(tc.want) {
			t.Errorf("from %d ms, expiry %d ms: held until %v, want %d ms", tc.from, tc.e, got, tc.want)
		}
	}
}
