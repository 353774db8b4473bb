package limitsyaml

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-rl/sluice/limits"
)

// examples is the configuration of testdata/limits.yaml and
// testdata/quotaservice.yaml (the quota service's format cannot say
// "no waiting" or express the frontend resource's domains: see below).
func examples() *limits.Config {
	b := func(size int64, rate float64, f ...func(*limits.Bucket)) limits.Bucket {
		x := limits.DefaultBucket()
		x.Size, x.FillRate, x.MaxTokensPerRequest = size, rate, int64(rate)
		for _, f := range f {
			f(&x)
		}
		return x
	}
	wait := func(d time.Duration) func(*limits.Bucket) { return func(b *limits.Bucket) { b.WaitTimeout = d } }
	idle := func(d time.Duration) func(*limits.Bucket) { return func(b *limits.Bucket) { b.MaxIdle = d } }
	debt := func(d time.Duration) func(*limits.Bucket) { return func(b *limits.Bucket) { b.MaxDebt = d } }
	return &limits.Config{
		GlobalDefault: bp(b(100, 50)),
		Resources: map[string]*limits.Resource{
			"Pinky_TheBrain": {
				Default: bp(b(1000, 500)),
				Buckets: map[string]limits.Bucket{"UserService": b(200, 100), "UserService_getUser": b(20, 10, wait(500*time.Millisecond))},
			},
			"Pinky_PinkyMySQL": {
				Default: bp(b(500, 250)),
				Buckets: map[string]limits.Bucket{"users": b(100, 50), "users_insert": b(10, 5, debt(2*time.Second))},
			},
			"TheBrain_userLogins": {Template: bp(b(1, 1, wait(0), idle(10*time.Minute))), MaxDynamicBuckets: 100000},
			"frontend": {
				MaxDynamicBuckets: 1000000,
				Buckets: map[string]limits.Bucket{
					"rate_limit":              b(10, 1, wait(0), idle(time.Minute)),
					"rate_limit/192.168.11.3": b(500, 100, wait(0)),
				},
			},
		},
	}
}

// file is how Sluice's configuration file embeds the section.
type file struct {
	Resources []map[string]any `yaml:"resources"`
	Limits    yaml.Node        `yaml:"limits"`
}

// decodeFile reads the section of a configuration file as package resources
// does: the node under limits:, decoded by DecodeSection.
func decodeFile(t *testing.T, data []byte) (*limits.Config, error) {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var f file
	if err := dec.Decode(&f); err != nil {
		return nil, err
	}
	return DecodeSection(&f.Limits)
}

func TestSectionExample(t *testing.T) {
	got, err := decodeFile(t, readFile(t, "testdata/limits.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if want := examples(); !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}
	e := newEngine(t, got)
	// Example 3: one login per second per user, no waiting.
	for i, want := range []limits.Status{limits.StatusOK, limits.StatusTimeout} {
		if d := e.Allow(t.Context(), at(0), limits.Request{Resource: "TheBrain_userLogins", Domain: "user-17"}); d.Status != want || d.Bucket.Source != limits.SourceDynamic {
			t.Fatalf("login %d: %v %v", i, d.Status, d.Bucket)
		}
	}
	if d := e.Allow(t.Context(), at(time.Second), limits.Request{Resource: "TheBrain_userLogins", Domain: "user-17"}); d.Status != limits.StatusOK {
		t.Fatalf("login a second later: %v", d.Status)
	}
	// The keyed limiter: any IP 10 at once then one per second; the
	// special IP 500 at once.
	for ip, burst := range map[string]int{"10.0.0.1": 10, "192.168.11.3": 500} {
		for i := range burst {
			if d := e.Allow(t.Context(), at(0), limits.Request{Resource: "frontend", Domain: "rate_limit/" + ip}); d.Status != limits.StatusOK {
				t.Fatalf("%s request %d: %v", ip, i, d.Status)
			}
		}
		if d := e.Allow(t.Context(), at(0), limits.Request{Resource: "frontend", Domain: "rate_limit/" + ip}); d.Status != limits.StatusTimeout {
			t.Fatalf("%s past its burst: %v", ip, d.Status)
		}
	}
	// Example 1: a listed endpoint, an unlisted one (the shared default).
	if d := e.Allow(t.Context(), at(0), limits.Request{Resource: "Pinky_TheBrain", Domain: "UserService_getUser"}); d.Limit != 20 || d.Bucket.Source != limits.SourceNamed {
		t.Fatalf("getUser: %+v", d)
	}
	if d := e.Allow(t.Context(), at(0), limits.Request{Resource: "Pinky_TheBrain", Domain: "OrderService"}); d.Limit != 1000 || d.Bucket.Source != limits.SourceDefault {
		t.Fatalf("OrderService: %+v", d)
	}
}

func TestQuotaServiceExample(t *testing.T) {
	got, err := ParseQuotaService(readFile(t, "testdata/quotaservice.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want := examples()
	delete(want.Resources, "frontend")
	// The quota service reads a wait timeout of 0 as its default.
	want.Resources["TheBrain_userLogins"].Template.WaitTimeout = time.Second
	want.Version, want.User, want.Date = 1, "sluice", 1700000000
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}
}

func TestQuotaServiceDefaults(t *testing.T) {
	got, err := ParseQuotaService([]byte(`
namespaces:
  plain:
    buckets:
      one:
        fill_rate: 321
        wait_timeout_millis: 9999
        max_idle_millis: 20000
        max_debt_millis: 30000
      defaults:
        size: 100
      zeros: {wait_timeout_millis: 0, max_idle_millis: 0, max_debt_millis: 0, max_tokens_per_request: 0}
      never: {max_idle_millis: -1}
      named: {name: ignored, namespace: ignored_too}
      empty:
  dynamic:
    max_dynamic_buckets: 50
    dynamic_bucket_template: {fill_rate: 999, max_tokens_per_request: 5}
  default_only:
    name: ignored
    default_bucket: {}
  nothing:
`))
	if err != nil {
		t.Fatal(err)
	}
	d := limits.DefaultBucket()
	with := func(f func(*limits.Bucket)) limits.Bucket { b := d; f(&b); return b }
	want := &limits.Config{Resources: map[string]*limits.Resource{
		"plain": {Buckets: map[string]limits.Bucket{
			"one": with(func(b *limits.Bucket) {
				b.FillRate, b.WaitTimeout, b.MaxIdle, b.MaxDebt, b.MaxTokensPerRequest = 321, 9999*time.Millisecond, 20*time.Second, 30*time.Second, 321
			}),
			"defaults": d, "zeros": d, "never": d, "named": d, "empty": d,
		}},
		"dynamic":      {MaxDynamicBuckets: 50, Template: bp(with(func(b *limits.Bucket) { b.FillRate, b.MaxTokensPerRequest = 999, 5 }))},
		"default_only": {Default: bp(d)},
		"nothing":      {},
	}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}
	// Empty documents configure nothing.
	for _, doc := range []string{"", "\n", "# comment\n", "---\n", "{}"} {
		if c, err := ParseQuotaService([]byte(doc)); err != nil || c.GlobalDefault != nil || len(c.Resources) != 0 {
			t.Errorf("%q: %+v %v", doc, c, err)
		}
	}
}

func TestYAMLAnchorsAndMerges(t *testing.T) {
	got, err := ParseQuotaService([]byte(`
global_default_bucket: &base {size: 7, fill_rate: 3}
namespaces:
  a:
    buckets:
      x: *base
      y:
        <<: *base
        size: 9
`))
	if err != nil {
		t.Fatal(err)
	}
	if x, y := got.Resources["a"].Buckets["x"], got.Resources["a"].Buckets["y"]; x.Size != 7 || x.FillRate != 3 || y.Size != 9 || y.FillRate != 3 {
		t.Fatalf("x %+v y %+v", x, y)
	}
	// An alias bomb (each mapping merging the previous one ten times) is
	// an error, quickly.
	var sb strings.Builder
	sb.WriteString("resources:\n  r:\n    domains:\n      x0: &a0 {size: 1}\n")
	for i := 1; i < 30; i++ {
		fmt.Fprintf(&sb, "      x%d: &a%d {<<: [", i, i)
		for j := range 10 {
			if j > 0 {
				sb.WriteString(", ")
			}
			fmt.Fprintf(&sb, "*a%d", i-1)
		}
		sb.WriteString("]}\n")
	}
	start := time.Now()
	_, err = ParseSection([]byte(sb.String()))
	if err == nil || !strings.Contains(err.Error(), "YAML nodes to read (aliases expanded)") {
		t.Fatalf("alias bomb: %v", err)
	}
	if time.Since(start) > 10*time.Second {
		t.Fatalf("alias bomb took %v", time.Since(start))
	}
	// A mapping merging itself is a cycle, reported at once.
	for _, doc := range []string{"resources: {r: {domains: {d: &x {<<: *x}}}}", "global_default: &x {<<: [*x, *x]}"} {
		if _, err := ParseSection([]byte(doc)); err == nil || !strings.Contains(err.Error(), "the mapping includes itself") {
			t.Errorf("%s: %v", doc, err)
		}
	}
}

func TestQuotaServiceErrors(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		want []string // substrings of the error, each naming a field
	}{
		{"unknown top-level field", "namespace: {}\n", []string{`namespace: unknown field (want one of global_default_bucket, namespaces, version, user, date) (line 1)`}},
		{"unknown namespace field", "namespaces:\n  a:\n    bucket: {}\n", []string{`namespaces.a.bucket: unknown field`, `(line 3)`}},
		{"unknown bucket field", "namespaces:\n  a:\n    buckets:\n      b: {fill: 3}\n", []string{`namespaces.a.buckets.b.fill: unknown field (want one of name, namespace, size, fill_rate`}},
		{"unknown global field", "global_default_bucket: {sise: 3}\n", []string{`global_default_bucket.sise: unknown field`}},
		{"wrong type", "namespaces:\n  a:\n    buckets:\n      b: {fill_rate: fast}\n", []string{`namespaces.a.buckets.b.fill_rate: want an integer (tokens per second), got str "fast" (line 4)`}},
		{"fractional fill rate", "global_default_bucket: {fill_rate: 0.5}\n", []string{`global_default_bucket.fill_rate: want an integer`}},
		{"size 0", "namespaces:\n  a:\n    default_bucket: {size: 0}\n", []string{`namespaces.a.default_bucket.size: 0 must be > 0 (tokens)`}},
		{"fill rate 0", "namespaces:\n  a:\n    dynamic_bucket_template: {fill_rate: 0}\n", []string{`namespaces.a.dynamic_bucket_template.fill_rate: 0 must be > 0 (tokens per second)`}},
		{"negative size", "global_default_bucket: {size: -3}\n", []string{`global_default_bucket.size: -3 must be > 0`}},
		{"negative wait", "global_default_bucket: {wait_timeout_millis: -3}\n", []string{`global_default_bucket.wait_timeout_millis: -3 is negative`}},
		{"negative debt", "global_default_bucket: {max_debt_millis: -3}\n", []string{`global_default_bucket.max_debt_millis: -3 is negative`}},
		{"negative per request", "global_default_bucket: {max_tokens_per_request: -3}\n", []string{`global_default_bucket.max_tokens_per_request: -3 is negative`}},
		{"wait beyond ten years", "global_default_bucket: {wait_timeout_millis: 9000000000000}\n", []string{`global_default_bucket.wait_timeout_millis: 9000000000000 ms exceeds`}},
		{"span beyond ten years", "global_default_bucket: {size: 1000000000000, fill_rate: 1}\n", []string{`global_default_bucket.size: a bucket of 1000000000000 tokens filling at 1 per second takes`}},
		{"default and template", "namespaces:\n  a:\n    default_bucket: {}\n    dynamic_bucket_template: {}\n", []string{`namespaces.a.default_bucket: a resource may not have both default_bucket and dynamic_bucket_template`}},
		{"bad namespace name", "namespaces:\n  'a b': {}\n", []string{`namespaces["a b"]: resource name "a b" has ' ' at byte 1`}},
		{"bad bucket name", "namespaces:\n  a:\n    buckets:\n      'x*': {}\n", []string{`namespaces.a.buckets["x*"]: domain name "x*" has '*' at byte 1`}},
		{"long name", "namespaces:\n  " + strings.Repeat("n", 257) + ": {}\n", []string{`is 257 bytes long; at most 256`}},
		{"negative max dynamic", "namespaces:\n  a:\n    max_dynamic_buckets: -1\n", []string{`namespaces.a.max_dynamic_buckets: -1 is negative (0: unlimited)`}},
		{"version out of range", "version: 3000000000\n", []string{`version: 3000000000 is out of the int32 range`}},
		{"user not a string", "user: [a]\n", []string{`user: want a scalar, got a sequence`}},
		{"duplicate key", "namespaces:\n  a: {}\n  a: {}\n", []string{`namespaces.a: given more than once (line 3)`}},
		{"not a mapping", "- a\n", []string{`(document): want a mapping`}},
		{"namespaces a list", "namespaces: [a]\n", []string{`namespaces: want a mapping, got a sequence (line 1)`}},
		{"two documents", "version: 1\n---\nversion: 2\n", []string{`more than one YAML document`}},
		{"syntax", "namespaces: {a: [}\n", []string{`(document): yaml:`}},
		{"every problem at once", "namespaces:\n  a:\n    buckets:\n      b: {size: 0, fill_rate: 0, wat: 1}\n",
			[]string{`namespaces.a.buckets.b.wat: unknown field`}},
		{"every range problem at once", "namespaces:\n  a:\n    buckets:\n      b: {size: 0, fill_rate: 0}\n",
			[]string{`namespaces.a.buckets.b.size: 0 must be > 0`, `namespaces.a.buckets.b.fill_rate: 0 must be > 0`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := ParseQuotaService([]byte(tc.doc))
			wantInvalid(t, cfg, err, tc.want...)
		})
	}
}

func TestSectionErrors(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		want []string
	}{
		{"unknown field", "resource: {}\n", []string{`limits.resource: unknown field (want one of global_default, namespaces, resources) (line 1)`}},
		{"unknown resource field", "resources:\n  a:\n    buckets: {}\n", []string{`limits.resources.a.buckets: unknown field (want one of algorithm, domains, template, max_dynamic_buckets, default, hard_limit, global_limit, tiers, on_store_error) (line 3)`}},
		{"unknown bucket field", "resources:\n  a:\n    domains:\n      x: {wait_timeout_millis: 3}\n", []string{`limits.resources.a.domains.x.wait_timeout_millis: unknown field`}},
		{"a duration without a unit", "global_default: {wait_timeout: 1000}\n", []string{`limits.global_default.wait_timeout: want a Go duration string such as "1s" or "250ms", got int "1000" (line 1)`}},
		{"a bad duration", "global_default: {max_debt: soon}\n", []string{`limits.global_default.max_debt: "soon" is not a Go duration string`}},
		{"never is only for max_idle", "global_default: {max_debt: never}\n", []string{`limits.global_default.max_debt: "never" is not a Go duration string`}},
		{"max idle 0", "global_default: {max_idle: 0s}\n", []string{`limits.global_default.max_idle: 0s must be > 0, or "never"`}},
		{"max idle negative", "global_default: {max_idle: -1s}\n", []string{`limits.global_default.max_idle: -1s must be > 0`}},
		{"negative wait", "global_default: {wait_timeout: -1s}\n", []string{`limits.global_default.wait_timeout: -1s is negative`}},
		{"fill rate 0", "resources:\n  a:\n    template: {fill_rate: 0}\n", []string{`limits.resources.a.template.fill_rate: 0 must be > 0 (tokens per second)`}},
		{"fill rate NaN", "global_default: {fill_rate: .nan}\n", []string{`limits.global_default.fill_rate: NaN is not a finite number`}},
		{"fill rate too high", "global_default: {fill_rate: 2e9}\n", []string{`limits.global_default.fill_rate: 2e+09 exceeds 1e+09 tokens per second`}},
		{"size 0", "resources:\n  a:\n    default: {size: 0}\n", []string{`limits.resources.a.default.size: 0 must be > 0 (tokens)`}},
		{"size not an integer", "global_default: {size: 1.5}\n", []string{`limits.global_default.size: want an integer (tokens), got float "1.5"`}},
		{"per request 0", "global_default: {max_tokens_per_request: 0}\n", []string{`limits.global_default.max_tokens_per_request: 0 must be ≥ 1`}},
		{"unknown algorithm", "resources:\n  a:\n    algorithm: leaky\n", []string{`limits.resources.a.algorithm: unknown algorithm "leaky" (want token_bucket or burst_tiers)`}},
		{"default and template", "resources:\n  a:\n    default: {}\n    template: {}\n", []string{`limits.resources.a.default: a resource may not have both default and template`}},
		{"bad domain", "resources:\n  a:\n    domains:\n      'rate limit': {}\n", []string{`limits.resources.a.domains["rate limit"]: domain name "rate limit" has ' ' at byte 4`}},
		{"a dotted domain is quoted in the path", "resources:\n  a:\n    domains:\n      rate_limit/1.2.3.4: {size: 0}\n", []string{`limits.resources.a.domains["rate_limit/1.2.3.4"].size: 0 must be > 0`}},
		{"negative max dynamic", "resources:\n  a:\n    max_dynamic_buckets: -5\n", []string{`limits.resources.a.max_dynamic_buckets: -5 is negative`}},
		{"domains a list", "resources:\n  a:\n    domains: [x]\n", []string{`limits.resources.a.domains: want a mapping, got a sequence (line 3)`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := ParseSection([]byte(tc.doc))
			wantInvalid(t, cfg, err, tc.want...)
			// The same through an outer decoder, under limits:.
			indented := "limits:\n  " + strings.ReplaceAll(strings.TrimSuffix(tc.doc, "\n"), "\n", "\n  ") + "\n"
			if _, err := decodeFile(t, []byte(indented)); err == nil {
				t.Errorf("accepted under limits:")
			}
		})
	}
}

func TestSectionValues(t *testing.T) {
	cfg, err := ParseSection([]byte(`
resources:
  r:
    domains:
      half: {fill_rate: 0.5}
      idle: {max_idle: never, wait_timeout: 250ms, max_debt: 0s, size: 3, max_tokens_per_request: 2}
      empty:
`))
	if err != nil {
		t.Fatal(err)
	}
	half := limits.DefaultBucket()
	half.FillRate, half.MaxTokensPerRequest = 0.5, 1
	idle := limits.DefaultBucket()
	idle.WaitTimeout, idle.MaxDebt, idle.Size, idle.MaxTokensPerRequest = 250*time.Millisecond, 0, 3, 2
	want := map[string]limits.Bucket{"half": half, "idle": idle, "empty": limits.DefaultBucket()}
	if got := cfg.Resources["r"].Buckets; !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}
}

// A section encodes back to YAML that decodes to the same configuration.
func TestSectionRoundTrip(t *testing.T) {
	cfg, err := decodeFile(t, readFile(t, "testdata/limits.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := MarshalSection(cfg)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseSection(out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if want := examples(); !reflect.DeepEqual(got, want) {
		t.Fatalf("round trip:\n%s\ngot  %+v\nwant %+v", out, got, want)
	}
	if !strings.Contains(string(out), "max_idle: 10m0s") {
		t.Errorf("durations not written as strings:\n%s", out)
	}
}

// The Go configurations the tests expect are valid.
func TestExamplesValidate(t *testing.T) {
	if err := examples().Validate(); err != nil {
		t.Errorf("examples: %v", err)
	}
	if err := charon().Validate(); err != nil {
		t.Errorf("charon: %v", err)
	}
}

// A bucket's durations read strictly, and write as Go duration strings,
// max_idle never as "never".
func TestDurationYAML(t *testing.T) {
	cfg, err := ParseSection([]byte("global_default: {max_idle: never, wait_timeout: 250ms}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if b := cfg.GlobalDefault; b.MaxIdle != limits.DefaultMaxIdle || b.WaitTimeout != 250*time.Millisecond {
		t.Fatalf("%v %v", b.MaxIdle, b.WaitTimeout)
	}
	if _, err := ParseSection([]byte("global_default: {wait_timeout: 250}\n")); err == nil || !strings.Contains(err.Error(), "want a Go duration string") {
		t.Fatalf("a bare number: %v", err)
	}
	b := limits.DefaultBucket()
	b.MaxDebt = 2 * time.Second
	out, err := yaml.Marshal(BucketNode(b))
	if err != nil || string(out) != "{size: 100, fill_rate: 50, wait_timeout: 1s, max_idle: never, max_debt: 2s, max_tokens_per_request: 50}\n" {
		t.Fatalf("%q %v", out, err)
	}
}

// wantInvalid fails t unless err is a configuration error (it wraps
// limits.ErrInvalidConfig; cfg is what was parsed, shown when accepted)
// that says every one of want.
func wantInvalid(t *testing.T, cfg any, err error, want ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("accepted: %+v", cfg)
	}
	if !errors.Is(err, limits.ErrInvalidConfig) {
		t.Errorf("%v does not wrap limits.ErrInvalidConfig", err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error\n%v\ndoes not say\n%s", err, w)
		}
	}
}
