package chaos

import (
	"cmp"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
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
		// The new master learns for a lease length (6 s) after the
		// election TTL (2 s).
		{mode: "leases", fault: "master-kill", errors: true, recover: 8 * time.Second},
		// Sentinel promotes the replica after down-after (1 s) and an
		// election; the servers find it through the sentinels. The
		// outage (seconds) refills the bucket: writes the dead master
		// took with it cannot show.
		{mode: "bucket-sentinel", fault: "sentinel-kill-master", errors: true, recover: 6 * time.Second},
		// (rls-cluster-tls under cluster-kill-master, the secured
		// cluster's row, is measured by sluice-chaos, docs/accuracy.md;
		// the suite checks that cluster's sharing in cmd/sluice's
		// TestEnvoyServersShareRedis, within the suite's time.)
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
			if onSentinel(Modes[tc.mode]) && (rep.Promoted == 0 || rep.FirstOnNew <= rep.Promoted) {
				t.Errorf("the replica promoted at %v, its first script at %v: want both, in that order", rep.Promoted, rep.FirstOnNew)
			}
		})
	}
}

// TestMatrix: the stores without proxies (a Redis Cluster's nodes and a
// Sentinel group's servers advertise their own addresses) get their own
// faults and the servers' ones, none of toxiproxy's; each mode's
// failover hits the slot its load uses.
func TestMatrix(t *testing.T) {
	runs := map[[2]string]bool{}
	for _, run := range Matrix() {
		runs[run] = true
	}
	for mode, faults := range map[string][]string{
		"bucket-sentinel": {"none", "sentinel-failover", "sentinel-kill-master", "server-kill", "server-stop"},
		"rls-cluster-tls": {"none", "cluster-failover", "cluster-kill-master", "server-kill", "server-stop"},
		"leases-tree":     {"none", "clock-skew-ahead", "clock-skew-behind", "parent-cut", "server-kill", "server-stop"},
		"leases":          {"none", "clock-skew-ahead", "clock-skew-behind", "etcd-cut", "etcd-leader-kill", "master-kill", "server-kill", "server-stop"},
	} {
		n := 0
		for run := range runs {
			if run[0] == mode {
				n++
			}
		}
		if n != len(faults) {
			t.Errorf("%s: %d runs, want %d (%v)", mode, n, len(faults), faults)
		}
		for _, f := range faults {
			if !runs[[2]string{mode, f}] {
				t.Errorf("%s under %s: not in the matrix", mode, f)
			}
		}
	}
	// The Doorman faults: a parent only in a tree, clocks only where
	// leases carry expiry times.
	for name, m := range Modes {
		for f, want := range map[string]bool{"parent-cut": m.Tree, "clock-skew-ahead": m.Kind == "leases", "clock-skew-behind": m.Kind == "leases"} {
			if got := Faults[f].applies(m); got != want {
				t.Errorf("%s applies to %s: %v, want %v", f, name, got, want)
			}
		}
	}
	for _, f := range []string{"sentinel-failover", "sentinel-kill-master"} {
		if Faults[f].applies(Modes["bucket-redis"]) || Faults[f].applies(Modes["bucket-cluster"]) {
			t.Errorf("%s applies to a store without sentinels", f)
		}
	}
	for mode, want := range map[string]string{"rls-cluster-tls": "{echaos}", "rls-redis": "{echaos}", "bucket-cluster": "{rchaos}", "copies-cluster": "{cpool}"} {
		if got := Modes[mode].hashKey(); got != want {
			t.Errorf("%s: hash key %q, want %q", mode, got, want)
		}
	}
}

// TestMakeCerts: the Redis certificate serves and connects, the servers'
// connects, both for 127.0.0.1 under the CA.
func TestMakeCerts(t *testing.T) {
	c, err := makeCerts(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(mustRead(t, c.CA)) {
		t.Fatal("no CA certificate")
	}
	for _, tc := range []struct {
		cert, key string
		usages    []x509.ExtKeyUsage
	}{
		{c.RedisCert, c.RedisKey, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}},
		{c.ClientCert, c.ClientKey, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}},
	} {
		pair, err := tls.LoadX509KeyPair(tc.cert, tc.key)
		if err != nil {
			t.Fatal(err)
		}
		if b, _ := pem.Decode(mustRead(t, tc.key)); b == nil || b.Type != "EC PRIVATE KEY" {
			t.Errorf("%s: not a PEM EC PRIVATE KEY (redis-server's OpenSSL reads it)", tc.key)
		}
		leaf, err := x509.ParseCertificate(pair.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range tc.usages {
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "127.0.0.1", KeyUsages: []x509.ExtKeyUsage{u}}); err != nil {
				t.Errorf("%s for usage %v: %v", tc.cert, u, err)
			}
		}
	}
}

func mustRead(t *testing.T, file string) []byte {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
