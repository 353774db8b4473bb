package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/protobuf/proto"

	pb "github.com/sluice-rl/sluice/api/doorman"
	qs "github.com/sluice-rl/sluice/api/quotaservice"
	v1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/internal/testutil/etcdtest"
	"github.com/sluice-rl/sluice/internal/testutil/redistest"
)

// dashboardDir holds the Grafana dashboards, from this package's directory.
var dashboardDir = filepath.Join("..", "..", "deploy", "grafana")

// dashboardFiles are the dashboards, one per job.
var dashboardFiles = []string{"sluice-leases.json", "sluice-limits.json", "sluice-copies.json", "sluice-stores.json"}

// dashboardOmitted are the metric families the server exports that no
// dashboard shows, each with the reason. A new metric must be on a
// dashboard or here. (Today every one is on a dashboard.)
var dashboardOmitted = map[string]string{}

// dashboardConfig has every kind of resource: a lease template, a token
// bucket, burst tiers and a copy-limited resource.
const dashboardConfig = `
resources:
  - identifier_glob: "db/*"
    capacity: 100
    algorithm: {kind: FAIR_SHARE, lease_length: 60, refresh_interval: 10, learning_mode_duration: 0}
limits:
  resources:
    api:
      template: {size: 100, fill_rate: 50}
    search:
      algorithm: burst_tiers
      hard_limit: 200
      tiers:
        - {limit: 100, window: 1s, active: 10s, cooldown: 30s}
    sandboxes:
      algorithm: copies
      global_limit: 50
      domain_limit: 10
`

// TestDashboards checks every query of the Grafana dashboards
// (deploy/grafana) against what a real server exports. One `sluice server`
// runs every service — leases (elected through etcd), limits and the quota
// service on a real redis-server, copy-limited sessions in a fleet on etcd,
// Envoy's rate limit service — and gets traffic on each (GetCapacity,
// Allow, quota Allow, a session's Reserve, ShouldRateLimit) and a
// configuration reload; its /metrics is scraped. Then for every query of
// every panel and template variable: each metric it names must be
// exported (for a histogram, as _bucket, _sum or _count), a counter read
// only through rate, irate or increase and a gauge never, a
// histogram_quantile over _bucket grouped by le, each label matched or
// grouped by present on the metrics (job and instance are Prometheus's),
// each value matched exactly present. The dashboards must have the
// Prometheus datasource as a variable used by every panel and query. A
// charted counter whose labels are a fixed set (eventLabels) must be
// exported at 0 before its first event (seriesBeforeEvents, on a scrape
// taken as soon as the server answers). And the check must bite: every metric name and matched value of every query,
// changed by one letter, is reported.
func TestDashboards(t *testing.T) {
	dashboards := map[string]grafanaDashboard{}
	for _, f := range dashboardFiles {
		dashboards[f] = readDashboard(t, filepath.Join(dashboardDir, f))
	}
	if files, _ := filepath.Glob(filepath.Join(dashboardDir, "*.json")); len(files) != len(dashboardFiles) {
		t.Errorf("%s has %d dashboards, the test knows %d: add the new one to dashboardFiles", dashboardDir, len(files), len(dashboardFiles))
	}
	first, families := scrapeEveryService(t)

	used := map[string]bool{}
	for _, f := range dashboardFiles {
		for _, q := range dashboards[f].queries() {
			for _, p := range checkQuery(q.expr, families) {
				t.Errorf("%s: %s: %s\n\t%s", f, q.where, p, q.expr)
			}
			pq, _ := readPromQL(q.expr)
			for _, s := range pq.selectors {
				used[familyOf(s.metric, families)] = true
			}
		}
	}
	// Every family of Sluice's own is on a dashboard, or left off for a
	// reason.
	var missing []string
	for name := range families {
		if strings.HasPrefix(name, "sluice_") && !used[name] && dashboardOmitted[name] == "" {
			missing = append(missing, name)
		}
	}
	for name := range dashboardOmitted {
		if used[name] {
			t.Errorf("%s is on a dashboard and in dashboardOmitted: take it out of dashboardOmitted", name)
		}
	}
	sort.Strings(missing)
	for _, name := range missing {
		t.Errorf("%s is on no dashboard: add a panel (deploy/grafana) or list it in dashboardOmitted with the reason", name)
	}
	for _, p := range seriesBeforeEvents(first, families, used) {
		t.Error(p)
	}

	t.Run("typos are caught", func(t *testing.T) {
		checked := 0
		for _, f := range dashboardFiles {
			for _, q := range dashboards[f].queries() {
				pq, err := readPromQL(q.expr)
				if err != nil {
					continue // reported above
				}
				for _, s := range pq.selectors {
					bad := strings.Replace(q.expr, s.metric, typo(s.metric), 1)
					if len(checkQuery(bad, families)) == 0 {
						t.Errorf("%s: %s: metric %s changed to %s, and the check passes:\n\t%s", f, q.where, s.metric, typo(s.metric), bad)
					}
					checked++
					for _, m := range s.matchers {
						if m.op != "=" || strings.Contains(m.value, "$") {
							continue
						}
						bad := strings.Replace(q.expr, fmt.Sprintf("%s%s%q", m.label, m.op, m.value), fmt.Sprintf("%s%s%q", m.label, m.op, typo(m.value)), 1)
						if bad == q.expr {
							t.Fatalf("%s: %s: cannot find %s%s%q in %s", f, q.where, m.label, m.op, m.value, q.expr)
						}
						if len(checkQuery(bad, families)) == 0 {
							t.Errorf("%s: %s: %s=%q changed to %q, and the check passes", f, q.where, m.label, m.value, typo(m.value))
						}
						checked++
					}
				}
			}
		}
		// And the kinds of mistake beside names.
		for _, c := range []struct{ expr, want string }{
			{`sluice_server_requests_total{job=~"$job"}`, "a counter read without rate"},
			{`rate(sluice_redis_up[5m])`, "a gauge read with rate"},
			{`histogram_quantile(0.9, sum by (method) (rate(sluice_server_request_duration_seconds_bucket[5m])))`, "not grouped by le"},
			{`sluice_server_request_duration_seconds`, "a histogram"},
			{`sum by (methd) (rate(sluice_server_requests_total[5m]))`, "methd"},
			{`rate(sluice_server_requests_total{mehtod="x"}[5m])`, "mehtod"},
			{`rate(sluice_server_requests_total{method=~"/nope/.*"}[5m])`, "/nope/"},
			{`rat(sluice_server_requests_total[5m])`, "no PromQL function"},
		} {
			if ps := checkQuery(c.expr, families); !strings.Contains(strings.Join(ps, "; "), c.want) {
				t.Errorf("checkQuery(%s) = %q, want a problem naming %q", c.expr, ps, c.want)
			}
		}
		t.Logf("%d changed names and values, each caught", checked)
	})
}

// typo changes s by one letter (its last but one, or appends one).
func typo(s string) string {
	r := []rune(s)
	if len(r) < 2 {
		return s + "x"
	}
	i := len(r) - 2
	if r[i] == 'x' {
		r[i] = 'y'
	} else {
		r[i] = 'x'
	}
	return string(r)
}

// eventLabels are the labels whose values form a fixed set the server
// knows before anything happens (a result, a change, an outcome), as
// opposed to values that name what the traffic brought (a resource, a
// method, a domain).
var eventLabels = map[string]bool{"result": true, "change": true, "outcome": true}

// seriesBeforeEvents reports every series of a charted counter whose labels
// are all eventLabels (or none) that the server exported after traffic
// (after) but not before the first event (first): such a series must exist
// from the start at 0, or its panel shows "No data" until the first event
// (Prometheus's instrumentation guidance, "Avoid missing metrics";
// docs/metrics.md).
func seriesBeforeEvents(first, after map[string]*dto.MetricFamily, charted map[string]bool) []string {
	var problems []string
	for name, f := range after {
		if !charted[name] || f.GetType() != dto.MetricType_COUNTER {
			continue
		}
		for _, m := range f.GetMetric() {
			fixed := true
			for _, l := range m.GetLabel() {
				fixed = fixed && eventLabels[l.GetName()]
			}
			if !fixed {
				continue
			}
			found := false
			for _, m0 := range first[name].GetMetric() {
				found = found || sameLabels(m0.GetLabel(), m.GetLabel())
			}
			if !found {
				problems = append(problems, fmt.Sprintf("%s%s is charted but absent from /metrics before its first event: create it at 0 when the server starts", name, labelString(m.GetLabel())))
			}
		}
	}
	sort.Strings(problems)
	return problems
}

// sameLabels reports whether a and b are the same label pairs (in the
// exposition's order, which is sorted).
func sameLabels(a, b []*dto.LabelPair) bool {
	return slices.EqualFunc(a, b, func(x, y *dto.LabelPair) bool { return x.GetName() == y.GetName() && x.GetValue() == y.GetValue() })
}

// labelString is {a="x",b="y"}, or "" without labels.
func labelString(ls []*dto.LabelPair) string {
	if len(ls) == 0 {
		return ""
	}
	var parts []string
	for _, l := range ls {
		parts = append(parts, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// scrapeEveryService runs a server with every service on a real Redis and
// etcd, sends it traffic on each API, and returns its /metrics, parsed.
func scrapeEveryService(t *testing.T) (first, after map[string]*dto.MetricFamily) {
	t.Helper()
	rs := redistest.StartT(t)
	etcd := etcdtest.StartEtcd(t)
	cfg := writeConfig(t, dashboardConfig)
	s := startFleetServer(t, "sluice", cfg, etcd.Endpoint,
		"--redis", "redis://"+rs.Addr+"/0", "--envoy-ratelimit-config", envoyRules(t),
		"--election", "etcd", "--election-key", "/"+t.Name()+"/election")
	parser := expfmt.NewTextParser(model.UTF8Validation)
	first, err := parser.TextToMetricFamilies(strings.NewReader(metricsPage(s.addr)))
	if err != nil {
		t.Fatalf("/metrics: %v", err)
	}
	conn := testutil.Dial(t, s.addr)
	ctx := t.Context()
	testutil.Learnt(t, s.c, "sandboxes")
	capacity := pb.NewCapacityClient(conn)
	testutil.Eventually(t, 30*time.Second, "a lease (the server elected master)", func() bool {
		r, err := capacity.GetCapacity(ctx, &pb.GetCapacityRequest{ClientId: proto.String("c1"), Resource: []*pb.ResourceRequest{req("db/a", 10)}})
		return err == nil && r.GetMastership() == nil && len(r.GetResponse()) == 1
	})
	for _, r := range []*v1.AllowRequest{{Resource: "api", Domain: "acme", Tokens: 1}, {Resource: "search", Domain: "acme", Tokens: 1}} {
		if _, err := s.c.Allow(ctx, r); err != nil {
			t.Fatalf("Allow %v: %v", r, err)
		}
	}
	if _, err := qs.NewQuotaServiceClient(conn).Allow(ctx, &qs.AllowRequest{Namespace: "api", BucketName: "acme", TokensRequested: 1}); err != nil {
		t.Fatalf("quota Allow: %v", err)
	}
	sess := s.open(t)
	s.reserve(t, sess, "sandboxes", "acme", 1)
	rls := rlsv3.NewRateLimitServiceClient(conn)
	for range 12 { // api allows 10 an hour: within, near and over the limit
		if _, err := rls.ShouldRateLimit(ctx, clientRequest("c1")); err != nil {
			t.Fatalf("ShouldRateLimit: %v", err)
		}
	}
	// A changed configuration, then a bad one, each reloaded on SIGHUP (an
	// unchanged one is not counted): the reloads' counter counts both
	// results.
	var families map[string]*dto.MetricFamily
	for _, reload := range []struct{ config, result string }{
		{strings.Replace(dashboardConfig, "capacity: 100", "capacity: 120", 1), "ok"},
		{"resources: 7", "failed"},
	} {
		if err := os.WriteFile(cfg, []byte(reload.config), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			var err error
			parser := expfmt.NewTextParser(model.UTF8Validation)
			if families, err = parser.TextToMetricFamilies(strings.NewReader(metricsPage(s.addr))); err != nil {
				t.Fatalf("/metrics: %v", err)
			}
			lacking := ""
			for _, want := range []string{"sluice_server_mastership_changes_total", "sluice_copies_reserves_total",
				"sluice_envoy_ratelimit_hits_total", "sluice_redis_round_trip_seconds"} {
				if families[want] == nil {
					lacking = want
				}
			}
			if !countedWith(families["sluice_server_config_reloads_total"], "result", reload.result) {
				lacking = "sluice_server_config_reloads_total{result=" + reload.result + "}"
			}
			if lacking == "" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("/metrics after traffic on every service and a reload: no %s within 30 s", lacking)
			}
		}
	}
	for _, m := range []string{"/doorman.Capacity/GetCapacity", "/sluice.v1.Limits/Allow", "/quotaservice.QuotaService/Allow",
		"/sluice.v1.Limits/Reserve", "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"} {
		if !hasLabelValue(families["sluice_server_requests_total"], "method", m) {
			t.Errorf("/metrics: no requests of %s counted", m)
		}
	}
	return first, families
}

// familyOf returns the family that metric (a series name) belongs to:
// itself, or the histogram or summary whose _bucket, _sum or _count it is.
// "" when there is none.
func familyOf(metric string, families map[string]*dto.MetricFamily) string {
	if f := families[metric]; f != nil && f.GetType() != dto.MetricType_HISTOGRAM {
		return metric
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(metric, suffix)
		if f := families[base]; ok && f != nil && (f.GetType() == dto.MetricType_HISTOGRAM || f.GetType() == dto.MetricType_SUMMARY && suffix != "_bucket") {
			return base
		}
	}
	return ""
}

// labelValues returns the values of label on the family's series (for
// "le", a histogram's bucket bounds).
func labelValues(f *dto.MetricFamily, label string) []string {
	var vs []string
	for _, m := range f.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == label {
				vs = append(vs, l.GetValue())
			}
		}
		if label == "le" {
			for _, b := range m.GetHistogram().GetBucket() {
				vs = append(vs, fmt.Sprint(b.GetUpperBound()))
			}
		}
	}
	return vs
}

func hasLabelValue(f *dto.MetricFamily, label, value string) bool {
	return slices.Contains(labelValues(f, label), value)
}

// countedWith reports whether counter family f has a series with label =
// value above 0.
func countedWith(f *dto.MetricFamily, label, value string) bool {
	for _, m := range f.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == label && l.GetValue() == value && m.GetCounter().GetValue() > 0 {
				return true
			}
		}
	}
	return false
}

// checkQuery returns what is wrong with a dashboard's query against the
// families a server exports (nothing: it is fine).
func checkQuery(expr string, families map[string]*dto.MetricFamily) []string {
	// Grafana's label_values(SELECTOR, LABEL) of a template variable.
	var valuesOf string
	if inner, ok := strings.CutPrefix(strings.TrimSpace(expr), "label_values("); ok {
		i := strings.LastIndex(inner, ",")
		if i < 0 || !strings.HasSuffix(inner, ")") {
			return []string{"label_values(SELECTOR, LABEL) expected"}
		}
		expr, valuesOf = inner[:i], strings.TrimSpace(strings.TrimSuffix(inner[i+1:], ")"))
	}
	q, err := readPromQL(expr)
	if err != nil {
		return []string{err.Error()}
	}
	if len(q.selectors) == 0 {
		return []string{"selects no metric"}
	}
	var problems []string
	// Prometheus adds job and instance when it scrapes.
	scraped := func(l string) bool { return l == "job" || l == "instance" }
	var fams []*dto.MetricFamily
	for _, s := range q.selectors {
		name := familyOf(s.metric, families)
		if name == "" {
			if f := families[s.metric]; f != nil {
				problems = append(problems, fmt.Sprintf("%s is a histogram: select its _bucket, _sum or _count", s.metric))
			} else {
				problems = append(problems, fmt.Sprintf("%s is not exported", s.metric))
			}
			continue
		}
		f := families[name]
		fams = append(fams, f)
		counter := f.GetType() == dto.MetricType_COUNTER || name != s.metric // _bucket, _sum, _count count up
		rated := len(s.funcs) > 0 && slices.Contains([]string{"rate", "irate", "increase"}, s.funcs[0])
		switch {
		case valuesOf != "": // label_values reads labels, not values
		case counter && !rated:
			problems = append(problems, fmt.Sprintf("%s is a counter read without rate, irate or increase", s.metric))
		case !counter && rated:
			problems = append(problems, fmt.Sprintf("%s is a gauge read with %s", s.metric, s.funcs[0]))
		}
		if s.in("histogram_quantile") {
			if !strings.HasSuffix(s.metric, "_bucket") || f.GetType() != dto.MetricType_HISTOGRAM {
				problems = append(problems, fmt.Sprintf("histogram_quantile over %s, not a histogram's _bucket", s.metric))
			}
			if !slices.Contains(q.grouping, "le") {
				problems = append(problems, fmt.Sprintf("histogram_quantile over %s not grouped by le", s.metric))
			}
		}
		for _, m := range s.matchers {
			if scraped(m.label) {
				continue
			}
			values := labelValues(f, m.label)
			if len(values) == 0 {
				problems = append(problems, fmt.Sprintf("%s has no label %s", s.metric, m.label))
				continue
			}
			if strings.Contains(m.value, "$") || m.op == "!=" || m.op == "!~" {
				continue // a variable's value, or excluded
			}
			match := func(v string) bool { return v == m.value }
			if m.op == "=~" {
				re, err := regexp.Compile("^(?:" + m.value + ")$")
				if err != nil {
					problems = append(problems, fmt.Sprintf("%s{%s=~%q}: %v", s.metric, m.label, m.value, err))
					continue
				}
				match = re.MatchString
			}
			if !slices.ContainsFunc(values, match) {
				problems = append(problems, fmt.Sprintf("%s{%s%s%q} matches none of its series (%s: %s)", s.metric, m.label, m.op, m.value, m.label, strings.Join(uniq(values), ", ")))
			}
		}
	}
	for _, l := range append(q.grouping, valuesOf) {
		if l == "" || scraped(l) || len(fams) == 0 {
			continue
		}
		if !slices.ContainsFunc(fams, func(f *dto.MetricFamily) bool { return len(labelValues(f, l)) > 0 }) {
			problems = append(problems, fmt.Sprintf("no metric of the query has a label %s", l))
		}
	}
	return problems
}

func uniq(vs []string) []string {
	slices.Sort(vs)
	return slices.Compact(vs)
}

// grafanaDashboard is the part of Grafana's dashboard JSON model the test
// reads.
type grafanaDashboard struct {
	UID           string         `json:"uid"`
	Title         string         `json:"title"`
	SchemaVersion int            `json:"schemaVersion"`
	Tags          []string       `json:"tags"`
	Panels        []grafanaPanel `json:"panels"`
	Templating    struct {
		List []struct {
			Name       string             `json:"name"`
			Type       string             `json:"type"`
			Query      any                `json:"query"`
			Datasource *grafanaDatasource `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
}

type grafanaPanel struct {
	ID         int                `json:"id"`
	Type       string             `json:"type"`
	Title      string             `json:"title"`
	Datasource *grafanaDatasource `json:"datasource"`
	GridPos    *struct{ H, W, X, Y int }
	Targets    []struct {
		Expr       string             `json:"expr"`
		RefID      string             `json:"refId"`
		Datasource *grafanaDatasource `json:"datasource"`
	} `json:"targets"`
	Panels []grafanaPanel `json:"panels"` // a collapsed row's
}

type grafanaDatasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// dashboardQuery is one query of a dashboard and where it is.
type dashboardQuery struct {
	where, expr string
}

// queries returns every query of d: its panels' targets and its template
// variables'.
func (d grafanaDashboard) queries() []dashboardQuery {
	var qs []dashboardQuery
	var walk func(ps []grafanaPanel)
	walk = func(ps []grafanaPanel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				qs = append(qs, dashboardQuery{fmt.Sprintf("panel %q (%s)", p.Title, tg.RefID), tg.Expr})
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type == "query" {
			q, _ := v.Query.(string)
			if m, ok := v.Query.(map[string]any); ok {
				q, _ = m["query"].(string)
			}
			qs = append(qs, dashboardQuery{fmt.Sprintf("variable %s", v.Name), q})
		}
	}
	return qs
}

// readDashboard reads a dashboard and fails t for what Grafana's import
// or the dashboards' conventions need: a uid, a title, the sluice tag, a
// datasource variable of type prometheus, and every panel and query on
// it; unique panel ids, each panel placed, a query for every panel.
func readDashboard(t *testing.T, path string) grafanaDashboard {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d grafanaDashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	name := filepath.Base(path)
	if d.UID == "" || d.Title == "" || d.SchemaVersion == 0 || !slices.Contains(d.Tags, "sluice") {
		t.Errorf("%s: uid %q, title %q, schemaVersion %d, tags %v: want all, with the tag sluice", name, d.UID, d.Title, d.SchemaVersion, d.Tags)
	}
	hasDatasource := false
	for _, v := range d.Templating.List {
		switch {
		case v.Name == "datasource":
			hasDatasource = v.Type == "datasource" && v.Query == "prometheus"
		case v.Type == "query" && (v.Datasource == nil || v.Datasource.UID != "${datasource}"):
			t.Errorf("%s: variable %s does not query ${datasource}", name, v.Name)
		}
	}
	if !hasDatasource {
		t.Errorf("%s: no datasource variable of type prometheus", name)
	}
	ids := map[int]bool{}
	var walk func(ps []grafanaPanel)
	walk = func(ps []grafanaPanel) {
		for _, p := range ps {
			if ids[p.ID] {
				t.Errorf("%s: panel id %d twice", name, p.ID)
			}
			ids[p.ID] = true
			if p.GridPos == nil || p.GridPos.W == 0 || p.GridPos.H == 0 {
				t.Errorf("%s: panel %q has no place (gridPos)", name, p.Title)
			}
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if p.Title == "" || len(p.Targets) == 0 {
				t.Errorf("%s: panel %d: title %q, %d queries", name, p.ID, p.Title, len(p.Targets))
			}
			if p.Datasource == nil || p.Datasource.Type != "prometheus" || p.Datasource.UID != "${datasource}" {
				t.Errorf("%s: panel %q: datasource %+v, want prometheus ${datasource}", name, p.Title, p.Datasource)
			}
			for _, tg := range p.Targets {
				if tg.Expr == "" || tg.RefID == "" || tg.Datasource == nil || tg.Datasource.UID != "${datasource}" {
					t.Errorf("%s: panel %q: a query without expr, refId or datasource ${datasource}", name, p.Title)
				}
			}
		}
	}
	walk(d.Panels)
	return d
}
