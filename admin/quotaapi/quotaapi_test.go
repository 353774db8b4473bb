package quotaapi_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/admin/adminhttp"
	"github.com/sluice-rl/sluice/admin/quotaapi"
	"github.com/sluice-rl/sluice/internal/testutil/admintest"
)

// qsAnswer is one answer of the REST API.
type qsAnswer struct {
	status  int
	version string // the Version header
	body    []byte
}

func (a qsAnswer) decode(t *testing.T, out any) {
	t.Helper()
	if err := json.Unmarshal(a.body, out); err != nil {
		t.Fatalf("answer %d %q: %v", a.status, a.body, err)
	}
}

// errorObject decodes an error answer, checking its shape: exactly
// "error" (the status text) and "description".
func (a qsAnswer) errorObject(t *testing.T) string {
	t.Helper()
	var m map[string]string
	a.decode(t, &m)
	if len(m) != 2 || m["error"] != http.StatusText(a.status) || m["description"] == "" {
		t.Fatalf("error answer %d %q: want {\"error\": %q, \"description\": ...}", a.status, a.body, http.StatusText(a.status))
	}
	return m["description"]
}

// qsDo sends a request as quotaservice-cli does (JSON body, the Version
// header when version is not "", X-Forwarded-User when user is not "").
func qsDo(t *testing.T, method, url, body, version, user string, hdr ...string) qsAnswer {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if version != "" {
		req.Header.Set("Version", version)
	}
	if user != "" {
		req.Header.Set("X-Forwarded-User", user)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s %s: Content-Type %q, want application/json", method, url, ct)
	}
	return qsAnswer{status: resp.StatusCode, version: resp.Header.Get("Version"), body: data}
}

// mustOK checks a change's answer: 200, {} and the version it made.
func mustOK(t *testing.T, a qsAnswer, version int) {
	t.Helper()
	if a.status != http.StatusOK || strings.TrimSpace(string(a.body)) != "{}" || a.version != strconv.Itoa(version) {
		t.Fatalf("answer %d %q, Version %q; want 200 {} and Version %d", a.status, a.body, a.version, version)
	}
}

// qsAllow asks the quota service's Allow (Connect JSON, as a generated
// client would over gRPC) for tokens of namespace/bucket, willing to
// wait up to a minute; it returns the status and the wait.
func qsAllow(t *testing.T, base, ns, bucket string, tokens int) (string, time.Duration) {
	t.Helper()
	body := fmt.Sprintf(`{"namespace": %q, "bucket_name": %q, "tokens_requested": %d, "max_wait_millis_override": 60000, "max_wait_time_override": true}`, ns, bucket, tokens)
	resp, err := http.Post(base+"/quotaservice.QuotaService/Allow", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Status     string `json:"status"`
		WaitMillis string `json:"waitMillis"`
	}
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("Allow: %d %s", resp.StatusCode, data)
	}
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatalf("Allow: %q: %v", data, err)
	}
	if out.Status == "" {
		out.Status = "OK" // proto3 JSON leaves the zero enum out
	}
	ms, _ := strconv.ParseInt(out.WaitMillis, 10, 64)
	return out.Status, time.Duration(ms) * time.Millisecond
}

const qsDoc = `# Sluice's configuration: one document for Doorman, Charon and the quota service
resources:
  - identifier_glob: fair
    capacity: 100
    algorithm: {kind: FAIR_SHARE, lease_length: 60, refresh_interval: 10}
limits:
  resources:
    # a burst-tier resource: no quota service namespace
    search:
      algorithm: burst_tiers
      tiers:
        - {limit: 10, window: 1s, active: 1m}
    api:
      on_store_error: open # Redis down: grant
      domains:
        big: {size: 100, fill_rate: 50}
`

// quotaservice-cli's requests against a Sluice server: add, show, update
// and remove a namespace and a bucket; the Version header and a stale
// version's 409; the special names; a changed fill rate in an Allow
// answer; the history (/api/configs) and the audit trail with the user
// of X-Forwarded-User; stats; and what a whole configuration replaces.
func TestQuotaServiceREST(t *testing.T) {
	ts := admintest.Start(t, qsDoc, adminhttp.AuthOptions{Insecure: true}, nil)
	api := ts.URL + "/api"

	// show: the whole configuration, with version 1 (the file as found).
	a := qsDo(t, "GET", api, "", "", "")
	var sc quotaapi.ServiceConfig
	a.decode(t, &sc)
	if a.status != 200 || a.version != "1" || sc.Version != 1 {
		t.Fatalf("GET /api: %d, Version %q, %s", a.status, a.version, a.body)
	}
	if len(sc.Namespaces) != 1 || sc.Namespaces["api"] == nil || sc.GlobalDefaultBucket != nil {
		t.Fatalf("GET /api: namespaces %v, global default %v; want api only (search is a burst-tier resource)", sc.Namespaces, sc.GlobalDefaultBucket)
	}
	want := quotaapi.BucketConfig{Name: "big", Namespace: "api", Size: 100, FillRate: 50, WaitTimeoutMillis: 1000, MaxIdleMillis: -1, MaxDebtMillis: 10000, MaxTokensPerRequest: 50}
	if got := sc.Namespaces["api"].Buckets["big"]; got == nil || *got != want {
		t.Fatalf("api/big: %+v, want %+v", got, want)
	}
	if g := qsDo(t, "GET", api+"/___GLOBAL___", "", "", ""); g.status != 200 || !bytes.Equal(g.body, a.body) {
		t.Errorf("GET /api/___GLOBAL___: %d %s; want GET /api's answer", g.status, g.body)
	}

	// add a namespace with a default bucket (missing fields: defaults).
	mustOK(t, qsDo(t, "POST", api+"/Pinky", `{"name": "Pinky", "default_bucket": {"size": 200, "fill_rate": 100}}`, "1", "alice"), 2)
	var ns quotaapi.NamespaceConfig
	a = qsDo(t, "GET", api+"/Pinky", "", "", "")
	a.decode(t, &ns)
	wantDef := quotaapi.BucketConfig{Name: quotaapi.DefaultBucket, Namespace: "Pinky", Size: 200, FillRate: 100, WaitTimeoutMillis: 1000, MaxIdleMillis: -1, MaxDebtMillis: 10000, MaxTokensPerRequest: 100}
	if a.status != 200 || a.version != "2" || ns.Name != "Pinky" || ns.DefaultBucket == nil || *ns.DefaultBucket != wantDef {
		t.Fatalf("GET /api/Pinky: %d, Version %q, %s", a.status, a.version, a.body)
	}
	a = qsDo(t, "POST", api+"/Pinky", `{}`, "2", "alice")
	if a.status != http.StatusConflict || !strings.Contains(a.errorObject(t), "already exists") {
		t.Errorf("POST an existing namespace: %d %s, want 409 already exists", a.status, a.body)
	}

	// add a bucket; show it.
	mustOK(t, qsDo(t, "POST", api+"/Pinky/users", `{"name": "users", "namespace": "Pinky", "size": 10, "fill_rate": 1, "wait_timeout_millis": 60000, "max_debt_millis": 60000, "max_tokens_per_request": 10}`, "2", "alice"), 3)
	var b quotaapi.BucketConfig
	a = qsDo(t, "GET", api+"/Pinky/users", "", "", "")
	a.decode(t, &b)
	wantUsers := quotaapi.BucketConfig{Name: "users", Namespace: "Pinky", Size: 10, FillRate: 1, WaitTimeoutMillis: 60000, MaxIdleMillis: -1, MaxDebtMillis: 60000, MaxTokensPerRequest: 10}
	if a.status != 200 || a.version != "3" || b != wantUsers {
		t.Fatalf("GET /api/Pinky/users: %d, Version %q, %s; want %+v", a.status, a.version, a.body, wantUsers)
	}

	// The server applies it: 1 admintest.Token a second, so 5 tokens after the
	// first 10 wait about 5 s.
	waitFor := func(what string, ok func(time.Duration) bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			st, _ := qsAllow(t, ts.URL, "Pinky", "users", 10) // drain (or queue behind the debt)
			st2, wait := qsAllow(t, ts.URL, "Pinky", "users", 5)
			if st2 == "OK" && ok(wait) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: Allow answers %s then %s, wait %v", what, st, st2, wait)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitFor("fill rate 1", func(w time.Duration) bool { return w >= 4*time.Second })

	// update: fill rate 1000; the wait drops to milliseconds.
	mustOK(t, qsDo(t, "PUT", api+"/Pinky/users", `{"size": 10, "fill_rate": 1000, "wait_timeout_millis": 60000, "max_debt_millis": 60000}`, "3", "bob"), 4)
	a = qsDo(t, "GET", api+"/Pinky/users", "", "", "")
	a.decode(t, &b)
	if b.FillRate != 1000 || b.MaxTokensPerRequest != 1000 {
		t.Fatalf("after PUT: %s", a.body)
	}
	waitFor("fill rate 1000", func(w time.Duration) bool { return w < time.Second })

	// A stale version: 409, the error object, the current version.
	a = qsDo(t, "PUT", api+"/Pinky/users", `{"size": 99}`, "3", "carol")
	if d := a.errorObject(t); a.status != http.StatusConflict || a.version != "4" || d != "configuration changed since you read it: version 4 now" {
		t.Fatalf("stale PUT: %d, Version %q, %q", a.status, a.version, d)
	}
	// Without a Version header, a change applies to the current version.
	mustOK(t, qsDo(t, "PUT", api+"/Pinky/users", `{"size": 20, "fill_rate": 1000, "wait_timeout_millis": 60000, "max_debt_millis": 60000}`, "", ""), 5)

	// An invalid bucket: every error, each naming its field.
	a = qsDo(t, "POST", api+"/Pinky/bad", `{"size": 0, "fill_rate": "fast", "colour": 1, "max_idle_millis": 1.5}`, "5", "alice")
	d := a.errorObject(t)
	for _, field := range []string{"namespaces.Pinky.buckets.bad.fill_rate", "namespaces.Pinky.buckets.bad.colour", "namespaces.Pinky.buckets.bad.max_idle_millis", "namespaces.Pinky.buckets.bad.size"} {
		if !strings.Contains(d, field) {
			t.Errorf("invalid bucket: %q does not name %s", d, field)
		}
	}
	if a.status != http.StatusBadRequest {
		t.Errorf("invalid bucket: %d", a.status)
	}
	a = qsDo(t, "POST", api+"/Pinky/other", `{"name": "users"}`, "5", "alice")
	if a.status != 400 || !strings.Contains(a.errorObject(t), `body.name: "users" is not the path's "other"`) {
		t.Errorf("a body named otherwise: %d %s", a.status, a.body)
	}
	if a = qsDo(t, "POST", api+"/Nobody/b", `{}`, "5", "alice"); a.status != 404 {
		t.Errorf("a bucket of a missing namespace: %d %s", a.status, a.body)
	}
	if a = qsDo(t, "PUT", api+"/search", `{}`, "5", "alice"); a.status != 409 || !strings.Contains(a.errorObject(t), "burst_tiers") {
		t.Errorf("PUT over a burst-tier resource: %d %s", a.status, a.body)
	}
	if a = qsDo(t, "GET", api+"/search", "", "", ""); a.status != 404 {
		t.Errorf("GET a burst-tier resource: %d %s", a.status, a.body)
	}

	// The special names: the global default, a namespace's dynamic bucket
	// template; PUT on a namespace keeps its on_store_error.
	mustOK(t, qsDo(t, "POST", api+"/___GLOBAL___/___DEFAULT_BUCKET___", `{"name": "___DEFAULT_BUCKET___", "namespace": "___GLOBAL___", "size": 5, "fill_rate": 5}`, "5", "alice"), 6)
	a = qsDo(t, "GET", api+"/___GLOBAL___/___DEFAULT_BUCKET___", "", "", "")
	b = quotaapi.BucketConfig{}
	a.decode(t, &b)
	if b.Name != quotaapi.DefaultBucket || b.Namespace != "" || b.Size != 5 {
		t.Errorf("the global default: %s", a.body)
	}
	mustOK(t, qsDo(t, "PUT", api+"/api", `{"dynamic_bucket_template": {"size": 3, "fill_rate": 3}, "max_dynamic_buckets": 50, "buckets": {"big": {"size": 100, "fill_rate": 50}}}`, "6", "alice"), 7)
	a = qsDo(t, "GET", api+"/api/___DYNAMIC_BUCKET_TPL___", "", "", "")
	b = quotaapi.BucketConfig{}
	a.decode(t, &b)
	if a.status != 200 || b.Name != quotaapi.DynamicBucketTemplate || b.Size != 3 {
		t.Errorf("the dynamic bucket template: %d %s", a.status, a.body)
	}
	doc, _ := os.ReadFile(ts.Path)
	for _, s := range []string{"on_store_error: open # Redis down: grant", "max_dynamic_buckets: 50", "global_default: {size: 5, fill_rate: 5,", "# a burst-tier resource: no quota service namespace", "identifier_glob: fair"} {
		if !strings.Contains(string(doc), s) {
			t.Errorf("the file lacks %q:\n%s", s, doc)
		}
	}

	// stats: the hottest buckets of Pinky.
	var st quotaapi.Stats
	a = qsDo(t, "GET", api+"/stats/Pinky", "", "", "")
	a.decode(t, &st)
	if a.status != 200 || st.Namespace != "Pinky" || len(st.TopHits) == 0 || st.TopHits[0].Bucket != "users" || st.TopHits[0].Score < 2 {
		t.Errorf("stats: %d %s", a.status, a.body)
	}
	var sc1 quotaapi.BucketScores
	qsDo(t, "GET", api+"/stats/Pinky/users", "", "", "").decode(t, &sc1)
	if sc1.Hits != st.TopHits[0].Score {
		t.Errorf("stats of Pinky/users: %+v; the top list says %d hits", sc1, st.TopHits[0].Score)
	}

	// remove the bucket, then the namespace.
	mustOK(t, qsDo(t, "DELETE", api+"/Pinky/users", "", "7", "alice"), 8)
	if a = qsDo(t, "GET", api+"/Pinky/users", "", "", ""); a.status != 404 || !strings.Contains(a.errorObject(t), "unable to locate bucket users in namespace Pinky") {
		t.Errorf("GET a removed bucket: %d %s", a.status, a.body)
	}
	mustOK(t, qsDo(t, "DELETE", api+"/Pinky", "", "8", "alice"), 9)
	if a = qsDo(t, "GET", api+"/Pinky", "", "", ""); a.status != 404 {
		t.Errorf("GET a removed namespace: %d %s", a.status, a.body)
	}
	if a = qsDo(t, "DELETE", api+"/Pinky", "", "", "alice"); a.status != 404 {
		t.Errorf("DELETE a removed namespace: %d %s", a.status, a.body)
	}

	// The history: every version, newest first, with its user.
	var cs quotaapi.Configs
	a = qsDo(t, "GET", api+"/configs", "", "", "")
	a.decode(t, &cs)
	if len(cs.Configs) != 9 || cs.Configs[0].Version != 9 || cs.Configs[8].Version != 1 {
		t.Fatalf("configs: %d of them: %s", len(cs.Configs), a.body)
	}
	users := map[int64]string{2: "alice", 3: "alice", 4: "bob", 5: quotaapi.DefaultUser, 9: "alice"}
	for _, c := range cs.Configs {
		if u, ok := users[c.Version]; ok && c.User != u {
			t.Errorf("configs: version %d by %q, want %q", c.Version, c.User, u)
		}
		if c.Hash == "" || c.Date == 0 && c.Version > 1 {
			t.Errorf("configs: version %d: hash %q, date %d", c.Version, c.Hash, c.Date)
		}
	}
	if p := cs.Configs[5].Namespaces["Pinky"]; cs.Configs[5].Version != 4 || p == nil || p.Buckets["users"] == nil || p.Buckets["users"].FillRate != 1000 {
		t.Errorf("configs: version 4: %+v", cs.Configs[5])
	}
	// The audit log names the user and the object of each change.
	var objects []string
	for _, c := range ts.Log.Changes(t) {
		objects = append(objects, fmt.Sprint(c["user"], " ", c["object"]))
	}
	if len(objects) < 3 || objects[0] != "alice limits/resources/Pinky" || objects[1] != "alice limits/resources/Pinky/domains/users" || objects[2] != "bob limits/resources/Pinky/domains/users" {
		t.Errorf("audit: %q", objects)
	}

	// POST /api replaces the global default and the namespaces, keeping
	// the burst-tier resource and the templates.
	mustOK(t, qsDo(t, "POST", api, `{"namespaces": {"Brain": {"buckets": {"x": {"size": 7}}}}, "version": 9, "user": "ignored"}`, "9", "dave"), 10)
	a = qsDo(t, "GET", api, "", "", "")
	sc = quotaapi.ServiceConfig{}
	a.decode(t, &sc)
	if sc.GlobalDefaultBucket != nil || len(sc.Namespaces) != 1 || sc.Namespaces["Brain"] == nil || sc.Namespaces["Brain"].Buckets["x"].Size != 7 || sc.Version != 10 || sc.User != "dave" {
		t.Errorf("after POST /api: %s", a.body)
	}
	doc, _ = os.ReadFile(ts.Path)
	if !strings.Contains(string(doc), "algorithm: burst_tiers") || !strings.Contains(string(doc), "identifier_glob: fair") || strings.Contains(string(doc), "api:") {
		t.Errorf("after POST /api, the file:\n%s", doc)
	}
	if a = qsDo(t, "POST", api, "", "10", "dave"); a.status != 400 {
		t.Errorf("POST /api with no body: %d %s", a.status, a.body)
	}
	if a = qsDo(t, "PUT", api, "{}", "10", "dave"); a.status != http.StatusMethodNotAllowed {
		t.Errorf("PUT /api: %d %s", a.status, a.body)
	}
	if a = qsDo(t, "GET", api, "", "", ""); a.version != "10" {
		t.Errorf("the version after refused changes: %q", a.version)
	}
}

// Writes need credentials: without them, the error object and 401; with a
// admintest.Token its user is recorded; X-Forwarded-User from an untrusted address
// is no credential.
func TestQuotaServiceRESTAuth(t *testing.T) {
	ts := admintest.Start(t, qsDoc, adminhttp.AuthOptions{TokenFile: admintest.TokenFile(t, "alice "+admintest.Token+"\n")}, nil)
	api := ts.URL + "/api"
	a := qsDo(t, "POST", api+"/Pinky", `{}`, "", "mallory")
	if a.status != http.StatusUnauthorized || !strings.Contains(a.errorObject(t), "authentication required") {
		t.Fatalf("a write without credentials: %d %s", a.status, a.body)
	}
	if a = qsDo(t, "GET", api, "", "", ""); a.status != 200 {
		t.Fatalf("a read: %d %s", a.status, a.body)
	}
	mustOK(t, qsDo(t, "POST", api+"/Pinky", `{}`, "1", "mallory", "Authorization", "Bearer "+admintest.Token), 2)
	var sc quotaapi.ServiceConfig
	qsDo(t, "GET", api, "", "", "").decode(t, &sc)
	if sc.User != "alice" || sc.Namespaces["Pinky"] == nil {
		t.Errorf("after a admintest.Token's write: %+v", sc)
	}
}

// TestQuotaServiceRESTKeepsBudgets: an update of a bucket through
// Square's REST API, whose format has no budgets, keeps the budgets
// Sluice's configuration gave it.
func TestQuotaServiceRESTKeepsBudgets(t *testing.T) {
	ts := admintest.Start(t, `limits:
  resources:
    api:
      domains:
        big:
          size: 100
          fill_rate: 50
          budgets:
            - {limit: 3, unit: day, calendar: UTC}
`, adminhttp.AuthOptions{Insecure: true}, nil)
	mustOK(t, qsDo(t, "PUT", ts.URL+"/api/api/big", `{"name": "big", "namespace": "api", "size": 200, "fill_rate": 100}`, "1", "alice"), 2)
	resp, err := http.Get(ts.URL + "/admin/v1/config")
	if err != nil {
		t.Fatal(err)
	}
	doc, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(doc), "size: 200") || !strings.Contains(string(doc), "budgets:") {
		t.Fatalf("the document after the update:\n%s\nwant size 200 and the budgets kept", doc)
	}
	granted := 0
	for range 5 {
		if st, _ := qsAllow(t, ts.URL, "api", "big", 1); st == "OK" {
			granted++
		}
	}
	if granted != 3 {
		t.Fatalf("after the update, %d of 5 granted; want the day's budget, 3", granted)
	}
}
