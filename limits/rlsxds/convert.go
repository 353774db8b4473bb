package rlsxds

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-rl/sluice/limits/limitsyaml"
	"github.com/sluice-rl/sluice/limits/rls"
)

// Convert returns the rules of configs, the RateLimitConfig resources of
// one state-of-the-world xDS response: each resource is one domain (its
// domain and descriptors; its name names it in errors and in the
// domain's Source, `RateLimitConfig "name"`). The rules are read exactly
// as limitsyaml.ParseEnvoyRateLimit reads a file of envoyproxy/ratelimit's
// configuration — each resource becomes the document the file would hold
// and passes limitsyaml.DecodeEnvoyDomain — so the checks and their
// wording are the file's. A unit is one of SECOND, MINUTE, HOUR, DAY and,
// by their numbers in the newer protos (WEEK 7, MONTH 5, YEAR 6), the
// calendar units, which rls.Unit carries as envoyproxy/ratelimit counts
// them (a month is 30 days, a year 365). A field this version of the
// protos does not know (quota_mode, from a newer control plane) is
// refused as an unknown field, as the file's reading refuses one.
//
// Errors (every problem of every resource, joined; each names the
// resource, the field by its path, and why, and wraps
// limits.ErrInvalidConfig): a resource that is nil or has an empty
// domain, a rule without a key, two sibling rules with the same key and
// value, a limit without a unit (UNKNOWN) or with an unknown unit number,
// a unit given with unlimited, an empty replaces name or one naming its
// own limit, an unknown field; and two resources of the same domain,
// naming both — envoyproxy/ratelimit merges them only with
// MERGE_DOMAIN_CONFIG, which is ConvertMerged.
//
// Source: envoyproxy/ratelimit, src/config/config_xds.go (the resource
// read as the YAML document it stands for) and the README's
// "Configuration".
func Convert(configs []*rlsconfv3.RateLimitConfig) (*rls.Config, error) {
	return convert(configs, false)
}

// ConvertMerged is Convert with envoyproxy/ratelimit's
// MERGE_DOMAIN_CONFIG: the resources of one domain are merged into one
// domain, their descriptors in the resources' order. The merged domain is
// checked again as a whole, so that two of its first-level rules with the
// same key and value are refused; such an error names every merged
// resource, and numbers the descriptors across them, in order.
func ConvertMerged(configs []*rlsconfv3.RateLimitConfig) (*rls.Config, error) {
	return convert(configs, true)
}

func convert(configs []*rlsconfv3.RateLimitConfig, merge bool) (*rls.Config, error) {
	var (
		domains []*rls.Domain
		errs    []error
		groups  = map[string][]int{} // a domain's resources, by index in configs (merge)
		order   []string             // the domains, as first given (merge)
		at      = map[string]int{}   // a domain's index in domains (merge)
	)
	for i, c := range configs {
		src := sourceOf(i, c)
		if c == nil {
			errs = append(errs, fmt.Errorf("%s: a nil resource", src))
			continue
		}
		d, err := limitsyaml.DecodeEnvoyDomain(src, domainNode(c))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if merge {
			if _, seen := groups[d.Name]; !seen {
				order = append(order, d.Name)
				at[d.Name] = len(domains)
				domains = append(domains, d)
			}
			groups[d.Name] = append(groups[d.Name], i)
			continue
		}
		domains = append(domains, d)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for _, name := range order {
		g := groups[name]
		if len(g) < 2 {
			continue
		}
		d, err := mergeDomain(configs, g)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		domains[at[name]] = d
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return rls.NewConfig(domains...)
}

// mergeDomain reads the resources configs[i] for i in idx, all of one
// domain, as one domain: their descriptors concatenated.
func mergeDomain(configs []*rlsconfv3.RateLimitConfig, idx []int) (*rls.Domain, error) {
	merged := &rlsconfv3.RateLimitConfig{Domain: configs[idx[0]].GetDomain()}
	names := make([]string, 0, len(idx))
	for _, i := range idx {
		merged.Descriptors = append(merged.Descriptors, configs[i].GetDescriptors()...)
		names = append(names, sourceOf(i, configs[i]))
	}
	src := fmt.Sprintf("domain %q merged from %s", merged.Domain, strings.Join(names, ", "))
	return limitsyaml.DecodeEnvoyDomain(src, domainNode(merged))
}

// sourceOf names the i-th resource in errors and in rls.Domain.Source.
func sourceOf(i int, c *rlsconfv3.RateLimitConfig) string {
	if name := c.GetName(); name != "" {
		return fmt.Sprintf("RateLimitConfig %q", name)
	}
	return fmt.Sprintf("RateLimitConfig [%d] (no name)", i)
}

// unitNames are the configuration's names of RateLimitUnit's numbers,
// the calendar units included (WEEK 7, MONTH 5 and YEAR 6 in the newer
// protos; the same numbers as rls.Unit's).
var unitNames = map[rlsconfv3.RateLimitUnit]string{
	1: "second", 2: "minute", 3: "hour", 4: "day", 5: "month", 6: "year", 7: "week",
}

// newerFields names the fields of the newer protos that this version
// does not know, by message and number, for the unknown-field error.
var newerFields = map[string]map[protowire.Number]string{
	"ratelimit.config.ratelimit.v3.RateLimitDescriptor": {7: "quota_mode"},
}

// domainNode returns c as the YAML document of envoyproxy/ratelimit's
// configuration it stands for: the fields as a file writes them, a field
// left at its zero value (proto3's absent) left out, except domain and
// key, whose emptiness is the reading's error to report.
func domainNode(c *rlsconfv3.RateLimitConfig) *yaml.Node {
	m := mapping(c)
	add(m, "domain", text(c.GetDomain()))
	if ds := c.GetDescriptors(); len(ds) > 0 {
		add(m, "descriptors", descriptorsNode(ds))
	}
	return m
}

func descriptorsNode(ds []*rlsconfv3.RateLimitDescriptor) *yaml.Node {
	seq := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
	for _, d := range ds {
		seq.Content = append(seq.Content, descriptorNode(d))
	}
	return seq
}

func descriptorNode(d *rlsconfv3.RateLimitDescriptor) *yaml.Node {
	if d == nil {
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"}
	}
	m := mapping(d)
	add(m, "key", text(d.GetKey()))
	if v := d.GetValue(); v != "" {
		add(m, "value", text(v))
	}
	if l := d.GetRateLimit(); l != nil {
		add(m, "rate_limit", policyNode(l))
	}
	if ds := d.GetDescriptors(); len(ds) > 0 {
		add(m, "descriptors", descriptorsNode(ds))
	}
	if d.GetShadowMode() {
		add(m, "shadow_mode", flag(true))
	}
	if d.GetDetailedMetric() {
		add(m, "detailed_metric", flag(true))
	}
	return m
}

func policyNode(l *rlsconfv3.RateLimitPolicy) *yaml.Node {
	m := mapping(l)
	if u := l.GetUnit(); u != rlsconfv3.RateLimitUnit_UNKNOWN {
		name, ok := unitNames[u]
		if !ok {
			name = "RateLimitUnit " + strconv.Itoa(int(u)) // refused by the reading, named
		}
		add(m, "unit", text(name))
	}
	if n := l.GetRequestsPerUnit(); n != 0 {
		add(m, "requests_per_unit", &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.FormatUint(uint64(n), 10)})
	}
	if l.GetUnlimited() {
		add(m, "unlimited", flag(true))
	}
	if name := l.GetName(); name != "" {
		add(m, "name", text(name))
	}
	if rs := l.GetReplaces(); len(rs) > 0 {
		seq := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		for _, r := range rs {
			rm := mapping(r)
			if r != nil {
				add(rm, "name", text(r.GetName()))
			}
			seq.Content = append(seq.Content, rm)
		}
		add(m, "replaces", seq)
	}
	return m
}

// mapping returns an empty mapping holding, as keys, the unknown fields
// of msg (nil: none), so that the reading refuses them by name.
func mapping(msg proto.Message) *yaml.Node {
	m := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	if msg == nil || !msg.ProtoReflect().IsValid() {
		return m
	}
	r := msg.ProtoReflect()
	known := newerFields[string(r.Descriptor().FullName())]
	seen := map[protowire.Number]bool{}
	for b := r.GetUnknown(); len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			break
		}
		v := protowire.ConsumeFieldValue(num, typ, b[n:])
		if v < 0 {
			break
		}
		b = b[n+v:]
		if seen[num] { // a repeated field, or one written twice
			continue
		}
		seen[num] = true
		name := known[num]
		if name == "" {
			name = fmt.Sprintf("field_%d", num)
		}
		add(m, name, text("(set by a newer version of "+string(r.Descriptor().FullName())+")"))
	}
	return m
}

func add(m *yaml.Node, key string, v *yaml.Node) {
	m.Content = append(m.Content, text(key), v)
}

func text(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s} }

func flag(b bool) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(b)}
}
