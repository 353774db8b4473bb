package limits

import (
	"cmp"
	"slices"
	"strings"
	"time"
)

// Kind says which part of a resource's configuration a Limit is.
type Kind uint8

// The kinds of Limit.
const (
	// KindNamed is a domain-specific configuration (a named bucket); it
	// also answers, as a prefix, for domains below it.
	KindNamed Kind = iota + 1
	// KindTemplate is the resource's per-domain template (dynamic
	// buckets).
	KindTemplate
	// KindDefault is the resource's shared default bucket.
	KindDefault
	// KindGlobal is the global default bucket.
	KindGlobal
	// KindNamespace is the configuration of the resources not configured
	// under a namespace prefix that allows them (Name is the prefix): a
	// state per (resource, domain), under UnconfiguredTiers.
	KindNamespace
)

// Limit is one validated bucket configuration as the engine hands it to a
// Store: what the store needs to run and count the bucket. The engine
// creates a new set of Limits with every configuration (SetConfig); a
// Store treats them as read-only and may keep and compare the pointers.
type Limit struct {
	// Resource is the resource it configures ("" for the global default).
	Resource string
	// Name is, for KindNamed, the domain it is configured for.
	Name string
	// Kind is which part of the configuration it is.
	Kind Kind
	// Algorithm is the resource's algorithm (TokenBucket or BurstTiers).
	Algorithm Algorithm
	// Bucket is the configuration, validated (TokenBucket; zero for
	// BurstTiers).
	Bucket Bucket
	// Params are Bucket's step parameters (TokenBucket).
	Params Params
	// Tiers are, for BurstTiers, the domain's hard limit, the resource's
	// global limit and the domain's tiers, normalized (nil for
	// TokenBucket).
	Tiers *TierParams
	// Unlimited reports that every request is granted in full, still
	// recorded: the resource is configured under a namespace that
	// ignores configured limits, or is unconfigured under one that
	// allows that (KindNamespace). Stores run the step as usual (for
	// BurstTiers, Tiers.Unlimited says the same); the engine grants.
	Unlimited bool
	// MaxDynamic is the resource's MaxDynamicBuckets (0: unlimited), for
	// the buckets this Limit creates on demand (Dynamic).
	MaxDynamic int64
	// Gen is the configuration's generation: 1 for the engine's first,
	// one more with each SetConfig.
	Gen uint64

	maxPerRequest int64 // Bucket.MaxTokensPerRequest resolved
	maxWait       int64 // min(WaitTimeout, MaxDebt), ns
	slow          bool  // BurstTiers or Unlimited: not Allow's token-bucket path
	failOpen      bool  // the resource's OnStoreError is FailOpen
}

// Step runs a token bucket's step on state s at now: Step with l.Params.
// Stores call it from Take, which the engine uses for TokenBucket limits
// only; BurstTiers limits go to Store.TakeHits (StepTiers), whose state
// is a TierState rather than one word.
func (l *Limit) Step(s State, now int64, a Ask) (State, Result) {
	return Step(s, l.Params, now, a)
}

// Dynamic reports whether the bucket of domain under l is created on
// demand and counts against the resource's MaxDynamic: a bucket from the
// template, or a key below a prefix (a named configuration answering for
// a longer domain).
func (l *Limit) Dynamic(domain string) bool {
	return l.Kind == KindTemplate || l.Kind == KindNamed && domain != l.Name
}

// storeResource returns the resource name a store keeps for key k under
// l: the configuration's own string where there is one (every kind but
// KindNamespace, whose resources are not configured: then k's, which the
// store must copy).
func (l *Limit) storeResource(k Key) string {
	if l.Kind == KindNamespace {
		return k.Resource
	}
	return l.Resource
}

// Ref returns which configuration answers for domain under l.
func (l *Limit) Ref(domain string) BucketRef {
	switch l.Kind {
	case KindNamed:
		if domain == l.Name {
			return BucketRef{Source: SourceNamed}
		}
		return BucketRef{Source: SourcePrefix, Prefix: l.Name}
	case KindTemplate:
		return BucketRef{Source: SourceDynamic}
	case KindDefault:
		return BucketRef{Source: SourceDefault}
	case KindGlobal:
		return BucketRef{Source: SourceGlobalDefault}
	case KindNamespace:
		return BucketRef{Source: SourceNamespace, Prefix: l.Name}
	}
	return BucketRef{}
}

// Source says which configuration answered a request.
type Source uint8

// The sources, in lookup order.
const (
	// SourceNone: no configuration answered (StatusNoBucket, or the
	// request was invalid).
	SourceNone Source = iota
	// SourceNamed: the domain's own configuration.
	SourceNamed
	// SourcePrefix: the configuration of the longest configured
	// '/'-prefix of the domain; the domain is a bucket of its own.
	SourcePrefix
	// SourceDynamic: a bucket of the domain's own from the resource's
	// template.
	SourceDynamic
	// SourceDefault: the resource's shared default bucket.
	SourceDefault
	// SourceGlobalDefault: the global default bucket.
	SourceGlobalDefault
	// SourceNamespace: the resource is not configured; a namespace prefix
	// that allows unconfigured resources answered (BucketRef.Prefix).
	SourceNamespace
)

// BucketRef names the configuration that answered a request.
type BucketRef struct {
	Source Source
	// Prefix is, for SourcePrefix, the configured prefix (the
	// configuration's string, not the request's); for SourceNamespace,
	// the namespace's prefix.
	Prefix string
}

// String returns "named", "prefix a/b", "dynamic", "default", "global
// default", "namespace open/", or "" for SourceNone.
func (r BucketRef) String() string {
	switch r.Source {
	case SourceNamed:
		return "named"
	case SourcePrefix:
		return "prefix " + r.Prefix
	case SourceDynamic:
		return "dynamic"
	case SourceDefault:
		return "default"
	case SourceGlobalDefault:
		return "global default"
	case SourceNamespace:
		return "namespace " + r.Prefix
	}
	return ""
}

// compiled is a validated configuration ready for lookups.
type compiled struct {
	gen        uint64
	cfg        *Config // a private copy, normalized
	global     *Limit
	resources  map[string]*compiledResource
	namespaces []compiledNamespace // longest prefix first
}

// compiledNamespace is one namespace prefix.
type compiledNamespace struct {
	prefix string
	ns     Namespace
	limit  *Limit // KindNamespace, when AllowUnconfigured
}

// namespace returns the longest namespace prefix of resource, or nil.
func (c *compiled) namespace(resource string) *compiledNamespace {
	for i := range c.namespaces {
		if strings.HasPrefix(resource, c.namespaces[i].prefix) {
			return &c.namespaces[i]
		}
	}
	return nil
}

type compiledResource struct {
	named    map[string]*Limit
	template *Limit
	def      *Limit
}

// compile validates cfg, normalizes a copy of it and builds its lookup
// tables for generation gen.
func compile(cfg *Config, gen uint64) (*compiled, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.Clone()
	if cfg == nil {
		cfg = &Config{}
	}
	cfg.Normalize()
	c := &compiled{gen: gen, cfg: cfg, resources: make(map[string]*compiledResource, len(cfg.Resources))}
	for _, prefix := range sortedKeys(cfg.Namespaces) {
		cn := compiledNamespace{prefix: prefix, ns: cfg.Namespaces[prefix]}
		if cn.ns.AllowUnconfigured {
			cn.limit = &Limit{Resource: prefix, Name: prefix, Kind: KindNamespace, Algorithm: BurstTiers,
				Tiers: newTierParams(0, 0, UnconfiguredTiers, true), Unlimited: true, Gen: gen, maxPerRequest: MaxTokens, slow: true}
		}
		c.namespaces = append(c.namespaces, cn)
	}
	slices.SortStableFunc(c.namespaces, func(a, b compiledNamespace) int { return cmp.Compare(len(b.prefix), len(a.prefix)) })
	mk := func(resource, name string, kind Kind, alg Algorithm, b Bucket, maxDyn int64, unlimited bool) *Limit {
		return &Limit{
			Resource: resource, Name: name, Kind: kind, Algorithm: alg, Bucket: b, Params: b.Params(),
			MaxDynamic: maxDyn, Gen: gen, Unlimited: unlimited, slow: unlimited,
			maxPerRequest: b.maxPerRequest(),
			maxWait:       int64(min(b.WaitTimeout, b.MaxDebt) / time.Nanosecond),
		}
	}
	mkTiers := func(resource, name string, kind Kind, p *TierParams, maxDyn int64) *Limit {
		return &Limit{Resource: resource, Name: name, Kind: kind, Algorithm: BurstTiers, Tiers: p,
			MaxDynamic: maxDyn, Gen: gen, Unlimited: p.Unlimited, maxPerRequest: MaxTokens, slow: true}
	}
	// failOpen marks the Limits of a resource that fails open.
	failOpen := func(ls ...*Limit) {
		for _, l := range ls {
			if l != nil {
				l.failOpen = true
			}
		}
	}
	if cfg.GlobalDefault != nil {
		c.global = mk("", "", KindGlobal, TokenBucket, *cfg.GlobalDefault, 0, false)
	}
	for name, r := range cfg.Resources {
		if r == nil {
			continue
		}
		ignore := false
		if ns := c.namespace(name); ns != nil {
			ignore = ns.ns.IgnoreConfigured
		}
		if r.Algorithm == BurstTiers {
			cr := &compiledResource{named: make(map[string]*Limit, len(r.TierDomains))}
			for d, td := range r.TierDomains {
				h, tiers := r.HardLimit, r.Tiers
				switch {
				case td.HardLimit == Unbounded:
					h = 0
				case td.HardLimit > 0:
					h = td.HardLimit
				}
				if td.Tiers != nil {
					tiers = td.Tiers
				}
				cr.named[d] = mkTiers(name, d, KindNamed, newTierParams(h, r.GlobalLimit, tiers, ignore), r.MaxDynamicBuckets)
			}
			cr.template = mkTiers(name, "", KindTemplate, newTierParams(r.HardLimit, r.GlobalLimit, r.Tiers, ignore), r.MaxDynamicBuckets)
			c.resources[name] = cr
			if r.OnStoreError == FailOpen {
				failOpen(cr.limits()...)
			}
			continue
		}
		cr := &compiledResource{named: make(map[string]*Limit, len(r.Buckets))}
		for d, b := range r.Buckets {
			cr.named[d] = mk(name, d, KindNamed, r.Algorithm, b, r.MaxDynamicBuckets, ignore)
		}
		if r.Template != nil {
			cr.template = mk(name, "", KindTemplate, r.Algorithm, *r.Template, r.MaxDynamicBuckets, ignore)
		}
		if r.Default != nil {
			cr.def = mk(name, "", KindDefault, r.Algorithm, *r.Default, 0, ignore)
		}
		c.resources[name] = cr
		if r.OnStoreError == FailOpen {
			failOpen(cr.limits()...)
		}
	}
	return c, nil
}

// limits returns the resource's Limits (nil where absent).
func (r *compiledResource) limits() []*Limit {
	ls := make([]*Limit, 0, len(r.named)+2)
	for _, l := range r.named {
		ls = append(ls, l)
	}
	return append(ls, r.template, r.def)
}

// resolve finds the bucket for (resource, domain), in the order of the
// design's search: the domain's own configuration; the longest configured
// '/'-prefix of it; a bucket from the template (for a burst-tier
// resource, its default tiers); the resource's default; for a resource
// not configured, the longest namespace prefix of it when that allows
// unconfigured resources; the global default. It returns nil when none
// answers. It does not
// allocate: the key's strings are the arguments.
//
// Source: quotaservice-design.md, "Hierarchies and bucket search order";
// ratelimiting-in-150-lines.md ("foo/bar/baz", then "foo/bar", then
// "foo").
func (c *compiled) resolve(resource, domain string) (Key, *Limit) {
	if r := c.resources[resource]; r != nil {
		if l := r.named[domain]; l != nil {
			return Key{Resource: resource, Domain: domain}, l
		}
		if len(r.named) > 0 {
			for i := len(domain) - 1; i > 0; i-- {
				if domain[i] == '/' {
					if l := r.named[domain[:i]]; l != nil {
						return Key{Resource: resource, Domain: domain}, l
					}
				}
			}
		}
		if r.template != nil {
			return Key{Resource: resource, Domain: domain}, r.template
		}
		if r.def != nil {
			return Key{Resource: resource}, r.def
		}
	} else if c.namespaces != nil {
		if ns := c.namespace(resource); ns != nil && ns.limit != nil {
			return Key{Resource: resource, Domain: domain}, ns.limit
		}
	}
	if c.global != nil {
		return Key{}, c.global
	}
	return Key{}, nil
}

// resolveKey returns the Limit of an existing bucket key under c, or nil
// when the key has no bucket of its own under c any more (its
// configuration vanished, or its domain now falls to a shared bucket).
func (c *compiled) resolveKey(k Key) *Limit {
	switch {
	case k.Resource == "" && k.Domain == "":
		return c.global
	case k.Domain == "":
		if r := c.resources[k.Resource]; r != nil {
			return r.def
		}
		return nil
	}
	got, l := c.resolve(k.Resource, k.Domain)
	if l == nil || got != k {
		return nil
	}
	return l
}
