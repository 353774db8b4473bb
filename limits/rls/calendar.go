package rls

import "time"

// Calendar aligns a fixed window to a calendar: a day, an ISO 8601 week
// (Monday to Sunday), a month or a year in a zone, starting at local
// midnight. The windows are as long as the calendar makes them: months of
// 28 to 31 days, years of 365 or 366, days of 23 or 25 hours where
// daylight saving starts or ends. Its zero value (Unit UnitUnknown) is no
// calendar. A Calendar is a value: safe for concurrent use.
//
// Source: envoyproxy/ratelimit's calendar-aligned month
// (USE_CALENDAR_MONTH_RATE_LIMIT, in UTC), gubernator's
// DURATION_IS_GREGORIAN (docs/references.md); ISO 8601 for the week.
type Calendar struct {
	// Unit is Day, Week, Month or Year; any other unit is no calendar.
	Unit Unit
	// Location is the zone whose midnight starts the windows (nil: UTC).
	Location *time.Location
}

// CalendarUnit reports whether unit u can be aligned to a calendar: Day,
// Week, Month or Year.
func CalendarUnit(u Unit) bool { return u == Day || u == Week || u == Month || u == Year }

// IsZero reports whether c is no calendar.
func (c Calendar) IsZero() bool { return !CalendarUnit(c.Unit) }

// Window returns the calendar's window that holds the instant now (Unix
// µs): its start (inclusive) and end (exclusive), in Unix µs, start ≤ now
// < end. A zero Calendar returns (now, now+1).
func (c Calendar) Window(now int64) (start, end int64) {
	if c.IsZero() {
		return now, now + 1
	}
	loc := c.Location
	if loc == nil {
		loc = time.UTC
	}
	t := time.UnixMicro(now).In(loc)
	y, m, d := t.Date()
	var from, to time.Time
	switch c.Unit {
	case Day:
		from, to = time.Date(y, m, d, 0, 0, 0, 0, loc), time.Date(y, m, d+1, 0, 0, 0, 0, loc)
	case Week:
		back := (int(t.Weekday()) + 6) % 7 // days since Monday
		from, to = time.Date(y, m, d-back, 0, 0, 0, 0, loc), time.Date(y, m, d-back+7, 0, 0, 0, 0, loc)
	case Month:
		from, to = time.Date(y, m, 1, 0, 0, 0, 0, loc), time.Date(y, m+1, 1, 0, 0, 0, 0, loc)
	default: // Year
		from, to = time.Date(y, 1, 1, 0, 0, 0, 0, loc), time.Date(y+1, 1, 1, 0, 0, 0, 0, loc)
	}
	start, end = from.UnixMicro(), to.UnixMicro()
	// A midnight that does not exist (a zone whose clocks skip from 00:00)
	// is placed by time.Date an hour off; keep now inside its window.
	return min(start, now), max(end, now+1)
}

// String returns "month in Europe/Paris" and the like; "" for no
// calendar.
func (c Calendar) String() string {
	if c.IsZero() {
		return ""
	}
	loc := "UTC"
	if c.Location != nil {
		loc = c.Location.String()
	}
	return c.Unit.String() + " in " + loc
}
