package limitsyaml

import (
	"errors"
	"math"
	"strconv"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/limits/rls"
)

// rawSection is Sluice's limits section as written: nil fields are
// absent (they take the defaults). It is read from a YAML node
// (walker.section) and converted to the engine's configuration
// (rawSection.validate); the two steps report their problems apart,
// reading first.
type rawSection struct {
	globalDefault *rawBucket
	namespaces    map[string]*rawNamespace
	resources     map[string]*rawResource
}

// rawNamespace is one namespace prefix; nil fields are false.
type rawNamespace struct {
	ignoreConfigured, allowUnconfigured *bool
}

// rawResource is one resource. domains holds a token-bucket resource's
// domains, tierDomains a burst-tier resource's (both written `domains:`).
type rawResource struct {
	algorithm         string
	domains           map[string]*rawBucket
	template          *rawBucket
	maxDynamicBuckets *int64
	def               *rawBucket
	hardLimit         *int64 // 0: "none"
	globalLimit       *int64 // 0: "none"
	tiers             *[]rawTier
	tierDomains       map[string]*rawTierDomain
	onStoreError      string
}

// rawBucket is one bucket; nil fields take the defaults.
type rawBucket struct {
	size                *int64
	fillRate            *float64
	waitTimeout         *time.Duration
	maxIdle             *time.Duration // neverIdle: "never"
	maxDebt             *time.Duration
	maxTokensPerRequest *int64
	budgets             []limits.Budget // nil: none (also for [])
}

// neverIdle is the max_idle "never" in a rawBucket.
const neverIdle = time.Duration(math.MinInt64)

// The fields of each level of the section.
var (
	sectionFields    = []string{"global_default", "namespaces", "resources"}
	resourceFields   = []string{"algorithm", "domains", "template", "max_dynamic_buckets", "default", "hard_limit", "global_limit", "tiers", "on_store_error"}
	bucketFields     = []string{"size", "fill_rate", "wait_timeout", "max_idle", "max_debt", "max_tokens_per_request", "budgets"}
	budgetFields     = []string{"limit", "unit", "unit_multiplier", "calendar", "algorithm", "burst"}
	namespaceFields  = []string{"ignore_configured", "allow_unconfigured"}
	tierDomainFields = []string{"hard_limit", "tiers"}
	tierFields       = []string{"limit", "window", "active", "cooldown", "skippable"}
)

// sectionPath is the key the section is found under, for error paths.
const sectionPath = "limits"

// section reads the section at n strictly (unknown fields are errors),
// reporting every problem; null is an empty section.
func (w *walker) section(n *yaml.Node) *rawSection {
	s := &rawSection{}
	pairs, _ := w.mapping(n, sectionPath, sectionFields)
	for _, p := range pairs {
		fp := join(sectionPath, p.key)
		switch p.key {
		case "global_default":
			s.globalDefault = w.sectionBucket(p.value, fp)
		case "namespaces":
			s.namespaces = mapOf(w, p.value, fp, w.sectionNamespace)
		case "resources":
			s.resources = mapOf(w, p.value, fp, w.sectionResource)
		}
	}
	return s
}

func (w *walker) sectionNamespace(n *yaml.Node, path string) *rawNamespace {
	ns := &rawNamespace{}
	pairs, _ := w.mapping(n, path, namespaceFields)
	for _, p := range pairs {
		fp := join(path, p.key)
		switch p.key {
		case "ignore_configured":
			ns.ignoreConfigured = w.boolean(p.value, fp)
		case "allow_unconfigured":
			ns.allowUnconfigured = w.boolean(p.value, fp)
		}
	}
	return ns
}

func (w *walker) sectionResource(n *yaml.Node, path string) *rawResource {
	r := &rawResource{}
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
				r.algorithm = *v
			}
		case "hard_limit":
			r.hardLimit = w.hitsLimit(p.value, fp)
		case "global_limit":
			r.globalLimit = w.hitsLimit(p.value, fp)
		case "tiers":
			r.tiers = w.sectionTiers(p.value, fp)
		case "domains":
			if tiered {
				r.tierDomains = mapOf(w, p.value, fp, w.sectionTierDomain)
				continue
			}
			r.domains = mapOf(w, p.value, fp, func(n *yaml.Node, path string) *rawBucket {
				if b := w.sectionBucket(n, path); b != nil {
					return b
				}
				return &rawBucket{}
			})
		case "template":
			r.template = w.sectionBucket(p.value, fp)
		case "max_dynamic_buckets":
			r.maxDynamicBuckets = w.int64(p.value, fp, "a count; 0: unlimited")
		case "default":
			r.def = w.sectionBucket(p.value, fp)
		case "on_store_error":
			if v := w.str(p.value, fp); v != nil {
				r.onStoreError = *v
			}
		}
	}
	return r
}

// sectionBucket reads a bucket; nil when null.
func (w *walker) sectionBucket(n *yaml.Node, path string) *rawBucket {
	pairs, ok := w.mapping(n, path, bucketFields)
	if !ok {
		return nil
	}
	b := &rawBucket{}
	dur := func(v *yaml.Node, fp string, never bool) *time.Duration {
		d := w.duration(v, fp, never)
		if d == nil {
			return nil
		}
		out := *d
		if never && *d == -1 && w.deref(v).Value == "never" {
			out = neverIdle
		}
		return &out
	}
	for _, p := range pairs {
		fp := join(path, p.key)
		switch p.key {
		case "size":
			b.size = w.int64(p.value, fp, "tokens")
		case "fill_rate":
			b.fillRate = w.float(p.value, fp, "tokens per second")
		case "wait_timeout":
			b.waitTimeout = dur(p.value, fp, false)
		case "max_idle":
			b.maxIdle = dur(p.value, fp, true)
		case "max_debt":
			b.maxDebt = dur(p.value, fp, false)
		case "max_tokens_per_request":
			b.maxTokensPerRequest = w.int64(p.value, fp, "tokens")
		case "budgets":
			b.budgets = w.sectionBudgets(p.value, fp)
		}
	}
	return b
}

// sectionBudgets reads a bucket's budgets, a sequence of mappings (each
// with limit and unit required; see the package documentation); nil when
// null or empty. Units, algorithms and zones are checked here, where
// errors can name their line; the rest is limits.Config.ValidateIn's.
func (w *walker) sectionBudgets(n *yaml.Node, path string) []limits.Budget {
	items, ok := w.sequence(n, path)
	if !ok || len(items) == 0 {
		return nil
	}
	out := make([]limits.Budget, 0, len(items))
	for i, item := range items {
		ip := path + "[" + strconv.Itoa(i) + "]"
		pairs, ok := w.mapping(item, ip, budgetFields)
		if !ok {
			if isNull(w.deref(item)) {
				w.bad(ip, item, "want a budget ({limit: N, unit: U, ...}), got null")
			}
			out = append(out, placeholderBudget) // reported
			continue
		}
		var b limits.Budget
		var hasLimit, hasUnit bool
		for _, p := range pairs {
			fp := join(ip, p.key)
			switch p.key {
			case "limit":
				hasLimit, b.Limit = true, placeholderBudget.Limit
				if v := w.int64(p.value, fp, "tokens per window"); v != nil {
					b.Limit = *v
				}
			case "unit":
				hasUnit, b.Unit = true, placeholderBudget.Unit
				if v := w.str(p.value, fp); v != nil {
					if u, err := rls.ParseUnit(*v); err != nil {
						w.bad(fp, w.deref(p.value), "%v", err)
					} else {
						b.Unit = u
					}
				}
			case "unit_multiplier":
				if v := w.int64(p.value, fp, "units per window"); v != nil {
					b.UnitMultiplier = *v
				}
			case "calendar":
				if v := w.str(p.value, fp); v != nil {
					b.Calendar = w.zone(*v, fp, w.deref(p.value))
				}
			case "algorithm":
				if v := w.str(p.value, fp); v != nil {
					a, err := rls.ParseAlgorithm(*v)
					if err != nil {
						w.bad(fp, w.deref(p.value), "%q is not a budget's algorithm (want fixed_window or token_bucket)", *v)
					}
					b.Algorithm = a
				}
			case "burst":
				if v := w.int64(p.value, fp, "tokens"); v != nil {
					b.Burst = *v
				}
			}
		}
		if !hasLimit {
			w.bad(join(ip, "limit"), w.deref(item), "required (tokens per window, ≥ 1)")
			b.Limit = placeholderBudget.Limit
		}
		if !hasUnit {
			w.bad(join(ip, "unit"), w.deref(item), "required (second, minute, hour, day, week, month or year)")
			b.Unit = placeholderBudget.Unit
		}
		out = append(out, b)
	}
	return out
}

// placeholderBudget stands for a budget, or a field of one, that reading
// reported: valid, so that validation does not report it again.
var placeholderBudget = limits.Budget{Limit: 1, Unit: rls.Day}

// zone loads the time zone name (UTC, or an IANA name), reporting under
// path a name that is none, or Local (each server's own).
func (w *walker) zone(name, path string, n *yaml.Node) *time.Location {
	if name == "" || name == "Local" {
		w.bad(path, n, "%q: name the zone (UTC, or an IANA name such as Europe/Paris); a server's own zone is not allowed", name)
		return nil
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		w.bad(path, n, "%q is not a time zone (want UTC or an IANA name such as Europe/Paris): %v", name, err)
		return nil
	}
	return loc
}

// validate applies the defaults and checks s, returning the configuration
// or every problem found, joined, each a *limits.ConfigError naming its
// path under "limits". A nil rawSection is an empty configuration.
func (s *rawSection) validate() (*limits.Config, error) {
	cfg := &limits.Config{}
	if s == nil {
		return cfg, nil
	}
	w := newWalker(nil)
	if s.globalDefault != nil {
		b := s.globalDefault.bucket(w, join(sectionPath, "global_default"))
		cfg.GlobalDefault = &b
	}
	if len(s.resources) > 0 {
		cfg.Resources = make(map[string]*limits.Resource, len(s.resources))
	}
	for _, name := range sortedKeys(s.resources) {
		sr := s.resources[name]
		rp := key(join(sectionPath, "resources"), name)
		r := &limits.Resource{}
		cfg.Resources[name] = r
		if sr == nil {
			continue
		}
		alg, err := limits.ParseAlgorithm(sr.algorithm)
		if err != nil {
			w.bad(rp+".algorithm", nil, "%v", err)
		}
		r.Algorithm = alg
		if r.OnStoreError, err = limits.ParseOnStoreError(sr.onStoreError); err != nil {
			w.bad(rp+".on_store_error", nil, "%v", err)
		}
		if sr.maxDynamicBuckets != nil {
			r.MaxDynamicBuckets = *sr.maxDynamicBuckets
		}
		if sr.template != nil {
			b := sr.template.bucket(w, rp+".template")
			r.Template = &b
		}
		if sr.def != nil {
			b := sr.def.bucket(w, rp+".default")
			r.Default = &b
		}
		sr.tierResource(w, r, rp)
		if len(sr.domains) > 0 {
			r.Buckets = make(map[string]limits.Bucket, len(sr.domains))
		}
		for _, d := range sortedKeys(sr.domains) {
			sb := sr.domains[d]
			if sb == nil {
				sb = &rawBucket{}
			}
			r.Buckets[d] = sb.bucket(w, key(rp+".domains", d))
		}
	}
	if len(s.namespaces) > 0 {
		cfg.Namespaces = make(map[string]limits.Namespace, len(s.namespaces))
	}
	for prefix, sn := range s.namespaces {
		var ns limits.Namespace
		if sn != nil {
			ns.IgnoreConfigured = sn.ignoreConfigured != nil && *sn.ignoreConfigured
			ns.AllowUnconfigured = sn.allowUnconfigured != nil && *sn.allowUnconfigured
		}
		cfg.Namespaces[prefix] = ns
	}
	if err := errors.Join(w.err(), cfg.ValidateIn(limits.Vocabulary{Prefix: sectionPath})); err != nil {
		return nil, err
	}
	return cfg, nil
}

// bucket applies the defaults to b.
func (b *rawBucket) bucket(w *walker, path string) limits.Bucket {
	out := limits.DefaultBucket()
	if b.size != nil {
		out.Size = *b.size
	}
	if b.fillRate != nil {
		out.FillRate = *b.fillRate
	}
	if b.waitTimeout != nil {
		out.WaitTimeout = *b.waitTimeout
	}
	if b.maxDebt != nil {
		out.MaxDebt = *b.maxDebt
	}
	if b.maxIdle != nil {
		switch d := *b.maxIdle; {
		case d == neverIdle:
			out.MaxIdle = limits.DefaultMaxIdle
		case d <= 0:
			w.bad(path+".max_idle", nil, "%v must be > 0, or \"never\"", d)
		default:
			out.MaxIdle = d
		}
	}
	out.MaxTokensPerRequest = roundUpTokens(out.FillRate)
	if b.maxTokensPerRequest != nil {
		if *b.maxTokensPerRequest == 0 {
			w.bad(path+".max_tokens_per_request", nil, "0 must be ≥ 1 (absent: the fill rate)")
		}
		out.MaxTokensPerRequest = *b.maxTokensPerRequest
	}
	out.Budgets = b.budgets
	return out
}

// DecodeSection reads and validates Sluice's limits section from node,
// the value of the `limits:` key (see the package documentation for its
// fields; a null node is an empty section). It returns every problem
// found, joined, each a *limits.ConfigError naming its path under
// "limits" (and its line when it is one of reading), the problems of
// reading first.
func DecodeSection(node *yaml.Node) (*limits.Config, error) {
	w := newWalker(node)
	s := w.section(node)
	cfg, verr := s.validate()
	if err := errors.Join(w.err(), verr); err != nil {
		return nil, err
	}
	return cfg, nil
}

// ParseSection is DecodeSection for a YAML document holding the
// section's fields at its top level (global_default, namespaces,
// resources), as `sluice config` and the tests write it. An empty
// document is an empty configuration; more than one document is an
// error.
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
