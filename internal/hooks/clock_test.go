package hooks

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestSkewedClock: the skew follows the file, read again once
// ClockSkewPoll has passed; a missing or unparsable file keeps the skew
// in force.
func TestSkewedClock(t *testing.T) {
	file := filepath.Join(t.TempDir(), "skew")
	t0 := time.Unix(1_000_000, 0)
	base := t0
	now := skewedClock(file, func() time.Time { return base })
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	step := func(d time.Duration, want time.Duration) {
		t.Helper()
		base = base.Add(d)
		if got := now().Sub(base); got != want {
			t.Errorf("at %v: skew %v, want %v", base.Sub(t0), got, want)
		}
	}
	step(0, 0) // no file yet
	write("3s\n")
	step(ClockSkewPoll/2, 0) // not read again yet
	step(ClockSkewPoll, 3*time.Second)
	write("soon")
	step(ClockSkewPoll, 3*time.Second)
	write("-3s")
	step(ClockSkewPoll, -3*time.Second)
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	step(ClockSkewPoll, -3*time.Second)
	t.Setenv(ClockSkewEnv, "")
	if f, _ := SkewedClock(); f != nil {
		t.Error("a clock without the variable")
	}
}
