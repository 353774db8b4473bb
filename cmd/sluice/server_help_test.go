package main

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// TestServerHelp: `sluice server --help` lists every flag once, under the
// titles of its groups in their order, in lines of at most helpWidth
// characters, only --help among "Other flags"; and docs/running.md's flag
// table has a row for each.
func TestServerHelp(t *testing.T) {
	out, err := exec.Command(binary, "server", "--help").Output()
	if err != nil {
		t.Fatal(err)
	}
	help := string(out)
	usage := help[strings.Index(help, "Usage:"):]
	for line := range strings.Lines(help) {
		if n := len([]rune(strings.TrimRight(line, "\n"))); n > helpWidth {
			t.Errorf("a line of %d characters (at most %d): %q", n, helpWidth, line)
		}
	}
	at := -1
	for _, g := range flagGroups {
		i := strings.Index(usage, "\n"+g+":\n")
		if i < 0 {
			t.Errorf("group %q missing", g)
			continue
		}
		if i < at {
			t.Errorf("group %q out of order", g)
		}
		at = i
	}
	if other := usage[strings.Index(usage, groupOther+":"):]; strings.Count(other, "--") != 1 || !strings.Contains(other, "--help") {
		t.Errorf("flags of no group:\n%s", other)
	}
	docs, err := os.ReadFile("../../docs/running.md")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, m := range regexp.MustCompile(`(?m)^\s+(?:-\w, )?--([a-z0-9-]+)`).FindAllStringSubmatch(usage, -1) {
		seen[m[1]]++
	}
	if len(seen) < 40 {
		t.Fatalf("only %d flags found in --help:\n%s", len(seen), usage)
	}
	for name, n := range seen {
		if n != 1 {
			t.Errorf("--%s listed %d times", name, n)
		}
		if name != "help" && !strings.Contains(string(docs), "`--"+name+"`") {
			t.Errorf("--%s has no row in docs/running.md's flag table", name)
		}
	}
}

// TestServerHelpNamesEveryAPI: `sluice server --help`'s long text names
// every API the server serves and every concern across them, each by
// what a user would look for.
func TestServerHelpNamesEveryAPI(t *testing.T) {
	long := newServerCmd().Long
	for _, want := range []string{
		"doorman.Capacity", "sluice.v1.Leases", // leases
		"sluice.v1.Limits/Allow", "quotaservice.QuotaService/Allow", // limits, Square's quota service
		"OpenSession", "--max-sessions", // Charon's sessions
		"ShouldRateLimit", "--envoy-ratelimit-config", // Envoy's rate limit service
		"RateLimitQuotaService", "--rlqs-", // RLQS
		"--client-identity", "--client-policy", // client identities
		"--otel-traces-exporter",                // tracing
		"/admin/v1/",                            // the admin API
		"/debug/status",                         // the status site
		"/metrics", "/readyz", "grpc.health.v1", // metrics, readiness, health
		"--redis", "--election", "--parent", "--grace", "SLUICE_", // the store, the tree, the drain, the environment
	} {
		if !strings.Contains(long, want) {
			t.Errorf("sluice server --help does not name %q", want)
		}
	}
}
