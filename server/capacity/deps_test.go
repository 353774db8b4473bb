package capacity

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDepsServerSideOnly: the capacity service links neither the
// client-side limiters (package ratelimit; it paces its logs with its own
// clock) nor the composition root (package server) that assembles it.
func TestDepsServerSideOnly(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH:", err)
	}
	out, err := exec.Command(gobin, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps .: %v", err)
	}
	forbidden := map[string]string{
		"github.com/sluice-rl/sluice/ratelimit": "the client-side limiters",
		"github.com/sluice-rl/sluice/server":    "the composition root",
	}
	deps := strings.Fields(string(out))
	if len(deps) == 0 {
		t.Fatal("go list -deps . listed nothing")
	}
	for _, dep := range deps {
		if what, ok := forbidden[dep]; ok {
			t.Errorf("server/capacity depends on %s (%s)", dep, what)
		}
	}
}
