package limitsyaml

import (
	"errors"
	"math"
	"strconv"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-rl/sluice/limits"
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
//	      on_store_error: open                         # Redis down: grant, flagged degraded (default closed)
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
// not with template), and algorithm (token_bucket, the default, or
// burst_tiers: see below). A bucket's fields, every one optional:
//
//	size                    tokens, ≥ 1                      default 100
//	fill_rate               tokens per second, > 0, may be   default 50
//	                        fractional (0.5: one per 2 s)
//	wait_timeout            Go duration ("1s", "250ms", "0s") default 1s
//	max_idle                Go duration > 0, or "never"      default never
//	max_debt                Go duration                      default 10s
//	max_tokens_per_request  tokens, ≥ 1                      default fill_rate, rounded up
//
// Charon's rate-limited resources (charon-paper.md, section 2.1) have
// algorithm burst_tiers, and hard_limit (H: hits per second per domain),
// global_limit (G: hits per second across the resource's domains; each a
// count ≥ 1, or "none"; absent: unbounded), tiers (a list, tier 1 first;
// none or absent: every request rejected), max_dynamic_buckets (the most
// domains with a state), and domains, whose configurations replace the
// default one for their domain (and the domains below it): hard_limit
// (absent: the resource's; "none": unbounded) and tiers (absent: the
// resource's; [] : none, the domain is refused everything):
//
//	limits:
//	  namespaces:
//	    open/: {allow_unconfigured: true}   # unknown open/… resources: granted, recorded
//	    muted/: {ignore_configured: true}   # configured muted/… resources: granted, recorded
//	  resources:
//	    api/search:
//	      algorithm: burst_tiers
//	      hard_limit: 50
//	      global_limit: 1000
//	      tiers:
//	        - {limit: 100, window: 1m, active: 1h}
//	        - {limit: 300, window: 1m, active: 5m, cooldown: 1h, skippable: true}
//	      domains:
//	        acme: {hard_limit: none}        # acme keeps the tiers, without H
//	        blocked: {tiers: []}
//
// A tier's fields: limit (hits in a window, ≥ 1), window, active (Go
// durations; required), cooldown (default 0s), skippable (default false).
//
// Either kind of resource may say what its requests get while the store
// fails (a shared Redis, sluice server --redis, unreachable):
// on_store_error: closed (the default: a server error) or open (granted,
// flagged degraded, counted); see limits.OnStoreError. The global default bucket
// always fails closed.
// Validate does not normalize (limits.Config.Normalize, which the engine applies
// to its own copy, says what it changes). A namespace (a resource-name
// prefix; the longest matching one decides) has ignore_configured and
// allow_unconfigured, both default false (see Namespace).
//
// Decoding is strict at every level: unknown fields, values of the wrong
// type (a duration must be a string with a unit: 1000 is an error, not
// 1000 ns), duplicate keys and invalid names are errors, each a
// *limits.ConfigError naming its path under "limits" and its line:
//
//	limits.resources.api.domains.rate_limit.fill_rate: 0 must be > 0 (tokens per second)
//
// A Section decodes through yaml.v3 (UnmarshalYAML applies the strict
// reading whatever the outer decoder's settings) and encodes back to the
// same form; Validate converts it to a *limits.Config.
type Section struct {
	GlobalDefault *SectionBucket               `yaml:"global_default,omitempty"`
	Namespaces    map[string]*SectionNamespace `yaml:"namespaces,omitempty"`
	Resources     map[string]*SectionResource  `yaml:"resources,omitempty"`
}

// SectionNamespace is one namespace prefix of a Section; nil fields are
// false.
type SectionNamespace struct {
	IgnoreConfigured  *bool `yaml:"ignore_configured,omitempty"`
	AllowUnconfigured *bool `yaml:"allow_unconfigured,omitempty"`
}

// SectionResource is one resource of a Section. Domains holds a
// token-bucket resource's domains, TierDomains a burst-tier resource's
// (both written `domains:`).
type SectionResource struct {
	Algorithm         string                        `yaml:"algorithm,omitempty"`
	Domains           map[string]*SectionBucket     `yaml:"domains,omitempty"`
	Template          *SectionBucket                `yaml:"template,omitempty"`
	MaxDynamicBuckets *int64                        `yaml:"max_dynamic_buckets,omitempty"`
	Default           *SectionBucket                `yaml:"default,omitempty"`
	HardLimit         *HitsLimit                    `yaml:"hard_limit,omitempty"`
	GlobalLimit       *HitsLimit                    `yaml:"global_limit,omitempty"`
	Tiers             *[]SectionTier                `yaml:"tiers,omitempty"`
	TierDomains       map[string]*SectionTierDomain `yaml:"-"`
	OnStoreError      string                        `yaml:"on_store_error,omitempty"`
}

// MarshalYAML writes r with TierDomains, if any, as `domains:`.
func (r SectionResource) MarshalYAML() (any, error) {
	out := struct {
		Algorithm         string         `yaml:"algorithm,omitempty"`
		HardLimit         *HitsLimit     `yaml:"hard_limit,omitempty"`
		GlobalLimit       *HitsLimit     `yaml:"global_limit,omitempty"`
		Tiers             *[]SectionTier `yaml:"tiers,omitempty"`
		Domains           any            `yaml:"domains,omitempty"`
		Template          *SectionBucket `yaml:"template,omitempty"`
		MaxDynamicBuckets *int64         `yaml:"max_dynamic_buckets,omitempty"`
		Default           *SectionBucket `yaml:"default,omitempty"`
		OnStoreError      string         `yaml:"on_store_error,omitempty"`
	}{Algorithm: r.Algorithm, HardLimit: r.HardLimit, GlobalLimit: r.GlobalLimit, Tiers: r.Tiers,
		Template: r.Template, MaxDynamicBuckets: r.MaxDynamicBuckets, Default: r.Default, OnStoreError: r.OnStoreError}
	switch {
	case r.TierDomains != nil:
		out.Domains = r.TierDomains
	case r.Domains != nil:
		out.Domains = r.Domains
	}
	return out, nil
}

// SectionTierDomain is a domain-specific configuration of a burst-tier
// resource: nil fields keep the resource's.
type SectionTierDomain struct {
	HardLimit *HitsLimit     `yaml:"hard_limit,omitempty"`
	Tiers     *[]SectionTier `yaml:"tiers,omitempty"`
}

// SectionTier is one burst tier of a Section.
type SectionTier struct {
	Limit     *int64    `yaml:"limit,omitempty"`
	Window    *Duration `yaml:"window,omitempty"`
	Active    *Duration `yaml:"active,omitempty"`
	Cooldown  *Duration `yaml:"cooldown,omitempty"`
	Skippable *bool     `yaml:"skippable,omitempty"`
}

// HitsLimit is a hard or global limit in a Section: hits per second (≥
// 1), or 0, written "none": unbounded.
type HitsLimit int64

// MarshalYAML writes h as a count, or "none".
func (h HitsLimit) MarshalYAML() (any, error) {
	if h == 0 {
		return "none", nil
	}
	return int64(h), nil
}

// UnmarshalYAML reads a count ≥ 1, or "none" (0).
func (h *HitsLimit) UnmarshalYAML(n *yaml.Node) error {
	w := newWalker(n)
	if v := w.hitsLimit(n, "hits limit"); v != nil {
		*h = *v
	}
	return w.err()
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
	sectionFields    = []string{"global_default", "namespaces", "resources"}
	resourceFields   = []string{"algorithm", "domains", "template", "max_dynamic_buckets", "default", "hard_limit", "global_limit", "tiers", "on_store_error"}
	bucketFields     = []string{"size", "fill_rate", "wait_timeout", "max_idle", "max_debt", "max_tokens_per_request"}
	namespaceFields  = []string{"ignore_configured", "allow_unconfigured"}
	tierDomainFields = []string{"hard_limit", "tiers"}
	tierFields       = []string{"limit", "window", "active", "cooldown", "skippable"}
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
		case "namespaces":
			s.Namespaces = mapOf(w, p.value, fp, w.sectionNamespace)
		case "resources":
			s.Resources = mapOf(w, p.value, fp, w.sectionResource)
		}
	}
	return w.err()
}

func (w *walker) sectionNamespace(n *yaml.Node, path string) *SectionNamespace {
	ns := &SectionNamespace{}
	pairs, _ := w.mapping(n, path, namespaceFields)
	for _, p := range pairs {
		fp := join(path, p.key)
		switch p.key {
		case "ignore_configured":
			ns.IgnoreConfigured = w.boolean(p.value, fp)
		case "allow_unconfigured":
			ns.AllowUnconfigured = w.boolean(p.value, fp)
		}
	}
	return ns
}

func (w *walker) sectionResource(n *yaml.Node, path string) *SectionResource {
	r := &SectionResource{}
	pairs, _ := w.mapping(n, path, resourceFields)
	tiered := false // the domains are burst-tier configurations
	for _, p := range pairs {
		if v := w.deref(p.value); p.key == "algorithm" && v != nil && v.Kind == yaml.ScalarNode && v.Value == limits.BurstTiers.String() {
			tiered = true
		}
	}
	for _, p := range pairs {
		fp := join(path, p.key)
		switch p.key {
		case "algorithm":
			if v := w.str(p.value, fp); v != nil {
				r.Algorithm = *v
			}
		case "hard_limit":
			r.HardLimit = w.hitsLimit(p.value, fp)
		case "global_limit":
			r.GlobalLimit = w.hitsLimit(p.value, fp)
		case "tiers":
			r.Tiers = w.sectionTiers(p.value, fp)
		case "domains":
			if tiered {
				r.TierDomains = mapOf(w, p.value, fp, w.sectionTierDomain)
				continue
			}
			r.Domains = mapOf(w, p.value, fp, func(n *yaml.Node, path string) *SectionBucket {
				if b := w.sectionBucket(n, path); b != nil {
					return b
				}
				return &SectionBucket{}
			})
		case "template":
			r.Template = w.sectionBucket(p.value, fp)
		case "max_dynamic_buckets":
			r.MaxDynamicBuckets = w.int64(p.value, fp, "a count; 0: unlimited")
		case "default":
			r.Default = w.sectionBucket(p.value, fp)
		case "on_store_error":
			if v := w.str(p.value, fp); v != nil {
				r.OnStoreError = *v
			}
		}
	}
	return r
}

// sectionTierDomain reads a burst-tier domain (null: the resource's
// configuration).
func (w *walker) sectionTierDomain(n *yaml.Node, path string) *SectionTierDomain {
	d := &SectionTierDomain{}
	pairs, _ := w.mapping(n, path, tierDomainFields)
	for _, p := range pairs {
		fp := join(path, p.key)
		switch p.key {
		case "hard_limit":
			d.HardLimit = w.hitsLimit(p.value, fp)
		case "tiers":
			d.Tiers = w.sectionTiers(p.value, fp)
		}
	}
	return d
}

// sectionTiers reads a list of tiers; nil when null.
func (w *walker) sectionTiers(n *yaml.Node, path string) *[]SectionTier {
	items, ok := w.sequence(n, path)
	if !ok {
		return nil
	}
	tiers := make([]SectionTier, 0, len(items))
	for i, item := range items {
		tp := path + "[" + strconv.Itoa(i) + "]"
		var t SectionTier
		pairs, ok := w.mapping(item, tp, tierFields)
		if !ok && isNull(w.deref(item)) {
			w.bad(tp, item, "want a tier {limit, window, active, cooldown, skippable}, got null")
		}
		for _, p := range pairs {
			fp := join(tp, p.key)
			switch p.key {
			case "limit":
				t.Limit = w.int64(p.value, fp, "hits in a window")
			case "window":
				t.Window = w.sectionDuration(p.value, fp)
			case "active":
				t.Active = w.sectionDuration(p.value, fp)
			case "cooldown":
				t.Cooldown = w.sectionDuration(p.value, fp)
			case "skippable":
				t.Skippable = w.boolean(p.value, fp)
			}
		}
		tiers = append(tiers, t)
	}
	return &tiers
}

// sectionDuration reads a Go duration string; nil when absent.
func (w *walker) sectionDuration(n *yaml.Node, path string) *Duration {
	d := w.duration(n, path, false)
	if d == nil {
		return nil
	}
	out := Duration(*d)
	return &out
}

// hitsLimit reads a hard or global limit: a count ≥ 1, or "none" (0);
// nil when absent.
func (w *walker) hitsLimit(n *yaml.Node, path string) *HitsLimit {
	s, ok := w.scalar(n, path)
	if !ok {
		return nil
	}
	if s.Tag == "!!str" && s.Value == "none" {
		h := HitsLimit(0)
		return &h
	}
	if s.Tag != "!!int" {
		w.bad(path, s, `want a count of hits per second or "none", got %s`, kindName(s))
		return nil
	}
	var v int64
	if err := s.Decode(&v); err != nil {
		w.bad(path, s, "%q is not a 64-bit integer (hits per second)", s.Value)
		return nil
	}
	if v <= 0 {
		w.bad(path, s, `%d must be ≥ 1 (hits per second; unbounded: "none", or leave it out)`, v)
		return nil
	}
	h := HitsLimit(v)
	return &h
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
// or every problem found, joined, each a *limits.ConfigError naming its path
// under "limits". A nil Section is an empty configuration.
func (s *Section) Validate() (*limits.Config, error) {
	cfg := &limits.Config{}
	if s == nil {
		return cfg, nil
	}
	w := newWalker(nil)
	if s.GlobalDefault != nil {
		b := s.GlobalDefault.bucket(w, join(sectionPath, "global_default"))
		cfg.GlobalDefault = &b
	}
	if len(s.Resources) > 0 {
		cfg.Resources = make(map[string]*limits.Resource, len(s.Resources))
	}
	for _, name := range sortedKeys(s.Resources) {
		sr := s.Resources[name]
		rp := key(join(sectionPath, "resources"), name)
		r := &limits.Resource{}
		cfg.Resources[name] = r
		if sr == nil {
			continue
		}
		alg, err := limits.ParseAlgorithm(sr.Algorithm)
		if err != nil {
			w.bad(rp+".algorithm", nil, "%v", err)
		}
		r.Algorithm = alg
		if r.OnStoreError, err = limits.ParseOnStoreError(sr.OnStoreError); err != nil {
			w.bad(rp+".on_store_error", nil, "%v", err)
		}
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
		sectionTierResource(w, sr, r, rp)
		if len(sr.Domains) > 0 {
			r.Buckets = make(map[string]limits.Bucket, len(sr.Domains))
		}
		for _, d := range sortedKeys(sr.Domains) {
			sb := sr.Domains[d]
			if sb == nil {
				sb = &SectionBucket{}
			}
			r.Buckets[d] = sb.bucket(w, key(rp+".domains", d))
		}
	}
	if len(s.Namespaces) > 0 {
		cfg.Namespaces = make(map[string]limits.Namespace, len(s.Namespaces))
	}
	for prefix, sn := range s.Namespaces {
		var ns limits.Namespace
		if sn != nil {
			ns.IgnoreConfigured = sn.IgnoreConfigured != nil && *sn.IgnoreConfigured
			ns.AllowUnconfigured = sn.AllowUnconfigured != nil && *sn.AllowUnconfigured
		}
		cfg.Namespaces[prefix] = ns
	}
	if err := errors.Join(w.err(), cfg.ValidateIn(limits.Vocabulary{Prefix: sectionPath})); err != nil {
		return nil, err
	}
	return cfg, nil
}

// sectionTierResource converts sr's burst-tier fields into r.
func sectionTierResource(w *walker, sr *SectionResource, r *limits.Resource, rp string) {
	if sr.HardLimit != nil {
		r.HardLimit = int64(*sr.HardLimit)
	}
	if sr.GlobalLimit != nil {
		r.GlobalLimit = int64(*sr.GlobalLimit)
	}
	if sr.Tiers != nil {
		r.Tiers = sectionTierList(w, *sr.Tiers, rp+".tiers")
	}
	if sr.TierDomains != nil {
		r.TierDomains = make(map[string]limits.TierDomain, len(sr.TierDomains))
	}
	for _, d := range sortedKeys(sr.TierDomains) {
		var td limits.TierDomain
		if sd := sr.TierDomains[d]; sd != nil {
			if sd.HardLimit != nil {
				td.HardLimit = int64(*sd.HardLimit)
				if td.HardLimit == 0 {
					td.HardLimit = limits.Unbounded
				}
			}
			if sd.Tiers != nil {
				td.Tiers = sectionTierList(w, *sd.Tiers, key(rp+".domains", d)+".tiers")
			}
		}
		r.TierDomains[d] = td
	}
}

// sectionTierList converts tiers (never nil, even empty), reporting the
// required fields that are absent.
func sectionTierList(w *walker, tiers []SectionTier, path string) []limits.Tier {
	out := make([]limits.Tier, 0, len(tiers))
	for i, st := range tiers {
		tp := path + "[" + strconv.Itoa(i) + "]"
		t := limits.Tier{Limit: 1, Window: time.Second, Active: time.Second}
		if st.Limit != nil {
			t.Limit = *st.Limit
		} else {
			w.bad(tp+".limit", nil, "required (hits in a window, ≥ 1)")
		}
		if st.Window != nil {
			t.Window = time.Duration(*st.Window)
		} else {
			w.bad(tp+".window", nil, `required (a Go duration such as "1s")`)
		}
		if st.Active != nil {
			t.Active = time.Duration(*st.Active)
		} else {
			w.bad(tp+".active", nil, `required (a Go duration such as "1h")`)
		}
		if st.Cooldown != nil {
			t.Cooldown = time.Duration(*st.Cooldown)
		}
		if st.Skippable != nil {
			t.Skippable = *st.Skippable
		}
		out = append(out, t)
	}
	return out
}

// bucket applies the defaults to b.
func (b *SectionBucket) bucket(w *walker, path string) limits.Bucket {
	out := limits.DefaultBucket()
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
			out.MaxIdle = limits.DefaultMaxIdle
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
func DecodeSection(node *yaml.Node) (*limits.Config, error) {
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
func ParseSection(data []byte) (*limits.Config, error) {
	root, err := parseDocument(data)
	if err != nil {
		return nil, err
	}
	if root == nil {
		return &limits.Config{}, nil
	}
	return DecodeSection(root)
}
