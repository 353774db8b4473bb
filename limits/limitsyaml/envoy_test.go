package limitsyaml

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/limits/rls"
)

func rlsEntries(kv ...string) []rls.Entry {
	var es []rls.Entry
	for i := 0; i+1 < len(kv); i += 2 {
		es = append(es, rls.Entry{Key: kv[i], Value: kv[i+1]})
	}
	return es
}

// TestLoadEnvoyRateLimitDir reads testdata/envoy, a directory of
// envoyproxy/ratelimit's files written as its README's examples write
// them, and checks what each kind of rule makes of requests.
func TestLoadEnvoyRateLimitDir(t *testing.T) {
	c, err := LoadEnvoyRateLimit("testdata/envoy")
	if err != nil {
		t.Fatal(err)
	}
	if c.Len() != 3 {
		t.Fatalf("%d domains, want 3", c.Len())
	}
	type want struct {
		rpu       uint32
		unit      rls.Unit
		unlimited bool
		shadow    bool
		name      string
	}
	for _, tc := range []struct {
		name    string
		domain  string
		entries []rls.Entry
		want    *want
	}{
		{"key and value", "mongo_cps", rlsEntries("database", "users"), &want{rpu: 500, unit: rls.Second}},
		{"an unconfigured value", "mongo_cps", rlsEntries("database", "orders"), nil},
		{"nested key only", "messaging", rlsEntries("message_type", "marketing", "to_number", "2061234567"), &want{rpu: 5, unit: rls.Day}},
		{"key only", "messaging", rlsEntries("to_number", "2061234567"), &want{rpu: 100, unit: rls.Day}},
		{"the depth rule", "messaging", rlsEntries("message_type", "marketing"), nil},
		{"per address, upper-case unit", "edge_proxy_per_ip", rlsEntries("remote_address", "10.0.0.1"), &want{rpu: 10, unit: rls.Second}},
		{"block list", "edge_proxy_per_ip", rlsEntries("remote_address", "50.0.0.5"), &want{rpu: 0, unit: rls.Second}},
		{"nested key and value", "edge_proxy_per_ip", rlsEntries("key", "value", "subkey", "subvalue"), &want{rpu: 10, unit: rls.Second}},
		{"stops above the limit", "edge_proxy_per_ip", rlsEntries("key", "value"), nil},
		{"shadow mode", "edge_proxy_per_ip", rlsEntries("destination_cluster", "mock"), &want{rpu: 1, unit: rls.Minute, shadow: true}},
		{"trailing wildcard", "edge_proxy_per_ip", rlsEntries("path", "/foo/bar"), &want{rpu: 20, unit: rls.Minute}},
		{"inner wildcard", "edge_proxy_per_ip", rlsEntries("path", "/api/v3/checkout"), &want{rpu: 30, unit: rls.Hour}},
		{"named", "edge_proxy_per_ip", rlsEntries("category", "account"), &want{rpu: 4, unit: rls.Minute, name: "account"}},
		{"week", "edge_proxy_per_ip", rlsEntries("user", "ann"), &want{rpu: 1000, unit: rls.Week, name: "per-user"}},
		{"unlimited", "edge_proxy_per_ip", rlsEntries("internal", "batch"), &want{unlimited: true}},
		{"whitelisted", "edge_proxy_per_ip", rlsEntries("health", "probe"), nil},
		{"unknown domain", "nowhere", rlsEntries("database", "users"), nil},
	} {
		m := c.Match(tc.domain, tc.entries)
		switch {
		case tc.want == nil:
			if m.Rule != nil {
				t.Errorf("%s: matched %+v", tc.name, m.Rule.Limit)
			}
		case m.Rule == nil:
			t.Errorf("%s: matched nothing", tc.name)
		case m.Rule.Limit.RequestsPerUnit != tc.want.rpu || m.Rule.Limit.Unit != tc.want.unit || m.Rule.Limit.Unlimited != tc.want.unlimited ||
			m.Rule.ShadowMode != tc.want.shadow || m.Rule.Limit.Name != tc.want.name:
			t.Errorf("%s: matched %+v (shadow %v), want %+v", tc.name, m.Rule.Limit, m.Rule.ShadowMode, tc.want)
		}
	}
	// share_threshold: every matching value one counter; without it, a
	// counter per value.
	a, b := c.Match("edge_proxy_per_ip", rlsEntries("path", "/api/v1/checkout")), c.Match("edge_proxy_per_ip", rlsEntries("path", "/api/v2/checkout"))
	if a.Bucket != b.Bucket {
		t.Error("share_threshold: two values, two counters")
	}
	a, b = c.Match("edge_proxy_per_ip", rlsEntries("path", "/foo/1")), c.Match("edge_proxy_per_ip", rlsEntries("path", "/foo/2"))
	if a.Bucket == b.Bucket {
		t.Error("a wildcard without share_threshold: two values, one counter")
	}
	// replaces: the per-user limit replaces the account one.
	ms := c.Resolve("edge_proxy_per_ip", [][]rls.Entry{rlsEntries("category", "account"), rlsEntries("user", "ann")})
	if ms[0].Rule != nil || ms[1].Rule == nil {
		t.Errorf("replaces: %+v", ms)
	}
	// Flags carried.
	m := c.Match("edge_proxy_per_ip", rlsEntries("user", "ann"))
	if !m.Rule.DetailedMetric || len(m.Rule.Limit.Replaces) != 1 || m.Rule.Limit.Replaces[0] != "account" {
		t.Errorf("user rule: %+v %+v", m.Rule, m.Rule.Limit)
	}
	if m := c.Match("edge_proxy_per_ip", rlsEntries("internal", "x")); !m.Rule.ValueToMetric {
		t.Error("value_to_metric not read")
	}
	if d := c.Domain("messaging"); d == nil || d.Source != filepath.Join("testdata/envoy", "messaging.yaml") {
		t.Errorf("messaging's source: %+v", d)
	}
}

// TestParseEnvoyRateLimitErrors: every mistake is an error naming the file
// and the field, never a panic.
func TestParseEnvoyRateLimitErrors(t *testing.T) {
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"no domain", "descriptors: []\n", "domain: missing"},
		{"empty domain", "domain: ''\n", "domain: empty"},
		{"unknown top-level field", "domain: d\nlimits: []\n", "limits: unknown field"},
		{"unknown descriptor field", "domain: d\ndescriptors:\n  - key: a\n    rate: 1\n", "descriptors[0].rate: unknown field"},
		{"empty key", "domain: d\ndescriptors:\n  - key: ''\n    rate_limit: {unit: second, requests_per_unit: 1}\n", "descriptors[0].key: missing or empty"},
		{"no key", "domain: d\ndescriptors:\n  - value: v\n", "descriptors[0].key: missing or empty"},
		{"duplicate", "domain: d\ndescriptors:\n  - {key: a, value: b}\n  - {key: a, value: b}\n", "descriptors[1]: the same key and value as descriptors[0]"},
		{"nested duplicate", "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - {key: b}\n      - {key: b}\n", "descriptors[0].descriptors[1]: the same key and value"},
		{"bad unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n", `descriptors[0].rate_limit.unit: "fortnight" is not a unit`},
		{"no unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {requests_per_unit: 1}\n", "descriptors[0].rate_limit.unit: missing"},
		{"unit with unlimited", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, unlimited: true}\n", "descriptors[0].rate_limit.unit: given with unlimited"},
		{"negative", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: -1}\n", "requests_per_unit: -1 is outside"},
		{"too many", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 4294967296}\n", "requests_per_unit: 4294967296 is outside"},
		{"rpu as text", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: ten}\n", "requests_per_unit: want an integer"},
		{"empty replaces", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: ''}]}\n", "replaces[0].name: missing or empty"},
		{"replaces itself", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, name: x, replaces: [{name: x}]}\n", `replaces[0].name: "x" is this limit's own name`},
		{"flag not a bool", "domain: d\ndescriptors:\n  - key: a\n    shadow_mode: sometimes\n", "descriptors[0].shadow_mode: want true or false"},
		{"descriptors not a list", "domain: d\ndescriptors: {key: a}\n", "descriptors: want a sequence"},
		{"not a mapping", "- domain: d\n", "want a mapping"},
		{"bad YAML", "domain: [\n", "(document)"},
		{"burst tiers", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {burst_tiers: api/t}\n", "descriptors[0].rate_limit.burst_tiers: only in Sluice's own configuration"},
		// Sluice's extensions.
		{"multiplier 0", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, unit_multiplier: 0}\n", "descriptors[0].rate_limit.unit_multiplier: 0 is outside 1 … 4294967295 (line 4)"},
		{"burst 0", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, burst: 0}\n", "descriptors[0].rate_limit.burst: 0 is outside"},
		{"burst of a fixed window", "domain: d\ndescriptors:\n  - key: a\n    algorithm: fixed_window\n    rate_limit: {unit: second, requests_per_unit: 1, burst: 3}\n", "descriptors[0].rate_limit.burst: a burst is a token bucket's depth, and the rule's algorithm is fixed_window"},
		{"burst in a fixed-window domain", "domain: d\nalgorithm: fixed_window\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n        rate_limits: [{unit: second, requests_per_unit: 1}, {unit: minute, requests_per_unit: 9, burst: 3}]\n", "descriptors[0].descriptors[0].rate_limits[1].burst: a burst is a token bucket's depth, and the domain's algorithm is fixed_window"},
		{"unknown zone", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: month, requests_per_unit: 1, calendar: Mars/Olympus}\n", `descriptors[0].rate_limit.calendar: "Mars/Olympus" is not a zone (want UTC or an IANA zone name`},
		{"local zone", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: month, requests_per_unit: 1, calendar: Local}\n", `calendar: "Local" is not a zone`},
		{"calendar seconds", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, calendar: UTC}\n", "descriptors[0].rate_limit.calendar: with unit second (a calendar counts days, weeks, months or years)"},
		{"calendar multiplier", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: month, requests_per_unit: 1, calendar: UTC, unit_multiplier: 3}\n", "rate_limit.unit_multiplier: given with calendar"},
		{"calendar burst", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: day, requests_per_unit: 1, calendar: UTC, burst: 2}\n", "rate_limit.burst: given with calendar"},
		{"unlimited calendar", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, calendar: UTC}\n", "rate_limit.calendar: given with unlimited: true"},
		{"both", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n    rate_limits: [{unit: day, requests_per_unit: 9}]\n", "descriptors[0].rate_limits: given with rate_limit (a rule has one or the other) (line 5)"},
		{"empty list", "domain: d\ndescriptors:\n  - key: a\n    rate_limits: []\n", "descriptors[0].rate_limits: empty (want one limit or more)"},
		{"unlimited in a list", "domain: d\ndescriptors:\n  - key: a\n    rate_limits: [{unlimited: true}]\n", "descriptors[0].rate_limits[0].unlimited: not in rate_limits"},
		{"0 in a list", "domain: d\ndescriptors:\n  - key: a\n    rate_limits: [{unit: second, requests_per_unit: 0}]\n", "descriptors[0].rate_limits[0].requests_per_unit: 0 in rate_limits"},
		{"the same shape twice", "domain: d\ndescriptors:\n  - key: a\n    rate_limits:\n      - {unit: day, requests_per_unit: 9}\n      - {unit: day, requests_per_unit: 5}\n", "descriptors[0].rate_limits[1]: the same unit, unit_multiplier and calendar as descriptors[0].rate_limits[0] (line 6)"},
	} {
		_, err := ParseEnvoyRateLimit("bad.yaml", []byte(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "bad.yaml") {
			t.Errorf("%s: %v; want an error from bad.yaml containing %q", tc.name, err, tc.want)
		}
	}
}

// TestParseEnvoyRateLimitAsWritten: keys and values written as numbers or
// booleans are their text; several documents are several domains; unit
// names in any case.
func TestParseEnvoyRateLimitAsWritten(t *testing.T) {
	ds, err := ParseEnvoyRateLimit("f.yaml", []byte(`
domain: a
descriptors:
  - key: port
    value: 8080
    rate_limit: {unit: Minute, requests_per_unit: 3}
  - key: beta
    value: true
    rate_limit: {unlimited: true}
---
domain: b
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 2 || ds[0].Descriptors[0].Value != "8080" || ds[0].Descriptors[0].Limit.Unit != rls.Minute ||
		ds[0].Descriptors[1].Value != "true" || ds[1].Name != "b" || ds[1].Source != "f.yaml (document 2)" {
		t.Fatalf("%+v", ds)
	}
}

// TestParseEnvoyExtensions: Sluice's extensions of the format read into
// the rule's limits.
func TestParseEnvoyExtensions(t *testing.T) {
	ds, err := ParseEnvoyRateLimit("f.yaml", []byte(`
domain: llm
descriptors:
  - key: tenant
    rate_limits:
      - {unit: month, requests_per_unit: 100000, calendar: Europe/Paris, name: monthly}
      - {unit: second, requests_per_unit: 50, burst: 200}
      - {unit: minute, unit_multiplier: 5, requests_per_unit: 1000}
  - key: week
    rate_limit: {unit: week, requests_per_unit: 7, calendar: UTC}
`))
	if err != nil {
		t.Fatal(err)
	}
	r := ds[0].Descriptors[0]
	if r.Limit == nil || len(r.MoreLimits) != 2 {
		t.Fatalf("rate_limits: %+v %+v", r.Limit, r.MoreLimits)
	}
	var got []string
	for l := range r.AllLimits() {
		got = append(got, l.String())
	}
	want := "100000/month calendar Europe/Paris, 50/second burst 200, 1000/minute*5"
	if strings.Join(got, ", ") != want || r.Limit.Name != "monthly" || r.MoreLimits[1].Period().Minutes() != 5 {
		t.Fatalf("limits %q, want %q", got, want)
	}
	if w := ds[0].Descriptors[1].Limit; w.Unit != rls.Week || w.Calendar.String() != "UTC" {
		t.Fatalf("week: %+v", w)
	}
	// A rule's hash changes with its extensions.
	c1, _ := rls.NewConfig(ds...)
	r.MoreLimits[0].Burst = 201
	c2, _ := rls.NewConfig(ds...)
	if c1.Hash() == c2.Hash() {
		t.Fatal("a burst's change leaves the rules' hash")
	}
}

// TestLoadEnvoyRateLimitDuplicateDomain: a domain in two files is an error
// naming both.
func TestLoadEnvoyRateLimitDuplicateDomain(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"one.yaml", "two.yml"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("domain: same\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "README.md"), []byte("not read"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := LoadEnvoyRateLimit(dir)
	if err == nil || !strings.Contains(err.Error(), "one.yaml") || !strings.Contains(err.Error(), "two.yml") {
		t.Fatalf("%v; want an error naming one.yaml and two.yml", err)
	}
	// One file alone loads.
	if c, err := LoadEnvoyRateLimit(filepath.Join(dir, "one.yaml")); err != nil || c.Domain("same") == nil {
		t.Fatalf("one file: %v", err)
	}
}

// FuzzParseEnvoyRateLimit: any input parses or fails with an error; what
// parses loads into a configuration whose rules answer Match without
// panicking.
func FuzzParseEnvoyRateLimit(f *testing.F) {
	for _, name := range []string{"database.yaml", "messaging.yaml", "edge.yaml"} {
		data, err := os.ReadFile(filepath.Join("testdata/envoy", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("domain: d\ndescriptors:\n  - key: a\n    value: '*x*'\n    share_threshold: true\n    rate_limit: {unit: year, requests_per_unit: 9}\n"))
	f.Add([]byte("domain: &a d\ndescriptors: [{key: *a, <<: {value: v}}]\n---\n---\ndomain: e\n"))
	f.Add([]byte("domain: d\ndescriptors:\n  - key: t\n    rate_limits:\n      - {unit: month, requests_per_unit: 9, calendar: Europe/Paris}\n      - {unit: second, requests_per_unit: 5, burst: 7, unit_multiplier: 3}\n"))
	f.Add([]byte("domain: d\nalgorithm: fixed_window\ndescriptors:\n  - {key: w, rate_limit: {unit: week, requests_per_unit: 1, calendar: UTC}}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		ds, err := ParseEnvoyRateLimit("fuzz.yaml", data)
		if err != nil {
			return
		}
		c, err := rls.NewConfig(ds...)
		if err != nil {
			return // a domain twice in one file
		}
		for _, d := range ds {
			// A path of exact rules (no wildcard, which another rule of
			// its level may take first) matches its own rule.
			var walk func(rules []*rls.Rule, entries []rls.Entry, exact bool)
			walk = func(rules []*rls.Rule, entries []rls.Entry, exact bool) {
				for _, r := range rules {
					if r.Key == "" {
						t.Fatalf("a rule with an empty key parsed: %+v", r)
					}
					for l := range r.AllLimits() {
						if p := l.Policy(rls.TokenBucket); !l.Unlimited && l.BurstTiers == "" && p.Period <= 0 {
							t.Fatalf("a limit of no period parsed: %+v", l)
						}
						if l.Calendar != nil && !rls.CalendarUnit(l.Unit) {
							t.Fatalf("a calendar of unit %v parsed", l.Unit)
						}
					}
					e := append(entries[:len(entries):len(entries)], rls.Entry{Key: r.Key, Value: strings.ReplaceAll(r.Value, "*", "z")})
					exact := exact && r.Value != "" && !r.Wildcard()
					if m := c.Match(d.Name, e); exact && r.Limit != nil && m.Rule != r {
						t.Fatalf("%v does not match its own rule %+v", e, r)
					}
					walk(r.Descriptors, e, exact)
				}
			}
			walk(d.Descriptors, nil, true)
		}
	})
}
