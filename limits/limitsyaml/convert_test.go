package limitsyaml

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-rl/sluice/limits"
)

// The quota service's file converts to a limits section that reads back to
// the same configuration, with its comments; and back to the quota
// service's format, which reads back to it again.
func TestQuotaServiceRoundTrip(t *testing.T) {
	data, err := os.ReadFile("testdata/quotaservice.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want, err := ParseQuotaService(data)
	if err != nil {
		t.Fatal(err)
	}
	section, err := QuotaServiceSection(data)
	if err != nil {
		t.Fatal(err)
	}
	out, err := Encode(section)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "# The same examples in the quota service's own configuration format") {
		t.Errorf("the file's comment was lost:\n%s", out)
	}
	got, err := DecodeSection(section)
	if err != nil {
		t.Fatalf("the section does not read: %v\n%s", err, out)
	}
	got.Version, got.User, got.Date = want.Version, want.User, want.Date // not in a section
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("section reads as\n%+v\nwant\n%+v", got, want)
	}
	back, err := MarshalQuotaService(got, section)
	if err != nil {
		t.Fatal(err)
	}
	again, err := ParseQuotaService(back)
	if err != nil {
		t.Fatalf("MarshalQuotaService's output does not read: %v\n%s", err, back)
	}
	if !reflect.DeepEqual(again, want) {
		t.Fatalf("round trip reads as\n%+v\nwant\n%+v\n%s", again, want, back)
	}
	for _, s := range []string{"# The same examples", "users_insert: {size: 10, fill_rate: 5, max_debt_millis: 2000}", "version: 1"} {
		if !strings.Contains(string(back), s) {
			t.Errorf("the quota service's file lacks %q:\n%s", s, back)
		}
	}
}

// What the quota service's format cannot say is an error naming the field.
func TestMarshalQuotaServiceRefuses(t *testing.T) {
	b := limits.DefaultBucket()
	frac, noWait := b, b
	frac.FillRate = 0.5
	noWait.WaitTimeout = 0
	cfg := &limits.Config{
		Namespaces: map[string]limits.Namespace{"open/": {AllowUnconfigured: true}},
		Resources: map[string]*limits.Resource{
			"a": {Buckets: map[string]limits.Bucket{"slow": frac, "nowait": noWait}},
			"b": {Algorithm: limits.BurstTiers},
			"c": {OnStoreError: limits.FailOpen, Default: &b},
		},
	}
	_, err := MarshalQuotaService(cfg, nil)
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"limits.namespaces", "limits.resources.a.domains.slow.fill_rate", "limits.resources.a.domains.nowait.wait_timeout",
		"limits.resources.b.algorithm", "limits.resources.c.on_store_error"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %s: %v", want, err)
		}
	}
	if _, err := MarshalQuotaService(&limits.Config{Resources: map[string]*limits.Resource{"ok": {Default: &b}}}, nil); err != nil {
		t.Errorf("a plain bucket: %v", err)
	}
	var n yaml.Node
	if out, err := MarshalQuotaService(nil, nil); err != nil || yaml.Unmarshal(out, &n) != nil {
		t.Errorf("nil: %q, %v", out, err)
	}
}
