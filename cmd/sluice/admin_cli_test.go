package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/admin"
	"github.com/sluice-rl/sluice/admin/adminclient"
	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/internal/tlsutil"
)

const adminCLIConfig = `# the admin CLI's tests
resources:
  - identifier_glob: fair
    capacity: 100
    algorithm: {kind: FAIR_SHARE, lease_length: 60, refresh_interval: 10}
limits:
  resources:
    api:
      domains:
        small: {size: 10, fill_rate: 1} # the small tenant
`

// runAdmin runs `sluice admin --server URL args…` and returns its
// standard output, standard error and whether it succeeded.
func runAdmin(t *testing.T, server string, args ...string) (stdout, stderr string, ok bool) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := exec.Command(binary, append([]string{"admin", "--server", server}, args...)...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Env = append(os.Environ(), "SLUICE_ADMIN_URL=", "SLUICE_ADMIN_TOKEN=")
	err := cmd.Run()
	if _, isExit := err.(*exec.ExitError); err != nil && !isExit {
		t.Fatalf("sluice admin %v: %v", args, err)
	}
	return out.String(), errb.String(), err == nil
}

// mustAdmin is runAdmin that must succeed.
func mustAdmin(t *testing.T, server string, args ...string) string {
	t.Helper()
	out, errs, ok := runAdmin(t, server, args...)
	if !ok {
		t.Fatalf("sluice admin %v failed:\n%s%s", args, out, errs)
	}
	return out
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// sluice admin against a `sluice server --admin-insecure` child process:
// get, set (a YAML file, a JSON file, --set), delete, history, diff,
// rollback byte for byte, a dry run that stores nothing, and an invalid
// change listing every error, one per line, each naming its field.
func TestAdminCLIRoundTrip(t *testing.T) {
	addr, _, path := startServerWith(t, adminCLIConfig, "--admin-insecure")
	srv := "http://" + addr
	versions := map[int]string{1: adminCLIConfig} // the file at each version

	if got := mustAdmin(t, srv, "get"); got != adminCLIConfig {
		t.Fatalf("get: %q, want the file", got)
	}
	if got := mustAdmin(t, srv, "get", "limits/resources/api/domains/small"); got != "{size: 10, fill_rate: 1} # the small tenant\n" {
		t.Errorf("get a domain: %q", got)
	}
	if got := mustAdmin(t, srv, "get", "templates/fair"); !strings.Contains(got, "identifier_glob: fair") {
		t.Errorf("get a template: %q", got)
	}

	// set from a YAML file: a new domain (version 2).
	dir := t.TempDir()
	yml := filepath.Join(dir, "medium.yaml")
	if err := os.WriteFile(yml, []byte("# medium tenants\nsize: 50\nfill_rate: 5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := mustAdmin(t, srv, "--user", "alice", "set", "limits/resources/api/domains/medium", "-f", yml)
	if !strings.HasPrefix(out, "version 2: create limits/resources/api/domains/medium (was version 1)\n") || !strings.Contains(out, "+        medium:") {
		t.Errorf("set -f FILE.yaml:\n%s", out)
	}
	versions[2] = readFile(t, path)
	if !strings.Contains(versions[2], "# medium tenants") {
		t.Errorf("the file after set:\n%s", versions[2])
	}
	// set from a JSON file (version 3), and with --set (version 4).
	js := filepath.Join(dir, "big.json")
	if err := os.WriteFile(js, []byte(`{"size": 500, "fill_rate": 50, "max_idle": "10m"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	mustAdmin(t, srv, "--user", "bob", "set", "limits/resources/api/domains/big", "-f", js)
	versions[3] = readFile(t, path)
	out = mustAdmin(t, srv, "--user", "carol", "set", "limits/resources/api/domains/small", "--set", "fill_rate=2", "--set", "max_debt=1s")
	if !strings.HasPrefix(out, "version 4: update limits/resources/api/domains/small (was version 3)\n") {
		t.Errorf("set --set:\n%s", out)
	}
	versions[4] = readFile(t, path)
	if !strings.Contains(versions[4], "small: {size: 10, fill_rate: 2, max_debt: 1s} # the small tenant") {
		t.Errorf("after --set, the file:\n%s", versions[4])
	}
	// A namespace prefix, whose name ends with '/'.
	mustAdmin(t, srv, "set", "limits/namespaces/open/", "--set", "allow_unconfigured=true")
	versions[5] = readFile(t, path)
	if got := mustAdmin(t, srv, "get", "limits/namespaces/open/"); got != "allow_unconfigured: true\n" {
		t.Errorf("get limits/namespaces/open/: %q", got)
	}
	if got := mustAdmin(t, srv, "get", "limits/resources/api/domains"); got != "limits/resources/api/domains/small\nlimits/resources/api/domains/medium\nlimits/resources/api/domains/big\n" {
		t.Errorf("get a list: %q", got)
	}

	// A dry run shows the normalized result and the diff, storing nothing.
	out = mustAdmin(t, srv, "--dry-run", "set", "limits/resources/api/domains/small", "--set", "fill_rate=0.5")
	for _, want := range []string{"dry run, nothing stored: update limits/resources/api/domains/small against version 5", "normalized:", "  fill_rate: 0.5", "  max_idle: never", "-        small: {size: 10, fill_rate: 2, max_debt: 1s}", "+        small: {size: 10, fill_rate: 0.5, max_debt: 1s}"} {
		if !strings.Contains(out, want) {
			t.Errorf("dry run: no %q in\n%s", want, out)
		}
	}
	if got := readFile(t, path); got != versions[5] {
		t.Errorf("a dry run changed the file:\n%s", got)
	}

	// An invalid change: every error, one per line, naming its field.
	out, errs, ok := runAdmin(t, srv, "set", "limits/resources/api/domains/small", "--set", "fill_rate=0", "--set", "size=-1", "--set", "colour=red")
	lines := strings.Split(strings.TrimSpace(errs), "\n")
	if ok || out != "" || len(lines) != 3 {
		t.Fatalf("an invalid set: ok %v, stdout %q, stderr:\n%s", ok, out, errs)
	}
	for _, field := range []string{"limits.resources.api.domains.small.fill_rate: ", "limits.resources.api.domains.small.size: ", "limits.resources.api.domains.small.colour"} {
		n := 0
		for _, l := range lines {
			if strings.HasPrefix(l, field) || strings.Contains(l, field) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("an invalid set: %d lines name %s:\n%s", n, field, errs)
		}
	}

	// history: newest first, with the users; diff; delete; rollback.
	out = mustAdmin(t, srv, "history")
	hl := strings.Split(strings.TrimSpace(out), "\n")
	if len(hl) != 6 || !strings.HasPrefix(hl[0], "VERSION") || !strings.HasPrefix(hl[1], "5 ") || !strings.HasPrefix(hl[5], "1 ") ||
		!strings.Contains(hl[2], "carol") || !strings.Contains(hl[3], "bob") || !strings.Contains(hl[4], "alice") || !strings.Contains(hl[4], "limits/resources/api/domains/medium") {
		t.Errorf("history:\n%s", out)
	}
	out = mustAdmin(t, srv, "diff", "3", "4")
	if !strings.Contains(out, "-        small: {size: 10, fill_rate: 1} # the small tenant") || !strings.Contains(out, "+        small: {size: 10, fill_rate: 2, max_debt: 1s} # the small tenant") {
		t.Errorf("diff 3 4:\n%s", out)
	}
	out = mustAdmin(t, srv, "delete", "limits/resources/api/domains/medium")
	if !strings.HasPrefix(out, "version 6: delete limits/resources/api/domains/medium") {
		t.Errorf("delete:\n%s", out)
	}
	if _, errs, ok := runAdmin(t, srv, "get", "limits/resources/api/domains/medium"); ok || !strings.Contains(errs, "not found") {
		t.Errorf("get a deleted domain: ok %v, %q", ok, errs)
	}
	out = mustAdmin(t, srv, "rollback", "2")
	if !strings.HasPrefix(out, "version 7: rollback to version 2 (was version 6)") {
		t.Errorf("rollback:\n%s", out)
	}
	if got := readFile(t, path); got != versions[2] {
		t.Errorf("after rollback 2, the file:\n%s\nwant version 2's:\n%s", got, versions[2])
	}
	if got := mustAdmin(t, srv, "diff", "2", "7"); got != "" {
		t.Errorf("diff 2 7: %q, want nothing", got)
	}
}

// Two writers: the CLI reads version N, another writer changes the
// configuration before the CLI's write arrives, and the CLI prints exactly
// "configuration changed since you read it: version N+1 now" and fails;
// the other writer's change stands.
func TestAdminCLIConflict(t *testing.T) {
	addr, _, path := startServerWith(t, adminCLIConfig, "--admin-insecure")
	target, _ := url.Parse("http://" + addr)
	other := adminclient.New("http://"+addr, adminclient.WithForwardedUser("other"))
	var raced atomic.Int32
	proxy := httputil.NewSingleHostReverseProxy(target)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && raced.Add(1) == 1 {
			// The other writer comes first.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := other.Update(ctx, admin.Domain("api", "small"), `{size: 10, fill_rate: 3}`, adminclient.WriteOptions{}); err != nil {
				t.Errorf("the other writer: %v", err)
			}
		}
		proxy.ServeHTTP(w, r)
	}))
	defer front.Close()

	out, errs, ok := runAdmin(t, front.URL, "set", "limits/resources/api/domains/small", "--set", "fill_rate=9")
	if ok || out != "" || errs != "configuration changed since you read it: version 2 now\n" {
		t.Fatalf("a stale write: ok %v, stdout %q, stderr %q", ok, out, errs)
	}
	if got := readFile(t, path); !strings.Contains(got, "small: {size: 10, fill_rate: 3}") {
		t.Errorf("the other writer's change is not in the file:\n%s", got)
	}
	// Read again and retry: it succeeds.
	if out := mustAdmin(t, front.URL, "set", "limits/resources/api/domains/small", "--set", "fill_rate=9"); !strings.HasPrefix(out, "version 3: update") {
		t.Errorf("the retry:\n%s", out)
	}
}

// Writes need credentials: with --admin-token-file, the CLI without a token
// is refused; with --token-file (the server's file format works) or
// $SLUICE_ADMIN_TOKEN, the change is recorded under the token's user.
func TestAdminCLIToken(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("# admins\nalice 0123456789abcdef-alice\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr, _, _ := startServerWith(t, adminCLIConfig, "--admin-token-file", tokens)
	srv := "http://" + addr
	if _, errs, ok := runAdmin(t, srv, "set", "limits/resources/api/domains/small", "--set", "fill_rate=2"); ok || !strings.Contains(errs, "authentication required") {
		t.Fatalf("a write without a token: ok %v, %q", ok, errs)
	}
	mustAdmin(t, srv, "--token-file", tokens, "set", "limits/resources/api/domains/small", "--set", "fill_rate=2")
	cmd := exec.Command(binary, "admin", "--server", srv, "history", "--json")
	cmd.Env = append(os.Environ(), "SLUICE_ADMIN_TOKEN=0123456789abcdef-alice")
	data, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	var es []admin.Audit
	if err := json.Unmarshal(data, &es); err != nil {
		t.Fatalf("history --json: %q: %v", data, err)
	}
	if len(es) != 2 || es[0].User != "alice" || es[0].Auth != "token" {
		t.Errorf("history: %+v", es)
	}
}

// sluice server serves the quota service's REST API on its port, beside
// /admin/v1: quotaservice-cli's add and show against a child process.
func TestServerQuotaServiceAPI(t *testing.T) {
	addr, _, path := startServerWith(t, adminCLIConfig, "--admin-insecure")
	do := func(method, p, body, version string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(method, "http://"+addr+p, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if version != "" {
			req.Header.Set("Version", version)
		}
		req.Header.Set("X-Forwarded-User", "qs-admin")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		return resp, strings.TrimSpace(b.String())
	}
	if resp, body := do("POST", "/api/api/large", `{"size": 1000, "fill_rate": 100}`, "1"); resp.StatusCode != 200 || body != "{}" || resp.Header.Get("Version") != "2" {
		t.Fatalf("add a bucket: %d %s, Version %q", resp.StatusCode, body, resp.Header.Get("Version"))
	}
	if resp, body := do("GET", "/api/api/large", "", ""); resp.StatusCode != 200 || !strings.Contains(body, `"fill_rate":100`) {
		t.Errorf("show it: %d %s", resp.StatusCode, body)
	}
	if resp, body := do("DELETE", "/api/api/large", "", "1"); resp.StatusCode != http.StatusConflict || !strings.Contains(body, "version 2 now") {
		t.Errorf("a stale delete: %d %s", resp.StatusCode, body)
	}
	if got := readFile(t, path); !strings.Contains(got, "large: {size: 1000, fill_rate: 100,") {
		t.Errorf("the file:\n%s", got)
	}
	if out := mustAdmin(t, "http://"+addr, "history"); !strings.Contains(out, "qs-admin") {
		t.Errorf("history:\n%s", out)
	}
}

// Over TLS with client certificates: the CLI (HOST:PORT and --tls-* as
// the other commands take them) writes as the certificate's CN; a
// quotaservice-cli request over HTTPS through a trusted proxy (here
// 127.0.0.1) writes as its X-Forwarded-User.
func TestAdminCLIOverMutualTLS(t *testing.T) {
	certs := testutil.MakeCerts(t)
	addr, _, _ := startServerWith(t, adminCLIConfig, "--tls-cert", certs.ServerCert, "--tls-key", certs.ServerKey, "--tls-client-ca", certs.CA,
		"--admin-trust-forwarded-user", "127.0.0.1")
	tlsArgs := []string{"--tls-ca", certs.CA, "--tls-cert", certs.ClientCert, "--tls-key", certs.ClientKey}
	mustAdmin(t, addr, append(tlsArgs, "set", "limits/resources/api/domains/small", "--set", "fill_rate=2")...)

	cfg, err := tlsutil.Client(certs.CA, certs.ClientCert, certs.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
	req, _ := http.NewRequest("PUT", "https://"+addr+"/api/api/small", strings.NewReader(`{"size": 10, "fill_rate": 4}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Version", "2")
	req.Header.Set("X-Forwarded-User", "qs-operator")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Version") != "3" {
		t.Fatalf("quotaservice-cli's update over HTTPS: %d, Version %q", resp.StatusCode, resp.Header.Get("Version"))
	}
	out := mustAdmin(t, addr, append(tlsArgs, "history", "--json")...)
	var es []admin.Audit
	if err := json.Unmarshal([]byte(out), &es); err != nil {
		t.Fatalf("history --json: %q: %v", out, err)
	}
	if len(es) != 3 || es[0].User != "qs-operator" || es[0].Auth != "forwarded" || es[1].User != "client" || es[1].Auth != "mtls" {
		t.Errorf("history: %+v", es)
	}
	if _, errs, ok := runAdmin(t, addr, "--tls-ca", certs.CA, "history"); ok {
		t.Errorf("a client without a certificate was served: %q", errs)
	}
}

// The CLI's object paths: names as written, '%' for path-escaped ones.
func TestParseAdminObject(t *testing.T) {
	cases := []struct {
		path string
		want admin.Object
	}{
		{"", admin.Object{}},
		{"config", admin.Object{}},
		{"templates", admin.Object{Kind: admin.KindTemplate}},
		{"templates/db/*", admin.Template("db/*")},
		{"templates/db%2F%2A", admin.Template("db/*")},
		{"limits/resources", admin.Object{Kind: admin.KindResource}},
		{"limits/resources/api", admin.Resource("api")},
		{"limits/resources/api/", admin.Resource("api")},
		{"limits/resources/api/search", admin.Resource("api/search")},
		{"limits/resources/api/domains", admin.Object{Kind: admin.KindDomain, Name: "api"}},
		{"limits/resources/api/domains/", admin.Object{Kind: admin.KindDomain, Name: "api"}},
		{"limits/resources/api/domains/small", admin.Domain("api", "small")},
		{"limits/resources/api/domains/rate_limit/10.0.0.1", admin.Domain("api", "rate_limit/10.0.0.1")},
		{"limits/resources/api%2Fsearch/domains/x", admin.Domain("api/search", "x")},
		{"limits/resources/api/default", admin.Object{Kind: admin.KindDefault, Name: "api"}},
		{"limits/resources/api/template", admin.Object{Kind: admin.KindBucketTemplate, Name: "api"}},
		{"limits/namespaces", admin.Object{Kind: admin.KindNamespace}},
		{"limits/namespaces/open/", admin.Namespace("open/")},
		{"limits/global_default", admin.GlobalDefault()},
		{"/admin/v1/limits/global_default", admin.GlobalDefault()},
	}
	for _, c := range cases {
		got, err := parseAdminObject(c.path)
		if err != nil || got != c.want {
			t.Errorf("%q: %+v, %v; want %+v", c.path, got, err, c.want)
		}
	}
	for _, bad := range []string{"limits", "limits/resources//domains/x", "resources/api", "limits/other"} {
		if o, err := parseAdminObject(bad); err == nil {
			t.Errorf("%q: %+v, want an error", bad, o)
		}
	}
}
