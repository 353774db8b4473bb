package limitsyaml

import (
	"errors"
	"os"
	"reflect"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-rl/sluice/limits"
)

// FuzzParseQuotaService: any input parses or fails with a
// configuration error; what parses is valid and runs.
func FuzzParseQuotaService(f *testing.F) {
	for _, s := range []string{
		"", "{}", "- a\n", "version: 1\n---\nversion: 2\n",
		"global_default_bucket: {size: 1, fill_rate: 1}\n",
		"namespaces:\n  a:\n    max_dynamic_buckets: 5\n    dynamic_bucket_template: {fill_rate: 3, max_idle_millis: 10}\n",
		"namespaces:\n  a:\n    default_bucket: &x {size: 9}\n    buckets:\n      b: *x\n      c: {<<: *x, fill_rate: 2}\n",
		"namespaces:\n  a:\n    buckets:\n      b: {size: 0, fill_rate: fast, wat: 1}\n",
	} {
		f.Add([]byte(s))
	}
	if data, err := readTestdata("testdata/quotaservice.yaml"); err == nil {
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := ParseQuotaService(data)
		if err != nil {
			if !errors.Is(err, limits.ErrInvalidConfig) {
				t.Fatalf("error %v does not wrap limits.ErrInvalidConfig", err)
			}
			return
		}
		exercise(t, cfg)
	})
}

// FuzzSluiceSection: any input decodes or fails with a configuration
// error; what decodes is valid, runs, and encodes back to the same
// configuration.
func FuzzSluiceSection(f *testing.F) {
	for _, s := range []string{
		"", "{}", "resources: []\n", "global_default: {fill_rate: 0.5, max_idle: never}\n",
		"resources:\n  r:\n    domains:\n      a/b: {size: 3, wait_timeout: 250ms}\n    max_dynamic_buckets: 2\n",
		"resources:\n  r:\n    template: {max_idle: 10m, max_debt: 0s}\n",
		"resources:\n  r:\n    default: {}\n    template: {}\n",
		"global_default: {wait_timeout: 1000}\n",
		"namespaces:\n  open/: {allow_unconfigured: true}\n  m/: {ignore_configured: true, allow_unconfigured: false}\n",
		"resources:\n  r:\n    algorithm: burst_tiers\n    hard_limit: 3\n    global_limit: none\n    tiers: [{limit: 2, window: 1s, active: 3s, cooldown: 1s, skippable: true}]\n",
		"resources:\n  r:\n    algorithm: burst_tiers\n    tiers: [{limit: 2, window: 5s, active: 3s}, {limit: 1, window: 1s, active: 0s}]\n    domains:\n      a: {hard_limit: none}\n      b: {tiers: []}\n      c:\n",
		"resources:\n  r:\n    algorithm: burst_tiers\n    tiers: &t [{limit: 1, window: 1s, active: 1s}]\n    domains:\n      a: {tiers: *t, hard_limit: 0}\n",
		"resources:\n  r:\n    hard_limit: 1\n    tiers: []\n",
		"resources:\n  r:\n    template:\n      size: 10\n      budgets:\n        - {limit: 100000, unit: month, calendar: UTC}\n        - {limit: 20000, unit: day, calendar: Europe/Paris}\n",
		"global_default: {budgets: [{limit: 60, unit: minute, unit_multiplier: 2, algorithm: token_bucket, burst: 5}, {limit: 3, unit: WEEK, algorithm: fixed_window}]}\n",
		"resources:\n  r:\n    default: {budgets: []}\n    domains:\n      a: {budgets: [{limit: 1, unit: year, calendar: America/New_York}]}\n",
		"global_default: {budgets: [{limit: 0, unit: day, calendar: Local, burst: 2}, ~, {unit: fortnight}]}\n",
	} {
		f.Add([]byte(s))
	}
	for _, name := range []string{"testdata/limits.yaml", "testdata/charon.yaml"} {
		if data, err := readTestdata(name); err == nil {
			var doc struct {
				Limits yaml.Node `yaml:"limits"`
			}
			if yaml.Unmarshal(data, &doc) == nil {
				if out, err := yaml.Marshal(&doc.Limits); err == nil {
					f.Add(out)
				}
			}
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := ParseSection(data)
		if err != nil {
			if !errors.Is(err, limits.ErrInvalidConfig) {
				t.Fatalf("error %v does not wrap limits.ErrInvalidConfig", err)
			}
			return
		}
		exercise(t, cfg)
		out, err := MarshalSection(cfg)
		if err != nil {
			t.Fatal(err)
		}
		again, err := ParseSection(out)
		if err != nil {
			t.Fatalf("re-encoded section fails: %v\n%s", err, out)
		}
		if !reflect.DeepEqual(again, cfg) {
			t.Fatalf("round trip changed the configuration:\n%s\n%+v\n%+v", out, cfg, again)
		}
	})
}

// exercise checks a parsed configuration is valid and runs a request on
// each of its resources.
func exercise(t *testing.T, cfg *limits.Config) {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("parsed configuration is invalid: %v", err)
	}
	e, err := limits.New(cfg, limits.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for name := range cfg.Resources {
		for _, d := range []string{"d", "d/e"} {
			if got := e.Allow(t.Context(), time.Unix(0, t0), limits.Request{Resource: name, Domain: d}); got.Status == limits.StatusUnspecified || got.Status == limits.StatusServerError || got.Status == limits.StatusInvalidRequest {
				t.Fatalf("%s/%s: %v %v", name, d, got.Status, got.Err)
			}
		}
	}
}

func readTestdata(name string) ([]byte, error) { return os.ReadFile(name) }
