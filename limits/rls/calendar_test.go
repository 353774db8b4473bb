package rls

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/testutil"
)

// TestCalendarWindow: the window holding an instant, for each calendar
// unit, across month ends of 28 to 31 days, leap years, year ends, ISO
// weeks across a year's end, and the daylight saving days of Paris and
// New York (23 and 25 hours).
func TestCalendarWindow(t *testing.T) {
	utc, paris, ny := time.UTC, testutil.Zone(t, "Europe/Paris"), testutil.Zone(t, "America/New_York")
	at := func(loc *time.Location, y int, m time.Month, d, h, min int) time.Time {
		return time.Date(y, m, d, h, min, 0, 0, loc)
	}
	cases := []struct {
		name       string
		unit       Unit
		loc        *time.Location
		now        time.Time
		start, end time.Time
		hours      float64 // the window's length
	}{
		{"February of a common year: 28 days", Month, utc, at(utc, 2027, 2, 14, 12, 0), at(utc, 2027, 2, 1, 0, 0), at(utc, 2027, 3, 1, 0, 0), 28 * 24},
		{"February of a leap year: 29 days", Month, utc, at(utc, 2028, 2, 29, 23, 59), at(utc, 2028, 2, 1, 0, 0), at(utc, 2028, 3, 1, 0, 0), 29 * 24},
		{"April: 30 days", Month, utc, at(utc, 2026, 4, 30, 23, 59), at(utc, 2026, 4, 1, 0, 0), at(utc, 2026, 5, 1, 0, 0), 30 * 24},
		{"January: 31 days", Month, utc, at(utc, 2026, 1, 1, 0, 0), at(utc, 2026, 1, 1, 0, 0), at(utc, 2026, 2, 1, 0, 0), 31 * 24},
		{"December into the next year", Month, utc, at(utc, 2026, 12, 31, 23, 59), at(utc, 2026, 12, 1, 0, 0), at(utc, 2027, 1, 1, 0, 0), 31 * 24},
		{"March in Paris: 31 days less the hour daylight saving takes", Month, paris, at(paris, 2026, 3, 20, 0, 0), at(paris, 2026, 3, 1, 0, 0), at(paris, 2026, 4, 1, 0, 0), 31*24 - 1},
		{"a common year", Year, utc, at(utc, 2026, 7, 1, 0, 0), at(utc, 2026, 1, 1, 0, 0), at(utc, 2027, 1, 1, 0, 0), 365 * 24},
		{"a leap year", Year, utc, at(utc, 2028, 12, 31, 23, 59), at(utc, 2028, 1, 1, 0, 0), at(utc, 2029, 1, 1, 0, 0), 366 * 24},
		{"a year in New York starts at its midnight", Year, ny, at(ny, 2027, 1, 1, 0, 0), at(ny, 2027, 1, 1, 0, 0), at(ny, 2028, 1, 1, 0, 0), 365 * 24},
		{"a day", Day, utc, at(utc, 2026, 11, 29, 6, 30), at(utc, 2026, 11, 29, 0, 0), at(utc, 2026, 11, 30, 0, 0), 24},
		{"Paris's spring day: 23 hours", Day, paris, at(paris, 2026, 3, 29, 12, 0), at(paris, 2026, 3, 29, 0, 0), at(paris, 2026, 3, 30, 0, 0), 23},
		{"Paris's autumn day: 25 hours", Day, paris, at(paris, 2026, 10, 25, 23, 0), at(paris, 2026, 10, 25, 0, 0), at(paris, 2026, 10, 26, 0, 0), 25},
		{"New York's spring day: 23 hours", Day, ny, at(ny, 2026, 3, 8, 1, 59), at(ny, 2026, 3, 8, 0, 0), at(ny, 2026, 3, 9, 0, 0), 23},
		{"New York's autumn day: 25 hours", Day, ny, at(ny, 2026, 11, 1, 1, 30), at(ny, 2026, 11, 1, 0, 0), at(ny, 2026, 11, 2, 0, 0), 25},
		{"a day in New York is not UTC's", Day, ny, at(utc, 2026, 11, 29, 3, 0), at(ny, 2026, 11, 28, 0, 0), at(ny, 2026, 11, 29, 0, 0), 24},
		{"an ISO week starts on Monday", Week, utc, at(utc, 2026, 11, 29, 23, 59), at(utc, 2026, 11, 23, 0, 0), at(utc, 2026, 11, 30, 0, 0), 7 * 24},
		{"Monday at midnight starts the next", Week, utc, at(utc, 2026, 11, 30, 0, 0), at(utc, 2026, 11, 30, 0, 0), at(utc, 2026, 12, 7, 0, 0), 7 * 24},
		{"the ISO week across 2026's end (2026-W53)", Week, utc, at(utc, 2027, 1, 2, 12, 0), at(utc, 2026, 12, 28, 0, 0), at(utc, 2027, 1, 4, 0, 0), 7 * 24},
		{"the ISO week across 2027's end (2027-W52)", Week, utc, at(utc, 2027, 12, 31, 12, 0), at(utc, 2027, 12, 27, 0, 0), at(utc, 2028, 1, 3, 0, 0), 7 * 24},
		{"Paris's week of the clocks' change: 7 days and an hour", Week, paris, at(paris, 2026, 10, 25, 12, 0), at(paris, 2026, 10, 19, 0, 0), at(paris, 2026, 10, 26, 0, 0), 7*24 + 1},
	}
	for _, tc := range cases {
		c := Calendar{Unit: tc.unit, Location: tc.loc}
		start, end := c.Window(tc.now.UnixMicro())
		if start != tc.start.UnixMicro() || end != tc.end.UnixMicro() {
			t.Errorf("%s: %s at %v: window [%v, %v), want [%v, %v)", tc.name, c, tc.now,
				time.UnixMicro(start).In(tc.loc), time.UnixMicro(end).In(tc.loc), tc.start, tc.end)
		}
		if h := time.Duration(end-start) * time.Microsecond; h.Hours() != tc.hours {
			t.Errorf("%s: the window lasts %v, want %v hours", tc.name, h, tc.hours)
		}
		if now := tc.now.UnixMicro(); start > now || now >= end {
			t.Errorf("%s: %v is not in its window", tc.name, tc.now)
		}
	}
	if s, e := (Calendar{}).Window(5); s != 5 || e != 6 {
		t.Errorf("no calendar: [%d, %d), want [5, 6)", s, e)
	}
}

// TestCalendarDecide: a month's budget in a store, on a hand-moved clock:
// spent within the month, whole again at the next month's first instant,
// duration until reset the time to the boundary; a window begun on a
// clock ahead of this one keeps its count.
func TestCalendarDecide(t *testing.T) {
	ctx := context.Background()
	s := NewMemoryStore()
	p := Policy{Algorithm: FixedWindow, Limit: 3, Period: Month.Duration().Microseconds(), Calendar: Calendar{Unit: Month, Location: time.UTC}}
	hit := func(now time.Time, n uint64) (bool, Result) {
		var r [1]Result
		ok, err := s.Decide(ctx, now.UnixMicro(), "d", []Hit{{Bucket: "b", Policy: p, Hits: n}}, r[:])
		if err != nil {
			t.Fatal(err)
		}
		return ok, r[0]
	}
	feb := time.Date(2028, 2, 28, 23, 0, 0, 0, time.UTC)
	if ok, r := hit(feb, 2); !ok || r.Remaining != 1 {
		t.Fatalf("first 2 of 3: granted %v, %+v", ok, r)
	}
	ok, r := hit(feb.Add(59*time.Minute), 2)
	if want := (24*time.Hour + time.Minute).Microseconds(); ok || r.RetryAfter != want || r.Reset != want {
		t.Fatalf("2 more on Feb 28 23:59 of a leap year: granted %v, %+v; want refused, retry and reset in %d µs (Feb 29 is a day)", ok, r, want)
	}
	if ok, r := hit(time.Date(2028, 3, 1, 0, 0, 0, 0, time.UTC), 3); !ok || r.Remaining != 0 {
		t.Fatalf("March's first instant: the whole budget, granted %v, %+v", ok, r)
	}
	// A clock an hour behind, still in February: March's count holds.
	if ok, r := hit(time.Date(2028, 2, 29, 23, 0, 0, 0, time.UTC), 1); ok || r.Remaining != 0 {
		t.Fatalf("a lagging clock: granted %v, %+v; want refused (March is spent)", ok, r)
	}

	// A burst apart from the rate: 60 a minute, at most 5 at once.
	b := Policy{Algorithm: TokenBucket, Limit: 60, Period: time.Minute.Microseconds(), Burst: 5}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	var res [1]Result
	if ok, _ := s.Decide(ctx, now, "d", []Hit{{Bucket: "c", Policy: b, Hits: 6}}, res[:]); ok || res[0].RetryAfter != -1 {
		t.Fatalf("6 at once of a burst of 5: granted %v, %+v; want never", ok, res[0])
	}
	granted := 0
	for range 10 {
		if ok, _ := s.Decide(ctx, now, "d", []Hit{{Bucket: "c", Policy: b, Hits: 1}}, res[:]); ok {
			granted++
		}
	}
	if granted != 5 {
		t.Fatalf("10 at one instant: %d granted, want the burst, 5", granted)
	}
	if ok, _ := s.Decide(ctx, now+time.Second.Microseconds(), "d", []Hit{{Bucket: "c", Policy: b, Hits: 1}}, res[:]); !ok || res[0].Remaining != 0 {
		t.Fatalf("a second later: one more (60 a minute), granted %v, %+v", ok, res[0])
	}
	if ok, _ := s.Decide(ctx, now+time.Hour.Microseconds(), "d", []Hit{{Bucket: "c", Policy: b}}, res[:]); !ok || res[0].Remaining != 5 {
		t.Fatalf("an hour later the bucket holds its depth: %+v, want 5", res[0])
	}
}
