package limitsyaml

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/limits/rls"
)

var (
	envoyDomainFields     = []string{"domain", "descriptors", "algorithm"}
	envoyDescriptorFields = []string{"key", "value", "rate_limit", "rate_limits", "descriptors", "shadow_mode", "detailed_metric", "value_to_metric", "share_threshold", "algorithm"}
	envoyLimitFields      = []string{"unit", "requests_per_unit", "unlimited", "name", "replaces", "burst_tiers", "unit_multiplier", "burst", "calendar"}
	envoyReplacesFields   = []string{"name"}
)

// ParseEnvoyRateLimit reads a file of envoyproxy/ratelimit's
// configuration as it is: each YAML document is one domain (the reference
// reads one document a file; more are accepted here), as in its README's
// "Configuration":
//
//	domain: edge
//	descriptors:
//	  - key: remote_address              # key only: a counter per value
//	    rate_limit: {unit: second, requests_per_unit: 10}
//	  - key: path
//	    value: "/api/*/items"            # '*' anywhere in the value
//	    share_threshold: true            # its values share one counter
//	    rate_limit: {unit: minute, requests_per_unit: 100, name: items}
//	  - key: tenant                      # no limit here: leads on
//	    descriptors:
//	      - key: plan
//	        value: free
//	        rate_limit: {unit: day, requests_per_unit: 1000, replaces: [{name: items}]}
//	        shadow_mode: true
//
// Every field of the reference is read: domain; descriptors with key,
// value, rate_limit (unit second, minute, hour, day, week, month or year
// in any case, requests_per_unit, unlimited, name, replaces), shadow_mode,
// detailed_metric, value_to_metric, share_threshold, and nested
// descriptors. One field is Sluice's own: algorithm (token_bucket, the
// default, or fixed_window), on a domain or a rule, which
// envoyproxy/ratelimit would refuse. Decoding is strict, and every error names its file and
// field by path (descriptors[0].descriptors[1].rate_limit.unit) and line:
// an unknown field, a value of the wrong type, an empty domain or key, two
// sibling rules with the same key and value, a unit missing or unknown
// (or given with unlimited: true), requests_per_unit beyond 2³²−1, an
// empty replaces name or one naming its own limit. A key or value written
// as a number or a boolean is read as its text, as the reference reads it.
// source names the file in errors and in rls.Domain.Source.
func ParseEnvoyRateLimit(source string, data []byte) ([]*rls.Domain, error) {
	ds, _, err := parseEnvoy(source, data)
	return ds, err
}

// parseEnvoy is ParseEnvoyRateLimit that also returns the domains'
// documents (yaml.DocumentNode, non-empty ones), for EnvoySection.
func parseEnvoy(source string, data []byte) ([]*rls.Domain, []*yaml.Node, error) {
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	var out []*rls.Domain
	var docs []*yaml.Node
	var errs []error
	for i := 0; ; i++ {
		var doc yaml.Node
		if err := dec.Decode(&doc); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			errs = append(errs, fmt.Errorf("%s: %w", source, &limits.ConfigError{Path: "(document)", Msg: err.Error()}))
			break
		}
		if len(doc.Content) == 0 || isNull(doc.Content[0]) {
			continue // an empty document
		}
		where := source
		if i > 0 {
			where = fmt.Sprintf("%s (document %d)", source, i+1)
		}
		d, err := decodeEnvoyDomain(doc.Content[0], where, false)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out, docs = append(out, d), append(docs, &doc)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, nil, err
	}
	return out, docs, nil
}

// DecodeEnvoySection reads the envoy_ratelimit section of Sluice's own
// configuration: a sequence of domains, each written as one document of
// envoyproxy/ratelimit's format (ParseEnvoyRateLimit), for example
//
//	envoy_ratelimit:
//	  - domain: edge
//	    descriptors:
//	      - key: remote_address
//	        rate_limit: {unit: second, requests_per_unit: 10}
//
// Here, and only here, a rate_limit may be Charon's burst tiers instead of
// a unit and requests_per_unit: burst_tiers names a resource of the
// limits section with algorithm burst_tiers (rls.Limit.BurstTiers; the
// caller checks that it exists), with name and replaces as usual:
//
//	envoy_ratelimit:
//	  - domain: api
//	    descriptors:
//	      - key: tenant
//	        rate_limit: {burst_tiers: api/tenants}
//
// A null section has no domains. Errors name the item and the field
// (envoy_ratelimit[1]: descriptors[0].key: missing or empty (line 7)), and
// a domain defined twice names both items.
func DecodeEnvoySection(n *yaml.Node) (*rls.Config, error) {
	if isNull(n) {
		return rls.NewConfig()
	}
	w := newWalker(n)
	items, _ := w.sequence(n, "envoy_ratelimit")
	if err := w.err(); err != nil {
		return nil, err
	}
	var domains []*rls.Domain
	var errs []error
	for i, item := range items {
		d, err := decodeEnvoyDomain(item, fmt.Sprintf("envoy_ratelimit[%d]", i), true)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		domains = append(domains, d)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return rls.NewConfig(domains...)
}

// decodeEnvoyDomain reads one domain's document n, read from where (its
// Source, and the prefix of its errors); sluice when it is an item of
// Sluice's envoy_ratelimit section.
func decodeEnvoyDomain(n *yaml.Node, where string, sluice bool) (*rls.Domain, error) {
	w := newWalker(n)
	w.sluice = sluice
	d := w.envoyDomain(n)
	if err := w.err(); err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	d.Source = where
	return d, nil
}

// DecodeEnvoyDomain reads one domain of envoyproxy/ratelimit's
// configuration from n, the root of one document as ParseEnvoyRateLimit
// reads it (a mapping with domain and descriptors), for a source other
// than a file that builds such a tree in code: limits/rlsxds builds one
// from each xDS resource, so that the rules of every source pass the
// same checks and their errors read the same. The reading is
// ParseEnvoyRateLimit's, field for field, Sluice's algorithm included and
// burst_tiers refused; a node without a line (one built in code) is named
// by its path alone. source becomes the domain's Source and starts every
// error. Errors: every problem, joined, each a *limits.ConfigError
// wrapped with source ("source: path: why", one a line).
func DecodeEnvoyDomain(source string, n *yaml.Node) (*rls.Domain, error) {
	w := newWalker(n)
	d := w.envoyDomain(n)
	if len(w.errs) > 0 {
		errs := make([]error, len(w.errs))
		for i, err := range w.errs {
			errs[i] = fmt.Errorf("%s: %w", source, err)
		}
		return nil, errors.Join(errs...)
	}
	d.Source = source
	return d, nil
}

// LoadEnvoyRateLimit reads path, a file of envoyproxy/ratelimit's
// configuration or a directory of them (its *.yaml and *.yml files, in
// name order, not recursing: the reference's config/ directory), into one
// configuration. Errors: a file that cannot be read or parsed
// (ParseEnvoyRateLimit's errors, every file's), and a domain defined twice,
// naming both files.
func LoadEnvoyRateLimit(path string) (*rls.Config, error) {
	c, _, err := loadEnvoy(path)
	return c, err
}

// loadEnvoy is LoadEnvoyRateLimit that also returns the domains'
// documents, in the order read.
func loadEnvoy(path string) (*rls.Config, []*yaml.Node, error) {
	files, err := envoyFiles(path)
	if err != nil {
		return nil, nil, err
	}
	var domains []*rls.Domain
	var docs []*yaml.Node
	var errs []error
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		ds, ns, err := parseEnvoy(f, data)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		domains, docs = append(domains, ds...), append(docs, ns...)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, nil, err
	}
	c, err := rls.NewConfig(domains...)
	return c, docs, err
}

// envoyDomain reads one domain's document.
func (w *walker) envoyDomain(n *yaml.Node) *rls.Domain {
	d := &rls.Domain{}
	pairs, ok := w.mapping(n, "", envoyDomainFields)
	if !ok {
		if !isNull(n) && n.Kind != yaml.MappingNode {
			return d
		}
		w.bad("domain", n, "missing")
		return d
	}
	var hasDomain bool
	for _, p := range pairs {
		switch p.key {
		case "domain":
			hasDomain = true
			if s := w.envoyText(p.value, "domain"); s != nil {
				d.Name = *s
				if d.Name == "" {
					w.bad("domain", p.value, "empty")
				}
			}
		case "descriptors":
			d.Descriptors = w.envoyRules(p.value, "descriptors")
		case "algorithm":
			d.Algorithm = w.algorithm(p.value, "algorithm")
		}
	}
	if !hasDomain {
		w.bad("domain", n, "missing")
	}
	if d.Algorithm == rls.FixedWindow {
		w.noBurstBelow(d.Descriptors, n, "descriptors")
	}
	return d
}

// noBurstBelow refuses a burst on the rules of a fixed-window domain that
// do not choose an algorithm for themselves (a rule's is its own, else
// its domain's), at every level.
func (w *walker) noBurstBelow(rules []*rls.Rule, n *yaml.Node, path string) {
	for i, r := range rules {
		p := fmt.Sprintf("%s[%d]", path, i)
		if r.Algorithm == rls.AlgorithmDefault {
			w.noBurst(r, n, p, "the domain's algorithm is fixed_window")
		}
		w.noBurstBelow(r.Descriptors, n, join(p, "descriptors"))
	}
}

// envoyRules reads a list of descriptor rules at path.
func (w *walker) envoyRules(n *yaml.Node, path string) []*rls.Rule {
	items, _ := w.sequence(n, path)
	rules := make([]*rls.Rule, 0, len(items))
	type kv struct{ k, v string }
	seen := map[kv]int{}
	for i, item := range items {
		p := fmt.Sprintf("%s[%d]", path, i)
		r := w.envoyRule(item, p)
		if r == nil {
			continue
		}
		if j, dup := seen[kv{r.Key, r.Value}]; dup {
			w.bad(p, item, "the same key and value as %s[%d] (key %q, value %q)", path, j, r.Key, r.Value)
			continue
		}
		seen[kv{r.Key, r.Value}] = i
		rules = append(rules, r)
	}
	return rules
}

// envoyRule reads one descriptor rule.
func (w *walker) envoyRule(n *yaml.Node, path string) *rls.Rule {
	pairs, ok := w.mapping(n, path, envoyDescriptorFields)
	if !ok {
		if isNull(n) {
			w.bad(path, n, "want a mapping with a key, got null")
		}
		return nil
	}
	r := &rls.Rule{}
	var hasKey bool
	for _, p := range pairs {
		fp := join(path, p.key)
		switch p.key {
		case "key":
			if s := w.envoyText(p.value, fp); s != nil {
				hasKey = true
				r.Key = *s
			}
		case "value":
			if s := w.envoyText(p.value, fp); s != nil {
				r.Value = *s
			}
		case "rate_limit":
			if r.Limit != nil {
				w.bad(fp, p.value, "given with rate_limits (a rule has one or the other)")
				continue
			}
			r.Limit = w.envoyLimit(p.value, fp)
		case "rate_limits":
			if r.Limit != nil {
				w.bad(fp, p.value, "given with rate_limit (a rule has one or the other)")
				continue
			}
			r.Limit, r.MoreLimits = w.envoyLimits(p.value, fp)
		case "descriptors":
			r.Descriptors = w.envoyRules(p.value, fp)
		case "shadow_mode":
			r.ShadowMode = w.flag(p.value, fp)
		case "detailed_metric":
			r.DetailedMetric = w.flag(p.value, fp)
		case "value_to_metric":
			r.ValueToMetric = w.flag(p.value, fp)
		case "share_threshold":
			r.ShareThreshold = w.flag(p.value, fp)
		case "algorithm":
			r.Algorithm = w.algorithm(p.value, fp)
		}
	}
	if !hasKey || r.Key == "" {
		w.bad(join(path, "key"), n, "missing or empty")
		return nil
	}
	if r.Algorithm == rls.FixedWindow {
		w.noBurst(r, n, path, "the rule's algorithm is fixed_window")
	}
	return r
}

// noBurst refuses a burst on any of r's limits (path names r) under a
// fixed window: why says where the window comes from.
func (w *walker) noBurst(r *rls.Rule, n *yaml.Node, path, why string) {
	i := 0
	for l := range r.AllLimits() {
		if l.Burst != 0 {
			field := join(path, "rate_limit.burst")
			if r.MoreLimits != nil {
				field = fmt.Sprintf("%s[%d].burst", join(path, "rate_limits"), i)
			}
			w.bad(field, n, "a burst is a token bucket's depth, and %s", why)
		}
		i++
	}
}

// envoyLimits reads a rate_limits list (Sluice's extension: several
// limits on one descriptor, every one must hold): its first limit and
// the others. None may be unlimited or burst tiers, and two may not be
// the same unit, multiplier and calendar (their counters would be
// redundant, and a mistake).
func (w *walker) envoyLimits(n *yaml.Node, path string) (*rls.Limit, []*rls.Limit) {
	items, _ := w.sequence(n, path)
	if len(items) == 0 {
		if n != nil && (n.Kind == yaml.SequenceNode || isNull(n)) {
			w.bad(path, n, "empty (want one limit or more)")
		}
		return nil, nil
	}
	type shape struct {
		unit     rls.Unit
		mult     uint32
		calendar string
	}
	seen := map[shape]int{}
	var all []*rls.Limit
	for i, item := range items {
		ip := fmt.Sprintf("%s[%d]", path, i)
		l := w.envoyLimit(item, ip)
		if l == nil {
			continue
		}
		switch {
		case l.Unlimited:
			w.bad(join(ip, "unlimited"), item, "not in rate_limits (an unlimited rule has rate_limit: {unlimited: true})")
		case l.BurstTiers != "":
			w.bad(join(ip, "burst_tiers"), item, "not in rate_limits (burst tiers are a rule's one limit)")
		case l.RequestsPerUnit == 0:
			w.bad(join(ip, "requests_per_unit"), item, "0 in rate_limits (a rule that refuses everything has rate_limit: {requests_per_unit: 0})")
		}
		k := shape{unit: l.Unit, mult: max(1, l.UnitMultiplier)}
		if l.Calendar != nil {
			k.calendar = l.Calendar.String()
		}
		if j, dup := seen[k]; dup {
			w.bad(ip, item, "the same unit, unit_multiplier and calendar as %s[%d]", path, j)
		}
		seen[k] = i
		all = append(all, l)
	}
	if len(all) == 0 {
		return nil, nil
	}
	more := all[1:]
	if len(more) == 0 {
		more = nil
	}
	return all[0], more
}

// envoyLimit reads a rate_limit block.
func (w *walker) envoyLimit(n *yaml.Node, path string) *rls.Limit {
	pairs, ok := w.mapping(n, path, envoyLimitFields)
	if !ok {
		return nil
	}
	l := &rls.Limit{}
	var unit *string
	var unitNode, rpuNode, multNode, burstNode, calNode *yaml.Node
	for _, p := range pairs {
		fp := join(path, p.key)
		switch p.key {
		case "unit":
			unit, unitNode = w.str(p.value, fp), p.value
		case "requests_per_unit":
			rpuNode = p.value
			l.RequestsPerUnit = w.uint32In(p.value, fp, "requests", 0)
		case "unlimited":
			l.Unlimited = w.flag(p.value, fp)
		case "unit_multiplier":
			l.UnitMultiplier, multNode = w.uint32In(p.value, fp, "units", 1), p.value
		case "burst":
			l.Burst, burstNode = w.uint32In(p.value, fp, "requests", 1), p.value
		case "calendar":
			calNode = p.value
			if s := w.str(p.value, fp); s != nil {
				loc, err := time.LoadLocation(*s)
				switch {
				case *s == "" || *s == "Local":
					w.bad(fp, p.value, "%q is not a zone (want UTC or an IANA zone name, as Europe/Paris)", *s)
				case err != nil:
					w.bad(fp, p.value, "%q is not a zone (want UTC or an IANA zone name, as Europe/Paris): %v", *s, err)
				default:
					l.Calendar = loc
				}
			}
		case "burst_tiers":
			if !w.sluice {
				w.bad(fp, p.value, "only in Sluice's own configuration (its envoy_ratelimit section, beside the limits section whose resource it names)")
			} else if s := w.str(p.value, fp); s != nil {
				if l.BurstTiers = *s; l.BurstTiers == "" {
					w.bad(fp, p.value, "empty (want a resource of the limits section with algorithm burst_tiers)")
				}
			}
		case "name":
			if s := w.envoyText(p.value, fp); s != nil {
				l.Name = *s
			}
		case "replaces":
			items, _ := w.sequence(p.value, fp)
			for i, item := range items {
				ip := fmt.Sprintf("%s[%d]", fp, i)
				rp, _ := w.mapping(item, ip, envoyReplacesFields)
				var name string
				for _, q := range rp {
					if s := w.envoyText(q.value, join(ip, "name")); s != nil {
						name = *s
					}
				}
				l.Replaces = append(l.Replaces, name)
				if name == "" {
					w.bad(join(ip, "name"), item, "missing or empty")
				}
			}
		}
	}
	for i, name := range l.Replaces {
		if name != "" && name == l.Name {
			w.bad(fmt.Sprintf("%s[%d].name", join(path, "replaces"), i), n, "%q is this limit's own name", name)
		}
	}
	if l.BurstTiers != "" || l.Unlimited {
		what := "burst_tiers (the resource's tiers are the limit)"
		if l.BurstTiers == "" {
			what = "unlimited: true (an unlimited limit counts nothing)"
		}
		for _, f := range []struct {
			name string
			node *yaml.Node
		}{{"unit_multiplier", multNode}, {"burst", burstNode}, {"calendar", calNode}} {
			if f.node != nil {
				w.bad(join(path, f.name), f.node, "given with %s", what)
			}
		}
	}
	switch {
	case l.BurstTiers != "":
		for _, f := range []struct {
			name string
			node *yaml.Node
			set  bool
		}{{"unit", unitNode, unit != nil}, {"requests_per_unit", rpuNode, rpuNode != nil}, {"unlimited", n, l.Unlimited}} {
			if f.set {
				w.bad(join(path, f.name), f.node, "given with burst_tiers (the resource's tiers are the limit)")
			}
		}
	case l.Unlimited && unit != nil && *unit != "":
		if u, err := rls.ParseUnit(*unit); err == nil && u != rls.UnitUnknown {
			w.bad(join(path, "unit"), unitNode, "given with unlimited: true (an unlimited limit has no unit)")
		}
	case l.Unlimited:
	case unit == nil:
		w.bad(join(path, "unit"), n, "missing (second, minute, hour, day, week, month or year)")
	default:
		u, err := rls.ParseUnit(*unit)
		if err != nil {
			w.bad(join(path, "unit"), unitNode, "%v", err)
		}
		l.Unit = u
		switch {
		case l.Calendar != nil && err == nil && !rls.CalendarUnit(u):
			w.bad(join(path, "calendar"), calNode, "with unit %s (a calendar counts days, weeks, months or years)", u)
		case l.Calendar != nil && l.UnitMultiplier > 1:
			w.bad(join(path, "unit_multiplier"), multNode, "given with calendar (a calendar's window is one %s)", u)
		case l.Calendar != nil && l.Burst != 0:
			w.bad(join(path, "burst"), burstNode, "given with calendar (a calendar counts in fixed windows; a burst is a token bucket's depth)")
		}
	}
	return l
}

// uint32In reads an integer field of unit in [least, 2³² − 1]; 0 when
// absent or out of range (an error named).
func (w *walker) uint32In(n *yaml.Node, path, unit string, least int64) uint32 {
	v := w.int64(n, path, unit)
	switch {
	case v == nil:
		return 0
	case *v < least || *v > math.MaxUint32:
		w.bad(path, n, "%d is outside %d … %d", *v, least, uint32(math.MaxUint32))
		return 0
	}
	return uint32(*v)
}

// envoyText reads a scalar as its text (a string, or a number or boolean
// as written); nil when absent or null.
func (w *walker) envoyText(n *yaml.Node, path string) *string {
	s, ok := w.scalar(n, path)
	if !ok {
		return nil
	}
	switch s.Tag {
	case "!!str", "!!int", "!!float", "!!bool":
		v := s.Value
		return &v
	}
	w.bad(path, s, "want a string, got %s", kindName(s))
	return nil
}

// algorithm reads the algorithm field (Sluice's extension of the
// format): token_bucket or fixed_window.
func (w *walker) algorithm(n *yaml.Node, path string) rls.Algorithm {
	s := w.str(n, path)
	if s == nil {
		return rls.AlgorithmDefault
	}
	a, err := rls.ParseAlgorithm(*s)
	if err != nil {
		w.bad(path, n, "%v", err)
	}
	return a
}

// flag reads a boolean field; false when absent.
func (w *walker) flag(n *yaml.Node, path string) bool {
	b := w.boolean(n, path)
	return b != nil && *b
}
