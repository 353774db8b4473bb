package limits

import (
	"errors"
	"math"
	"time"

	"go.yaml.in/yaml/v3"
)

// Section is Sluice's own limits configuration, as it appears under the
// key `limits:` of Sluice's configuration file (beside Doorman's
// `resources:`):
//
//	limits:
//	  global_default: {size: 100, fill_rate: 50}      # optional
//	  resources:
//	    TheBrain_userLogins:
//	      template: {size: 1, fill_rate: 1, wait_timeout: 0s}
//	      max_dynamic_buckets: 100000                  # 0 or absent: unlimited
//	    api:
//	      domains:
//	        rate_limit: {size: 10, fill_rate: 1, max_idle: 10m}
//	        rate_limit/192.168.11.3: {size: 500, fill_rate: 100}
//	    Pinky_TheBrain:
//	      default: {size: 1000, fill_rate: 500}        # shared by unlisted domains
//	      domains:
//	        UserService: {size: 200, fill_rate: 100}
//
// A resource has any of domains (domain-specific buckets, each also the
// configuration of the domains below it: with rate_limit configured,
// rate_limit/10.0.0.1 is a bucket of its own with rate_limit's
// configuration), template (a bucket per other domain) with
// max_dynamic_buckets, default (one bucket shared by the other domains;
// not with template), and algorithm (token_bucket, the default). A
// bucket's fields, every one optional:
//
//	size                    tokens, ≥ 1                      default 100
//	fill_rate               tokens per second, > 0, may be   default 50
//	                        fractional (0.5: one per 2 s)
//	wait_timeout            Go duration ("1s", "250ms", "0s") default 1s
//	max_idle                Go duration > 0, or "never"      default never
//	max_debt                Go duration                      default 10s
//	max_tokens_per_request  tokens, ≥ 1                      default fill_rate, rounded up
//
// Decoding is strict at every level: unknown fields, values of the wrong
// type (a duration must be a string with a unit: 1000 is an error, not
// 1000 ns), duplicate keys and invalid names are errors, each a
// *ConfigError naming its path under "limits" and its line:
//
//	limits.resources.api.domains.rate_limit.fill_rate: 0 must be > 0 (tokens per second)
//
// A Section decodes through yaml.v3 (UnmarshalYAML applies the strict
// reading whatever the outer decoder's settings) and encodes back to the
// same form; Validate converts it to a *Config.
type Section struct {
	GlobalDefault *SectionBucket              `yaml:"global_default,omitempty"`
	Resources     map[string]*SectionResource `yaml:"resources,omitempty"`
}

// SectionResource is one resource of a Section.
type SectionResource struct {
	Algorithm         string                    `yaml:"algorithm,omitempty"`
	Domains           map[string]*SectionBucket `yaml:"domains,omitempty"`
	Template          *SectionBucket            `yaml:"template,omitempty"`
	MaxDynamicBuckets *int64                    `yaml:"max_dynamic_buckets,omitempty"`
	Default           *SectionBucket            `yaml:"default,omitempty"`
}

// SectionBucket is one bucket of a Section; nil fields take the defaults.
type SectionBucket struct {
	Size                *int64    `yaml:"size,omitempty"`
	FillRate            *float64  `yaml:"fill_rate,omitempty"`
	WaitTimeout         *Duration `yaml:"wait_timeout,omitempty"`
	MaxIdle             *Duration `yaml:"max_idle,omitempty"`
	MaxDebt             *Duration `yaml:"max_debt,omitempty"`
	MaxTokensPerRequest *int64    `yaml:"max_tokens_per_request,omitempty"`
}

// Duration is a time.Duration written as a Go duration string ("1s"); Never
// is written "never".
type Duration time.Duration

// Never is the max_idle "never".
const Never = Duration(math.MinInt64)

// MarshalYAML writes d as a Go duration string, or "never".
func (d Duration) MarshalYAML() (any, error) {
	if d == Never {
		return "never", nil
	}
	return time.Duration(d).String(), nil
}

// UnmarshalYAML reads a Go duration string, or "never" (Never).
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	w := newWalker(n)
	if v := w.duration(n, "duration", true); v != nil {
		*d = Duration(*v)
		if *v == -1 && n.Value == "never" {
			*d = Never
		}
	}
	return w.err()
}

// The fields of each level of a Section.
var (
	sectionFields  = []string{"global_default", "resources"}
	resourceFields = []string{"algorithm", "domains", "template", "max_dynamic_buckets", "default"}
	bucketFields   = []string{"size", "fill_rate", "wait_timeout", "max_idle", "max_debt", "max_tokens_per_request"}
)

// sectionPath is the key a Section is found under, for error paths.
const sectionPath = "limits"

// UnmarshalYAML reads a Section strictly (see Section), whatever the
// decoder's KnownFields setting. It returns every problem, joined.
func (s *Section) UnmarshalYAML(n *yaml.Node) error {
	w := newWalker(n)
	*s = Section{}
	pairs, _ := w.mapping(n, sectionPath, sectionFields)
	for _, p := range pairs {
		fp := join(sectionPath, p.key)
		switch p.key {
		case "global_default":
			s.GlobalDefault = w.sectionBucket(p.value, fp)
		case "resources":
			rs, _ := w.mapping(p.value, fp, nil)
			if len(rs) > 0 {
				s.Resources = make(map[string]*SectionResource, len(rs))
			}
			for _, r := range rs {
				s.Resources[r.key] = w.sectionResource(r.value, key(fp, r.key))
			}
		}
	}
	return w.err()
}

func (w *walker) sectionResource(n *yaml.Node, path string) *SectionResource {
	r := &SectionResource{}
	pairs, _ := w.mapping(n, path, resourceFields)
	for _, p := range pairs {
		fp := join(path, p.key)
		switch p.key {
		case "algorithm":
			if v := w.str(p.value, fp); v != nil {
				r.Algorithm = *v
			}
		case "domains":
			ds, _ := w.mapping(p.value, fp, nil)
			if len(ds) > 0 {
				r.Domains = make(map[string]*SectionBucket, len(ds))
			}
			for _, d := range ds {
				b := w.sectionBucket(d.value, key(fp, d.key))
				if b == nil {
					b = &SectionBucket{}
				}
				r.Domains[d.key] = b
			}
		case "template":
			r.Template = w.sectionBucket(p.value, fp)
		case "max_dynamic_buckets":
			r.MaxDynamicBuckets = w.int64(p.value, fp, "a count; 0: unlimited")
		case "default":
			r.Default = w.sectionBucket(p.value, fp)
		}
	}
	return r
}

// sectionBucket reads a bucket; nil when null.
func (w *walker) sectionBucket(n *yaml.Node, path string) *SectionBucket {
	pairs, ok := w.mapping(n, path, bucketFields)
	if !ok {
		return nil
	}
	b := &SectionBucket{}
	dur := func(v *yaml.Node, fp string, never bool) *Duration {
		d := w.duration(v, fp, never)
		if d == nil {
			return nil
		}
		out := Duration(*d)
		if never && *d == -1 && w.deref(v).Value == "never" {
			out = Never
		}
		return &out
	}
	for _, p := range pairs {
		fp := join(path, p.key)
		switch p.key {
		case "size":
			b.Size = w.int64(p.value, fp, "tokens")
		case "fill_rate":
			b.FillRate = w.float(p.value, fp, "tokens per second")
		case "wait_timeout":
			b.WaitTimeout = dur(p.value, fp, false)
		case "max_idle":
			b.MaxIdle = dur(p.value, fp, true)
		case "max_debt":
			b.MaxDebt = dur(p.value, fp, false)
		case "max_tokens_per_request":
			b.MaxTokensPerRequest = w.int64(p.value, fp, "tokens")
		}
	}
	return b
}

// Validate applies the defaults and checks s, returning the configuration
// or every problem found, joined, each a *ConfigError naming its path
// under "limits". A nil Section is an empty configuration.
func (s *Section) Validate() (*Config, error) {
	cfg := &Config{}
	if s == nil {
		return cfg, nil
	}
	w := newWalker(nil)
	if s.GlobalDefault != nil {
		b := s.GlobalDefault.bucket(w, join(sectionPath, "global_default"))
		cfg.GlobalDefault = &b
	}
	if len(s.Resources) > 0 {
		cfg.Resources = make(map[string]*Resource, len(s.Resources))
	}
	for _, name := range sortedKeys(s.Resources) {
		sr := s.Resources[name]
		rp := key(join(sectionPath, "resources"), name)
		r := &Resource{}
		cfg.Resources[name] = r
		if sr == nil {
			continue
		}
		alg, err := ParseAlgorithm(sr.Algorithm)
		if err != nil {
			w.bad(rp+".algorithm", nil, "%v", err)
		}
		r.Algorithm = alg
		if sr.MaxDynamicBuckets != nil {
			r.MaxDynamicBuckets = *sr.MaxDynamicBuckets
		}
		if sr.Template != nil {
			b := sr.Template.bucket(w, rp+".template")
			r.Template = &b
		}
		if sr.Default != nil {
			b := sr.Default.bucket(w, rp+".default")
			r.Default = &b
		}
		if len(sr.Domains) > 0 {
			r.Buckets = make(map[string]Bucket, len(sr.Domains))
		}
		for _, d := range sortedKeys(sr.Domains) {
			sb := sr.Domains[d]
			if sb == nil {
				sb = &SectionBucket{}
			}
			r.Buckets[d] = sb.bucket(w, key(rp+".domains", d))
		}
	}
	if err := errors.Join(w.err(), cfg.validate(goVocab, sectionPath)); err != nil {
		return nil, err
	}
	return cfg, nil
}

// bucket applies the defaults to b.
func (b *SectionBucket) bucket(w *walker, path string) Bucket {
	out := DefaultBucket()
	if b.Size != nil {
		out.Size = *b.Size
	}
	if b.FillRate != nil {
		out.FillRate = *b.FillRate
	}
	if b.WaitTimeout != nil {
		out.WaitTimeout = time.Duration(*b.WaitTimeout)
	}
	if b.MaxDebt != nil {
		out.MaxDebt = time.Duration(*b.MaxDebt)
	}
	if b.MaxIdle != nil {
		switch d := *b.MaxIdle; {
		case d == Never:
			out.MaxIdle = DefaultMaxIdle
		case d <= 0:
			w.bad(path+".max_idle", nil, "%v must be > 0, or \"never\"", time.Duration(d))
		default:
			out.MaxIdle = time.Duration(d)
		}
	}
	out.MaxTokensPerRequest = roundUpTokens(out.FillRate)
	if b.MaxTokensPerRequest != nil {
		if *b.MaxTokensPerRequest == 0 {
			w.bad(path+".max_tokens_per_request", nil, "0 must be ≥ 1 (absent: the fill rate)")
		}
		out.MaxTokensPerRequest = *b.MaxTokensPerRequest
	}
	return out
}

// DecodeSection reads and validates a Section from node (the value of the
// `limits:` key).
func DecodeSection(node *yaml.Node) (*Config, error) {
	var s Section
	rerr := s.UnmarshalYAML(node)
	cfg, verr := s.Validate()
	if err := errors.Join(rerr, verr); err != nil {
		return nil, err
	}
	return cfg, nil
}

// ParseSection reads and validates a YAML document holding a Section's
// fields at its top level (global_default, resources). An empty document
// is an empty configuration.
func ParseSection(data []byte) (*Config, error) {
	root, err := parseDocument(data)
	if err != nil {
		return nil, err
	}
	if root == nil {
		return &Config{}, nil
	}
	return DecodeSection(root)
}
