package limits

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/internal/names"
)

// Bucket configures one token bucket. Parsers apply the design's defaults
// for absent fields (DefaultBucket); in a Bucket built in Go, the zero
// value of each field means what its comment says.
//
// Source: quotaservice-design.md, "Configuration"; quotaservice-wire.md,
// BucketConfig.
type Bucket struct {
	// Size is the most tokens the bucket holds (≥ 1, ≤ MaxTokens). 0 is
	// an error.
	Size int64
	// FillRate is the rate at which tokens are added, in tokens per second
	// (> 0, ≤ MaxFillRate; fractions allowed). 0 is an error.
	FillRate float64
	// WaitTimeout is the longest a request waits for its tokens (≥ 0,
	// ≤ MaxDuration): a request may ask for less, never more. 0: no
	// waiting, only tokens that exist now.
	WaitTimeout time.Duration
	// MaxIdle is how long the bucket may go unused before Reap removes it
	// (once it is full again). ≤ 0: never.
	MaxIdle time.Duration
	// MaxDebt is how far into the future the bucket may grant tokens (≥ 0,
	// ≤ MaxDuration): after a grant, the bucket owes at most MaxDebt of
	// fill. 0: no debt.
	MaxDebt time.Duration
	// MaxTokensPerRequest is the most tokens one request may ask for (≥ 0,
	// ≤ MaxTokens); a request asking for more gets
	// StatusTooManyTokensRequested. 0: the fill rate rounded up to a
	// whole token (the design's default, "= fill rate"; rounded up so that
	// a bucket filling slower than one token per second still serves one).
	MaxTokensPerRequest int64
	// Budgets are more limits every grant of the bucket must also fit —
	// tokens per minute, per calendar day or month — each with a counter
	// of its own per bucket, decided before the token bucket and given
	// back when the bucket refuses (at most MaxBudgets; see Budget and
	// Engine.Allow). nil: none. Only on token-bucket resources (a
	// burst-tier resource has no Bucket).
	//
	// Source: envoyproxy/ratelimit's requests_per_unit and calendar
	// month (docs/references.md), counted by package limits/rls.
	Budgets []Budget
}

// The design's bucket defaults, which the parsers apply to absent fields.
//
// Source: quotaservice-design.md, "Configuration".
const (
	DefaultSize        = 100
	DefaultFillRate    = 50
	DefaultWaitTimeout = 1000 * time.Millisecond
	DefaultMaxDebt     = 10000 * time.Millisecond
	// DefaultMaxIdle is "never" (the design's -1).
	DefaultMaxIdle = time.Duration(-1)
)

// Bounds on configured values.
const (
	// MaxTokens bounds sizes, max tokens per request and requests' token
	// counts: 2⁵³, the largest integer a float64 (and a Lua number) holds
	// exactly.
	MaxTokens = 1 << 53
	// MaxDuration bounds wait timeouts, max debts and a bucket's span (the
	// time an empty bucket takes to fill: size ÷ fill rate): ten years.
	MaxDuration = 10 * 365 * 24 * time.Hour
	// MaxNameLen bounds resource and domain names, in bytes.
	MaxNameLen = names.MaxLen
)

// DefaultBucket returns a bucket with every field at the design's default:
// size 100, 50 tokens per second, wait timeout 1 s, never reaped, max debt
// 10 s, max tokens per request = the fill rate (50).
func DefaultBucket() Bucket {
	return Bucket{
		Size:                DefaultSize,
		FillRate:            DefaultFillRate,
		WaitTimeout:         DefaultWaitTimeout,
		MaxIdle:             DefaultMaxIdle,
		MaxDebt:             DefaultMaxDebt,
		MaxTokensPerRequest: DefaultFillRate,
	}
}

// Params returns the bucket's step parameters. It is meaningful only for a
// valid bucket (Validate).
func (b Bucket) Params() Params {
	return Params{Size: b.Size, Rate: b.FillRate, Span: Cost(b.Size, b.FillRate)}
}

// maxPerRequest is MaxTokensPerRequest with 0 resolved.
func (b Bucket) maxPerRequest() int64 {
	if b.MaxTokensPerRequest > 0 {
		return b.MaxTokensPerRequest
	}
	return int64(math.Min(math.Ceil(b.FillRate), MaxTokens))
}

// Algorithm selects how a resource's buckets decide. A resource has one;
// the Store passes it through to the step function.
type Algorithm int

// The algorithms.
const (
	// TokenBucket is quotaservice-design.md's token bucket (Step). It is
	// the zero value.
	TokenBucket Algorithm = 0
	// BurstTiers is Charon's rate-limited resource (charon-paper.md,
	// section 2.1): a hard limit per domain, a global limit, and burst
	// tiers per domain (StepTiers).
	BurstTiers Algorithm = 1
)

// String returns the configuration name of a (token_bucket,
// burst_tiers).
func (a Algorithm) String() string {
	switch a {
	case TokenBucket:
		return "token_bucket"
	case BurstTiers:
		return "burst_tiers"
	}
	return "Algorithm(" + strconv.Itoa(int(a)) + ")"
}

// ParseAlgorithm parses a configuration name ("token_bucket" or
// "burst_tiers"; "" is token_bucket).
func ParseAlgorithm(s string) (Algorithm, error) {
	switch s {
	case "", "token_bucket":
		return TokenBucket, nil
	case "burst_tiers":
		return BurstTiers, nil
	}
	return 0, fmt.Errorf("unknown algorithm %q (want token_bucket or burst_tiers)", s)
}

// Resource configures one resource (the quota service's namespace): the
// buckets of its domains (bucket names), or, with Algorithm BurstTiers,
// Charon's hard limit, global limit and burst tiers. A token-bucket
// resource uses Buckets, Template and Default; a burst-tier resource uses
// HardLimit, GlobalLimit, Tiers and TierDomains; MaxDynamicBuckets serves
// both. Fields of the other algorithm are an error.
//
// Source: quotaservice-design.md, "Naming and wildcards", "Hierarchies and
// bucket search order", "Dynamic token buckets", "Default token buckets";
// ratelimiting-in-150-lines.md (prefixes); charon-paper.md, section 2.1.
type Resource struct {
	// Algorithm is how the resource's buckets decide (TokenBucket or
	// BurstTiers).
	Algorithm Algorithm
	// Buckets holds the domain-specific configurations, by domain (the
	// quota service's named buckets). Each is its own bucket, and also the
	// configuration of any domain it is a '/'-prefix of that has none of
	// its own: with "a/b" configured, "a/b/c" is a bucket of its own with
	// a/b's configuration.
	Buckets map[string]Bucket
	// Template, when set, configures a bucket per domain that has no
	// configuration of its own (the quota service's dynamic buckets).
	Template *Bucket
	// MaxDynamicBuckets bounds the buckets the resource creates on demand
	// (from Template, and per key under a prefix): past it a request for a
	// new domain gets StatusTooManyBuckets. 0: unlimited (as in the quota
	// service). ≥ 0.
	MaxDynamicBuckets int64
	// Default, when set, is one bucket shared by every domain that has no
	// configuration and no Template. A resource may not have both Template
	// and Default (the default would never answer).
	Default *Bucket

	// HardLimit is, for BurstTiers, the paper's H: the most hits granted
	// to one domain in any second (0: unbounded; ≤ MaxTokens).
	HardLimit int64
	// GlobalLimit is, for BurstTiers, the paper's G: the most hits
	// granted to all the resource's domains together in any second (0:
	// unbounded; ≤ MaxTokens). It is per resource: domains cannot
	// override it.
	GlobalLimit int64
	// Tiers are, for BurstTiers, the default configuration's burst tiers,
	// tier 1 first (at most MaxTiers). Every domain without a
	// configuration of its own has its own state under them. None (n = 0)
	// makes the resource inaccessible: every request is rejected.
	Tiers []Tier
	// TierDomains holds, for BurstTiers, the domain-specific
	// configurations, which replace the default one for their domain (and,
	// as Buckets do, for the domains below it: with "acme" configured,
	// "acme/eu" has its own state under acme's configuration).
	TierDomains map[string]TierDomain

	// OnStoreError is what the resource's requests get when the Store
	// fails (a Redis outage): FailClosed (the zero value), a server
	// error, or FailOpen, a grant flagged Decision.Degraded. Both
	// algorithms.
	OnStoreError OnStoreError
}

// OnStoreError is what a resource answers when its Store fails: any error
// of Store.Take or Store.TakeHits but ErrStaleConfig (on Redis, an outage:
// a timeout, a refused connection, the store's circuit breaker open).
//
// Source: docs/redis.md, "When Redis fails" (a per-resource choice of fail-open,
// flagged degraded in the answer and counted, or fail-closed);
// quotaservice-design.md, "Failure scenarios" (clients fail open or
// closed as configured). Copy-limited resources have the same choice
// (copies.OnStoreError).
type OnStoreError uint8

// The choices.
const (
	// FailClosed (the zero value): StatusServerError, RetryNever, with
	// the store's error in Decision.Err.
	FailClosed OnStoreError = iota
	// FailOpen: StatusOK with the tokens asked (Tokens, lowered to the
	// bucket's max tokens per request as usual; the hits asked on a
	// burst-tier resource), no wait, Remaining 0, Degraded set and the
	// store's error in Decision.Err; nothing is recorded in the store,
	// and the listener gets EventDegraded (not EventTokensServed).
	FailOpen
)

// String returns the configuration name of o: "closed" or "open".
func (o OnStoreError) String() string {
	switch o {
	case FailClosed:
		return "closed"
	case FailOpen:
		return "open"
	}
	return "OnStoreError(" + strconv.Itoa(int(o)) + ")"
}

// ParseOnStoreError parses a configuration name: "closed" ("" too) or
// "open".
func ParseOnStoreError(s string) (OnStoreError, error) {
	switch s {
	case "", "closed":
		return FailClosed, nil
	case "open":
		return FailOpen, nil
	}
	return 0, fmt.Errorf("%q, want closed or open", s)
}

// TierDomain is a domain-specific configuration of a burst-tier resource.
//
// Source: charon-paper.md, section 2.1 ("A domain-specific configuration
// defines a distinct set of burst tier configurations, which may vary in
// number"); a domain's own hard limit is Sluice's addition.
type TierDomain struct {
	// HardLimit is the domain's hard limit: 0 keeps the resource's,
	// Unbounded (-1) means none, else hits per second (≤ MaxTokens).
	HardLimit int64
	// Tiers replace the resource's tiers for the domain; nil keeps the
	// resource's, an empty non-nil slice means none (the domain is
	// refused everything).
	Tiers []Tier
}

// Namespace configures the resources whose names start with a prefix
// (Config.Namespaces). When several prefixes match a resource, the
// longest decides alone.
//
// Source: charon-paper.md, section 4.3 ("A group of resources
// (distinguished by a namespace prefix) can be configured to ignore
// configured resources and to allow unconfigured resource access. These
// settings are orthogonal").
type Namespace struct {
	// IgnoreConfigured grants every request for a resource configured
	// under the prefix, in full, still recording it: a burst-tier
	// domain's tiers take the hits they can (bursting as usual) and its
	// one-second logs take them all; a token bucket gives the tokens it
	// holds, never going into debt, and does not make the caller wait.
	// Too many tokens or too many buckets are granted too. Decisions say
	// Unlimited. A resource the global default bucket answers for is not
	// a configured one.
	IgnoreConfigured bool
	// AllowUnconfigured gives a resource under the prefix that is not
	// configured the most permissive configuration (UnconfiguredTiers:
	// no hard or global limit, one tier of MaxTokens hits a second, no
	// cooldown) instead of the global default bucket or StatusNoBucket,
	// each domain with its own state, every request granted in full and
	// recorded. Decisions say Unlimited.
	AllowUnconfigured bool
}

// UnconfiguredTiers is the tier of a resource allowed by
// Namespace.AllowUnconfigured: the paper's "most permissive values
// possible (e.g. maximum value limits, no cooldown, short window periods,
// and no global or hard limits)", with a window of one second so that its
// hits are the last second's.
var UnconfiguredTiers = []Tier{{Limit: MaxTokens, Window: time.Second, Active: MaxDuration, Cooldown: 0}}

// Config is a limits configuration: the resources and the global default.
// Build it in Go, or read it from a configuration file with package
// limits/limitsyaml (Sluice's limits section, the quota service's
// format); the engine validates it (Validate) before use and never
// changes it.
type Config struct {
	// GlobalDefault, when set, is one bucket shared by every request that
	// no resource configuration answers, including requests for resources
	// not configured at all. Unset: those get StatusNoBucket.
	GlobalDefault *Bucket
	// Resources holds the resources' configurations, by name.
	Resources map[string]*Resource
	// Namespaces configures resource-name prefixes (for example "open/")
	// to ignore configured limits or allow unconfigured resources.
	Namespaces map[string]Namespace

	// Version, User and Date describe the configuration itself, as the
	// quota service's ServiceConfig does (its admin API refuses a change
	// sent against an older version). The engine carries them and
	// ignores them.
	Version int32
	User    string
	Date    int64
}

// ErrInvalidConfig is wrapped by every configuration error (a
// *ConfigError).
var ErrInvalidConfig = errors.New("invalid limits configuration")

// ConfigError is one problem in a configuration, naming the field by its
// path in the configuration's own terms, for example
//
//	namespaces.Pinky_TheBrain.buckets.users.fill_rate: 0 must be > 0 (tokens per second)
//
// It wraps ErrInvalidConfig.
type ConfigError struct {
	// Path names the field, in the vocabulary of the format it came from.
	Path string
	// Msg says what is wrong.
	Msg string
}

// Error returns "path: msg".
func (e *ConfigError) Error() string { return e.Path + ": " + e.Msg }

// Unwrap returns ErrInvalidConfig.
func (e *ConfigError) Unwrap() error { return ErrInvalidConfig }

// Vocabulary says how a configuration format names the fields that
// ValidateIn reports, so that an error names the field as the file the
// configuration came from writes it. The zero Vocabulary is Validate's:
// Sluice's limits section at the top level.
type Vocabulary struct {
	// Prefix is the configuration's path in its document (for example
	// "limits", the key Sluice's section sits under): every error path
	// starts with it. "": the top level.
	Prefix string
	// Names gives the format's name of each field that it names
	// differently from Sluice's limits section, keyed by the section's
	// name. Honoured for global_default, resources, domains, template,
	// default, max_dynamic_buckets, algorithm, size, fill_rate,
	// wait_timeout, max_idle, max_debt and max_tokens_per_request; every
	// other field keeps the section's name. nil: none renamed.
	Names map[string]string
	// Millis says the format writes durations as whole milliseconds:
	// errors show wait timeouts, max debts and their bound in
	// milliseconds rather than as Go duration strings.
	Millis bool
}

// vocab resolves v's names against goVocab.
func (v Vocabulary) vocab() vocab {
	name := func(s string) string {
		if n, ok := v.Names[s]; ok {
			return n
		}
		return s
	}
	g := goVocab
	return vocab{
		global: name(g.global), resources: name(g.resources), buckets: name(g.buckets), template: name(g.template), def: name(g.def),
		maxDynamic: name(g.maxDynamic), algorithm: name(g.algorithm),
		size: name(g.size), fillRate: name(g.fillRate), waitTimeout: name(g.waitTimeout), maxIdle: name(g.maxIdle), maxDebt: name(g.maxDebt), maxPerRequest: name(g.maxPerRequest),
		millis: v.Millis,
	}
}

// vocab names a configuration's fields in one format's terms, for errors.
type vocab struct {
	global, resources, buckets, template, def, maxDynamic, algorithm string
	size, fillRate, waitTimeout, maxIdle, maxDebt, maxPerRequest     string
	// millis: durations are whole milliseconds in this format.
	millis bool
}

// goVocab names the fields as Sluice's own section does (Validate's
// errors for a Config built in Go).
var goVocab = vocab{
	global: "global_default", resources: "resources", buckets: "domains", template: "template", def: "default",
	maxDynamic: "max_dynamic_buckets", algorithm: "algorithm",
	size: "size", fillRate: "fill_rate", waitTimeout: "wait_timeout", maxIdle: "max_idle", maxDebt: "max_debt", maxPerRequest: "max_tokens_per_request",
}

// Validate checks c and returns every problem found, joined, each a
// *ConfigError naming the field in the terms of Sluice's limits section
// (for example `resources.api.domains.login.fill_rate`). A nil Config is
// valid and configures nothing. Validate is ValidateIn with the zero
// Vocabulary.
func (c *Config) Validate() error { return c.validate(goVocab, "") }

// ValidateIn is Validate with every error naming its field in the terms
// of v, the vocabulary of the format c was read from, under v.Prefix: a
// format's parser validates what it read with it, so that its errors
// name the fields as its file does, for example
// `namespaces.Pinky.buckets.users.fill_rate` for the quota service's
// format. It checks exactly what Validate checks.
func (c *Config) ValidateIn(v Vocabulary) error { return c.validate(v.vocab(), v.Prefix) }

func (c *Config) validate(v vocab, prefix string) error {
	if c == nil {
		return nil
	}
	var errs []error
	bad := func(path, format string, args ...any) {
		errs = append(errs, &ConfigError{Path: path, Msg: fmt.Sprintf(format, args...)})
	}
	if c.GlobalDefault != nil {
		validateBucket(*c.GlobalDefault, join(prefix, v.global), v, bad)
	}
	for _, name := range sortedKeys(c.Resources) {
		r := c.Resources[name]
		rp := key(join(prefix, v.resources), name)
		if err := checkName(name); err != "" {
			bad(rp, "resource name %s", err)
		}
		if r == nil {
			continue
		}
		switch r.Algorithm {
		case TokenBucket:
			if r.HardLimit != 0 || r.GlobalLimit != 0 || r.Tiers != nil || r.TierDomains != nil {
				for _, f := range []struct {
					name string
					set  bool
				}{{"hard_limit", r.HardLimit != 0}, {"global_limit", r.GlobalLimit != 0}, {"tiers", r.Tiers != nil}, {v.buckets, r.TierDomains != nil}} {
					if f.set {
						bad(rp+"."+f.name, "burst-tier settings are only for algorithm %s (this resource's is %s)", BurstTiers, TokenBucket)
					}
				}
			}
		case BurstTiers:
			validateTierResource(r, rp, v, bad)
		default:
			bad(rp+"."+v.algorithm, "unknown algorithm %d (want token_bucket or burst_tiers)", r.Algorithm)
		}
		if r.MaxDynamicBuckets < 0 {
			bad(rp+"."+v.maxDynamic, "%d is negative (0: unlimited)", r.MaxDynamicBuckets)
		}
		if r.OnStoreError > FailOpen {
			bad(rp+".on_store_error", "%v, want closed or open", r.OnStoreError)
		}
		if r.Template != nil && r.Default != nil {
			bad(rp+"."+v.def, "a resource may not have both %s and %s: the default would never answer (with a template, every unconfigured domain gets a bucket of its own, or %s once %s are in use)", v.def, v.template, StatusTooManyBuckets, v.maxDynamic)
		}
		if r.Template != nil {
			validateBucket(*r.Template, rp+"."+v.template, v, bad)
		}
		if r.Default != nil {
			validateBucket(*r.Default, rp+"."+v.def, v, bad)
		}
		for _, d := range sortedKeys(r.Buckets) {
			bp := key(rp+"."+v.buckets, d)
			if err := checkName(d); err != "" {
				bad(bp, "domain name %s", err)
			}
			validateBucket(r.Buckets[d], bp, v, bad)
		}
	}
	for _, ns := range sortedKeys(c.Namespaces) {
		if err := checkName(ns); err != "" {
			bad(key(join(prefix, "namespaces"), ns), "namespace prefix %s", err)
		}
	}
	return errors.Join(errs...)
}

// validateBucket reports every problem of b under path.
func validateBucket(b Bucket, path string, v vocab, bad func(path, format string, args ...any)) {
	dur := func(d time.Duration) string {
		if v.millis {
			return strconv.FormatInt(d.Milliseconds(), 10)
		}
		return d.String()
	}
	maxDur := dur(MaxDuration)
	if v.millis {
		maxDur += " ms (ten years)"
	} else {
		maxDur += " (ten years)"
	}
	sizeOK, rateOK := true, true
	switch {
	case b.Size <= 0:
		bad(path+"."+v.size, "%d must be > 0 (tokens)", b.Size)
		sizeOK = false
	case b.Size > MaxTokens:
		bad(path+"."+v.size, "%d exceeds %d (2^53)", b.Size, int64(MaxTokens))
		sizeOK = false
	}
	switch r := b.FillRate; {
	case math.IsNaN(r) || math.IsInf(r, 0):
		bad(path+"."+v.fillRate, "%v is not a finite number (tokens per second)", r)
		rateOK = false
	case r <= 0:
		bad(path+"."+v.fillRate, "%v must be > 0 (tokens per second)", r)
		rateOK = false
	case r > MaxFillRate:
		bad(path+"."+v.fillRate, "%v exceeds %v tokens per second (one per nanosecond)", r, float64(MaxFillRate))
		rateOK = false
	}
	if sizeOK && rateOK {
		if span := float64(b.Size) / b.FillRate; span > MaxDuration.Seconds() {
			bad(path+"."+v.size, "a bucket of %d tokens filling at %v per second takes %.3g s to fill, more than %s", b.Size, b.FillRate, span, maxDur)
		}
	}
	switch {
	case b.WaitTimeout < 0:
		bad(path+"."+v.waitTimeout, "%s is negative", dur(b.WaitTimeout))
	case b.WaitTimeout > MaxDuration:
		bad(path+"."+v.waitTimeout, "%s exceeds %s", dur(b.WaitTimeout), maxDur)
	}
	switch {
	case b.MaxDebt < 0:
		bad(path+"."+v.maxDebt, "%s is negative", dur(b.MaxDebt))
	case b.MaxDebt > MaxDuration:
		bad(path+"."+v.maxDebt, "%s exceeds %s", dur(b.MaxDebt), maxDur)
	}
	switch {
	case b.MaxTokensPerRequest < 0:
		bad(path+"."+v.maxPerRequest, "%d is negative", b.MaxTokensPerRequest)
	case b.MaxTokensPerRequest > MaxTokens:
		bad(path+"."+v.maxPerRequest, "%d exceeds %d (2^53)", b.MaxTokensPerRequest, int64(MaxTokens))
	}
	validateBudgets(b.Budgets, path+".budgets", bad)
}

// NameChars describes the characters allowed in names, for messages.
const NameChars = names.Chars

// ValidName reports whether s is a valid resource or domain name: 1 to
// MaxNameLen bytes, each one of A-Z a-z 0-9 / _ - . : (quotaservice's
// [a-zA-Z0-9_]+ widened with the separators of ratelimiting-in-150-lines.md
// and Sluice's resource ids).
func ValidName(s string) bool { return checkName(s) == "" }

// checkName returns "" for a valid name, else what is wrong with it.
func checkName(s string) string { return names.Check(s) }

// join returns prefix.field, or field when prefix is empty.
func join(prefix, field string) string { return names.Join(prefix, field) }

// key returns path.name, or path["name"] when name is ambiguous in a path.
func key(path, name string) string { return names.Key(path, name) }

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// Clone returns a deep copy of c.
func (c *Config) Clone() *Config {
	if c == nil {
		return nil
	}
	out := *c
	out.GlobalDefault = cloneBucket(c.GlobalDefault)
	if c.Resources != nil {
		out.Resources = make(map[string]*Resource, len(c.Resources))
		for name, r := range c.Resources {
			if r == nil {
				out.Resources[name] = nil
				continue
			}
			out.Resources[name] = cloneResource(r)
		}
	}
	out.Namespaces = maps.Clone(c.Namespaces)
	return &out
}

func cloneBucket(b *Bucket) *Bucket {
	if b == nil {
		return nil
	}
	c := *b
	c.Budgets = slices.Clone(b.Budgets)
	return &c
}

// String returns a one-line summary of b, for logs and tests.
func (b Bucket) String() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "size=%d fill_rate=%v wait_timeout=%v max_debt=%v max_tokens_per_request=%d", b.Size, b.FillRate, b.WaitTimeout, b.MaxDebt, b.maxPerRequest())
	if b.MaxIdle > 0 {
		fmt.Fprintf(&sb, " max_idle=%v", b.MaxIdle)
	}
	for i, bg := range b.Budgets {
		if i == 0 {
			sb.WriteString(" budgets=[")
		} else {
			sb.WriteString(", ")
		}
		sb.WriteString(bg.String())
	}
	if len(b.Budgets) > 0 {
		sb.WriteByte(']')
	}
	return sb.String()
}
