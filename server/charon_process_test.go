package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	v1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/internal/testutil/fixture"
	"github.com/sluice-rl/sluice/resources"
)

// charonChildEnv makes the test binary a client process: its value is the
// server's address; SLUICE_CHARON_DO says what to do (see charonChild).
const charonChildEnv = "SLUICE_CHARON_CHILD"

// childReport is what a client process prints, one JSON line.
type childReport struct {
	Session  string `json:"session"`
	Granted  int64  `json:"granted"`
	Transfer string `json:"transfer,omitempty"`
	Seized   int64  `json:"seized,omitempty"`
	Err      string `json:"err,omitempty"`
}

// charonChild is a client process of TestCharonProcesses, talking to the
// server over gRPC as any client would. SLUICE_CHARON_DO is one of:
//
//	hold DOMAIN N          open a 2 s session kept alive every 300 ms, reserve N copies; report; wait to be killed
//	transfer DOMAIN N K    as hold, then stage K of them (ttl 30 s); report the transfer id; wait
//	seize ID               open a session, seize the transfer, release what it got, close; report; exit
func charonChild() int {
	addr, do := os.Getenv(charonChildEnv), strings.Fields(os.Getenv("SLUICE_CHARON_DO"))
	report := func(r childReport) {
		b, _ := json.Marshal(r)
		fmt.Println(string(b))
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		report(childReport{Err: err.Error()})
		return 1
	}
	c := v1.NewLimitsClient(conn)
	ctx := context.Background()
	sess, err := c.OpenSession(ctx, &v1.OpenSessionRequest{Ttl: durationpb.New(2 * time.Second)})
	if err != nil {
		report(childReport{Err: err.Error()})
		return 1
	}
	id := sess.GetSessionId()
	switch do[0] {
	case "hold", "transfer":
		stream, err := c.KeepAlive(ctx)
		if err != nil {
			report(childReport{Err: err.Error()})
			return 1
		}
		go func() {
			for {
				if stream.Send(&v1.KeepAliveRequest{SessionId: id}) != nil {
					return
				}
				if _, err := stream.Recv(); err != nil {
					return
				}
				time.Sleep(300 * time.Millisecond)
			}
		}()
		n, _ := strconv.ParseInt(do[2], 10, 64)
		r, err := c.Reserve(ctx, &v1.ReserveRequest{SessionId: id, Resource: "cookbook/sandboxes", Domain: do[1], Copies: n})
		if err != nil {
			report(childReport{Session: id, Err: err.Error()})
			return 1
		}
		out := childReport{Session: id, Granted: r.GetGranted()}
		if do[0] == "transfer" {
			k, _ := strconv.ParseInt(do[3], 10, 64)
			var groups []string
			for _, g := range r.GetGroups() {
				groups = append(groups, g.GetName())
			}
			tr, err := c.Transfer(ctx, &v1.TransferRequest{SessionId: id, Resource: "cookbook/sandboxes", Domain: do[1], Copies: k, Groups: groups, Ttl: durationpb.New(30 * time.Second)})
			if err != nil {
				out.Err = err.Error()
			}
			out.Transfer = tr.GetTransferId()
		}
		report(out)
		select {} // until killed
	case "seize":
		sz, err := c.Seize(ctx, &v1.SeizeRequest{SessionId: id, TransferId: do[1]})
		if err != nil {
			report(childReport{Session: id, Err: err.Error()})
			return 1
		}
		if _, err := c.Release(ctx, &v1.ReleaseRequest{SessionId: id, Resource: sz.GetResource(), Domain: sz.GetDomain(), Copies: sz.GetCopies(), Groups: sz.GetGroups()}); err != nil {
			report(childReport{Session: id, Err: err.Error()})
			return 1
		}
		_, _ = c.CloseSession(ctx, &v1.CloseSessionRequest{SessionId: id})
		report(childReport{Session: id, Seized: sz.GetCopies()})
		return 0
	}
	return 2
}

// startChild runs the test binary as a client process doing do, and
// returns it and its report.
func startChild(t *testing.T, addr, do string) (*exec.Cmd, childReport) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), charonChildEnv+"="+addr, "SLUICE_CHARON_DO="+do)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("child %q: %v", do, err)
	}
	var r childReport
	if err := json.Unmarshal([]byte(line), &r); err != nil || r.Err != "" {
		t.Fatalf("child %q: %s (%v)", do, line, err)
	}
	return cmd, r
}

// Real processes: a client holding copies is killed with SIGKILL and its
// holds are released (its keep-alive stream breaks; at the latest its 2 s
// ttl passes); another process seizes a transfer staged by a third and
// releases it.
func TestCharonProcesses(t *testing.T) {
	s, _ := startServer(t, Config{ID: "charon", Repository: Repository{Fixed: resources.Compose(nil, nil, fixture.Sandboxes(), nil)}})
	addr := s.Addr()
	held := func() int64 { return globalHolds(s.Sessions().Snapshot()) }

	holder, r := startChild(t, addr, "hold globex 3")
	if r.Granted != 3 || held() != 3 {
		t.Fatalf("the holder got %d, %d held", r.Granted, held())
	}
	if err := holder.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	took := testutil.Eventually(t, 30*time.Second, "the killed client's holds to be released", func() bool { return held() == 0 })
	t.Logf("holds of a SIGKILLed client released %v after the kill (session ttl 2 s)", took.Round(time.Millisecond))

	stager, r := startChild(t, addr, "transfer acme 3 2")
	if r.Granted != 3 || r.Transfer == "" || held() != 3 {
		t.Fatalf("the stager: %+v, %d held", r, held())
	}
	_, seized := startChild(t, addr, "seize "+r.Transfer)
	if seized.Seized != 2 {
		t.Fatalf("the seizer: %+v", seized)
	}
	testutil.Eventually(t, 30*time.Second, "the seized copies to be released", func() bool { return held() == 1 })
	if err := stager.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, "the stager's last copy to be released", func() bool { return held() == 0 })
}
