package sim

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDepsWithoutCompositionRoot: the simulator drives the capacity
// service and the client directly, so it must not link the composition
// root (package server) nor, through it, Envoy's types
// (go-control-plane). A new import that brings either back fails here.
func TestDepsWithoutCompositionRoot(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH:", err)
	}
	out, err := exec.Command(gobin, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps .: %v", err)
	}
	forbidden := []struct{ name, prefix string }{
		{"the composition root", "github.com/sluice-rl/sluice/server"},
		{"Envoy's types", "github.com/envoyproxy/go-control-plane/"},
	}
	deps := strings.Fields(string(out))
	if len(deps) == 0 {
		t.Fatal("go list -deps . listed nothing")
	}
	for _, dep := range deps {
		for _, f := range forbidden {
			if dep == f.prefix || strings.HasSuffix(f.prefix, "/") && strings.HasPrefix(dep, f.prefix) {
				t.Errorf("sim depends on %s (%s)", dep, f.name)
			}
		}
	}
}
