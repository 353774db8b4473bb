package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/admin"
	"github.com/sluice-rl/sluice/admin/adminclient"
	"github.com/sluice-rl/sluice/admin/adminhttp"
	v1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/internal/testutil/etcdtest"
)

// adminProc is a `sluice server` whose JSON log (level info: the audit
// lines) is kept.
type adminProc struct {
	name, addr string
	cmd        *exec.Cmd
	done       chan struct{}
	mu         sync.Mutex
	lines      []string
}

func startAdminProc(t *testing.T, name string, args ...string) *adminProc {
	t.Helper()
	args = append(args, "--listen", "127.0.0.1:0", "--log-level", "info", "--log-format", "json")
	p := &adminProc{name: name, cmd: exec.Command(binary, args...), done: make(chan struct{})}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	logDone := make(chan struct{})
	go func() {
		defer close(logDone)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 0, 1<<16), 1<<22)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			p.mu.Unlock()
			if os.Getenv("SLUICE_TEST_LOG") != "" {
				fmt.Fprintf(os.Stderr, "%s: %s\n", name, sc.Text())
			}
		}
	}()
	go func() {
		<-logDone
		_ = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	p.addr = testutil.ReadAddr(t, name, stdout)
	return p
}

// stop stops the server with SIGTERM and waits for it.
func (p *adminProc) stop(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not exit 30 s after SIGTERM", p.name)
	}
}

// logged returns a copy of the server's log lines so far.
func (p *adminProc) logged() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.lines)
}

// audits returns the server's audit lines.
func (p *adminProc) audits(t *testing.T) []map[string]any {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []map[string]any
	for _, l := range p.lines {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == "configuration changed" {
			out = append(out, m)
		}
	}
	return out
}

// configHash returns the hash of the configuration the server at addr
// applies (its status page), "" if it does not answer.
func configHash(hc *http.Client, addr string) string {
	resp, err := hc.Get("http://" + addr + "/debug/status?format=json&limit=1")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var st struct {
		Config *struct {
			Hash string `json:"hash"`
		} `json:"config"`
	}
	if json.NewDecoder(resp.Body).Decode(&st) != nil || st.Config == nil {
		return ""
	}
	return st.Config.Hash
}

const adminEtcdDoc = `# shared by every server watching the key
resources:
  - identifier_glob: "db/*"
    capacity: 100
    algorithm: {kind: FAIR_SHARE, lease_length: 60, refresh_interval: 10}
limits:
  resources:
    api:
      domains:
        tenant: {size: 100, fill_rate: 10} # the tenant under watch
`

// docs/admin.md, "Where the configuration lives": two servers watch one etcd key; a change through
// the admin API of either is applied by both. The time from the accepted
// write to both applying it (their status pages showing the new
// document's hash) is measured over 20 changes. Writes without a token
// are refused; the audit log names the user of each change; a restart of
// both keeps every change, and a rollback restores version 1 byte for
// byte.
func TestAdminTwoServersOneEtcdKey(t *testing.T) {
	e := etcdtest.StartEtcd(t)
	cli := e.Client(t)
	const key = "/sluice/config"
	ctx := context.Background()
	if _, err := cli.Put(ctx, key, adminEtcdDoc); err != nil {
		t.Fatal(err)
	}
	const token = "alice-0123456789abcdef"
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("alice "+token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"server", "--config", "etcd:" + key, "--etcd-endpoints", e.Endpoint, "--admin-token-file", tokens}
	servers := []*adminProc{startAdminProc(t, "a", args...), startAdminProc(t, "b", args...)}
	hc := &http.Client{Timeout: 5 * time.Second}
	want := admin.Hash([]byte(adminEtcdDoc))
	for _, s := range servers {
		testutil.Eventually(t, 30*time.Second, s.name+" serves the key's configuration", func() bool { return configHash(hc, s.addr) == want })
	}

	// No credentials: refused, nothing changed.
	anon := adminclient.New("http://" + servers[0].addr)
	var ae *adminhttp.AuthError
	if _, err := anon.Update(ctx, admin.Domain("api", "tenant"), map[string]any{"size": 1}, adminclient.WriteOptions{}); !errors.As(err, &ae) || ae.Status != 401 {
		t.Fatalf("a write without a token: %v, want 401", err)
	}

	const changes = 20
	var lat []time.Duration
	var lastHash string
	for i := range changes {
		via := servers[i%2]
		c := adminclient.New("http://"+via.addr, adminclient.WithToken(token), adminclient.WithHTTPClient(hc))
		cur, err := c.Config(ctx)
		if err != nil {
			t.Fatal(err)
		}
		res, err := c.Update(ctx, admin.Domain("api", "tenant"), map[string]any{"size": 200 + i, "fill_rate": 10}, adminclient.WriteOptions{IfVersion: cur.Version})
		accepted := time.Now()
		if err != nil {
			t.Fatalf("change %d through %s: %v", i, via.name, err)
		}
		if res.Version != cur.Version+1 {
			t.Fatalf("change %d: version %d after %d", i, res.Version, cur.Version)
		}
		var wg sync.WaitGroup
		applied := make([]time.Duration, len(servers))
		for j, s := range servers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				deadline := accepted.Add(30 * time.Second)
				for time.Now().Before(deadline) {
					if configHash(hc, s.addr) == res.Hash {
						applied[j] = time.Since(accepted)
						return
					}
					time.Sleep(time.Millisecond)
				}
				applied[j] = -1
			}()
		}
		wg.Wait()
		for j, d := range applied {
			if d < 0 {
				t.Fatalf("change %d: %s did not apply it within 30 s", i, servers[j].name)
			}
		}
		lat = append(lat, max(applied[0], applied[1]))
		lastHash = res.Hash
	}
	slices.Sort(lat)
	t.Logf("accepted change → applied by both servers, over %d changes through either: p50 %v, max %v (min %v; status pages polled every 1 ms)",
		changes, lat[len(lat)/2].Round(10*time.Microsecond), lat[len(lat)-1].Round(10*time.Microsecond), lat[0].Round(10*time.Microsecond))
	if lat[len(lat)-1] > 10*time.Second {
		t.Errorf("the slowest change took %v to reach both servers", lat[len(lat)-1])
	}
	// Both Allow with the last size.
	for _, s := range servers {
		if got := allowLimitAt(t, s.addr, "tenant"); got != 200+changes-1 {
			t.Errorf("%s: Allow says the bucket holds %d, want %d", s.name, got, 200+changes-1)
		}
	}
	// The audit log names the user of each change, on the server that took it.
	for _, s := range servers {
		lines := s.audits(t)
		if len(lines) != changes/2 {
			t.Errorf("%s: %d audit lines, want %d", s.name, len(lines), changes/2)
		}
		for _, l := range lines {
			if l["user"] != "alice" || l["auth"] != "token" || l["object"] != "limits/resources/api/domains/tenant" || !strings.Contains(l["diff"].(string), "tenant: {") {
				t.Errorf("%s: audit line %v", s.name, l)
			}
		}
	}

	// A restart of every server keeps every change.
	before, _ := adminclient.New("http://" + servers[0].addr).Config(ctx)
	for _, s := range servers {
		s.stop(t)
	}
	servers = []*adminProc{startAdminProc(t, "a2", args...), startAdminProc(t, "b2", args...)}
	for _, s := range servers {
		testutil.Eventually(t, 30*time.Second, s.name+" serves the last change after the restart", func() bool { return configHash(hc, s.addr) == lastHash })
		after, err := adminclient.New("http://" + s.addr).Config(ctx)
		if err != nil || after.Version != before.Version || after.Document != before.Document || after.Version != changes+1 {
			t.Errorf("%s after the restart: version %d (%v), want %d and the same document", s.name, after.Version, err, before.Version)
		}
	}
	hist, err := adminclient.New("http://" + servers[1].addr).History(ctx)
	if err != nil || len(hist) != changes+1 || hist[0].Version != changes+1 {
		t.Fatalf("history after the restart: %d entries, %v", len(hist), err)
	}
	// Rollback to version 1 through b2: the document byte for byte, on both.
	c := adminclient.New("http://"+servers[1].addr, adminclient.WithToken(token))
	res, err := c.Rollback(ctx, 1, adminclient.WriteOptions{IfVersion: changes + 1})
	if err != nil || res.Version != changes+2 || res.Hash != want {
		t.Fatalf("rollback: %+v %v", res, err)
	}
	got, err := cli.Get(ctx, key)
	if err != nil || string(got.Kvs[0].Value) != adminEtcdDoc {
		t.Fatalf("after the rollback the key holds %q (%v)", got.Kvs[0].Value, err)
	}
	for _, s := range servers {
		testutil.Eventually(t, 30*time.Second, s.name+" applies the rollback", func() bool { return configHash(hc, s.addr) == want })
		if got := allowLimitAt(t, s.addr, "tenant"); got != 100 {
			t.Errorf("%s: Allow says %d after the rollback, want 100", s.name, got)
		}
	}
	// A stale rollback: 409 with the message.
	_, err = c.Rollback(ctx, 2, adminclient.WriteOptions{IfVersion: changes + 1})
	if err == nil || err.Error() != fmt.Sprintf("configuration changed since you read it: version %d now", changes+2) {
		t.Errorf("a stale rollback: %v", err)
	}
}

// allowLimitAt asks the server at addr for a token of api/domain (Connect
// JSON) and returns the bucket size it answers with.
func allowLimitAt(t *testing.T, addr, domain string) int {
	t.Helper()
	resp, err := http.Post("http://"+addr+"/sluice.v1.Limits/Allow", "application/json",
		strings.NewReader(fmt.Sprintf(`{"resource": "api", "domain": %q, "tokens": 1}`, domain)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		Limit string `json:"limit"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(r.Limit)
	return n
}

// A server without any way of authenticating writers says why it refuses
// them; with --admin-insecure it takes loopback writes and warns at start.
func TestAdminWritePathFlags(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte(adminEtcdDoc), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// The refusal names sluice server's flags (Config.Runtime.Setting).
	const disabled = "the admin write path is disabled: start the server with --admin-token-file, --tls-client-ca, --admin-trust-forwarded-user or --admin-insecure"
	closed := startAdminProc(t, "closed", "server", "--config", cfg)
	_, err := adminclient.New("http://"+closed.addr).Update(ctx, admin.Domain("api", "tenant"), map[string]any{"size": 1}, adminclient.WriteOptions{})
	var ae *adminhttp.AuthError
	if !errors.As(err, &ae) || ae.Status != 403 || ae.Msg != disabled {
		t.Errorf("a write to a server without admin flags: %v", err)
	}
	closed.stop(t)
	open := startAdminProc(t, "open", "server", "--config", cfg, "--admin-insecure")
	res, err := adminclient.New("http://"+open.addr, adminclient.WithForwardedUser("dev")).Update(ctx, admin.Domain("api", "tenant"), map[string]any{"size": 5, "fill_rate": 1}, adminclient.WriteOptions{IfVersion: 1})
	if err != nil || res.Audit.User != "dev" || res.Audit.Auth != "insecure" {
		t.Fatalf("an insecure loopback write: %+v %v", res, err)
	}
	testutil.Eventually(t, 30*time.Second, "the server applies the file's change", func() bool { return allowLimitAt(t, open.addr, "tenant") == 5 })
	warned := slices.ContainsFunc(open.logged(), func(l string) bool {
		return strings.Contains(l, `"level":"WARN"`) && strings.Contains(l, "--admin-insecure")
	})
	if !warned {
		t.Error("no warning at start for --admin-insecure")
	}
	if _, err := os.Stat(cfg + ".history/2.json"); err != nil {
		t.Errorf("the file's history: %v", err)
	}
}

// Read-your-writes (docs/admin.md): a change the admin API answered 2xx for
// has been applied by the server that accepted it. 100 times in a row, on
// a file and on an etcd key: quotaservice-cli's add of a namespace with a
// dynamic bucket template, then at once an Allow on it, granted; its
// remove, then at once an Allow, refused (no bucket).
func TestAdminReadYourWrites(t *testing.T) {
	e := etcdtest.StartEtcd(t)
	cli := e.Client(t)
	const key = "/sluice/ryw"
	if _, err := cli.Put(t.Context(), key, adminCLIConfig); err != nil {
		t.Fatal(err)
	}
	fileAddr, _, _ := startServerWith(t, adminCLIConfig, "--admin-insecure")
	etcdServer := startAdminProc(t, "etcd", "server", "--config", "etcd:"+key, "--etcd-endpoints", e.Endpoint, "--admin-insecure")
	for _, tc := range []struct{ mode, addr string }{{"file", fileAddr}, {"etcd", etcdServer.addr}} {
		t.Run(tc.mode, func(t *testing.T) {
			// Two servers of their own, each waiting on its own store's
			// writes: the two run side by side.
			t.Parallel()
			c := v1.NewLimitsClient(testutil.Dial(t, tc.addr))
			testutil.Eventually(t, 30*time.Second, "the server answers", func() bool {
				_, err := c.Allow(t.Context(), &v1.AllowRequest{Resource: "api", Domain: "small"})
				return err == nil
			})
			do := func(method, path, body string) {
				t.Helper()
				req, _ := http.NewRequestWithContext(t.Context(), method, "http://"+tc.addr+"/api/"+path, strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("%s /api/%s: %d %s", method, path, resp.StatusCode, b)
				}
			}
			allow := func(ns string) v1.AllowResponse_Status {
				t.Helper()
				r, err := c.Allow(t.Context(), &v1.AllowRequest{Resource: ns, Domain: "user"})
				if err != nil {
					t.Fatal(err)
				}
				return r.GetStatus()
			}
			for i := range 100 {
				ns := fmt.Sprintf("ns%d", i)
				do("POST", ns, `{"dynamic_bucket_template": {"size": 10, "fill_rate": 1}}`)
				if got := allow(ns); got != v1.AllowResponse_OK {
					t.Fatalf("write %d: Allow on the namespace just added answered %v", i, got)
				}
				do("DELETE", ns, "")
				if got := allow(ns); got == v1.AllowResponse_OK {
					t.Fatalf("write %d: Allow on the namespace just removed answered %v", i, got)
				}
			}
		})
	}
}
