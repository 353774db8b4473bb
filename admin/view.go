package admin

import (
	"math"
	"strconv"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-rl/sluice/admin/internal/yamlnode"
	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/limits/copies"
	"github.com/sluice-rl/sluice/resources"
)

// ObjectView is one object of the configuration: as written in the
// document and as the loader (resources.Parse) sees it.
type ObjectView struct {
	// Object is the object's path ("limits/resources/api/domains/x").
	Object Object `json:"object"`
	// Kind, Name and Domain are Object's fields.
	Kind   Kind   `json:"kind"`
	Name   string `json:"name,omitempty"`
	Domain string `json:"domain,omitempty"`
	// Value is the object as written, as JSON: mappings are objects,
	// integers and floats numbers, durations strings ("1s").
	Value any `json:"value"`
	// YAML is the object as written, comments included.
	YAML string `json:"yaml"`
	// Effective is the object as the loader sees it: defaults applied
	// and normalized (charon-paper.md §4.1: tiers with an active time of 0
	// removed, windows shortened, copy limits lowered to the global
	// limit). Its shape is the kind's: TemplateView, ResourceView,
	// BucketView (domains, defaults, templates, the global default),
	// TierDomainView, a count (a copy-limited resource's domain) or
	// NamespaceView. Absent when the document does not load.
	Effective any `json:"effective,omitempty"`
}

func newObjectView(o Object, n *yaml.Node, repo *resources.Repository) ObjectView {
	v := ObjectView{Object: o, Kind: o.Kind, Name: o.Name, Domain: o.Domain, Value: nodeValue(n, 0)}
	if b, err := encodeNode(n); err == nil {
		v.YAML = string(b)
	}
	if repo != nil {
		v.Effective = effective(o, repo)
	}
	return v
}

// maxValueNodes bounds the nodes nodeValue visits (aliases expanded): an
// alias bomb in a document stored by hand costs no more.
const maxValueNodes = 1 << 20

// nodeValue converts a node to a JSON value (aliases followed, to a
// depth of 100, visiting at most maxValueNodes nodes).
func nodeValue(n *yaml.Node, depth int) any {
	budget := maxValueNodes
	return valueOf(n, depth, &budget)
}

func valueOf(n *yaml.Node, depth int, budget *int) any {
	n = yamlnode.Deref(n)
	if *budget--; n == nil || depth > 100 || *budget < 0 {
		return nil
	}
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) > 0 {
			return valueOf(n.Content[0], depth+1, budget)
		}
		return nil
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := yamlnode.Deref(n.Content[i])
			if k == nil || k.Kind != yaml.ScalarNode {
				continue
			}
			if k.Tag == "!!merge" {
				if mm, ok := valueOf(n.Content[i+1], depth+1, budget).(map[string]any); ok {
					for key, val := range mm {
						if _, set := m[key]; !set {
							m[key] = val
						}
					}
				}
				continue
			}
			m[k.Value] = valueOf(n.Content[i+1], depth+1, budget)
		}
		return m
	case yaml.SequenceNode:
		s := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			s = append(s, valueOf(c, depth+1, budget))
		}
		return s
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return nil
		case "!!bool":
			var b bool
			if n.Decode(&b) == nil {
				return b
			}
		case "!!int":
			var i int64
			if n.Decode(&i) == nil {
				return i
			}
		case "!!float":
			var f float64
			if n.Decode(&f) == nil && !math.IsNaN(f) && !math.IsInf(f, 0) {
				return f
			}
		}
		return n.Value
	}
	return nil
}

// TemplateView is a Doorman resource template as the loader sees it.
// Durations are whole seconds.
type TemplateView struct {
	IdentifierGlob string  `json:"identifier_glob"`
	Capacity       float64 `json:"capacity"`
	// SafeCapacity is absent when the server computes it; -1: no limit.
	SafeCapacity *float64      `json:"safe_capacity,omitempty"`
	Description  string        `json:"description,omitempty"`
	Algorithm    AlgorithmView `json:"algorithm"`
}

// AlgorithmView is a template's algorithm; durations in whole seconds.
type AlgorithmView struct {
	Kind                 string                `json:"kind"`
	LeaseLength          int64                 `json:"lease_length"`
	RefreshInterval      int64                 `json:"refresh_interval"`
	LearningModeDuration int64                 `json:"learning_mode_duration"`
	Parameters           []resources.Parameter `json:"parameters,omitempty"`
}

// BucketView is a token bucket with every default applied. Durations are
// Go duration strings; max_idle may be "never".
type BucketView struct {
	Size                int64   `json:"size"`
	FillRate            float64 `json:"fill_rate"`
	WaitTimeout         string  `json:"wait_timeout"`
	MaxIdle             string  `json:"max_idle"`
	MaxDebt             string  `json:"max_debt"`
	MaxTokensPerRequest int64   `json:"max_tokens_per_request"`
}

// TierView is one burst tier, normalized.
type TierView struct {
	Limit     int64  `json:"limit"`
	Window    string `json:"window"`
	Active    string `json:"active"`
	Cooldown  string `json:"cooldown"`
	Skippable bool   `json:"skippable"`
}

// TierDomainView is a burst-tier resource's domain configuration:
// HardLimit "" keeps the resource's, "none" is unbounded, else a count;
// Tiers nil keeps the resource's, [] refuses the domain everything.
type TierDomainView struct {
	HardLimit string      `json:"hard_limit,omitempty"`
	Tiers     *[]TierView `json:"tiers,omitempty"`
}

// GroupView is a group of a copy-limited resource.
type GroupView struct {
	Name    string   `json:"name"`
	Limit   int64    `json:"limit"`
	Domains []string `json:"domains"`
}

// ResourceView is a resource of the limits section as the loader sees it.
// Algorithm is token_bucket, burst_tiers or copies; each has its own
// fields. HardLimit and GlobalLimit are counts, or "none" (unbounded).
type ResourceView struct {
	Algorithm    string `json:"algorithm"`
	OnStoreError string `json:"on_store_error"`
	// token_bucket: Domains are BucketViews; burst_tiers: TierDomainViews;
	// copies: counts (domain_limits).
	Domains           map[string]any `json:"domains,omitempty"`
	Template          *BucketView    `json:"template,omitempty"`
	Default           *BucketView    `json:"default,omitempty"`
	MaxDynamicBuckets int64          `json:"max_dynamic_buckets,omitempty"`
	HardLimit         string         `json:"hard_limit,omitempty"`
	GlobalLimit       string         `json:"global_limit,omitempty"`
	Tiers             *[]TierView    `json:"tiers,omitempty"`
	DomainLimit       *int64         `json:"domain_limit,omitempty"`
	Groups            []GroupView    `json:"groups,omitempty"`
	// Ignored: a copy-limited resource whose namespace ignores its limits.
	Ignored bool `json:"ignored,omitempty"`
}

// NamespaceView is a namespace prefix's flags.
type NamespaceView struct {
	IgnoreConfigured  bool `json:"ignore_configured"`
	AllowUnconfigured bool `json:"allow_unconfigured"`
}

func dur(d time.Duration) string { return d.String() }

func bucketView(b limits.Bucket) *BucketView {
	idle := "never"
	if b.MaxIdle > 0 {
		idle = dur(b.MaxIdle)
	}
	return &BucketView{Size: b.Size, FillRate: b.FillRate, WaitTimeout: dur(b.WaitTimeout), MaxIdle: idle,
		MaxDebt: dur(b.MaxDebt), MaxTokensPerRequest: b.MaxTokensPerRequest}
}

func tierViews(ts []limits.Tier) *[]TierView {
	if ts == nil {
		return nil
	}
	out := make([]TierView, 0, len(ts))
	for _, t := range ts {
		out = append(out, TierView{Limit: t.Limit, Window: dur(t.Window), Active: dur(t.Active), Cooldown: dur(t.Cooldown), Skippable: t.Skippable})
	}
	return &out
}

func hits(h int64) string {
	if h <= 0 {
		return "none"
	}
	return strconv.FormatInt(h, 10)
}

func tierDomainView(td limits.TierDomain) TierDomainView {
	v := TierDomainView{Tiers: tierViews(td.Tiers)}
	switch {
	case td.HardLimit == limits.Unbounded:
		v.HardLimit = "none"
	case td.HardLimit > 0:
		v.HardLimit = hits(td.HardLimit)
	}
	return v
}

func resourceView(r *limits.Resource) *ResourceView {
	v := &ResourceView{Algorithm: r.Algorithm.String(), OnStoreError: r.OnStoreError.String(), MaxDynamicBuckets: r.MaxDynamicBuckets}
	if r.Algorithm == limits.BurstTiers {
		v.HardLimit, v.GlobalLimit = hits(r.HardLimit), hits(r.GlobalLimit)
		v.Tiers = tierViews(r.Tiers)
		if v.Tiers == nil {
			v.Tiers = &[]TierView{}
		}
		if len(r.TierDomains) > 0 {
			v.Domains = map[string]any{}
			for d, td := range r.TierDomains {
				v.Domains[d] = tierDomainView(td)
			}
		}
		return v
	}
	if len(r.Buckets) > 0 {
		v.Domains = map[string]any{}
		for d, b := range r.Buckets {
			v.Domains[d] = bucketView(b)
		}
	}
	if r.Template != nil {
		v.Template = bucketView(*r.Template)
	}
	if r.Default != nil {
		v.Default = bucketView(*r.Default)
	}
	return v
}

func copiesView(r copies.Resource) *ResourceView {
	dl := r.DomainLimit
	ose := "closed"
	if r.OnStoreError == copies.FailOpen {
		ose = "open"
	}
	v := &ResourceView{Algorithm: "copies", OnStoreError: ose, DomainLimit: &dl, GlobalLimit: hits(r.GlobalLimit), Ignored: r.Ignore}
	if len(r.DomainLimits) > 0 {
		v.Domains = map[string]any{}
		for d, n := range r.DomainLimits {
			v.Domains[d] = n
		}
	}
	for _, g := range r.Groups {
		v.Groups = append(v.Groups, GroupView{Name: g.Name, Limit: g.Limit, Domains: append([]string{}, g.Domains...)})
	}
	return v
}

// EnvoyDomainView is an Envoy rate limit domain as the loader sees it:
// its algorithm ("" for the server's) and its number of rules, at every
// level.
type EnvoyDomainView struct {
	Domain    string `json:"domain"`
	Algorithm string `json:"algorithm,omitempty"`
	Rules     int    `json:"rules"`
}

// effective returns o as repo's loader sees it, or nil when repo has no
// such object.
func effective(o Object, repo *resources.Repository) any {
	if o.Kind == KindEnvoyDomain {
		d := repo.EnvoyRateLimit().Domain(o.Name)
		if d == nil {
			return nil
		}
		return EnvoyDomainView{Domain: d.Name, Algorithm: d.Algorithm.String(), Rules: d.Rules()}
	}
	if o.Kind == KindTemplate {
		for _, t := range repo.Templates() {
			if t.IdentifierGlob != o.Name {
				continue
			}
			v := TemplateView{IdentifierGlob: t.IdentifierGlob, Capacity: t.Capacity, Description: t.Description,
				Algorithm: AlgorithmView{Kind: t.Algorithm.Kind.String(), LeaseLength: int64(t.Algorithm.LeaseLength / time.Second),
					RefreshInterval:      int64(t.Algorithm.RefreshInterval / time.Second),
					LearningModeDuration: int64(t.Algorithm.LearningModeDuration / time.Second), Parameters: t.Algorithm.Parameters}}
			if t.HasSafeCapacity {
				sc := t.SafeCapacity
				v.SafeCapacity = &sc
			}
			return v
		}
		return nil
	}
	var lc *limits.Config
	if repo.Limits() != nil {
		lc = repo.Limits().Clone()
		lc.Normalize()
	}
	cc, _ := repo.Copies().Normalize()
	switch o.Kind {
	case KindGlobalDefault:
		if lc != nil && lc.GlobalDefault != nil {
			return bucketView(*lc.GlobalDefault)
		}
		return nil
	case KindNamespace:
		if lc != nil {
			if ns, ok := lc.Namespaces[o.Name]; ok {
				return NamespaceView{IgnoreConfigured: ns.IgnoreConfigured, AllowUnconfigured: ns.AllowUnconfigured}
			}
		}
		return nil
	}
	if cc != nil {
		if r, ok := cc.Resources[o.Name]; ok {
			switch o.Kind {
			case KindResource:
				return copiesView(r)
			case KindDomain:
				if n, ok := r.DomainLimits[o.Domain]; ok {
					return n
				}
			}
			return nil
		}
	}
	if lc == nil || lc.Resources[o.Name] == nil {
		return nil
	}
	r := lc.Resources[o.Name]
	switch o.Kind {
	case KindResource:
		return resourceView(r)
	case KindDefault:
		if r.Default != nil {
			return bucketView(*r.Default)
		}
	case KindBucketTemplate:
		if r.Template != nil {
			return bucketView(*r.Template)
		}
	case KindDomain:
		if r.Algorithm == limits.BurstTiers {
			if td, ok := r.TierDomains[o.Domain]; ok {
				return tierDomainView(td)
			}
			return nil
		}
		if b, ok := r.Buckets[o.Domain]; ok {
			return bucketView(b)
		}
	}
	return nil
}
