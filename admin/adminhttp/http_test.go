package adminhttp_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/admin"
	"github.com/sluice-rl/sluice/admin/adminclient"
	"github.com/sluice-rl/sluice/admin/adminhttp"
	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/internal/testutil/admintest"
	"github.com/sluice-rl/sluice/internal/tlsutil"
)

const serverDoc = `# limits for the admin API's tests
limits:
  resources:
    api:
      domains:
        big: {size: 100, fill_rate: 50} # the big tenant
        shared: {size: 1000, fill_rate: 1}
`

// call makes one request and decodes its JSON answer into out (if not
// nil); it returns the status.
func call(t *testing.T, hc *http.Client, method, url string, body string, hdr map[string]string, out any) int {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: %d %q: %v", method, url, resp.StatusCode, data, err)
		}
	}
	return resp.StatusCode
}

// allowLimit asks the server's Limits API (Connect JSON) for a admintest.Token of
// api/domain and returns the bucket's size it answers with.
func allowLimit(t *testing.T, ts *admintest.Server, domain string) int64 {
	t.Helper()
	var resp struct {
		Limit  string `json:"limit"`
		Status string `json:"status"`
	}
	code := call(t, nil, http.MethodPost, ts.URL+"/sluice.v1.Limits/Allow", fmt.Sprintf(`{"resource": "api", "domain": %q, "tokens": 1}`, domain),
		map[string]string{"Content-Type": "application/json"}, &resp)
	if code != http.StatusOK {
		t.Fatalf("Allow: %d", code)
	}
	n, _ := strconv.ParseInt(resp.Limit, 10, 64)
	return n
}

// The HTTP API on a server's port: a change with If-Match is stored in the
// file, which the server reloads and applies (an Allow answer shows the
// new size); a stale one gets 409 with the current version; an invalid
// one 400 with every error; a dry run stores nothing; history, diff and
// rollback.
func TestHTTPAPI(t *testing.T) {
	ts := admintest.Start(t, serverDoc, adminhttp.AuthOptions{TokenFile: admintest.TokenFile(t, "alice "+admintest.Token+"\n")}, nil)
	auth := map[string]string{"Authorization": "Bearer " + admintest.Token, "Content-Type": "application/json"}
	if got := allowLimit(t, ts, "big"); got != 100 {
		t.Fatalf("Allow before: limit %d, want 100", got)
	}
	var cur admin.Current
	if code := call(t, nil, "GET", ts.URL+"/admin/v1/config", "", nil, &cur); code != 200 || cur.Version != 1 || cur.Document != serverDoc {
		t.Fatalf("GET config: %d %+v", code, cur)
	}
	var view admin.ObjectView
	if code := call(t, nil, "GET", ts.URL+"/admin/v1/limits/resources/api/domains/big", "", nil, &view); code != 200 || view.Effective.(map[string]any)["wait_timeout"] != "1s" {
		t.Fatalf("GET bucket: %d %+v", code, view)
	}

	// A dry run: the normalized bucket and the diff, nothing stored.
	var res admin.Result
	h := map[string]string{"If-Match": `"1"`}
	for k, v := range auth {
		h[k] = v
	}
	if code := call(t, nil, "PUT", ts.URL+"/admin/v1/limits/resources/api/domains/big?dry_run=true", `{"size": 7, "fill_rate": 1}`, h, &res); code != 200 || !res.DryRun || res.Version != 1 ||
		!strings.Contains(res.Diff, "-        big: {size: 100, fill_rate: 50} # the big tenant\n+        big: {size: 7, fill_rate: 1} # the big tenant\n") || !strings.Contains(res.Document, "big: {size: 7") {
		t.Fatalf("dry run: %d %+v", code, res)
	}
	if got := mustRead(t, ts.Path); got != serverDoc {
		t.Fatalf("the dry run changed the file:\n%s", got)
	}
	// The change itself.
	if code := call(t, nil, "PUT", ts.URL+"/admin/v1/limits/resources/api/domains/big", `{"size": 7, "fill_rate": 1}`, h, &res); code != 200 || res.Version != 2 || res.Audit.User != "alice" {
		t.Fatalf("PUT: %d %+v", code, res)
	}
	took := testutil.Eventually(t, 20*time.Second, "the server applies the change", func() bool { return allowLimit(t, ts, "big") == 7 })
	t.Logf("accepted change applied by the server (file watch) in %v", took)

	// A stale version: 409, the message, the current version.
	var eb adminhttp.ErrorBody
	if code := call(t, nil, "PUT", ts.URL+"/admin/v1/limits/resources/api/domains/big", `{"size": 8, "fill_rate": 1}`, h, &eb); code != 409 ||
		eb.Error != "configuration changed since you read it: version 2 now" || eb.Version != 2 || eb.Code != "conflict" {
		t.Fatalf("stale PUT: %d %+v", code, eb)
	}
	// Invalid: 400, every error naming its field.
	eb = adminhttp.ErrorBody{}
	if code := call(t, nil, "POST", ts.URL+"/admin/v1/limits/resources/api/domains/new?version=2", `{"size": 0, "fill_rate": 0, "nonsense": 1}`, auth, &eb); code != 400 || eb.Code != "invalid" || len(eb.Errors) != 3 {
		t.Fatalf("invalid POST: %d %+v", code, eb)
	}
	for i, w := range []string{"limits.resources.api.domains.new.nonsense: unknown field", "limits.resources.api.domains.new.size: 0 must be", "limits.resources.api.domains.new.fill_rate: 0 must be"} {
		if !strings.HasPrefix(eb.Errors[i], w) {
			t.Errorf("error %d: %q, want %q…", i, eb.Errors[i], w)
		}
	}
	eb = adminhttp.ErrorBody{}
	if code := call(t, nil, "POST", ts.URL+"/admin/v1/limits/resources/api/domains/new", `{"size": 1, "size": 2}`, auth, &eb); code != 400 || len(eb.Errors) != 1 || eb.Errors[0] != "body.size: given more than once" {
		t.Fatalf("a duplicate field: %d %+v", code, eb)
	}
	if code := call(t, nil, "POST", ts.URL+"/admin/v1/limits/resources/api/domains/big", `{"size": 1}`, auth, &eb); code != 409 || eb.Code != "exists" {
		t.Fatalf("create of an existing bucket: %d %+v", code, eb)
	}
	if code := call(t, nil, "DELETE", ts.URL+"/admin/v1/limits/resources/nothing", "", auth, &eb); code != 404 || eb.Code != "not_found" {
		t.Fatalf("delete of an absent resource: %d %+v", code, eb)
	}
	if code := call(t, nil, "PUT", ts.URL+"/admin/v1/limits/resources/api/domains/big", `{"size": 1}`, map[string]string{"Authorization": "Bearer " + admintest.Token, "If-Match": "yesterday"}, &eb); code != 400 || !strings.Contains(eb.Error, "If-Match") {
		t.Fatalf("a bad If-Match: %d %+v", code, eb)
	}
	// A YAML body, then a rollback to version 1: the file byte for byte.
	if code := call(t, nil, "POST", ts.URL+"/admin/v1/limits/resources/api%2Fv2", "domains:\n  x: {size: 3, fill_rate: 1} # three\n", map[string]string{"Authorization": "Bearer " + admintest.Token, "Content-Type": "application/yaml"}, &res); code != 200 || res.Version != 3 {
		t.Fatalf("POST YAML: %d %+v", code, res)
	}
	if !strings.Contains(mustRead(t, ts.Path), "    api/v2:\n      domains:\n        x: {size: 3, fill_rate: 1} # three\n") {
		t.Errorf("the file:\n%s", mustRead(t, ts.Path))
	}
	var hist adminhttp.HistoryBody
	if code := call(t, nil, "GET", ts.URL+"/admin/v1/history", "", nil, &hist); code != 200 || len(hist.Entries) != 3 || hist.Entries[0].Object != "limits/resources/api%2Fv2" {
		t.Fatalf("history: %d %+v", code, hist)
	}
	var diff adminhttp.DiffBody
	if code := call(t, nil, "GET", ts.URL+"/admin/v1/diff?from=1&to=2", "", nil, &diff); code != 200 || !strings.Contains(diff.Diff, "-        big: {size: 100, fill_rate: 50} # the big tenant\n+        big: {size: 7, fill_rate: 1} # the big tenant\n") {
		t.Fatalf("diff: %d %+v", code, diff)
	}
	if code := call(t, nil, "POST", ts.URL+"/admin/v1/rollback/1", "", map[string]string{"Authorization": "Bearer " + admintest.Token, "If-Match": "3"}, &res); code != 200 || res.Version != 4 || res.From != 1 {
		t.Fatalf("rollback: %d %+v", code, res)
	}
	if got := mustRead(t, ts.Path); got != serverDoc {
		t.Fatalf("after the rollback the file is\n%s", got)
	}
	testutil.Eventually(t, 20*time.Second, "the server applies the rollback", func() bool { return allowLimit(t, ts, "big") == 100 })
	// The audit log names the user of each change.
	lines := ts.Log.Changes(t)
	if len(lines) != 3 {
		t.Fatalf("%d audit lines, want 3", len(lines))
	}
	for i, l := range lines {
		if l["user"] != "alice" || l["auth"] != "token" || l["version"] != float64(i+2) || l["diff"] == "" || l["time"] == "" || l["object"] == "" {
			t.Errorf("audit line %d: %v", i, l)
		}
	}
}

// Writes need credentials; reads do not, unless AuthReads.
func TestHTTPAuth(t *testing.T) {
	loopback := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	elsewhere := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	tokens := admintest.TokenFile(t, "# operators\nalice "+admintest.Token+"  # alice's\nbob bob-admintest.Token-0123456789\n")
	put := func(ts *admintest.Server, hdr map[string]string) (int, adminhttp.ErrorBody, admin.Result) {
		var raw json.RawMessage
		code := call(t, nil, "PUT", ts.URL+"/admin/v1/limits/resources/api/domains/shared", fmt.Sprintf(`{"size": %d, "fill_rate": 1}`, time.Now().UnixNano()%1000+1), hdr, &raw)
		var eb adminhttp.ErrorBody
		var res admin.Result
		_ = json.Unmarshal(raw, &eb)
		_ = json.Unmarshal(raw, &res)
		return code, eb, res
	}
	// Without AuthOptions.Setting, the answers name server.Config's fields.
	const disabled = "the admin write path is disabled: start the server with Admin.TokenFile, Listen.TLS.CAFile, Admin.TrustForwarded or Admin.Insecure"
	cases := []struct {
		name     string
		opts     adminhttp.AuthOptions
		hdr      map[string]string
		code     int
		user     string
		method   string
		errorHas string
	}{
		{"nothing configured", adminhttp.AuthOptions{}, nil, 403, "", "", disabled},
		{"nothing configured, a token", adminhttp.AuthOptions{}, map[string]string{"Authorization": "Bearer " + admintest.Token}, 403, "", "", disabled},
		{"token", adminhttp.AuthOptions{TokenFile: tokens}, map[string]string{"Authorization": "Bearer " + admintest.Token}, 200, "alice", "token", ""},
		{"another token", adminhttp.AuthOptions{TokenFile: tokens}, map[string]string{"Authorization": "Bearer bob-admintest.Token-0123456789"}, 200, "bob", "token", ""},
		{"bad token", adminhttp.AuthOptions{TokenFile: tokens}, map[string]string{"Authorization": "Bearer nope"}, 401, "", "", "unknown bearer token"},
		{"no token", adminhttp.AuthOptions{TokenFile: tokens}, nil, 401, "", "", "authentication required"},
		{"basic auth", adminhttp.AuthOptions{TokenFile: tokens}, map[string]string{"Authorization": "Basic YTpi"}, 401, "", "", "want Bearer"},
		{"forwarded, trusted", adminhttp.AuthOptions{TrustForwarded: loopback}, map[string]string{"X-Forwarded-User": "carol"}, 200, "carol", "forwarded", ""},
		{"forwarded, untrusted", adminhttp.AuthOptions{TrustForwarded: elsewhere}, map[string]string{"X-Forwarded-User": "carol"}, 401, "", "", "authentication required"},
		{"forwarded, bad name", adminhttp.AuthOptions{TrustForwarded: loopback}, map[string]string{"X-Forwarded-User": "carol smith"}, 401, "", "", "X-Forwarded-User"},
		{"insecure loopback", adminhttp.AuthOptions{Insecure: true}, nil, 200, "anonymous", "insecure", ""},
		{"insecure loopback, named", adminhttp.AuthOptions{Insecure: true}, map[string]string{"X-Forwarded-User": "dave"}, 200, "dave", "insecure", ""},
		{"insecure and a bad token", adminhttp.AuthOptions{Insecure: true, TokenFile: tokens}, map[string]string{"Authorization": "Bearer nope"}, 401, "", "", "unknown bearer token"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ts := admintest.Start(t, serverDoc, c.opts, nil)
			code, eb, res := put(ts, c.hdr)
			if code != c.code {
				t.Fatalf("PUT: %d %+v, want %d", code, eb, c.code)
			}
			if c.errorHas != "" && !strings.Contains(eb.Error, c.errorHas) {
				t.Errorf("error %q lacks %q", eb.Error, c.errorHas)
			}
			lines := ts.Log.Changes(t)
			if c.code != 200 {
				if len(lines) != 0 || mustRead(t, ts.Path) != serverDoc {
					t.Errorf("a refused write changed something: %v", lines)
				}
				return
			}
			if res.Audit == nil || res.Audit.User != c.user || res.Audit.Auth != c.method {
				t.Errorf("audit record %+v, want user %q by %s", res.Audit, c.user, c.method)
			}
			if len(lines) != 1 || lines[0]["user"] != c.user || lines[0]["auth"] != c.method {
				t.Errorf("audit log %v, want user %q by %s", lines, c.user, c.method)
			}
			// Reads are open.
			if code := call(t, nil, "GET", ts.URL+"/admin/v1/config", "", nil, nil); code != 200 {
				t.Errorf("GET config without credentials: %d", code)
			}
		})
	}
	t.Run("reads authenticated", func(t *testing.T) {
		ts := admintest.Start(t, serverDoc, adminhttp.AuthOptions{TokenFile: tokens, AuthReads: true}, nil)
		if code := call(t, nil, "GET", ts.URL+"/admin/v1/config", "", nil, nil); code != 401 {
			t.Errorf("GET without a admintest.Token: %d, want 401", code)
		}
		if code := call(t, nil, "GET", ts.URL+"/admin/v1/config", "", map[string]string{"Authorization": "Bearer " + admintest.Token}, nil); code != 200 {
			t.Errorf("GET with a admintest.Token: %d, want 200", code)
		}
	})
	t.Run("token file reloaded", func(t *testing.T) {
		f := admintest.TokenFile(t, "alice "+admintest.Token+"\n")
		ts := admintest.Start(t, serverDoc, adminhttp.AuthOptions{TokenFile: f}, nil)
		if err := os.WriteFile(f, []byte("erin erin-admintest.Token-0123456789\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		// The modification time may not move within its granularity.
		future := time.Now().Add(time.Minute)
		_ = os.Chtimes(f, future, future)
		if code, eb, _ := put(ts, map[string]string{"Authorization": "Bearer " + admintest.Token}); code != 401 {
			t.Errorf("a removed admintest.Token: %d %+v", code, eb)
		}
		if code, eb, res := put(ts, map[string]string{"Authorization": "Bearer erin-admintest.Token-0123456789"}); code != 200 || res.Audit.User != "erin" {
			t.Errorf("a new admintest.Token: %d %+v", code, eb)
		}
	})
}

// With --tls-client-ca the client certificate's subject CN is the user.
func TestHTTPMutualTLS(t *testing.T) {
	certs := testutil.MakeCerts(t)
	scfg, err := tlsutil.Server(certs.ServerCert, certs.ServerKey, certs.CA)
	if err != nil {
		t.Fatal(err)
	}
	ts := admintest.Start(t, serverDoc, adminhttp.AuthOptions{ClientCerts: true}, scfg)
	ccfg, err := tlsutil.Client(certs.CA, certs.ClientCert, certs.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	for _, h2 := range []bool{false, true} {
		tr := &http.Transport{TLSClientConfig: ccfg.Clone(), ForceAttemptHTTP2: h2}
		if !h2 {
			tr.TLSClientConfig.NextProtos = []string{"http/1.1"}
		}
		c := adminclient.New(ts.URL, adminclient.WithHTTPClient(&http.Client{Transport: tr}))
		res, err := c.Update(context.Background(), admin.Domain("api", "shared"), map[string]any{"size": 5 + btoi(h2), "fill_rate": 1}, adminclient.WriteOptions{})
		if err != nil {
			t.Fatalf("HTTP/2 %v: %v", h2, err)
		}
		if res.Audit.User != "client" || res.Audit.Auth != "mtls" {
			t.Errorf("HTTP/2 %v: audit %+v, want user client (the certificate's CN) by mtls", h2, res.Audit)
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Acceptance: 20 clients read the same bucket's version and each changes
// it from that version: exactly one succeeds per version, the others get
// 409; retrying from the version the 409 names, every change lands once.
func TestConcurrentWriters(t *testing.T) {
	ts := admintest.Start(t, serverDoc, adminhttp.AuthOptions{Insecure: true}, nil)
	const writers = 20
	ctx := context.Background()
	var (
		ready, start sync.WaitGroup
		mu           sync.Mutex
		wins         = map[int64]string{} // version → the writer that made it
		conflicts    int
		firstRound   []error
	)
	ready.Add(writers)
	start.Add(1)
	var done sync.WaitGroup
	for i := range writers {
		done.Add(1)
		go func() {
			defer done.Done()
			name := fmt.Sprintf("writer-%02d", i)
			c := adminclient.New(ts.URL, adminclient.WithForwardedUser(name))
			first := true
			var once sync.Once
			defer once.Do(ready.Done) // even if the first Get fails
			for {
				v, ver, err := c.Get(ctx, admin.Domain("api", "shared"))
				if err != nil {
					t.Errorf("%s: Get: %v", name, err)
					return
				}
				if first {
					once.Do(ready.Done)
					start.Wait() // every writer has read the same version
				}
				size := v.Value.(map[string]any)["size"].(float64)
				res, err := c.Update(ctx, admin.Domain("api", "shared"), map[string]any{"size": int64(size) + 1, "fill_rate": 1}, adminclient.WriteOptions{IfVersion: ver})
				mu.Lock()
				if first {
					firstRound = append(firstRound, err)
				}
				first = false
				var ce *admin.ConflictError
				switch {
				case errors.As(err, &ce):
					conflicts++
					mu.Unlock()
					if ce.Current <= ver {
						t.Errorf("%s: a 409 naming version %d, not newer than %d", name, ce.Current, ver)
						return
					}
					continue
				case err != nil:
					mu.Unlock()
					t.Errorf("%s: %v", name, err)
					return
				}
				if other, dup := wins[res.Version]; dup {
					t.Errorf("version %d made by %s and %s", res.Version, other, name)
				}
				wins[res.Version] = name
				mu.Unlock()
				return
			}
		}()
	}
	ready.Wait()
	start.Done()
	done.Wait()
	ok := 0
	for _, err := range firstRound {
		if err == nil {
			ok++
		}
	}
	if ok != 1 || len(firstRound) != writers {
		t.Errorf("from one version: %d of %d writers succeeded, want exactly 1", ok, len(firstRound))
	}
	if len(wins) != writers {
		t.Fatalf("%d changes stored, want %d", len(wins), writers)
	}
	for v := int64(2); v <= writers+1; v++ {
		if wins[v] == "" {
			t.Errorf("version %d: nobody made it", v)
		}
	}
	c := adminclient.New(ts.URL)
	v, ver, err := c.Get(ctx, admin.Domain("api", "shared"))
	if err != nil || ver != writers+1 || v.Value.(map[string]any)["size"] != float64(1000+writers) {
		t.Errorf("after %d increments: %v at version %d (%v), want size %d at version %d", writers, v.Value, ver, err, 1000+writers, writers+1)
	}
	hist, _ := c.History(ctx)
	users := map[string]bool{}
	for _, a := range hist[:writers] {
		users[a.User] = true
	}
	if len(users) != writers {
		t.Errorf("the history names %d writers, want %d", len(users), writers)
	}
	t.Logf("%d writers, %d changes, %d conflicts (409)", writers, len(wins), conflicts)
}

func mustRead(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
