package resources

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/algorithm"
	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/limits/copies"
)

const valid = `
resources:
  - identifier_glob: "db/*"
    capacity: 300
    algorithm: {kind: PROPORTIONAL_SHARE, lease_length: 60, refresh_interval: 16}
  - identifier_glob: "db/replica-1"
    capacity: 500
    safe_capacity: 5
    description: "replica 1"
    algorithm:
      kind: FAIR_SHARE
      lease_length: 60
      refresh_interval: 16
      learning_mode_duration: 0
      parameters: [{name: decay_factor, value: "0.5"}]
  - identifier_glob: "*"
    capacity: 0
    algorithm: {kind: NO_ALGORITHM, lease_length: 30, refresh_interval: 10}
`

func TestParseValid(t *testing.T) {
	r, err := Parse([]byte(valid))
	if err != nil {
		t.Fatal(err)
	}
	if r.Len() != 3 || len(r.Hash()) != 64 {
		t.Fatalf("len %d hash %q", r.Len(), r.Hash())
	}
	tmpl, ok := r.Find("db/replica-1")
	if !ok || tmpl.Capacity != 500 || !tmpl.HasSafeCapacity || tmpl.SafeCapacity != 5 || tmpl.Algorithm.Kind != algorithm.FairShare ||
		tmpl.Algorithm.LeaseLength != 60*time.Second || tmpl.Algorithm.RefreshInterval != 16*time.Second || tmpl.Algorithm.LearningModeDuration != 0 {
		t.Fatalf("db/replica-1: %+v", tmpl)
	}
	if v, ok := tmpl.Algorithm.Param("decay_factor"); !ok || v != "0.5" || tmpl.Algorithm.Params.DecayFactor != 0.5 {
		t.Fatalf("decay_factor %q %v (%+v)", v, ok, tmpl.Algorithm.Params)
	}
	tmpl, _ = r.Find("db/replica-2")
	if tmpl.IdentifierGlob != "db/*" || tmpl.Algorithm.LearningModeDuration != 60*time.Second || tmpl.Algorithm.Params != algorithm.DefaultParams() {
		t.Fatalf("db/replica-2: %+v (learning mode defaults to the lease length)", tmpl)
	}
	// '*' does not cross '/': "a/b" matches no template.
	if tmpl, _ := r.Find("x"); tmpl.IdentifierGlob != "*" {
		t.Fatalf("x: %+v", tmpl)
	}
	if _, ok := r.Find("a/b"); ok {
		t.Fatal("a/b matched '*'")
	}
	p := r.Proto()
	if len(p.GetResources()) != 3 || p.GetResources()[1].GetSafeCapacity() != 5 || p.GetResources()[1].GetAlgorithm().GetLeaseLength() != 60 {
		t.Fatalf("proto %v", p)
	}
	if empty, err := Parse(nil); err != nil || empty.Len() != 0 {
		t.Fatalf("empty file: %v", err)
	}
}

func TestParseErrorsNameTemplateAndField(t *testing.T) {
	tmpl := func(body string) string { return "resources:\n  - " + body + "\n" }
	alg := "algorithm: {kind: FAIR_SHARE, lease_length: 60, refresh_interval: 16}"
	tests := []struct {
		name string
		doc  string
		want []string
	}{
		{"unknown field", tmpl(`identifier_glob: a
    capacity: 1
    capacityy: 2
    ` + alg), []string{`resources[0] ("a"): unknown field "capacityy" (line 4`}},
		{"unknown algorithm field", tmpl("identifier_glob: b\n    capacity: 1\n    algorithm: {kind: FAIR_SHARE, lease_length: 60, refresh_interval: 16, lease_lenght: 3}"),
			[]string{`resources[0] ("b"): algorithm: unknown field "lease_lenght"`}},
		{"unknown parameter field", tmpl("identifier_glob: c\n    capacity: 1\n    algorithm: {kind: FAIR_SHARE, lease_length: 60, refresh_interval: 16, parameters: [{name: x, valu: y}]}"),
			[]string{`resources[0] ("c"): algorithm.parameters[0]: unknown field "valu"`}},
		{"unknown top-level field", "resource: []\n", []string{`unknown field "resource"`, "want one of resources"}},
		{"missing glob", tmpl("capacity: 1\n    " + alg), []string{`resources[0] ("?")`, "identifier_glob: required"}},
		{"bad glob", tmpl("identifier_glob: \"db/[\"\n    capacity: 1\n    " + alg), []string{`resources[0] ("db/[")`, "identifier_glob: bad glob"}},
		{"negative capacity", tmpl("identifier_glob: a\n    capacity: -5\n    " + alg), []string{`("a")`, "capacity: -5 is negative"}},
		{"missing capacity", tmpl("identifier_glob: a\n    " + alg), []string{"capacity: required"}},
		{"NaN capacity", tmpl("identifier_glob: a\n    capacity: .nan\n    " + alg), []string{"capacity: NaN is not a finite number"}},
		{"negative safe capacity", tmpl("identifier_glob: a\n    capacity: 1\n    safe_capacity: -2\n    " + alg), []string{`resources[0] ("a"): safe_capacity: -2 is negative`, "only negative value is -1 (no limit)"}},
		{"small negative safe capacity", tmpl("identifier_glob: a\n    capacity: 1\n    safe_capacity: -0.5\n    " + alg), []string{`resources[0] ("a"): safe_capacity: -0.5 is negative`}},
		{"infinite safe capacity", tmpl("identifier_glob: a\n    capacity: 1\n    safe_capacity: -.inf\n    " + alg), []string{`resources[0] ("a"): safe_capacity: -Inf is not a finite number`}},
		{"missing algorithm", tmpl("identifier_glob: a\n    capacity: 1"), []string{"algorithm: required"}},
		{"unknown kind", tmpl("identifier_glob: a\n    capacity: 1\n    algorithm: {kind: ROUND_ROBIN, lease_length: 60, refresh_interval: 16}"), []string{"algorithm.kind", "ROUND_ROBIN"}},
		{"refresh beyond lease", tmpl("identifier_glob: db\n    capacity: 1\n    algorithm: {kind: FAIR_SHARE, lease_length: 10, refresh_interval: 30}"), []string{`resources[0] ("db")`, "algorithm.refresh_interval: 30 exceeds lease_length 10"}},
		{"zero lease", tmpl("identifier_glob: a\n    capacity: 1\n    algorithm: {kind: FAIR_SHARE, lease_length: 0, refresh_interval: 0}"), []string{"algorithm.lease_length: 0 seconds, must be at least 1"}},
		{"missing refresh", tmpl("identifier_glob: a\n    capacity: 1\n    algorithm: {kind: FAIR_SHARE, lease_length: 10}"), []string{"algorithm.refresh_interval: required"}},
		{"negative learning", tmpl("identifier_glob: a\n    capacity: 1\n    algorithm: {kind: FAIR_SHARE, lease_length: 10, refresh_interval: 5, learning_mode_duration: -1}"), []string{"algorithm.learning_mode_duration"}},
		{"duplicate glob", "resources:\n  - {identifier_glob: a, capacity: 1, " + alg + "}\n  - {identifier_glob: a, capacity: 2, " + alg + "}\n", []string{`resources[1] ("a"): identifier_glob: duplicate of resources[0]`}},
		{"two documents", "resources: []\n---\nresources: []\n", []string{"more than one YAML document"}},
		{"not yaml", "resources: [", []string{"config:"}},
		{"two errors reported", "resources:\n  - {identifier_glob: a, capacity: -1, " + alg + "}\n  - {identifier_glob: b, capacity: -2, " + alg + "}\n", []string{`("a"): capacity`, `("b"): capacity`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.doc))
			if err == nil {
				t.Fatalf("accepted:\n%s", tt.doc)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

// Every named parameter of the design's table is honoured or refused with
// an error that names the template, the field and the parameter.
// Source: doorman-design.md, "Common algorithm parameters".
func TestParseAlgorithmParameters(t *testing.T) {
	doc := func(params string) string {
		return "resources:\n  - identifier_glob: db\n    capacity: 1\n    algorithm:\n      kind: FAIR_SHARE\n      lease_length: 10\n      refresh_interval: 5\n      parameters: " + params + "\n"
	}
	tests := []struct {
		name      string
		params    string
		wantDecay float64  // when accepted
		want      []string // what the error must mention; nil: accepted
	}{
		{name: "none", params: "[]", wantDecay: 0.5},
		{name: "decay factor honoured", params: `[{name: decay_factor, value: "0.25"}]`, wantDecay: 0.25},
		{name: "decay factor one", params: `[{name: decay_factor, value: "1"}]`, wantDecay: 1},
		{name: "decay factor above one", params: `[{name: decay_factor, value: "2"}]`,
			want: []string{`resources[0] ("db"): algorithm.parameters[0].value: decay_factor "2" must be a number in (0, 1]`}},
		{name: "decay factor zero", params: `[{name: decay_factor, value: "0"}]`,
			want: []string{`resources[0] ("db"): algorithm.parameters[0].value: decay_factor "0"`}},
		{name: "decay factor negative", params: `[{name: decay_factor, value: "-0.5"}]`,
			want: []string{`resources[0] ("db"): algorithm.parameters[0].value: decay_factor "-0.5"`}},
		{name: "decay factor NaN", params: `[{name: decay_factor, value: "NaN"}]`,
			want: []string{`algorithm.parameters[0].value: decay_factor "NaN"`}},
		{name: "decay factor not a number", params: `[{name: decay_factor, value: "half"}]`,
			want: []string{`algorithm.parameters[0].value: decay_factor "half"`}},
		{name: "decay factor without value", params: `[{name: decay_factor}]`,
			want: []string{`algorithm.parameters[0].value: decay_factor ""`}},
		{name: "lease_duration_secs duplicates lease_length", params: `[{name: lease_duration_secs, value: "60"}]`,
			want: []string{`resources[0] ("db"): algorithm.parameters[0].name: lease_duration_secs duplicates the algorithm field lease_length, which sets the same thing: set lease_length instead`}},
		{name: "lease_duration_secs even when equal", params: `[{name: lease_duration_secs, value: "10"}]`,
			want: []string{`algorithm.parameters[0].name: lease_duration_secs`, "set lease_length instead"}},
		{name: "refresh_interval duplicates refresh_interval", params: `[{name: refresh_interval, value: "5"}]`,
			want: []string{`resources[0] ("db"): algorithm.parameters[0].name: refresh_interval duplicates the algorithm field refresh_interval, which sets the same thing: set refresh_interval instead`}},
		{name: "learning_mode_duration as a parameter", params: `[{name: learning_mode_duration, value: "5"}]`,
			want: []string{`algorithm.parameters[0].name: learning_mode_duration`, "set learning_mode_duration instead"}},
		{name: "unknown name", params: `[{name: decay_factr, value: "0.5"}]`,
			want: []string{`resources[0] ("db"): algorithm.parameters[0].name: unknown algorithm parameter "decay_factr"`, "decay_factor"}},
		{name: "missing name", params: `[{value: "0.5"}]`,
			want: []string{`resources[0] ("db"): algorithm.parameters[0].name: required`}},
		{name: "given twice", params: `[{name: decay_factor, value: "0.5"}, {name: decay_factor, value: "0.25"}]`,
			want: []string{`resources[0] ("db"): algorithm.parameters[1].name: decay_factor given more than once (first at parameters[0])`}},
		{name: "every problem reported", params: `[{name: lease_duration_secs, value: "60"}, {name: decay_factor, value: "5"}, {name: x}]`,
			want: []string{"algorithm.parameters[0].name: lease_duration_secs", "algorithm.parameters[1].value: decay_factor", `algorithm.parameters[2].name: unknown algorithm parameter "x"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Parse([]byte(doc(tt.params)))
			if tt.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				tmpl, _ := r.Find("db")
				if tmpl.Algorithm.Params.DecayFactor != tt.wantDecay {
					t.Fatalf("decay factor %v, want %v", tmpl.Algorithm.Params.DecayFactor, tt.wantDecay)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted: %s", tt.params)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

// safe_capacity: -1 means no limit and is kept as -1 (and sent as -1); 0
// forbids; any other negative value is an error (TestParseErrorsNameTemplateAndField).
// Source: charon-paper.md §5.1; doorman-design.md, "Optimistic, pessimistic
// and safe mode operation".
func TestParseSafeCapacity(t *testing.T) {
	tests := []struct {
		name      string
		field     string // the safe_capacity line, or "" for none
		wantHas   bool
		wantSafe  float64
		unlimited bool
	}{
		{name: "absent: computed by the server", field: ""},
		{name: "no limit", field: "safe_capacity: -1", wantHas: true, wantSafe: -1, unlimited: true},
		{name: "no limit, written as a float", field: "safe_capacity: -1.0", wantHas: true, wantSafe: -1, unlimited: true},
		{name: "forbidden", field: "safe_capacity: 0", wantHas: true, wantSafe: 0},
		{name: "a number", field: "safe_capacity: 7.5", wantHas: true, wantSafe: 7.5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := "resources:\n  - identifier_glob: a\n    capacity: 100\n    " + tt.field + "\n    algorithm: {kind: FAIR_SHARE, lease_length: 60, refresh_interval: 16}\n"
			r, err := Parse([]byte(doc))
			if err != nil {
				t.Fatal(err)
			}
			tmpl, _ := r.Find("a")
			if tmpl.HasSafeCapacity != tt.wantHas || tmpl.SafeCapacity != tt.wantSafe || tmpl.SafeCapacityUnlimited() != tt.unlimited {
				t.Fatalf("template %+v (unlimited %v)", tmpl, tmpl.SafeCapacityUnlimited())
			}
			p := r.Proto().GetResources()[0]
			if (p.SafeCapacity != nil) != tt.wantHas || p.GetSafeCapacity() != tt.wantSafe {
				t.Fatalf("proto safe_capacity %v", p.SafeCapacity)
			}
		})
	}
}

func TestExampleConfigIsValid(t *testing.T) {
	r, err := Load("../examples/config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if r.Len() < 4 {
		t.Fatalf("example has %d templates", r.Len())
	}
}

// The shipped limits example answers the documents' examples as they say.
func TestExampleLimitsIsValid(t *testing.T) {
	r, err := Load("../examples/limits.yaml")
	if err != nil {
		t.Fatal(err)
	}
	e, err := limits.New(r.Limits(), limits.Options{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_700_000_000, 0)
	for _, tc := range []struct {
		resource, domain string
		tokens           int64
		status           limits.Status
		bucket           string
		limit            int64
	}{
		// ratelimiting-in-150-lines.md: any IP gets rate_limit's bucket
		// of 10 (at most 1 a request: its fill rate); 192.168.11.3 its
		// own of 500.
		{"frontend", "rate_limit/10.0.0.1", 2, limits.StatusTooManyTokensRequested, "prefix rate_limit", 10},
		{"frontend", "rate_limit/10.0.0.1", -10, limits.StatusOK, "prefix rate_limit", 10},
		{"frontend", "rate_limit/10.0.0.1", 1, limits.StatusTimeout, "prefix rate_limit", 10},
		{"frontend", "rate_limit/10.0.0.2", 1, limits.StatusOK, "prefix rate_limit", 10},
		{"frontend", "rate_limit/192.168.11.3", 100, limits.StatusOK, "named", 500},
		// quotaservice-design.md, example 3: one login a second per user.
		{"TheBrain_userLogins", "user42", 1, limits.StatusOK, "dynamic", 1},
		{"TheBrain_userLogins", "user42", 1, limits.StatusTimeout, "dynamic", 1},
		// Examples 1 and 2: named buckets, the rest on the shared default.
		{"Pinky_TheBrain", "UserService_getUser", 5, limits.StatusOK, "named", 20},
		{"Pinky_TheBrain", "OtherService", 5, limits.StatusOK, "default", 1000},
		{"Pinky_PinkyMySQL", "users_insert", 5, limits.StatusOK, "named", 10},
		// Anything else: the global default.
		{"Unknown", "x", 1, limits.StatusOK, "global default", 100},
	} {
		// tokens -n: n requests of one token, the last one judged.
		n := int64(1)
		if tc.tokens < 0 {
			n, tc.tokens = -tc.tokens, 1
		}
		var d limits.Decision
		for range n {
			d = e.Allow(t.Context(), now, limits.Request{Resource: tc.resource, Domain: tc.domain, Tokens: tc.tokens})
		}
		if d.Status != tc.status || d.Bucket.String() != tc.bucket || d.Limit != tc.limit {
			t.Errorf("%s %s ×%d: %v from %q (size %d), want %v from %q (size %d)", tc.resource, tc.domain, tc.tokens,
				d.Status, d.Bucket, d.Limit, tc.status, tc.bucket, tc.limit)
		}
	}
}

func TestLoadMissingFile(t *testing.T) {
	if _, err := Load(filepath.Join(t.TempDir(), "nope.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("got %v", err)
	}
}

func TestWatcher(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "config.yaml")
	write := func(s string) {
		// Write-and-rename, as editors and config managers do.
		tmp := filepath.Join(dir, ".tmp")
		if err := os.WriteFile(tmp, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, file); err != nil {
			t.Fatal(err)
		}
	}
	write(valid)
	loads := make(chan *Repository, 10)
	errs := make(chan error, 10)
	w, err := NewWatcher(file, func(r *Repository) { loads <- r }, func(err error) { errs <- err })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- w.Run(ctx) }()
	defer func() { cancel(); <-done }()
	time.Sleep(50 * time.Millisecond) // let the watch start; not a timing assertion

	write(strings.Replace(valid, "capacity: 500", "capacity: 700", 1))
	select {
	case r := <-loads:
		if tmpl, _ := r.Find("db/replica-1"); tmpl.Capacity != 700 {
			t.Fatalf("reloaded capacity %v", tmpl.Capacity)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no reload after the file changed")
	}
	good := w.Current()

	write("resources:\n  - {identifier_glob: a, capacity: -1}\n")
	select {
	case err := <-errs:
		if !strings.Contains(err.Error(), "capacity") {
			t.Fatalf("error %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no error after a bad file")
	}
	if w.Current() != good {
		t.Fatal("a bad file replaced the last good configuration")
	}
	// Reload (SIGHUP) with a good file again.
	if err := os.WriteFile(file, []byte(valid), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := w.Reload(); err != nil {
		t.Fatal(err)
	}
	if tmpl, _ := w.Current().Find("db/replica-1"); tmpl.Capacity != 500 {
		t.Fatalf("after Reload capacity %v", tmpl.Capacity)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(valid))
	f.Add([]byte("resources:\n  - {identifier_glob: a, capacity: -1}\n"))
	f.Add([]byte("resources: [{identifier_glob: '[', capacity: 1, algorithm: {kind: STATIC, lease_length: 1, refresh_interval: 1}}]"))
	f.Add([]byte("{}"))
	f.Add([]byte("- 1\n- 2"))
	f.Add([]byte("resources: [{identifier_glob: a, capacity: 1, safe_capacity: -1, algorithm: {kind: FAIR_SHARE, lease_length: 2, refresh_interval: 1}}]"))
	f.Add([]byte("resources: [{identifier_glob: a, capacity: 1, safe_capacity: -1.5, algorithm: {kind: FAIR_SHARE, lease_length: 2, refresh_interval: 1}}]"))
	f.Add([]byte(`resources: [{identifier_glob: a, capacity: 1, algorithm: {kind: FAIR_SHARE, lease_length: 2, refresh_interval: 1, parameters: [{name: decay_factor, value: "0.3"}, {name: lease_duration_secs, value: "2"}]}}]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := Parse(data)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			return
		}
		for _, tmpl := range r.Templates() {
			a := tmpl.Algorithm
			if !(tmpl.Capacity >= 0) || (tmpl.SafeCapacity < 0 && tmpl.SafeCapacity != NoSafeCapacityLimit) || a.LeaseLength <= 0 || a.RefreshInterval <= 0 ||
				a.RefreshInterval > a.LeaseLength || a.LearningModeDuration < 0 || !a.Kind.Valid() ||
				!(a.Params.DecayFactor > 0 && a.Params.DecayFactor <= 1) {
				t.Fatalf("invalid template accepted: %+v", tmpl)
			}
			if _, err := algorithm.ParseParameters(a.Parameters); err != nil {
				t.Fatalf("parameters accepted that algorithm refuses: %v", err)
			}
			if got, ok := r.Find(tmpl.IdentifierGlob); !ok || (!strings.ContainsAny(tmpl.IdentifierGlob, `*?[\`) && got.Index != tmpl.Index) {
				t.Fatalf("Find(%q) = %+v, %v", tmpl.IdentifierGlob, got, ok)
			}
		}
	})
}

// The limits section beside the templates: parsed and validated by package
// limits, its errors named under "limits", its unknown fields refused.
func TestLimitsSection(t *testing.T) {
	repo, err := Parse([]byte(`
resources:
  - identifier_glob: "db/*"
    capacity: 10
    algorithm: {kind: FAIR_SHARE, lease_length: 20, refresh_interval: 5}
limits:
  global_default: {size: 10, fill_rate: 5}
  resources:
    api:
      domains:
        small: {size: 10, fill_rate: 2.5, wait_timeout: 250ms}
`))
	if err != nil {
		t.Fatal(err)
	}
	if repo.Len() != 1 {
		t.Errorf("%d templates, want 1", repo.Len())
	}
	l := repo.Limits()
	if l == nil || l.GlobalDefault == nil || l.Resources["api"] == nil {
		t.Fatalf("limits %+v", l)
	}
	if b := l.Resources["api"].Buckets["small"]; b.FillRate != 2.5 || b.WaitTimeout != 250*time.Millisecond {
		t.Errorf("api/small: %+v", b)
	}
	if repo, err := Parse([]byte("resources: []\n")); err != nil || repo.Limits() != nil {
		t.Errorf("no section: %v, %v; want nil limits", repo.Limits(), err)
	}
	for _, tc := range []struct{ yaml, want string }{
		{"limits:\n  resources:\n    api:\n      domains:\n        small: {size: 10, fill_rate: 0}\n", "limits.resources.api.domains.small.fill_rate"},
		{"limits:\n  resources:\n    api:\n      domians: {}\n", "limits.resources.api.domians: unknown field"},
		{"limits:\n  nonsense: 1\n", "limits.nonsense: unknown field"},
		{"limit:\n  resources: {}\n", `unknown field "limit"`},
	} {
		_, err := Parse([]byte(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v; want an error containing %q", tc.yaml, err, tc.want)
		}
	}
}

// Square's configuration format, read as a repository of limits only, and
// reloaded by a watcher like Sluice's own file.
func TestLoadQuotaService(t *testing.T) {
	path := filepath.Join(t.TempDir(), "quota.yaml")
	write := func(s string) {
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("namespaces:\n  logins:\n    dynamic_bucket_template: {size: 1, fill_rate: 1}\n    max_dynamic_buckets: 10\n")
	loads := make(chan *Repository, 4)
	w, err := NewWatcherFunc(path, LoadQuotaService, func(r *Repository) { loads <- r }, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := w.Current()
	if r.Len() != 0 || r.Limits() == nil || r.Limits().Resources["logins"].MaxDynamicBuckets != 10 {
		t.Fatalf("first load: %d templates, limits %+v", r.Len(), r.Limits())
	}
	write("namespaces:\n  logins:\n    dynamic_bucket_template: {size: 1, fill_rate: 0}\n")
	if err := w.Reload(); err == nil || !strings.Contains(err.Error(), "namespaces.logins.dynamic_bucket_template.fill_rate") {
		t.Fatalf("bad reload: %v", err)
	}
	if w.Current() != r {
		t.Fatal("a bad file replaced the last good one")
	}
	write("namespaces:\n  logins:\n    dynamic_bucket_template: {size: 2, fill_rate: 1}\n")
	if err := w.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := (<-loads).Limits().Resources["logins"].Template.Size; got != 2 {
		t.Fatalf("reloaded template size %d, want 2", got)
	}
}

// examples/charon.yaml holds exactly the resources its comments and
// docs/charon.md describe: the rate-limited ones for package limits,
// cookbook/sandboxes for limits/copies, and the namespaces for both.
func TestExampleCharon(t *testing.T) {
	r, err := Load("../examples/charon.yaml")
	if err != nil {
		t.Fatal(err)
	}
	l := r.Limits()
	for _, name := range []string{"cookbook/tiers", "cookbook/hard", "cookbook/batch", "muted/r"} {
		if l.Resources[name] == nil || l.Resources[name].Algorithm != limits.BurstTiers {
			t.Errorf("%s: %+v, want a burst-tier resource", name, l.Resources[name])
		}
	}
	want := &copies.Config{
		Resources: map[string]copies.Resource{"cookbook/sandboxes": {
			DomainLimit: 3, DomainLimits: map[string]int64{"acme": 4}, GlobalLimit: 5,
			Groups: []copies.Group{{Name: "trusted", Limit: 4, Domains: []string{"acme", "initech"}}},
		}},
		AllowUnconfigured: []string{"open/"},
	}
	if got := r.Copies(); !reflect.DeepEqual(got, want) {
		t.Errorf("copies %+v\nwant %+v", got, want)
	}
	if len(r.Notes()) != 0 {
		t.Errorf("the example needs normalizing: %v", r.Notes())
	}
	for _, tc := range []struct{ yaml, want string }{
		{"limits:\n  resources:\n    s: {algorithm: copies, domain_limit: 1, domian_limits: {}}\n", "limits.resources.s"},
		{"limits:\n  resources:\n    s: {algorithm: copies}\n", "limits.resources.s.domain_limit: required"},
		{"limits:\n  resources:\n    s: {algorithm: copies, domain_limit: -1}\n", "domain_limit"},
		{"limits:\n  resources:\n    s: {algorithm: copies, domain_limit: 1, global_limit: 0}\n", "limits.resources.s.global_limit"},
		{"limits:\n  resources:\n    s: {algorithm: copies, domain_limit: 1, on_store_error: ajar}\n", "limits.resources.s.on_store_error: \"ajar\", want closed or open"},
	} {
		if _, err := Parse([]byte(tc.yaml)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v; want an error containing %q", tc.yaml, err, tc.want)
		}
	}
	r, err = Parse([]byte("limits:\n  resources:\n    s: {algorithm: copies, domain_limit: 1, on_store_error: open}\n    c: {algorithm: copies, domain_limit: 1, on_store_error: closed}\n"))
	if err != nil || r.Copies().Resources["s"].OnStoreError != copies.FailOpen || r.Copies().Resources["c"].OnStoreError != copies.FailClosed {
		t.Errorf("on_store_error: %+v, %v", r.Copies(), err)
	}
	r, err = Parse([]byte("limits:\n  resources:\n    s: {algorithm: copies, domain_limit: 9, global_limit: 5}\n"))
	if err != nil || len(r.Notes()) != 1 || !strings.Contains(r.Notes()[0], "limits.resources.s.domain_limit") {
		t.Errorf("normalization notes %v, %v", r.Notes(), err)
	}
}

// TestEnvoyRateLimitSection: Envoy's rate limit rules in Sluice's own
// file, in envoyproxy/ratelimit's format, each error naming its item.
func TestEnvoyRateLimitSection(t *testing.T) {
	r, err := Parse([]byte(`
envoy_ratelimit:
  - domain: edge
    algorithm: fixed_window
    descriptors:
      - key: remote_address
        rate_limit: {unit: second, requests_per_unit: 10}
`))
	if err != nil {
		t.Fatal(err)
	}
	if d := r.EnvoyRateLimit().Domain("edge"); d == nil || d.Rules() != 1 || d.Algorithm.String() != "fixed_window" {
		t.Fatalf("domain edge: %+v", d)
	}
	r, err = Parse([]byte(`
limits:
  resources:
    api/tenants: {algorithm: burst_tiers, tiers: [{limit: 2, window: 1s, active: 1m}]}
envoy_ratelimit:
  - domain: api
    descriptors: [{key: tenant, rate_limit: {burst_tiers: api/tenants, name: tiers}}]
`))
	if err != nil {
		t.Fatal(err)
	}
	if l := r.EnvoyRateLimit().Domain("api").Descriptors[0].Limit; l.BurstTiers != "api/tenants" || l.Name != "tiers" {
		t.Fatalf("burst tiers: %+v", l)
	}
	if r, _ := Parse([]byte("resources: []\n")); r.EnvoyRateLimit() != nil {
		t.Fatal("a file without the section has Envoy rules")
	}
	for _, c := range []struct{ yaml, want string }{
		{"envoy_ratelimit:\n  - domain: a\n  - domain: a\n", `domain "a" defined twice: in envoy_ratelimit[0] and in envoy_ratelimit[1]`},
		{"envoy_ratelimit:\n  - domain: a\n    descriptors: [{key: k, rate_limt: {}}]\n", `envoy_ratelimit[0]: descriptors[0]`},
		{"envoy_ratelimit: {domain: a}\n", "envoy_ratelimit"},
		// Charon's burst tiers: a resource of the limits section, alone.
		{"envoy_ratelimit:\n  - domain: a\n    descriptors: [{key: k, rate_limit: {burst_tiers: t}}]\n",
			`envoy_ratelimit: domain "a", rule k: rate_limit.burst_tiers: "t" is not a resource of the limits section`},
		{"limits: {resources: {t: {default: {size: 1, fill_rate: 1}}}}\nenvoy_ratelimit:\n  - domain: a\n    descriptors: [{key: k, value: v, rate_limit: {burst_tiers: t}}]\n",
			`envoy_ratelimit: domain "a", rule k_v: rate_limit.burst_tiers: resource "t" has algorithm token_bucket, not burst_tiers`},
		{"envoy_ratelimit:\n  - domain: a\n    descriptors: [{key: k, rate_limit: {burst_tiers: t, unit: second}}]\n", "descriptors[0].rate_limit.unit: given with burst_tiers"},
		{"envoy_ratelimit:\n  - domain: a\n    descriptors: [{key: k, rate_limit: {burst_tiers: t, requests_per_unit: 3}}]\n", "descriptors[0].rate_limit.requests_per_unit: given with burst_tiers"},
		{"envoy_ratelimit:\n  - domain: a\n    descriptors: [{key: k, rate_limit: {burst_tiers: ''}}]\n", "descriptors[0].rate_limit.burst_tiers: empty"},
	} {
		if _, err := Parse([]byte(c.yaml)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.yaml, err, c.want)
		}
	}
}
