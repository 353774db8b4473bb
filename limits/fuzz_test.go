package limits

import (
	"errors"
	"math"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// FuzzAllow drives the engine with arbitrary requests against a
// configuration drawn from the input: it must never panic, never grant
// outside what was asked, never create a bucket for an invalid request,
// and name the field of every invalid request.
func FuzzAllow(f *testing.F) {
	f.Add("api", "rate_limit/10.0.0.1", int64(1), int64(0), int64(0), false, int64(0), int64(10), 1.0, int64(1000))
	f.Add("api", "user-1", int64(5), int64(2), int64(int64(time.Second)), true, int64(time.Millisecond), int64(3), 0.5, int64(0))
	f.Add("", "", int64(-1), int64(-1), int64(-1), true, int64(-1), int64(0), 0.0, int64(-1))
	f.Add("api", "a b", int64(math.MaxInt64), int64(math.MaxInt64), int64(math.MaxInt64), true, int64(math.MaxInt64), int64(math.MaxInt64), math.Inf(1), int64(math.MaxInt64))
	f.Add("shared", "x/y/z", int64(1<<53), int64(1), int64(0), true, int64(math.MinInt64), int64(1<<53), 1e-9, int64(1))
	f.Add("nope", "d", int64(0), int64(0), int64(0), false, int64(0), int64(1), 1e9, int64(0))
	f.Fuzz(func(t *testing.T, resource, domain string, tokens, minTokens, maxWait int64, hasMaxWait bool, dt, size int64, rate float64, waitMs int64) {
		b := Bucket{Size: size, FillRate: rate, WaitTimeout: time.Duration(waitMs) * time.Millisecond, MaxDebt: 10 * time.Second, MaxIdle: time.Second}
		cfg := &Config{
			GlobalDefault: &b,
			Resources: map[string]*Resource{
				"api":    {Buckets: map[string]Bucket{"rate_limit": b, "a/b": b}, Template: &b, MaxDynamicBuckets: 2},
				"shared": {Default: &b, Buckets: map[string]Bucket{"x": b}},
			},
		}
		e, err := New(cfg, Options{})
		if err != nil {
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("config error %v does not wrap ErrInvalidConfig", err)
			}
			return
		}
		req := Request{Resource: resource, Domain: domain, Tokens: tokens, MinTokens: minTokens, MaxWait: time.Duration(maxWait), HasMaxWait: hasMaxWait}
		now := t0
		for i := range 3 {
			before := e.Len()
			d := e.Allow(time.Unix(0, now), req)
			switch d.Status {
			case StatusOK:
				want := max(tokens, 1)
				lo := minTokens
				if lo == 0 {
					lo = want
				}
				if d.Granted < lo || d.Granted > want || d.Wait < 0 || d.Wait > b.WaitTimeout || hasMaxWait && d.Wait > time.Duration(maxWait) || d.RetryAfter != 0 || d.RetryNever {
					t.Fatalf("call %d: %+v for %+v", i, d, req)
				}
			case StatusInvalidRequest:
				var re *RequestError
				if !errors.As(d.Err, &re) || re.Field == "" || !strings.HasPrefix(d.Err.Error(), re.Field+": ") {
					t.Fatalf("invalid request without a field: %v", d.Err)
				}
				if e.Len() != before {
					t.Fatalf("an invalid request created a bucket")
				}
			case StatusTimeout:
				if d.RetryNever == (d.RetryAfter > 0) {
					t.Fatalf("timeout: retry after %v, never %v", d.RetryAfter, d.RetryNever)
				}
			case StatusNoBucket, StatusTooManyBuckets, StatusTooManyTokensRequested:
				if !d.RetryNever {
					t.Fatalf("%v without RetryNever", d.Status)
				}
			default:
				t.Fatalf("status %v (%v)", d.Status, d.Err)
			}
			if d.Status != StatusOK && (d.Granted != 0 || e.Len() != before) {
				t.Fatalf("a rejection granted %d or created a bucket", d.Granted)
			}
			if d.Remaining < 0 || d.Remaining > float64(d.Limit) || math.IsNaN(d.Remaining) {
				t.Fatalf("remaining %v of %d", d.Remaining, d.Limit)
			}
			now += dt
		}
		if _, err := e.Reap(time.Unix(0, now)); err != nil {
			t.Fatal(err)
		}
		_ = e.Walk(time.Unix(0, now), func(bi BucketInfo) bool {
			if bi.Tokens < 0 || bi.Tokens > float64(bi.Size) || bi.Fraction < 0 || bi.Fraction > 1 {
				t.Fatalf("walk: %+v", bi)
			}
			return true
		})
	})
}

// FuzzParseQuotaServiceYAML: any input parses or fails with a
// configuration error; what parses is valid and runs.
func FuzzParseQuotaServiceYAML(f *testing.F) {
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
		cfg, err := ParseQuotaServiceYAML(data)
		if err != nil {
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("error %v does not wrap ErrInvalidConfig", err)
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
	} {
		f.Add([]byte(s))
	}
	if data, err := readTestdata("testdata/limits.yaml"); err == nil {
		var doc struct {
			Limits yaml.Node `yaml:"limits"`
		}
		if yaml.Unmarshal(data, &doc) == nil {
			if out, err := yaml.Marshal(&doc.Limits); err == nil {
				f.Add(out)
			}
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := ParseSection(data)
		if err != nil {
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("error %v does not wrap ErrInvalidConfig", err)
			}
			return
		}
		exercise(t, cfg)
		var s Section
		root, _ := parseDocument(data)
		if root == nil {
			return
		}
		if err := s.UnmarshalYAML(root); err != nil {
			t.Fatalf("parsed, yet does not decode: %v", err)
		}
		out, err := yaml.Marshal(&s)
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
func exercise(t *testing.T, cfg *Config) {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("parsed configuration is invalid: %v", err)
	}
	e, err := New(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for name := range cfg.Resources {
		for _, d := range []string{"d", "d/e"} {
			if got := e.Allow(time.Unix(0, t0), Request{Resource: name, Domain: d}); got.Status == StatusUnspecified || got.Status == StatusServerError || got.Status == StatusInvalidRequest {
				t.Fatalf("%s/%s: %v %v", name, d, got.Status, got.Err)
			}
		}
	}
}

func readTestdata(name string) ([]byte, error) { return os.ReadFile(name) }
