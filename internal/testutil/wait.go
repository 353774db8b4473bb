package testutil

import (
	"flag"
	"log/slog"
	"os"
	"strconv"
	"testing"
	"time"
)

// Eventually polls cond every 20 ms until it is true and returns how long
// that took; if it is still false after d, the test fails (t.Fatalf) naming
// what it waited for. d is a generous bound for an outcome, not a timing
// claim: timing is measured on virtual time (the simulator, synctest).
func Eventually(t testing.TB, d time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > d {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start)
}

// Logger returns the logger tests hand to servers and clients: it discards
// everything unless SLUICE_TEST_LOG is set (then it writes text to stderr
// at that level: debug, info, warn or error), so that a passing suite is
// quiet.
func Logger() *slog.Logger {
	lv, ok := os.LookupEnv("SLUICE_TEST_LOG")
	if !ok {
		return slog.New(slog.DiscardHandler)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(lv)); err != nil {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

// QuietLogs makes slog's default logger Logger(), for the code under test
// that logs to the default (a TestMain calls it before m.Run).
func QuietLogs() { slog.SetDefault(Logger()) }

// ChildLogLevel is the --log-level for sluice child processes in tests:
// "error" (quiet) unless SLUICE_TEST_LOG sets another.
func ChildLogLevel() string {
	if lv := os.Getenv("SLUICE_TEST_LOG"); lv != "" {
		return lv
	}
	return "error"
}

// RapidChecks sets pgregory.net/rapid's -rapid.checks to n unless the
// command line gave it: property tests run n cases by default (rapid's own
// default is 100). It also fixes the seed (-rapid.seed=1) unless the command
// line or rapid's RAPID_SEED variable chose one, so that the suite, and CI,
// answer the same way on every run; explore new cases with RAPID_SEED=0
// (random) and a large -rapid.checks. Call it from TestMain before m.Run.
func RapidChecks(n int) {
	flag.Parse()
	checks, seed := false, false
	flag.Visit(func(f *flag.Flag) {
		checks = checks || f.Name == "rapid.checks"
		seed = seed || f.Name == "rapid.seed"
	})
	if !checks {
		_ = flag.Set("rapid.checks", strconv.Itoa(n))
	}
	if _, env := os.LookupEnv("RAPID_SEED"); !seed && !env {
		_ = flag.Set("rapid.seed", "1")
	}
}
