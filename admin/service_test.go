package admin

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/admin/effective"
	"github.com/sluice-rl/sluice/resources"
)

// testDoc is a configuration with a comment on nearly everything, written
// as the admin API writes YAML (so that a change's diff is the change).
const testDoc = `# Sluice configuration (a comment at the top)
resources:
  # the database
  - identifier_glob: db/*
    capacity: 100
    algorithm: {kind: FAIR_SHARE, lease_length: 60, refresh_interval: 10}
limits:
  global_default: {size: 5, fill_rate: 1}
  namespaces:
    open/: {allow_unconfigured: true} # unconfigured open/ resources are free
  resources:
    # the public API
    api:
      template: {size: 2, fill_rate: 1}
      domains:
        small: {size: 10, fill_rate: 1} # the small tenant
        big:
          size: 100 # a hundred
          fill_rate: 50
    search:
      algorithm: burst_tiers
      hard_limit: 5
      tiers:
        - {limit: 100, window: 1m, active: 1h}
    sandboxes:
      algorithm: copies
      domain_limit: 3
      domain_limits: {acme: 4}
      global_limit: 5
`

func yamlBody(t *testing.T, s string) Change {
	t.Helper()
	n, err := decodeYAML([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return Change{Value: n}
}

func jsonBody(t *testing.T, s string) Change {
	t.Helper()
	n, err := decodeJSON([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return Change{Value: n}
}

// Every kind of object is read, created, updated and deleted; each change
// leaves a document resources.Parse loads, keeps every comment it does not
// remove, and diffs as just the change.
func TestServiceObjects(t *testing.T) {
	ctx := context.Background()
	s, store := newMemService(testDoc)

	// Reads: the value as written and as the loader sees it.
	v, ver, err := s.Get(ctx, Domain("api", "big"))
	if err != nil || ver != 1 {
		t.Fatalf("Get: %v, version %d", err, ver)
	}
	if m := v.Value.(map[string]any); m["size"] != int64(100) || m["fill_rate"] != int64(50) {
		t.Errorf("value as written: %v", v.Value)
	}
	if b := v.Effective.(*effective.Bucket); b.WaitTimeout != "1s" || b.MaxIdle != "never" || b.MaxTokensPerRequest != 50 {
		t.Errorf("effective: %+v, want the defaults applied", b)
	}
	if !strings.Contains(v.YAML, "# a hundred") {
		t.Errorf("YAML lost the comment: %q", v.YAML)
	}
	list, err := s.List(ctx, Object{Kind: KindDomain, Name: "api"})
	if err != nil || len(list.Objects) != 2 || list.Objects[0].Domain != "small" || list.Objects[1].Domain != "big" {
		t.Fatalf("List domains: %+v %v", list, err)
	}
	list, err = s.List(ctx, Object{Kind: KindResource})
	if err != nil || len(list.Objects) != 3 {
		t.Fatalf("List resources: %+v %v", list, err)
	}
	if rv := list.Objects[2].Effective.(*effective.Resource); rv.Algorithm != "copies" || *rv.DomainLimit != 3 || rv.Domains["acme"] != int64(4) {
		t.Errorf("copies resource: %+v", rv)
	}

	type step struct {
		name   string
		change Change
		want   []string // lines the diff adds or removes
	}
	steps := []step{
		{"update a bucket, JSON", with(jsonBody(t, `{"size": 200, "fill_rate": 2.5}`), OpUpdate, Domain("api", "big")),
			[]string{"-          size: 100 # a hundred", "+          size: 200 # a hundred", "-          fill_rate: 50", "+          fill_rate: 2.5"}},
		{"create a bucket, YAML", with(yamlBody(t, "size: 7 # seven\nfill_rate: 1\n"), OpCreate, Domain("api", "rate_limit/10.0.0.1")),
			[]string{"+        rate_limit/10.0.0.1:", "+          size: 7 # seven", "+          fill_rate: 1"}},
		{"delete a bucket", with(Change{}, OpDelete, Domain("api", "small")),
			[]string{"-        small: {size: 10, fill_rate: 1} # the small tenant"}},
		{"update the default of a copies domain", with(yamlBody(t, "2"), OpUpdate, Domain("sandboxes", "acme")),
			[]string{"-      domain_limits: {acme: 4}", "+      domain_limits: {acme: 2}"}},
		{"create a namespace", with(jsonBody(t, `{"ignore_configured": true}`), OpCreate, Namespace("muted/")),
			[]string{"+    muted/:", "+      ignore_configured: true"}},
		{"update the global default", with(yamlBody(t, "{size: 6, fill_rate: 1}"), OpUpdate, GlobalDefault()),
			[]string{"-  global_default: {size: 5, fill_rate: 1}", "+  global_default: {size: 6, fill_rate: 1}"}},
		{"create a template through the collection", with(yamlBody(t, "identifier_glob: cache/*\ncapacity: 10\nalgorithm: {kind: STATIC, lease_length: 30, refresh_interval: 5}\n"), OpCreate, Object{Kind: KindTemplate}),
			[]string{"+  - identifier_glob: cache/*", "+    capacity: 10"}},
		{"update a template without its glob", with(yamlBody(t, "capacity: 50\nalgorithm: {kind: FAIR_SHARE, lease_length: 60, refresh_interval: 10}\n"), OpUpdate, Template("db/*")),
			[]string{"-    capacity: 100", "+    capacity: 50"}},
		{"a resource's bucket template", with(jsonBody(t, `{"size": 3, "fill_rate": 1}`), OpUpdate, Object{Kind: KindBucketTemplate, Name: "api"}),
			[]string{"-      template: {size: 2, fill_rate: 1}", "+      template: {size: 3, fill_rate: 1}"}},
		{"upsert a resource", withUpsert(jsonBody(t, `{"default": {"size": 1000, "fill_rate": 500}}`), Resource("Pinky_TheBrain")),
			[]string{"+    Pinky_TheBrain:", "+      default:", "+        size: 1000"}},
		{"delete a template", with(Change{}, OpDelete, Template("cache/*")),
			[]string{"-  - identifier_glob: cache/*"}},
		{"create an Envoy domain through the collection", with(yamlBody(t, "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: second, requests_per_unit: 10}\n"), OpCreate, Object{Kind: KindEnvoyDomain}),
			[]string{"+envoy_ratelimit:", "+  - domain: edge", "+        rate_limit: {unit: second, requests_per_unit: 10}"}},
		{"update an Envoy domain without its name", with(jsonBody(t, `{"algorithm": "fixed_window", "descriptors": [{"key": "remote_address", "rate_limit": {"unit": "minute", "requests_per_unit": 5}}]}`), OpUpdate, EnvoyDomain("edge")),
			[]string{"+    algorithm: fixed_window"}},
	}
	version := int64(1)
	for _, st := range steps {
		st.change.IfVersion = version
		st.change.User = "tester"
		res, err := s.Apply(ctx, st.change)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if res.Version != version+1 || res.PreviousVersion != version || res.Audit == nil || res.Audit.User != "tester" {
			t.Fatalf("%s: version %d (previous %d), audit %+v; want %d", st.name, res.Version, res.PreviousVersion, res.Audit, version+1)
		}
		version = res.Version
		for _, w := range st.want {
			if !containsLine(res.Diff, w) {
				t.Errorf("%s: the diff lacks %q:\n%s", st.name, w, res.Diff)
			}
		}
		if res.Reformatted {
			t.Errorf("%s: reformatted a document written in the API's style", st.name)
		}
		data, _ := store.stored()
		if _, err := resources.Parse(data); err != nil {
			t.Fatalf("%s: the stored document does not load: %v", st.name, err)
		}
		for _, c := range []string{"# Sluice configuration (a comment at the top)", "# the database", "# the public API", "# a hundred", "# unconfigured open/ resources are free"} {
			if !strings.Contains(string(data), c) {
				t.Errorf("%s: the comment %q was lost:\n%s", st.name, c, data)
			}
		}
	}
	if res, err := s.Apply(ctx, with(Change{IfVersion: version}, OpUpdate, Resource("api"))); err == nil {
		t.Errorf("an update without a value: %+v", res)
	}
	if _, err := s.Apply(ctx, with(jsonBody(t, `{"size": 1, "fill_rate": 1}`), OpCreate, Domain("api", "big"))); !errors.Is(err, ErrExists) {
		t.Errorf("create of an existing bucket: %v, want ErrExists", err)
	}
	if _, err := s.Apply(ctx, with(jsonBody(t, `{"size": 1, "fill_rate": 1}`), OpUpdate, Domain("api", "nobody"))); !errors.Is(err, ErrNotFound) {
		t.Errorf("update of an absent bucket: %v, want ErrNotFound", err)
	}
	if _, err := s.Apply(ctx, with(jsonBody(t, `{"size": 1, "fill_rate": 1}`), OpCreate, Domain("nothing", "x"))); !errors.Is(err, ErrNotFound) {
		t.Errorf("a bucket of an absent resource: %v, want ErrNotFound", err)
	}
	if _, err := s.Apply(ctx, with(Change{}, OpDelete, Namespace("nothing/"))); !errors.Is(err, ErrNotFound) {
		t.Errorf("delete of an absent namespace: %v, want ErrNotFound", err)
	}
	if _, err := s.Apply(ctx, with(yamlBody(t, "identifier_glob: other\ncapacity: 1\n"), OpUpdate, Template("db/*"))); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "body.identifier_glob") {
		t.Errorf("a template body naming another glob: %v", err)
	}
	v, _, err = s.Get(ctx, EnvoyDomain("edge"))
	if err != nil || v.Effective.(effective.EnvoyDomain) != (effective.EnvoyDomain{Domain: "edge", Algorithm: "fixed_window", Rules: 1}) {
		t.Errorf("Envoy domain as the loader sees it: %+v %v", v.Effective, err)
	}
	if _, err := s.Apply(ctx, with(yamlBody(t, "descriptors: [{key: k, rate_limit: {unit: fortnight, requests_per_unit: 1}}]\n"), OpUpdate, EnvoyDomain("edge"))); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "envoy_ratelimit[0]: descriptors[0].rate_limit.unit") {
		t.Errorf("an Envoy domain with a bad unit: %v, want the field named", err)
	}
	if h, _ := s.History(ctx); len(h) != len(steps)+1 || h[0].Version != version || h[len(h)-1].Op != OpImport {
		t.Errorf("history: %d entries, newest %+v", len(h), h[0])
	}
}

func with(c Change, op Op, o Object) Change {
	c.Op, c.Object = op, o
	return c
}

func withUpsert(c Change, o Object) Change {
	c.Op, c.Object, c.Upsert = OpUpdate, o, true
	return c
}

func containsLine(text, line string) bool {
	for _, l := range strings.Split(text, "\n") {
		if l == line {
			return true
		}
	}
	return false
}

// An invalid change is refused with every error, each naming its field,
// and stores nothing.
func TestServiceInvalid(t *testing.T) {
	ctx := context.Background()
	s, store := newMemService(testDoc)
	before, _ := store.stored()
	cases := []struct {
		name   string
		change Change
		want   []string
	}{
		{"two bad fields", with(jsonBody(t, `{"size": 0, "fill_rate": -1}`), OpUpdate, Domain("api", "big")),
			[]string{"limits.resources.api.domains.big.size: 0 must be", "limits.resources.api.domains.big.fill_rate: -1 must be"}},
		{"an unknown field", with(jsonBody(t, `{"size": 1, "fill_rat": 1}`), OpUpdate, Domain("api", "big")),
			[]string{"limits.resources.api.domains.big.fill_rat: unknown field"}},
		{"a duration as a number", with(jsonBody(t, `{"wait_timeout": 1000}`), OpUpdate, Domain("api", "big")),
			[]string{"limits.resources.api.domains.big.wait_timeout: want a Go duration string"}},
		{"a string for a number", with(jsonBody(t, `{"size": "10"}`), OpUpdate, Domain("api", "big")),
			[]string{"limits.resources.api.domains.big.size: want an integer"}},
		{"a template without capacity", with(yamlBody(t, "algorithm: {kind: STATIC, lease_length: 1, refresh_interval: 2}"), OpCreate, Template("x")),
			[]string{`resources[1] ("x"): capacity: required`, `resources[1] ("x"): algorithm.refresh_interval: 2 exceeds lease_length 1`}},
		{"not a mapping", with(jsonBody(t, `[1, 2]`), OpUpdate, Domain("api", "big")),
			[]string{"body: want a mapping (the domain's fields), got a sequence"}},
		{"a copies domain that is not a count", with(jsonBody(t, `{"limit": 3}`), OpUpdate, Domain("sandboxes", "acme")),
			[]string{"body: want a count of copies"}},
		{"a bad whole document", Change{Op: OpReplace, Document: []byte("limits:\n  resources:\n    x: {domains: {a: {size: -1}}}\n")},
			[]string{"limits.resources.x.domains.a.size: -1 must be"}},
	}
	for _, c := range cases {
		_, err := s.Apply(ctx, c.change)
		var ie *InvalidError
		if !errors.As(err, &ie) {
			t.Errorf("%s: %v, want an *InvalidError", c.name, err)
			continue
		}
		for _, w := range c.want {
			found := false
			for _, e := range ie.Errors {
				found = found || strings.Contains(e, w)
			}
			if !found {
				t.Errorf("%s: no error names %q: %q", c.name, w, ie.Errors)
			}
		}
	}
	after, _ := store.stored()
	if string(after) != string(before) {
		t.Error("an invalid change changed the file")
	}
	if h, _ := s.History(ctx); len(h) != 1 {
		t.Errorf("history: %d entries, want the import only", len(h))
	}
}

// A dry run returns the normalized object, the notes, the diff and the
// new document, and stores nothing.
func TestServiceDryRun(t *testing.T) {
	ctx := context.Background()
	s, store := newMemService(testDoc)
	before, _ := store.stored()
	c := with(yamlBody(t, "algorithm: burst_tiers\nhard_limit: 5\ntiers:\n  - {limit: 10, window: 1h, active: 30m}\n  - {limit: 20, window: 1m, active: 0s}\n"), OpUpdate, Resource("search"))
	c.DryRun, c.IfVersion = true, 1
	res, err := s.Apply(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if !res.DryRun || res.Version != 1 || res.Audit != nil || res.Document == "" || res.Hash != Hash([]byte(res.Document)) {
		t.Errorf("dry run result: %+v", res)
	}
	rv := res.View.Effective.(*effective.Resource)
	if len(*rv.Tiers) != 1 || (*rv.Tiers)[0].Window != "30m0s" {
		t.Errorf("normalized tiers: %+v, want one tier with its window shortened to the active time", *rv.Tiers)
	}
	notes := strings.Join(res.Notes, "\n")
	if !strings.Contains(notes, "limits.resources.search.tiers[1]: active time 0s: the tier is removed") ||
		!strings.Contains(notes, "limits.resources.search.tiers[0].window: 1h0m0s is longer than the active time") {
		t.Errorf("notes: %q", res.Notes)
	}
	if !containsLine(res.Diff, "+        - {limit: 20, window: 1m, active: 0s}") {
		t.Errorf("diff:\n%s", res.Diff)
	}
	if res.View.Value.(map[string]any)["hard_limit"] != int64(5) {
		t.Errorf("value as written: %v", res.View.Value)
	}
	after, _ := store.stored()
	if string(after) != string(before) {
		t.Error("a dry run changed the file")
	}
	// A change that changes nothing stores nothing.
	res, err = s.Apply(ctx, with(yamlBody(t, "{size: 5, fill_rate: 1}"), OpUpdate, GlobalDefault()))
	if err != nil || !res.Unchanged || res.Version != 1 {
		t.Errorf("a change to the same value: %+v %v", res, err)
	}
}

// A stale version is refused with the current one; without a version a
// change builds on the current document.
func TestServiceConflict(t *testing.T) {
	ctx := context.Background()
	s, _ := newMemService(testDoc)
	if _, err := s.Apply(ctx, with(jsonBody(t, `{"size": 1}`), OpUpdate, Domain("api", "big"))); err != nil {
		t.Fatal(err)
	}
	c := with(jsonBody(t, `{"size": 2}`), OpUpdate, Domain("api", "small"))
	c.IfVersion = 1
	_, err := s.Apply(ctx, c)
	var ce *ConflictError
	if !errors.As(err, &ce) || ce.Current != 2 || err.Error() != "configuration changed since you read it: version 2 now" {
		t.Fatalf("stale change: %v", err)
	}
	c.IfVersion = 0
	res, err := s.Apply(ctx, c)
	if err != nil || res.Version != 3 {
		t.Fatalf("change against the current version: %+v %v", res, err)
	}
	v, _, _ := s.Get(ctx, Domain("api", "big"))
	if v.Value.(map[string]any)["size"] != int64(1) {
		t.Errorf("the first change was lost: %v", v.Value)
	}
	// A flat flow mapping stays one, its comment on its line.
	cur, _ := s.Config(ctx)
	if !strings.Contains(cur.Document, "        small: {size: 2} # the small tenant\n        big:\n") {
		t.Errorf("the bucket's style or comment changed:\n%s", cur.Document)
	}
}

// A flow mapping replaced by a nested one becomes a block mapping, its
// line comment now its key's (on the same line).
func TestDocumentLineComment(t *testing.T) {
	d, err := ParseDocument([]byte("limits:\n  resources:\n    api: {default: {size: 1, fill_rate: 1}} # the API\n    other: {}\n"))
	if err != nil {
		t.Fatal(err)
	}
	v, err := decodeJSON([]byte(`{"domains": {"x": {"size": 2}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Put(Resource("api"), v, PutUpdate); err != nil {
		t.Fatal(err)
	}
	got, _ := d.Encode()
	want := "limits:\n  resources:\n    api: # the API\n      domains:\n        x:\n          size: 2\n    other: {}\n"
	if string(got) != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

// Options.Check refuses what only the server knows to be wrong: the
// change is invalid, with the check's error, and nothing is stored.
func TestServiceCheck(t *testing.T) {
	_, store := newMemService("resources: []\n")
	s := New(store, Options{Check: func(r *resources.Repository) error {
		if r.Limits() != nil {
			return errors.New("limits: this server reads its limits from --quotaservice-config q.yaml")
		}
		return nil
	}})
	c := yamlBody(t, "{domains: {d: {size: 1, fill_rate: 1}}}")
	c.Op, c.Object = OpCreate, Resource("api")
	_, err := s.Apply(context.Background(), c)
	var ie *InvalidError
	if !errors.As(err, &ie) || len(ie.Errors) != 1 || !strings.Contains(ie.Errors[0], "--quotaservice-config") {
		t.Fatalf("a change the check refuses: %v", err)
	}
	if got, _ := store.stored(); string(got) != "resources: []\n" {
		t.Fatalf("the refused change was stored: %q", got)
	}
}
