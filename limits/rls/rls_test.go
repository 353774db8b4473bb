package rls

import (
	"regexp"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

func lim(rpu uint32, u Unit) *Limit { return &Limit{RequestsPerUnit: rpu, Unit: u} }

func entries(kv ...string) []Entry {
	var es []Entry
	for i := 0; i+1 < len(kv); i += 2 {
		es = append(es, Entry{Key: kv[i], Value: kv[i+1]})
	}
	return es
}

// testConfig is one domain with every kind of rule.
func testConfig(t *testing.T) *Config {
	t.Helper()
	d := &Domain{Name: "edge", Source: "edge.yaml", Descriptors: []*Rule{
		{Key: "remote_address", Limit: lim(10, Second)},                                // key only: a counter per value
		{Key: "path", Value: "/login", Limit: lim(5, Minute)},                          // key and value
		{Key: "path", Value: "/api/*/items", Limit: lim(50, Second)},                   // wildcard, a counter per value
		{Key: "path", Value: "/static/*", ShareThreshold: true, Limit: lim(7, Second)}, // wildcard, one counter
		{Key: "path", Limit: lim(100, Second)},                                         // any other path
		{Key: "client", Value: "ip_192.0.2.66", Limit: lim(1, Hour)},
		{Key: "client_ip", Value: "192.0.2.66", Limit: lim(2, Hour)},
		{Key: "tenant", Descriptors: []*Rule{ // no limit of its own: leads on
			{Key: "plan", Value: "free", Limit: lim(3, Day)},
			{Key: "plan", Value: "gold"}, // whitelisted
		}},
		{Key: "user", Limit: &Limit{RequestsPerUnit: 20, Unit: Minute, Name: "per-user"}, Descriptors: []*Rule{
			{Key: "op", Value: "write", Limit: &Limit{RequestsPerUnit: 2, Unit: Minute, Replaces: []string{"per-user"}}},
		}},
		{Key: "banned", Value: "yes", Limit: lim(0, Second)},
		{Key: "health", Limit: &Limit{Unlimited: true}},
	}}
	c, err := NewConfig(d)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestMatchRules(t *testing.T) {
	c := testConfig(t)
	for _, tc := range []struct {
		name    string
		entries []Entry
		want    *Limit // nil: no match
	}{
		{"key only", entries("remote_address", "10.0.0.1"), lim(10, Second)},
		{"key and value before key only", entries("path", "/login"), lim(5, Minute)},
		{"wildcard inside the value", entries("path", "/api/v2/items"), lim(50, Second)},
		{"wildcard with nothing for the star", entries("path", "/api//items"), lim(50, Second)},
		{"a wildcard that does not match: key only", entries("path", "/api/v2/orders"), lim(100, Second)},
		{"shared wildcard", entries("path", "/static/app.js"), lim(7, Second)},
		{"unknown key", entries("color", "red"), nil},
		{"nested", entries("tenant", "acme", "plan", "free"), lim(3, Day)},
		{"nested, unknown value", entries("tenant", "acme", "plan", "silver"), nil},
		{"whitelisted", entries("tenant", "acme", "plan", "gold"), nil},
		{"stops above the limited level", entries("tenant", "acme"), nil},
		{"deeper than the tree (the depth rule)", entries("remote_address", "10.0.0.1", "path", "/login"), nil},
		{"a limit with nested rules applies at its own depth", entries("user", "ann"), &Limit{RequestsPerUnit: 20, Unit: Minute, Name: "per-user"}},
		{"and the nested one below it", entries("user", "ann", "op", "write"), &Limit{RequestsPerUnit: 2, Unit: Minute, Replaces: []string{"per-user"}}},
		{"block list", entries("banned", "yes"), lim(0, Second)},
		{"unlimited", entries("health", "x"), &Limit{Unlimited: true}},
		{"keys and values never collide: client = ip_192.0.2.66", entries("client", "ip_192.0.2.66"), lim(1, Hour)},
		{"keys and values never collide: client_ip = 192.0.2.66", entries("client_ip", "192.0.2.66"), lim(2, Hour)},
		{"the key of another rule's value", entries("client_ip", "ip_192.0.2.66"), nil},
		{"no entries", nil, nil},
	} {
		m := c.Match("edge", tc.entries)
		switch {
		case tc.want == nil && m.Rule != nil:
			t.Errorf("%s: matched %+v, want nothing", tc.name, m.Rule)
		case tc.want != nil && m.Rule == nil:
			t.Errorf("%s: matched nothing, want %+v", tc.name, tc.want)
		case tc.want != nil && (m.Rule.Limit.RequestsPerUnit != tc.want.RequestsPerUnit || m.Rule.Limit.Unit != tc.want.Unit ||
			m.Rule.Limit.Name != tc.want.Name || m.Rule.Limit.Unlimited != tc.want.Unlimited):
			t.Errorf("%s: matched %+v, want %+v", tc.name, m.Rule.Limit, tc.want)
		}
	}
	if m := c.Match("nowhere", entries("path", "/login")); m.Rule != nil {
		t.Errorf("an unknown domain matched %+v", m.Rule)
	}
}

// TestBuckets: a key-only or wildcard rule counts each value apart; a
// key-and-value rule, and a wildcard with share_threshold, count its
// values together; domains and levels never share a counter.
func TestBuckets(t *testing.T) {
	c := testConfig(t)
	b := func(kv ...string) string {
		t.Helper()
		m := c.Match("edge", entries(kv...))
		if m.Rule == nil {
			t.Fatalf("%v matched nothing", kv)
		}
		return m.Bucket
	}
	if b("remote_address", "10.0.0.1") == b("remote_address", "10.0.0.2") {
		t.Error("two values of a key-only rule share a counter")
	}
	if first := b("remote_address", "10.0.0.1"); b("remote_address", "10.0.0.1") != first {
		t.Error("one value, two counters")
	}
	if b("path", "/api/a/items") == b("path", "/api/b/items") {
		t.Error("two values of a wildcard without share_threshold share a counter")
	}
	if b("path", "/static/a.js") != b("path", "/static/b.css") {
		t.Error("two values of a wildcard with share_threshold have counters of their own")
	}
	if b("client", "ip_192.0.2.66") == b("client_ip", "192.0.2.66") {
		t.Error("client = ip_192.0.2.66 and client_ip = 192.0.2.66 share a counter")
	}
	if b("user", "ann") == b("user", "ann", "op", "write") {
		t.Error("two levels share a counter")
	}
}

// TestResolveReplaces: a request matching a named limit and one that
// replaces it is limited by the replacing one only.
func TestResolveReplaces(t *testing.T) {
	c := testConfig(t)
	ms := c.Resolve("edge", [][]Entry{entries("user", "ann"), entries("user", "ann", "op", "write"), entries("path", "/login")})
	if ms[0].Rule != nil {
		t.Errorf("the replaced per-user limit still applies: %+v", ms[0].Rule.Limit)
	}
	if ms[1].Rule == nil || ms[1].Rule.Limit.RequestsPerUnit != 2 || ms[2].Rule == nil || ms[2].Rule.Limit.RequestsPerUnit != 5 {
		t.Errorf("the others: %+v %+v", ms[1], ms[2])
	}
	// Alone, the named limit applies.
	if ms := c.Resolve("edge", [][]Entry{entries("user", "ann")}); ms[0].Rule == nil {
		t.Error("per-user alone matched nothing")
	}
}

func TestNewConfigDuplicateDomain(t *testing.T) {
	_, err := NewConfig(&Domain{Name: "a", Source: "one.yaml"}, &Domain{Name: "a", Source: "two.yaml"})
	if err == nil || !strings.Contains(err.Error(), "one.yaml") || !strings.Contains(err.Error(), "two.yaml") {
		t.Fatalf("a domain defined twice: %v; want an error naming both files", err)
	}
	if _, err := NewConfig(&Domain{Source: "x.yaml"}); err == nil {
		t.Fatal("an empty domain name accepted")
	}
}

func TestUnits(t *testing.T) {
	for _, tc := range []struct {
		s    string
		u    Unit
		secs float64
	}{{"second", Second, 1}, {"MINUTE", Minute, 60}, {"Hour", Hour, 3600}, {"day", Day, 86400}, {"week", Week, 604800}, {"month", Month, 2592000}, {"year", Year, 31536000}} {
		u, err := ParseUnit(tc.s)
		if err != nil || u != tc.u || u.Duration().Seconds() != tc.secs || !strings.EqualFold(u.String(), tc.s) {
			t.Errorf("%s: %v %v %v", tc.s, u, err, u.Duration())
		}
	}
	for _, s := range []string{"", "unknown", "fortnight"} {
		if _, err := ParseUnit(s); err == nil {
			t.Errorf("ParseUnit(%q) accepted", s)
		}
	}
}

// TestGlob: glob agrees with the regular expression of its pattern ('*'
// as .*, everything else literal) on any pattern and string.
func TestGlob(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		alphabet := rapid.SampledFrom([]rune{'a', 'b', '*', '/', '.'})
		pattern := string(rapid.SliceOfN(alphabet, 0, 8).Draw(t, "pattern"))
		s := string(rapid.SliceOfN(rapid.SampledFrom([]rune{'a', 'b', '/', '.', '*'}), 0, 10).Draw(t, "s"))
		parts := strings.Split(pattern, "*")
		for i := range parts {
			parts[i] = regexp.QuoteMeta(parts[i])
		}
		re := regexp.MustCompile("^(?s:" + strings.Join(parts, ".*") + ")$")
		if got, want := glob(pattern, s), re.MatchString(s); got != want {
			t.Fatalf("glob(%q, %q) = %v, want %v", pattern, s, got, want)
		}
	})
}
