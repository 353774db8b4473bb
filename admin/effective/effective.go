package effective

import (
	"strconv"
	"time"

	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/limits/copies"
	"github.com/sluice-rl/sluice/limits/rls"
	"github.com/sluice-rl/sluice/resources"
)

// Template is a Doorman resource template as the loader sees it.
// Durations are whole seconds.
type Template struct {
	IdentifierGlob string  `json:"identifier_glob"`
	Capacity       float64 `json:"capacity"`
	// SafeCapacity is absent when the server computes it; -1: no limit.
	SafeCapacity *float64  `json:"safe_capacity,omitempty"`
	Description  string    `json:"description,omitempty"`
	Algorithm    Algorithm `json:"algorithm"`
}

// Algorithm is a template's algorithm; durations in whole seconds.
type Algorithm struct {
	Kind                 string                `json:"kind"`
	LeaseLength          int64                 `json:"lease_length"`
	RefreshInterval      int64                 `json:"refresh_interval"`
	LearningModeDuration int64                 `json:"learning_mode_duration"`
	Parameters           []resources.Parameter `json:"parameters,omitempty"`
}

// TemplateOf returns t as the loader sees it (durations truncated to
// whole seconds, as the document writes them).
func TemplateOf(t resources.Template) Template {
	v := Template{IdentifierGlob: t.IdentifierGlob, Capacity: t.Capacity, Description: t.Description,
		Algorithm: Algorithm{Kind: t.Algorithm.Kind.String(), LeaseLength: int64(t.Algorithm.LeaseLength / time.Second),
			RefreshInterval:      int64(t.Algorithm.RefreshInterval / time.Second),
			LearningModeDuration: int64(t.Algorithm.LearningModeDuration / time.Second), Parameters: t.Algorithm.Parameters}}
	if t.HasSafeCapacity {
		sc := t.SafeCapacity
		v.SafeCapacity = &sc
	}
	return v
}

// Bucket is a token bucket with every default applied. Durations are Go
// duration strings ("1s"); MaxIdle may be "never".
type Bucket struct {
	Size                int64   `json:"size"`
	FillRate            float64 `json:"fill_rate"`
	WaitTimeout         string  `json:"wait_timeout"`
	MaxIdle             string  `json:"max_idle"`
	MaxDebt             string  `json:"max_debt"`
	MaxTokensPerRequest int64   `json:"max_tokens_per_request"`
}

// BucketOf returns b as the loader sees it; b should be normalized
// (limits.Config.Normalize) for its defaults to show.
func BucketOf(b limits.Bucket) *Bucket {
	idle := "never"
	if b.MaxIdle > 0 {
		idle = dur(b.MaxIdle)
	}
	return &Bucket{Size: b.Size, FillRate: b.FillRate, WaitTimeout: dur(b.WaitTimeout), MaxIdle: idle,
		MaxDebt: dur(b.MaxDebt), MaxTokensPerRequest: b.MaxTokensPerRequest}
}

// Tier is one burst tier, normalized. Durations are Go duration strings.
type Tier struct {
	Limit     int64  `json:"limit"`
	Window    string `json:"window"`
	Active    string `json:"active"`
	Cooldown  string `json:"cooldown"`
	Skippable bool   `json:"skippable"`
}

// TierDomain is a burst-tier resource's domain configuration: HardLimit
// "" keeps the resource's, "none" is unbounded, else a count; Tiers nil
// keeps the resource's, [] refuses the domain everything.
type TierDomain struct {
	HardLimit string  `json:"hard_limit,omitempty"`
	Tiers     *[]Tier `json:"tiers,omitempty"`
}

// TierDomainOf returns td as the loader sees it.
func TierDomainOf(td limits.TierDomain) TierDomain {
	v := TierDomain{Tiers: tiers(td.Tiers)}
	switch {
	case td.HardLimit == limits.Unbounded:
		v.HardLimit = "none"
	case td.HardLimit > 0:
		v.HardLimit = hits(td.HardLimit)
	}
	return v
}

// Group is a group of a copy-limited resource.
type Group struct {
	Name    string   `json:"name"`
	Limit   int64    `json:"limit"`
	Domains []string `json:"domains"`
}

// Resource is a resource of the limits section as the loader sees it.
// Algorithm is token_bucket, burst_tiers or copies; each has its own
// fields. HardLimit and GlobalLimit are counts, or "none" (unbounded).
type Resource struct {
	Algorithm    string `json:"algorithm"`
	OnStoreError string `json:"on_store_error"`
	// token_bucket: Domains are *Buckets; burst_tiers: TierDomains;
	// copies: counts (domain_limits, int64).
	Domains           map[string]any `json:"domains,omitempty"`
	Template          *Bucket        `json:"template,omitempty"`
	Default           *Bucket        `json:"default,omitempty"`
	MaxDynamicBuckets int64          `json:"max_dynamic_buckets,omitempty"`
	HardLimit         string         `json:"hard_limit,omitempty"`
	GlobalLimit       string         `json:"global_limit,omitempty"`
	Tiers             *[]Tier        `json:"tiers,omitempty"`
	DomainLimit       *int64         `json:"domain_limit,omitempty"`
	Groups            []Group        `json:"groups,omitempty"`
	// Ignored: a copy-limited resource whose namespace ignores its limits.
	Ignored bool `json:"ignored,omitempty"`
}

// ResourceOf returns a token-bucket or burst-tier resource of a
// normalized limits.Config as the loader sees it.
func ResourceOf(r *limits.Resource) *Resource {
	v := &Resource{Algorithm: r.Algorithm.String(), OnStoreError: r.OnStoreError.String(), MaxDynamicBuckets: r.MaxDynamicBuckets}
	if r.Algorithm == limits.BurstTiers {
		v.HardLimit, v.GlobalLimit = hits(r.HardLimit), hits(r.GlobalLimit)
		v.Tiers = tiers(r.Tiers)
		if v.Tiers == nil {
			v.Tiers = &[]Tier{}
		}
		if len(r.TierDomains) > 0 {
			v.Domains = map[string]any{}
			for d, td := range r.TierDomains {
				v.Domains[d] = TierDomainOf(td)
			}
		}
		return v
	}
	if len(r.Buckets) > 0 {
		v.Domains = map[string]any{}
		for d, b := range r.Buckets {
			v.Domains[d] = BucketOf(b)
		}
	}
	if r.Template != nil {
		v.Template = BucketOf(*r.Template)
	}
	if r.Default != nil {
		v.Default = BucketOf(*r.Default)
	}
	return v
}

// CopiesOf returns a copy-limited resource of a normalized copies.Config
// (copies.Config.Normalize) as the loader sees it: Algorithm "copies",
// OnStoreError "open" or "closed".
func CopiesOf(r copies.Resource) *Resource {
	dl := r.DomainLimit
	ose := "closed"
	if r.OnStoreError == copies.FailOpen {
		ose = "open"
	}
	v := &Resource{Algorithm: "copies", OnStoreError: ose, DomainLimit: &dl, GlobalLimit: hits(r.GlobalLimit), Ignored: r.Ignore}
	if len(r.DomainLimits) > 0 {
		v.Domains = map[string]any{}
		for d, n := range r.DomainLimits {
			v.Domains[d] = n
		}
	}
	for _, g := range r.Groups {
		v.Groups = append(v.Groups, Group{Name: g.Name, Limit: g.Limit, Domains: append([]string{}, g.Domains...)})
	}
	return v
}

// Namespace is a namespace prefix's flags.
type Namespace struct {
	IgnoreConfigured  bool `json:"ignore_configured"`
	AllowUnconfigured bool `json:"allow_unconfigured"`
}

// NamespaceOf returns ns as the loader sees it.
func NamespaceOf(ns limits.Namespace) Namespace {
	return Namespace{IgnoreConfigured: ns.IgnoreConfigured, AllowUnconfigured: ns.AllowUnconfigured}
}

// EnvoyDomain is an Envoy rate limit domain as the loader sees it: its
// algorithm ("" for the server's) and its number of rules, at every
// level.
type EnvoyDomain struct {
	Domain    string `json:"domain"`
	Algorithm string `json:"algorithm,omitempty"`
	Rules     int    `json:"rules"`
}

// EnvoyDomainOf returns d (not nil) as the loader sees it.
func EnvoyDomainOf(d *rls.Domain) EnvoyDomain {
	return EnvoyDomain{Domain: d.Name, Algorithm: d.Algorithm.String(), Rules: d.Rules()}
}

func dur(d time.Duration) string { return d.String() }

func tiers(ts []limits.Tier) *[]Tier {
	if ts == nil {
		return nil
	}
	out := make([]Tier, 0, len(ts))
	for _, t := range ts {
		out = append(out, Tier{Limit: t.Limit, Window: dur(t.Window), Active: dur(t.Active), Cooldown: dur(t.Cooldown), Skippable: t.Skippable})
	}
	return &out
}

// hits returns h as a count, or "none" when h ≤ 0 (unbounded).
func hits(h int64) string {
	if h <= 0 {
		return "none"
	}
	return strconv.FormatInt(h, 10)
}
