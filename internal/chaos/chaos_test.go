package chaos

import (
	"cmp"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/testutil"
)

// sluiceBin is the sluice binary the servers run, built by TestMain.
var sluiceBin string

func TestMain(m *testing.M) {
	MaybeRunHolder()
	testutil.QuietLogs()
	dir, err := os.MkdirTemp("", "sluice-chaos-test")
	if err != nil {
		panic(err)
	}
	sluiceBin = filepath.Join(dir, "sluice")
	if out, err := exec.Command("go", "build", "-o", sluiceBin, "github.com/sluice-rl/sluice/cmd/sluice").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building sluice: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// run runs a mode under a fault with short phases (2 s of load, 3 s of
// fault, recover after: 4 s when zero) and logs the report.
func run(t *testing.T, mode, fault string, recover time.Duration) *Report {
	t.Helper()
	rep, err := Run(t.Context(), Options{Mode: mode, Fault: fault, Sluice: sluiceBin,
		Warm: 2 * time.Second, Hold: 3 * time.Second, Recover: cmp.Or(recover, 4*time.Second), Workers: 6})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	rep.Print(&b)
	t.Log("\n" + b.String())
	return rep
}

// grantedAfter counts the decided grants answered after d.
func grantedAfter(rep *Report, d time.Duration) (n int64) {
	for _, op := range rep.History {
		if op.Outcome == Granted && !op.Degraded && op.Start > d {
			n += op.N
		}
	}
	return n
}

// The short subset of the harness in the test command: a handful of
// faults whose outcomes are deterministic — the model holds, nothing is
// lost, the service comes back — asserted with generous bounds.
func TestFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("real processes")
	}
	t.Run("control: unshared buckets exceed the bound", func(t *testing.T) {
		rep := run(t, "bucket-memory-unshared", "none", 0)
		if !rep.Violated() || rep.Bucket.Smallest == nil {
			t.Fatalf("three servers with their own buckets: not caught (worst %v)", rep.Bucket.Worst)
		}
	})
	for _, tc := range []struct {
		mode, fault string
		// errors: the fault makes requests fail (closed buckets, a dead
		// server); degraded: it makes them fail open.
		errors, degraded bool
		// recover: how long the load goes on after the heal (0: 4 s).
		recover time.Duration
	}{
		{mode: "bucket-redis", fault: "redis-stop", errors: true},
		{mode: "bucket-redis-open", fault: "redis-blackhole", degraded: true},
		{mode: "quota-redis", fault: "server-kill", errors: true},
		{mode: "copies-redis", fault: "client-kill"},
		{mode: "copies-redis", fault: "redis-restart", errors: true},
		// The new master learns for a lease length (4 s) after the
		// election TTL (2 s).
		{mode: "leases", fault: "master-kill", errors: true, recover: 8 * time.Second},
	} {
		t.Run(tc.mode+"/"+tc.fault, func(t *testing.T) {
			rep := run(t, tc.mode, tc.fault, tc.recover)
			if rep.Violated() {
				t.Fatalf("the model was violated")
			}
			if got := len(rep.Errors) > 0; got != tc.errors {
				t.Errorf("errors %v, want some: %v", rep.Errors, tc.errors)
			}
			if got := rep.Degraded > 0; got != tc.degraded {
				t.Errorf("%d degraded answers, want some: %v", rep.Degraded, tc.degraded)
			}
			if rep.Recovery > 20*time.Second {
				t.Errorf("recovery %v", rep.Recovery)
			}
			// Service came back: grants decided in the last 2 s.
			if n := grantedAfter(rep, rep.End-2*time.Second); n == 0 {
				t.Errorf("nothing granted in the last 2 s of the run")
			}
		})
	}
}
