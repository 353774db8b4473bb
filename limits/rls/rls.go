// Package rls holds the rules of Envoy's rate limit service as
// envoyproxy/ratelimit's configuration writes them — domains, each a tree
// of descriptor rules with their rate limits — and how the descriptors of
// a request find their rules: Config.Match for one descriptor,
// Config.Resolve for a request's (the replaces rule applied across them).
// It is deterministic and does no I/O; limits/limitsyaml reads the files
// (ParseEnvoyRateLimit, LoadEnvoyRateLimit) into a Config.
//
// The matching rules, as envoyproxy/ratelimit applies them (its README,
// "Configuration"; src/config/config_impl.go):
//
//   - A request descriptor's entries are walked level by level down the
//     domain's tree. At each level a rule with the entry's key and value
//     is preferred, then a rule whose value is a wildcard pattern matching
//     the value ('*' stands for any run of characters, anywhere in the
//     value), in the order the file gives them, then a key-only rule (no
//     value), which matches any value.
//   - A rule's limit applies only when the descriptor ends at the rule's
//     depth: a descriptor with more entries than the tree has levels
//     matches nothing (the depth rule), and so does one that stops above a
//     rule's level.
//   - A rule without a rate_limit matches and limits nothing (a
//     whitelisted descriptor), as does a descriptor that matches no rule;
//     both answer OK with no current limit.
//   - The counter (Match.Bucket) is the domain and the request's entries:
//     each distinct value of a key-only rule, and of a wildcard rule, has a
//     counter of its own — except a wildcard rule with share_threshold,
//     whose matching values share one counter.
//   - replaces: when a request's descriptors match both a named rule and a
//     rule that replaces that name, only the replacing one applies
//     (Resolve).
//
// One departure, on purpose: envoyproxy/ratelimit looks rules up by the
// joined string key + "_" + value, so distinct entries can collide (the
// entry client = "ip_192.0.2.66" finds the rule client_ip = 192.0.2.66);
// here a key and a value are always told apart.
package rls

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"iter"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Unit is the unit of a rate limit's requests_per_unit.
type Unit uint8

// The units, as envoy.service.ratelimit.v3's RateLimitResponse.RateLimit.Unit
// numbers them (UNKNOWN 0, SECOND 1, MINUTE 2, HOUR 3, DAY 4, MONTH 5,
// YEAR 6, WEEK 7).
const (
	UnitUnknown Unit = iota
	Second
	Minute
	Hour
	Day
	Month
	Year
	Week
)

var unitNames = [...]string{"unknown", "second", "minute", "hour", "day", "month", "year", "week"}

// String returns the unit's name in the configuration ("second", …).
func (u Unit) String() string {
	if int(u) < len(unitNames) {
		return unitNames[u]
	}
	return fmt.Sprintf("Unit(%d)", u)
}

// ParseUnit reads a unit name, in any case ("second", "MINUTE", …); an
// unknown name (or "unknown") is an error.
func ParseUnit(s string) (Unit, error) {
	for u, name := range unitNames {
		if u != int(UnitUnknown) && strings.EqualFold(s, name) {
			return Unit(u), nil
		}
	}
	return UnitUnknown, fmt.Errorf("%q is not a unit (want second, minute, hour, day, week, month or year)", s)
}

// Duration returns the unit's length: a week is 7 days, a month 30 days
// and a year 365 (envoyproxy/ratelimit's lengths; a Calendar's windows
// follow the calendar instead), UnitUnknown 0.
func (u Unit) Duration() time.Duration {
	switch u {
	case Second:
		return time.Second
	case Minute:
		return time.Minute
	case Hour:
		return time.Hour
	case Day:
		return 24 * time.Hour
	case Week:
		return 7 * 24 * time.Hour
	case Month:
		return 30 * 24 * time.Hour
	case Year:
		return 365 * 24 * time.Hour
	}
	return 0
}

// Limit is a rule's rate_limit.
type Limit struct {
	// RequestsPerUnit is the number of requests allowed per Unit; 0 is a
	// limit every request is over (a block list).
	RequestsPerUnit uint32
	// Unit is requests_per_unit's unit (UnitUnknown when Unlimited).
	Unit Unit
	// Unlimited answers OK without counting.
	Unlimited bool
	// Name names the limit for replaces (and current_limit.name); may be
	// empty.
	Name string
	// Replaces names the limits this one replaces in a request that
	// matches both.
	Replaces []string
	// BurstTiers, when set, names a resource of Sluice's limits section
	// (algorithm burst_tiers) whose hard limit, global limit and tiers
	// decide the rule instead of RequestsPerUnit and Unit (0 and
	// UnitUnknown): each counter of the rule (Match.Bucket) is one of the
	// resource's domains (TierDomain). A Sluice extension (the field
	// rate_limit.burst_tiers), in Sluice's own configuration only.
	//
	// Source: charon-paper.md, section 2.1, "Rate-Limited Resources".
	BurstTiers string
	// UnitMultiplier makes the limit's unit UnitMultiplier units long: a
	// token bucket refilled at RequestsPerUnit per UnitMultiplier × Unit,
	// a fixed window UnitMultiplier × Unit long (0 and 1: one unit).
	// Envoy's field name (RateLimitResponse.RateLimit's and the request
	// override's unit_multiplier); in rule files a Sluice extension.
	UnitMultiplier uint32
	// Burst is a token bucket's depth, in requests, apart from its rate
	// (0: RequestsPerUnit, the format's meaning): "60 a minute, at most
	// 5 at once" is RequestsPerUnit 60, Unit Minute, Burst 5. Never with
	// a fixed window or a calendar. A Sluice extension (the field burst;
	// gubernator's leaky bucket has the same).
	Burst uint32
	// Calendar, when set, counts the limit in fixed windows aligned to
	// the calendar of this zone (Unit Day, Week, Month or Year; an ISO
	// 8601 week starts on Monday): months of 28 to 31 days, days of 23
	// or 25 hours across daylight saving. nil: the unit's fixed length
	// (Duration). A Sluice extension (the field calendar).
	Calendar *time.Location
}

// String describes the limit as the status pages show it: "5/second",
// "3/second*10" (a unit_multiplier), "60/minute burst 5",
// "10000/month calendar Europe/Paris", "unlimited", "burst_tiers api".
func (l *Limit) String() string {
	switch {
	case l.BurstTiers != "":
		return "burst_tiers " + l.BurstTiers
	case l.Unlimited:
		return "unlimited"
	}
	s := strconv.FormatUint(uint64(l.RequestsPerUnit), 10) + "/" + l.Unit.String()
	if l.UnitMultiplier > 1 {
		s += "*" + strconv.FormatUint(uint64(l.UnitMultiplier), 10)
	}
	if l.Burst != 0 {
		s += " burst " + strconv.FormatUint(uint64(l.Burst), 10)
	}
	if l.Calendar != nil {
		s += " calendar " + l.Calendar.String()
	}
	return s
}

// Period returns the limit's period: Unit's length times UnitMultiplier
// (for a calendar limit, the unit's nominal length: the windows are the
// calendar's).
func (l *Limit) Period() time.Duration {
	return l.Unit.Duration() * time.Duration(max(1, l.UnitMultiplier))
}

// Policy returns the limit's policy under algorithm alg (TokenBucket or
// FixedWindow; a calendar limit is always a calendar's fixed window).
func (l *Limit) Policy(alg Algorithm) Policy {
	p := Policy{Algorithm: alg, Limit: l.RequestsPerUnit, Period: l.Period().Microseconds()}
	switch {
	case l.Calendar != nil:
		p.Algorithm, p.Calendar = FixedWindow, Calendar{Unit: l.Unit, Location: l.Calendar}
	case alg == TokenBucket && l.Burst != 0:
		p.Burst = l.Burst
	}
	return p
}

// Rule is one descriptor rule of a domain's tree.
type Rule struct {
	// Key is the entry's key (never empty).
	Key string
	// Value is the entry's value: "" matches any value (a key-only rule);
	// with '*' it is a wildcard pattern.
	Value string
	// Limit is the rule's rate limit (rate_limit, or the first of
	// rate_limits); nil: the rule limits nothing (it is whitelisted, or
	// only leads to nested rules).
	Limit *Limit
	// MoreLimits are rate_limits' limits after the first (Limit): every
	// one must hold, each with a counter of its own (LimitBucket), decided
	// and charged together. A Sluice extension of the format (the field
	// rate_limits, in place of rate_limit); none is Unlimited or has
	// BurstTiers.
	MoreLimits []*Limit
	// ShadowMode decides and counts as usual, but answers OK.
	ShadowMode bool
	// DetailedMetric and ValueToMetric ask for the request's values in the
	// rule's metrics (bounded by the server).
	DetailedMetric, ValueToMetric bool
	// ShareThreshold makes the values a wildcard matches share one
	// counter.
	ShareThreshold bool
	// Algorithm counts the rule's limit (AlgorithmDefault: the domain's).
	// A Sluice extension of the format (the field algorithm).
	Algorithm Algorithm
	// Descriptors are the nested rules, one level further.
	Descriptors []*Rule
}

// AllLimits yields the rule's limits: Limit, then MoreLimits (none when
// Limit is nil).
func (r *Rule) AllLimits() iter.Seq[*Limit] {
	return func(yield func(*Limit) bool) {
		if r.Limit == nil || !yield(r.Limit) {
			return
		}
		for _, l := range r.MoreLimits {
			if !yield(l) {
				return
			}
		}
	}
}

// LimitBucket returns the counter of a rule's i-th limit (0: Limit, i:
// MoreLimits[i-1]) on a descriptor whose counter is bucket (Match.Bucket):
// bucket itself for the first, so that a rule turned from rate_limit into
// rate_limits keeps its counter; else bucket tagged "rate_limits[i]"
// (ParseBucket reads it back).
func LimitBucket(bucket string, i int) string {
	if i == 0 {
		return bucket
	}
	return string(appendString([]byte(bucket), "rate_limits["+strconv.Itoa(i)+"]"))
}

// Wildcard reports whether the rule's value is a pattern.
func (r *Rule) Wildcard() bool { return strings.Contains(r.Value, "*") }

// Domain is one domain's rules, from one configuration document.
type Domain struct {
	// Name is the domain (never empty).
	Name string
	// Descriptors are the tree's first level.
	Descriptors []*Rule
	// Source names where the domain was read (a file), for errors.
	Source string
	// Algorithm counts the domain's limits (AlgorithmDefault: the
	// server's). A Sluice extension of the format (the field algorithm).
	Algorithm Algorithm
}

// AlgorithmOf returns the algorithm of rule r in d: r's own, else d's,
// else def.
func (d *Domain) AlgorithmOf(r *Rule, def Algorithm) Algorithm {
	switch {
	case r != nil && r.Algorithm != AlgorithmDefault:
		return r.Algorithm
	case d != nil && d.Algorithm != AlgorithmDefault:
		return d.Algorithm
	}
	return def
}

// Config is a set of domains. Its zero value has none. A Config is not
// changed once built: safe for concurrent reads.
type Config struct {
	domains map[string]*Domain
	hash    string
}

// NewConfig returns the configuration of domains. Errors: a domain with
// an empty name, or a domain defined twice (naming both sources).
func NewConfig(domains ...*Domain) (*Config, error) {
	c := &Config{domains: make(map[string]*Domain, len(domains))}
	for _, d := range domains {
		if d.Name == "" {
			return nil, fmt.Errorf("%s: domain: empty", d.Source)
		}
		if prev, ok := c.domains[d.Name]; ok {
			return nil, fmt.Errorf("domain %q defined twice: in %s and in %s", d.Name, prev.Source, d.Source)
		}
		c.domains[d.Name] = d
	}
	h := sha256.New()
	for _, name := range c.Names() {
		d := c.domains[name]
		fmt.Fprintf(h, "domain %q %d\n", d.Name, d.Algorithm)
		hashRules(h, d.Descriptors, 1)
	}
	c.hash = hex.EncodeToString(h.Sum(nil))
	return c, nil
}

// hashRules writes rules, every field, into h at depth.
func hashRules(h io.Writer, rules []*Rule, depth int) {
	for _, r := range rules {
		fmt.Fprintf(h, "%d %q %q %t %t %t %t %d", depth, r.Key, r.Value, r.ShadowMode, r.DetailedMetric, r.ValueToMetric, r.ShareThreshold, r.Algorithm)
		for l := range r.AllLimits() {
			fmt.Fprintf(h, " limit %d %d %t %q %q %q %d %d", l.RequestsPerUnit, l.Unit, l.Unlimited, l.Name, l.Replaces, l.BurstTiers, l.UnitMultiplier, l.Burst)
			if l.Calendar != nil {
				fmt.Fprintf(h, " calendar %q", l.Calendar)
			}
		}
		fmt.Fprintln(h)
		hashRules(h, r.Descriptors, depth+1)
	}
}

// Hash returns a digest of the rules (SHA-256, hex): equal for equal
// rules, whatever files or order they came from (sources aside).
func (c *Config) Hash() string {
	if c == nil {
		return ""
	}
	return c.hash
}

// Domain returns the rules of domain name, or nil.
func (c *Config) Domain(name string) *Domain {
	if c == nil {
		return nil
	}
	return c.domains[name]
}

// Names returns the domains' names, in order.
func (c *Config) Names() []string {
	if c == nil {
		return nil
	}
	return slices.Sorted(maps.Keys(c.domains))
}

// Rules returns the number of rules in the domain's tree, at every level.
func (d *Domain) Rules() int {
	n := 0
	d.Each(func([]*Rule) { n++ })
	return n
}

// RulePath names a rule as envoyproxy/ratelimit's statistics do: each
// level's key, and _value when the rule has one, joined by dots
// (key_value.key), path's first rule first.
func RulePath(path []*Rule) string {
	var b strings.Builder
	for i, r := range path {
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(r.Key)
		if r.Value != "" {
			b.WriteByte('_')
			b.WriteString(r.Value)
		}
	}
	return b.String()
}

// Each calls fn with the path (the first level's rule first) of every
// rule of the domain's tree, depth first, in order. fn must not keep
// path, which Each reuses.
func (d *Domain) Each(fn func(path []*Rule)) {
	var walk func(path []*Rule, rules []*Rule)
	walk = func(path []*Rule, rules []*Rule) {
		for _, r := range rules {
			path := append(path, r)
			fn(path)
			walk(path, r.Descriptors)
		}
	}
	walk(make([]*Rule, 0, 8), d.Descriptors)
}

// Len returns the number of domains.
func (c *Config) Len() int {
	if c == nil {
		return 0
	}
	return len(c.domains)
}

// Entry is one entry of a request descriptor.
type Entry struct {
	Key, Value string
}

// Match is what one request descriptor matched.
type Match struct {
	// Rule is the matched rule, with a Limit; nil when the descriptor
	// matched no rule with a limit (no such domain, no such rule, the
	// depth rule, or a whitelisted rule): the answer is OK with no
	// current limit.
	Rule *Rule
	// Bucket identifies the counter: the domain and the request's entries,
	// a share_threshold wildcard's pattern standing for its values. Keys
	// and values are length-prefixed, so that no two distinct descriptors
	// share a counter by accident.
	Bucket string
}

// Match returns what the descriptor entries of a request in domain match
// (see the package doc). It costs O(entries × rules on one level) and one
// allocation (the bucket) when it matches a limit.
func (c *Config) Match(domain string, entries []Entry) Match {
	d := c.Domain(domain)
	if d == nil || len(entries) == 0 {
		return Match{}
	}
	level := d.Descriptors
	var r *Rule
	var buf [128]byte // the bucket, built on the way down
	b := appendString(buf[:0], domain)
	for _, e := range entries {
		if r = find(level, e); r == nil {
			return Match{}
		}
		v := e.Value
		if r.ShareThreshold && r.Wildcard() {
			v = r.Value // the values a shared wildcard matches: one counter
		}
		b = appendString(appendString(b, e.Key), v)
		level = r.Descriptors
	}
	if r.Limit == nil {
		return Match{}
	}
	return Match{Rule: r, Bucket: string(b)}
}

// find returns the rule of level that e matches: key and value, then a
// wildcard, then key only; nil if none.
func find(level []*Rule, e Entry) *Rule {
	var wild, keyOnly *Rule
	for _, r := range level {
		if r.Key != e.Key {
			continue
		}
		switch {
		case r.Value == "":
			if keyOnly == nil {
				keyOnly = r
			}
		case r.Value == e.Value:
			return r
		case wild == nil && r.Wildcard() && glob(r.Value, e.Value):
			wild = r
		}
	}
	if wild != nil {
		return wild
	}
	return keyOnly
}

// glob reports whether s matches pattern, in which '*' stands for any run
// of characters (none included) and every other byte for itself.
func glob(pattern, s string) bool {
	parts := strings.Split(pattern, "*")
	if len(parts) == 1 {
		return s == pattern
	}
	if !strings.HasPrefix(s, parts[0]) {
		return false
	}
	s = s[len(parts[0]):]
	last := parts[len(parts)-1]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(s, p)
		if i < 0 {
			return false
		}
		s = s[i+len(p):]
	}
	return len(s) >= len(last) && strings.HasSuffix(s, last)
}

// Bucket returns the counter of a descriptor's entries in domain as
// Match.Bucket encodes it, with no wildcard shared: a descriptor's own
// (an override's, say).
func Bucket(domain string, entries []Entry) string {
	b := make([]byte, 0, 64)
	b = appendString(b, domain)
	for _, e := range entries {
		b = appendString(b, e.Key)
		b = appendString(b, e.Value)
	}
	return string(b)
}

// TaggedBucket returns the counter of a descriptor's entries in domain
// apart from Bucket's: the same, followed by tag (an override's limit,
// say), so that ParseBucket reads it back.
func TaggedBucket(domain string, entries []Entry, tag string) string {
	return string(appendString([]byte(Bucket(domain, entries)), tag))
}

// ParseBucket reads a counter (Match.Bucket, Bucket, TaggedBucket) back:
// its domain, its entries (for a shared wildcard, its pattern as the
// value) and its tag ("" when none). ok is false for a string that is no
// counter.
func ParseBucket(bucket string) (domain string, entries []Entry, tag string, ok bool) {
	var parts []string
	for b := bucket; len(b) > 0; {
		n, w := binary.Uvarint([]byte(b[:min(len(b), binary.MaxVarintLen64)]))
		if w <= 0 || uint64(len(b)-w) < n {
			return "", nil, "", false
		}
		parts = append(parts, b[w:w+int(n)])
		b = b[w+int(n):]
	}
	if len(parts) == 0 {
		return "", nil, "", false
	}
	domain, parts = parts[0], parts[1:]
	if len(parts)%2 == 1 {
		tag, parts = parts[len(parts)-1], parts[:len(parts)-1]
	}
	for i := 0; i < len(parts); i += 2 {
		entries = append(entries, Entry{Key: parts[i], Value: parts[i+1]})
	}
	return domain, entries, tag, true
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// Resolve matches each of a request's descriptors in domain (Match) and
// then applies replaces: a match whose limit's name another match's limit
// replaces matches nothing (its answer is OK with no current limit).
// matches[i] is descriptors[i]'s.
func (c *Config) Resolve(domain string, descriptors [][]Entry) []Match {
	return c.ResolveInto(make([]Match, len(descriptors)), domain, descriptors)
}

// ResolveInto is Resolve writing into out (len(out) ≥ len(descriptors)),
// which it returns, cut to len(descriptors).
func (c *Config) ResolveInto(out []Match, domain string, descriptors [][]Entry) []Match {
	out = out[:len(descriptors)]
	var replaced map[string]bool
	for i, d := range descriptors {
		out[i] = c.Match(domain, d)
		if m := out[i]; m.Rule != nil {
			for l := range m.Rule.AllLimits() {
				for _, name := range l.Replaces {
					if replaced == nil {
						replaced = map[string]bool{}
					}
					replaced[name] = true
				}
			}
		}
	}
	if replaced == nil {
		return out
	}
	for i, m := range out {
		if m.Rule == nil {
			continue
		}
		for l := range m.Rule.AllLimits() {
			if l.Name != "" && replaced[l.Name] {
				out[i] = Match{}
				break
			}
		}
	}
	return out
}
