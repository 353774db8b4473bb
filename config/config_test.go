package config

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/algorithm"
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
	if v, ok := tmpl.Algorithm.Param("decay_factor"); !ok || v != "0.5" {
		t.Fatalf("decay_factor %q %v", v, ok)
	}
	tmpl, _ = r.Find("db/replica-2")
	if tmpl.IdentifierGlob != "db/*" || tmpl.Algorithm.LearningModeDuration != 60*time.Second {
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
		{"negative safe capacity", tmpl("identifier_glob: a\n    capacity: 1\n    safe_capacity: -1\n    " + alg), []string{"safe_capacity: -1 is negative"}},
		{"missing algorithm", tmpl("identifier_glob: a\n    capacity: 1"), []string{"algorithm: required"}},
		{"unknown kind", tmpl("identifier_glob: a\n    capacity: 1\n    algorithm: {kind: ROUND_ROBIN, lease_length: 60, refresh_interval: 16}"), []string{"algorithm.kind", "ROUND_ROBIN"}},
		{"refresh beyond lease", tmpl("identifier_glob: db\n    capacity: 1\n    algorithm: {kind: FAIR_SHARE, lease_length: 10, refresh_interval: 30}"), []string{`resources[0] ("db")`, "algorithm.refresh_interval: 30 exceeds lease_length 10"}},
		{"zero lease", tmpl("identifier_glob: a\n    capacity: 1\n    algorithm: {kind: FAIR_SHARE, lease_length: 0, refresh_interval: 0}"), []string{"algorithm.lease_length: 0 seconds, must be at least 1"}},
		{"missing refresh", tmpl("identifier_glob: a\n    capacity: 1\n    algorithm: {kind: FAIR_SHARE, lease_length: 10}"), []string{"algorithm.refresh_interval: required"}},
		{"negative learning", tmpl("identifier_glob: a\n    capacity: 1\n    algorithm: {kind: FAIR_SHARE, lease_length: 10, refresh_interval: 5, learning_mode_duration: -1}"), []string{"algorithm.learning_mode_duration"}},
		{"bad decay factor", tmpl("identifier_glob: a\n    capacity: 1\n    algorithm: {kind: FAIR_SHARE, lease_length: 10, refresh_interval: 5, parameters: [{name: decay_factor, value: \"2\"}]}"), []string{"algorithm.parameters[0].value", "decay_factor"}},
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

func TestExampleConfigIsValid(t *testing.T) {
	r, err := Load("../examples/config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if r.Len() < 4 {
		t.Fatalf("example has %d templates", r.Len())
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
			if !(tmpl.Capacity >= 0) || tmpl.SafeCapacity < 0 || a.LeaseLength <= 0 || a.RefreshInterval <= 0 ||
				a.RefreshInterval > a.LeaseLength || a.LearningModeDuration < 0 || !a.Kind.Valid() {
				t.Fatalf("invalid template accepted: %+v", tmpl)
			}
			if got, ok := r.Find(tmpl.IdentifierGlob); !ok || (!strings.ContainsAny(tmpl.IdentifierGlob, `*?[\`) && got.Index != tmpl.Index) {
				t.Fatalf("Find(%q) = %+v, %v", tmpl.IdentifierGlob, got, ok)
			}
		}
	})
}
