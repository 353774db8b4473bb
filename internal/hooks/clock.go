package hooks

import (
	"os"
	"strings"
	"sync/atomic"
	"time"
)

// ClockSkewEnv names the environment variable with which Sluice's fault
// harness (internal/chaos, the clock-skew faults) skews a `sluice server`
// process's clock: the path of a file holding a Go duration ("3s",
// "-3s"; a missing, empty or unparsable file leaves the skew as it was,
// 0 at first), read again at most every ClockSkewPoll, and added to every
// reading of the server's clock (server.Config.Runtime.Now). Rewriting
// the file steps the clock, as NTP stepping a host's clock would. It is
// a test hook, no flag: a server that finds it set logs a warning.
const ClockSkewEnv = "SLUICE_TEST_CLOCK_SKEW_FILE"

// ClockSkewPoll is how often at most SkewedClock reads its file again.
const ClockSkewPoll = 20 * time.Millisecond

// SkewedClock returns the clock that ClockSkewEnv asks for and the path
// of its file, or nil and "" when the variable is not set (the server
// then reads time.Now). The clock is safe for concurrent use; the call
// that finds the file due reads it, inline (no goroutine).
func SkewedClock() (now func() time.Time, file string) {
	file = os.Getenv(ClockSkewEnv)
	if file == "" {
		return nil, ""
	}
	return skewedClock(file, time.Now), file
}

// skewedClock is SkewedClock reading file, on top of base.
func skewedClock(file string, base func() time.Time) func() time.Time {
	var skew atomic.Int64 // the skew in force
	var due atomic.Int64  // when to read the file next: nanoseconds since start
	start := base()
	read := func() {
		b, err := os.ReadFile(file)
		if err != nil {
			return
		}
		if d, err := time.ParseDuration(strings.TrimSpace(string(b))); err == nil {
			skew.Store(int64(d))
		}
	}
	read()
	due.Store(int64(ClockSkewPoll))
	return func() time.Time {
		t := base()
		el := int64(t.Sub(start))
		if d := due.Load(); el >= d && due.CompareAndSwap(d, el+int64(ClockSkewPoll)) {
			read()
		}
		// Add shifts t's monotonic reading with its wall clock, so an
		// interval between two readings counts a step of the skew (a
		// real step leaves Go's monotonic readings alone). The server's
		// lease arithmetic is on the wall clock (Unix seconds) either way.
		return t.Add(time.Duration(skew.Load()))
	}
}
