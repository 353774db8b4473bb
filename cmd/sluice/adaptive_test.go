package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/server/status"
)

// Twenty client processes with adaptive demand on one resource: the sum of
// the wants they learned (headroom 0) tracks the real total demand within
// 10 %.
func TestAdaptiveDemandTwentyProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte(`
resources:
  - identifier_glob: "shared"
    capacity: 100000
    algorithm: {kind: FAIR_SHARE, lease_length: 30, refresh_interval: 5, learning_mode_duration: 0}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := startProc(t, "srv", "server", "--config", cfg)
	total := 0.0
	for i := range 20 {
		rate := float64(5 + 5*i) // 5 … 100 permits/s
		total += rate
		cmd := exec.Command(binary, "workload", "--server", srv.addr, "--resource", "shared",
			"--rate", fmt.Sprint(rate), "--headroom", "0", "--client", fmt.Sprintf("w%d", i), "--duration", "2m")
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	}
	sumWants := func() (float64, int) {
		resp, err := http.Get("http://" + srv.addr + "/debug/status/resource?id=shared&format=json")
		if err != nil {
			return 0, 0
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		var page status.ResourcePage
		if json.Unmarshal(body, &page) != nil {
			return 0, 0
		}
		return page.Resource.SumWants, len(page.Leases)
	}
	var got float64
	var n int
	took := testutil.Eventually(t, 60*time.Second, "Σ learned wants within 10 % of the demand", func() bool {
		got, n = sumWants()
		return n == 20 && got > 0.9*total && got < 1.1*total
	})
	// And it stays there.
	worst := 0.0
	for range 10 {
		time.Sleep(300 * time.Millisecond)
		got, n = sumWants()
		worst = max(worst, abs(got-total)/total)
	}
	t.Logf("20 processes, real demand %v permits/s: Σ learned wants within 10 %% after %v; worst deviation over the next 3 s %.1f %% (last Σ wants %.1f from %d leases)",
		total, took.Round(100*time.Millisecond), 100*worst, got, n)
	if worst > 0.1 {
		t.Fatalf("Σ learned wants strayed %.1f %% from the demand", 100*worst)
	}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}
