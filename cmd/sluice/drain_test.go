package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/sluice-rl/sluice/api/doorman"
	"github.com/sluice-rl/sluice/api/doorman/doormanconnect"
	"github.com/sluice-rl/sluice/internal/testutil"
)

// SIGTERM under load: the master drains — RPCs in flight get answers, every
// RPC after the signal is answered (with a redirect), a client that follows
// redirects to the other candidate never sees an error, and the other
// candidate is master within a second.
func TestDrainUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	etcd := testutil.StartEtcd(t)
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte(`
resources:
  - identifier_glob: "res"
    capacity: 100
    algorithm: {kind: FAIR_SHARE, lease_length: 30, refresh_interval: 5, learning_mode_duration: 0}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	args := func(name string) []string {
		return []string{"server", "--config", cfg, "--id", name, "--election", "etcd", "--etcd-endpoints", etcd.Endpoint,
			"--election-key", "/sluice/test/drain", "--election-ttl", "5s", "--grace", "5s"}
	}
	a := startProc(t, "a", args("a")...)
	waitUntil(t, 20*time.Second, "a is master", func() bool { _, is, _ := discover(a.addr); return is })
	b := startProc(t, "b", args("b")...)
	waitUntil(t, 20*time.Second, "b follows a", func() bool { m, _, _ := discover(b.addr); return m == a.addr })

	var ok, redirects, errs atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hc := h2cClient()
			cur := a.addr
			stubs := map[string]doormanconnect.CapacityClient{}
			other := map[string]string{a.addr: b.addr, b.addr: a.addr}
			for {
				select {
				case <-stop:
					return
				default:
				}
				stub := stubs[cur]
				if stub == nil {
					stub = doormanconnect.NewCapacityClient(hc, "http://"+cur, connect.WithGRPC())
					stubs[cur] = stub
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				resp, err := stub.GetCapacity(ctx, connect.NewRequest(&pb.GetCapacityRequest{
					ClientId: ptr(fmt.Sprintf("c%d", i)),
					Resource: []*pb.ResourceRequest{{ResourceId: ptr("res"), Priority: ptr(int64(0)), Wants: ptr(5.0)}},
				}))
				cancel()
				switch {
				case err != nil:
					errs.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Sprintf("%s: %v", cur, err))
					return
				case resp.Msg.Mastership != nil:
					redirects.Add(1)
					if m := resp.Msg.GetMastership().GetMasterAddress(); m != "" && m != cur {
						cur = m
					} else {
						cur = other[cur]
						time.Sleep(10 * time.Millisecond)
					}
				default:
					ok.Add(1)
				}
			}
		}()
	}
	time.Sleep(time.Second) // load before the signal; not a timing assertion
	before := ok.Load()
	signaled := time.Now()
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	took := waitUntil(t, 10*time.Second, "b is master", func() bool { _, is, _ := discover(b.addr); return is })
	select {
	case <-a.done:
	case <-time.After(10 * time.Second):
		t.Fatal("a did not exit within its grace period")
	}
	exited := time.Since(signaled)
	afterSwitch := ok.Load()
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	t.Logf("b master %v after SIGTERM to a; a exited after %v (exit code %d); %d grants before the signal, %d after the switch, %d redirects followed, %d errors",
		took.Round(time.Millisecond), exited.Round(time.Millisecond), a.cmd.ProcessState.ExitCode(), before, ok.Load()-afterSwitch, redirects.Load(), errs.Load())
	if took > time.Second {
		t.Errorf("b became master %v after SIGTERM, want within 1 s", took)
	}
	if errs.Load() != 0 {
		t.Errorf("%d RPC errors; first: %v", errs.Load(), firstErr.Load())
	}
	if a.cmd.ProcessState.ExitCode() != 0 {
		t.Errorf("a exited with %d", a.cmd.ProcessState.ExitCode())
	}
	if ok.Load() == afterSwitch {
		t.Error("no grants from b after the switch")
	}
}

// waitUntil polls cond every 20 ms for up to d and returns how long it took.
func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) time.Duration {
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
