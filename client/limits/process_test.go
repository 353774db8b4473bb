package limits_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/client/limits"
	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/limits/copies"
	"github.com/sluice-rl/sluice/resources"
	"github.com/sluice-rl/sluice/server"
)

// The real-process helper. The test binary of this package becomes a
// client process of Charon's operations, using this package's Client,
// when it runs TestHelperProcess with the environment variable
// SLUICE_LIMITS_HELPER set to the service's address (host:port) and
// SLUICE_LIMITS_DO to one of:
//
//	hold RESOURCE DOMAIN N        reserve N copies (all or nothing) in a session
//	                              with a 2 s ttl; report; wait to be killed
//	transfer RESOURCE DOMAIN N K  as hold, then stage K of them (ttl 30 s);
//	                              report the transfer id; wait to be killed
//	seize ID                      seize the transfer, release what it got
//	                              (Hold.Do), close; report; exit 0
//
// It reports one JSON line on stdout — {"session": id, "granted": n,
// "transfer": id, "seized": n, "degraded": bool, "err": "…"}, the same
// fields as the server package's child processes — and, while waiting,
// exits when its stdin closes (a parent that dies leaves no orphan). A
// degraded grant (the service unreachable) is reported as an error.
//
// Another package's test (the server's, the CLI's) can drive the same
// children against a real server: build this test binary once with
// `go test -c -o $DIR/limits.test ./client/limits`, then run
// `$DIR/limits.test -test.run=^TestHelperProcess$` with those variables,
// a stdin pipe held open, read the line, and SIGKILL the process when
// the test wants it dead. TestRealProcesses below is such a parent, with
// the server in process.
const (
	helperEnv   = "SLUICE_LIMITS_HELPER"
	helperDoEnv = "SLUICE_LIMITS_DO"
)

// helperReport is the JSON line a helper process prints.
type helperReport struct {
	Session  string `json:"session"`
	Granted  int64  `json:"granted"`
	Transfer string `json:"transfer,omitempty"`
	Seized   int64  `json:"seized,omitempty"`
	Degraded bool   `json:"degraded,omitempty"`
	Err      string `json:"err,omitempty"`
}

// TestHelperProcess is the helper process when SLUICE_LIMITS_HELPER is
// set, and does nothing otherwise.
func TestHelperProcess(t *testing.T) {
	addr := os.Getenv(helperEnv)
	if addr == "" {
		t.Skip("not a helper process (" + helperEnv + " unset)")
	}
	os.Exit(helperMain(addr, strings.Fields(os.Getenv(helperDoEnv))))
}

// helperMain is the helper process; it returns its exit status.
func helperMain(addr string, do []string) int {
	report := func(r helperReport) {
		b, _ := json.Marshal(r)
		fmt.Println(string(b))
	}
	fail := func(r helperReport, err error) int {
		r.Err = err.Error()
		report(r)
		return 1
	}
	c, err := limits.New(addr, limits.WithSessionTTL(2*time.Second), limits.WithFailOpen(false), limits.WithCallTimeout(30*time.Second),
		limits.WithLogger(quiet))
	if err != nil {
		return fail(helperReport{}, err)
	}
	defer c.Close()
	ctx := context.Background()
	arg := func(i int) int64 {
		if i >= len(do) {
			return 0
		}
		n, _ := strconv.ParseInt(do[i], 10, 64)
		return n
	}
	switch {
	case len(do) >= 4 && (do[0] == "hold" || do[0] == "transfer"):
		h, err := c.ReserveCopies(ctx, do[1], do[2], arg(3), 0, 0)
		if err != nil {
			return fail(helperReport{}, err)
		}
		r := helperReport{Session: h.Session(), Granted: h.Copies(), Degraded: h.Degraded()}
		if do[0] == "transfer" {
			id, err := h.Transfer(ctx, arg(4), 30*time.Second)
			if err != nil {
				return fail(r, err)
			}
			r.Transfer = id
		}
		report(r)
		_, _ = io.Copy(io.Discard, os.Stdin) // until killed, or the parent goes
		return 0
	case len(do) == 2 && do[0] == "seize":
		h, err := c.Seize(ctx, do[1])
		if err != nil {
			return fail(helperReport{}, err)
		}
		r := helperReport{Session: h.Session(), Seized: h.Copies()}
		if err := h.Do(ctx, func(context.Context) error { return nil }); err != nil {
			return fail(r, err)
		}
		report(r)
		return 0
	}
	return fail(helperReport{}, fmt.Errorf("%s=%q: want hold R D N, transfer R D N K or seize ID", helperDoEnv, strings.Join(do, " ")))
}

// startHelper runs this test binary as a helper process doing do against
// addr, and returns it and its report (the test fails on an error or a
// degraded grant). Cleanup kills it.
func startHelper(t *testing.T, addr, do string) (*exec.Cmd, helperReport) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$")
	cmd.Env = append(os.Environ(), helperEnv+"="+addr, helperDoEnv+"="+do)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = stdin.Close()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("helper %q: %v", do, err)
	}
	var r helperReport
	if err := json.Unmarshal([]byte(line), &r); err != nil || r.Err != "" || r.Degraded {
		t.Fatalf("helper %q: %s (%v)", do, line, err)
	}
	return cmd, r
}

// TestRealProcesses: the client side of TestCharonProcesses (package
// server), against the real server (package server, in process, on
// loopback): a process holding copies through this client is killed with
// SIGKILL, and its holds are released within its session's ttl (2 s; its
// keep-alive stream breaks first); another process seizes a transfer a
// third staged, and releases it.
func TestRealProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	cfg := &copies.Config{Resources: map[string]copies.Resource{"cookbook/sandboxes": copiesConfig().Resources["sandboxes"]}}
	ctx, cancel := context.WithCancel(context.Background())
	s, err := server.New(ctx, server.Config{ID: "limits-client-test", Listen: server.Listen{Address: "127.0.0.1:0"}, Repository: server.Repository{Fixed: resources.Compose(nil, nil, cfg, nil)}, Runtime: server.Runtime{Logger: quiet}})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		_ = s.Run(ctx)
	}()
	defer func() { cancel(); <-ran }()
	addr := s.Addr()
	held := func() int64 {
		r, _ := s.Sessions().Engine().Resource("cookbook/sandboxes")
		return r.GlobalHolds
	}

	holder, r := startHelper(t, addr, "hold cookbook/sandboxes globex 3")
	if r.Granted != 3 || r.Session == "" || held() != 3 {
		t.Fatalf("the holder: %+v, %d held", r, held())
	}
	killed := time.Now()
	if err := holder.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "the killed client's holds to be released", func() bool { return held() == 0 })
	took := time.Since(killed)
	t.Logf("holds of a SIGKILLed client released %v after the kill (session ttl 2 s)", took.Round(time.Millisecond))
	if took > 2*time.Second+3*time.Second { // the ttl, the server's expiry period, and room for a loaded machine
		t.Errorf("released %v after the kill: past the session's ttl", took)
	}

	stager, r := startHelper(t, addr, "transfer cookbook/sandboxes acme 3 2")
	if r.Granted != 3 || r.Transfer == "" || held() != 3 {
		t.Fatalf("the stager: %+v, %d held", r, held())
	}
	_, seized := startHelper(t, addr, "seize "+r.Transfer)
	if seized.Seized != 2 || seized.Session == r.Session {
		t.Fatalf("the seizer: %+v", seized)
	}
	testutil.Eventually(t, 30*time.Second, "the seized copies to be released", func() bool { return held() == 1 })
	if err := stager.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "the stager's last copy to be released", func() bool { return held() == 0 })
}
