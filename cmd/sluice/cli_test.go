package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const cliConfig = `
resources:
  - identifier_glob: "res"
    capacity: 100
    algorithm: {kind: FAIR_SHARE, lease_length: 30, refresh_interval: 5, learning_mode_duration: 0}
  - identifier_glob: "bench/*"
    capacity: 1000
    algorithm: {kind: PROPORTIONAL_SHARE, lease_length: 30, refresh_interval: 5, learning_mode_duration: 0}
`

func cliServer(t *testing.T) *proc {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte(cliConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	return startProc(t, "srv", "server", "--config", cfg)
}

// Ten malformed files, ten clear and distinct errors naming template and
// field.
func TestConfigValidate(t *testing.T) {
	dir := t.TempDir()
	alg := "algorithm: {kind: FAIR_SHARE, lease_length: 60, refresh_interval: 16}"
	files := []string{
		"resources: [",
		"resources:\n  - {identifier_glob: a, capacity: 1, capacityy: 2, " + alg + "}\n",
		"resources:\n  - {capacity: 1, " + alg + "}\n",
		"resources:\n  - {identifier_glob: \"db/[\", capacity: 1, " + alg + "}\n",
		"resources:\n  - {identifier_glob: api, capacity: -5, " + alg + "}\n",
		"resources:\n  - {identifier_glob: api, capacity: 1, safe_capacity: -2, " + alg + "}\n",
		"resources:\n  - {identifier_glob: api, capacity: 1, algorithm: {kind: ROUND_ROBIN, lease_length: 60, refresh_interval: 16}}\n",
		"resources:\n  - {identifier_glob: db, capacity: 1, algorithm: {kind: FAIR_SHARE, lease_length: 10, refresh_interval: 30}}\n",
		"resources:\n  - {identifier_glob: a, capacity: 1, algorithm: {kind: FAIR_SHARE, lease_length: 10, refresh_interval: 5, parameters: [{name: decay_factor, value: \"2\"}]}}\n",
		"resources:\n  - {identifier_glob: a, capacity: 1, " + alg + "}\n  - {identifier_glob: a, capacity: 2, " + alg + "}\n",
	}
	seen := map[string]bool{}
	for i, content := range files {
		f := filepath.Join(dir, fmt.Sprintf("bad%02d.yaml", i+1))
		if err := os.WriteFile(f, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(binary, "config", "validate", f).CombinedOutput()
		if err == nil {
			t.Errorf("%s accepted:\n%s", f, content)
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(lines) < 2 || !strings.HasSuffix(lines[0], "invalid:") {
			t.Errorf("%s: output %q", f, out)
			continue
		}
		msg := strings.Join(strings.Fields(strings.Join(lines[1:], " ")), " ")
		t.Logf("%s: %s", filepath.Base(f), msg)
		if seen[msg] {
			t.Errorf("%s: the same message as another file: %s", f, msg)
		}
		seen[msg] = true
	}
	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(good, []byte(cliConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(binary, "config", "validate", good, "../../examples/config.yaml").CombinedOutput()
	if err != nil || strings.Count(string(out), ": ok (") != 2 {
		t.Fatalf("valid files: %v\n%s", err, out)
	}
}

// TestConfigValidateEnvoy: envoyproxy/ratelimit's files and directories,
// each reported with its domains, or its errors naming file and field; a
// domain in two paths is an error naming both files.
func TestConfigValidateEnvoy(t *testing.T) {
	dir := "../../limits/limitsyaml/testdata/envoy"
	out, err := exec.Command(binary, "config", "validate", "--envoy-ratelimit", dir).CombinedOutput()
	if err != nil || !strings.Contains(string(out), ": ok (3 domains: edge_proxy_per_ip, messaging, mongo_cps; 16 rules)") {
		t.Fatalf("a directory: %v\n%s", err, out)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = exec.Command(binary, "config", "validate", "--envoy-ratelimit", bad).CombinedOutput()
	if err == nil || !strings.Contains(string(out), `bad.yaml: descriptors[0].rate_limit.unit: "fortnight" is not a unit`) {
		t.Fatalf("a bad file: %v\n%s", err, out)
	}
	out, err = exec.Command(binary, "config", "validate", "--envoy-ratelimit", dir, filepath.Join(dir, "messaging.yaml")).CombinedOutput()
	if err == nil || !strings.Contains(string(out), `domain "messaging" defined twice`) {
		t.Fatalf("a domain twice: %v\n%s", err, out)
	}
}

func TestGetCommand(t *testing.T) {
	srv := cliServer(t)
	out, err := exec.Command(binary, "get", "--server", srv.addr, "--resource", "res", "--wants", "30", "--json").CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	var got struct {
		Capacity        float64 `json:"capacity"`
		RefreshInterval int64   `json:"refresh_interval_seconds"`
	}
	if err := json.Unmarshal(out, &got); err != nil || got.Capacity != 30 || got.RefreshInterval != 5 {
		t.Fatalf("get --json: %v %s", err, out)
	}
	out, err = exec.Command(binary, "get", "--server", srv.addr, "--resource", "res", "--wants", "90", "--client", "other").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "capacity 70") {
		t.Fatalf("a second client gets what is free: %v %s", err, out)
	}
	if out, err := exec.Command(binary, "get", "--server", "127.0.0.1:1", "--resource", "res").CombinedOutput(); err == nil {
		t.Fatalf("an unreachable server: %s", out)
	}
	if out, err := exec.Command(binary, "get", "--server", srv.addr, "--resource", "res", "--wants", "-1").CombinedOutput(); err == nil || !strings.Contains(string(out), "negative") {
		t.Fatalf("negative wants: %v %s", err, out)
	}
}

func TestBenchCommand(t *testing.T) {
	srv := cliServer(t)
	out, err := exec.Command(binary, "bench", "--server", srv.addr, "--clients", "20", "--resources", "3", "--conns", "2", "--duration", "1s", "--json").CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	var r BenchResult
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	t.Logf("bench: %+v", r)
	if r.ServerCPUPerRequest <= 0 {
		t.Errorf("server CPU per request %v: the server's process_cpu_seconds_total was not read", r.ServerCPUPerRequest)
	}
	if r.Requests == 0 || r.Errors != 0 || r.PerSecond <= 0 || r.P50 <= 0 || r.P99 < r.P50 || r.Max < r.P99 {
		t.Fatalf("bench result %+v", r)
	}
}

func TestShellCommand(t *testing.T) {
	srv := cliServer(t)
	cmd := exec.Command(binary, "shell", "--server", srv.addr)
	cmd.Stdin = strings.NewReader(strings.Join([]string{
		"help",
		"get alice res 60",
		"get bob res 60",
		"get alice res 60",
		"show",
		"release alice res",
		"get carol res 60",
		"show",
		"master",
		"frobnicate",
		"get alice res lots",
		"quit",
		"get never res 1",
	}, "\n"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	t.Logf("shell:\n%s", out)
	for _, want := range []string{
		"alice res: capacity 60 for",
		"bob res: capacity 40 for",
		// Asked again at once: Doorman's 5-second rule, the lease comes back.
		"refresh in 5 s (asked again within 5s",
		"alice res: released",
		"carol res: capacity 50 for", // its fair share, from what alice gave back (else 0 is free)
		srv.addr + " is the master",
		`error: unknown command "frobnicate"`,
		`error: WANTS "lots" is not a number`,
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if strings.Contains(string(out), "never") {
		t.Error("the shell went on after quit")
	}
	// show lists what is held, after the release bob and carol.
	last := string(out)[strings.LastIndex(string(out), "CLIENT"):]
	if strings.Contains(last, "alice") || !strings.Contains(last, "bob") || !strings.Contains(last, "carol") {
		t.Errorf("last show:\n%s", last)
	}
}
