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
