package limitsyaml

import (
	"math"
	"strconv"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/limits/rls"
)

// MarshalSection writes cfg as Sluice's limits section: a YAML document
// holding the section's fields at its top level (global_default,
// namespaces, resources), indented by two spaces, names in order, every
// bucket (but one with budgets) and tier in flow style with all its
// fields (BucketNode, ResourceNode). ParseSection reads it back to cfg, exactly for a
// configuration ParseSection returned. A configuration built in Go reads
// back to an equivalent one: a nil resource comes back empty, a bucket's
// MaxIdle ≤ 0 comes back as limits.DefaultMaxIdle and its
// MaxTokensPerRequest 0 as the fill rate rounded up. cfg's Version, User
// and Date have no place in the section and are not written. A nil cfg
// is an empty section ({}).
//
// MarshalSection does not validate cfg: an invalid value is written as
// it is, for ParseSection to refuse. Fields a resource's algorithm has no
// place for under `domains:` (a burst-tier resource's Buckets, a
// token-bucket resource's TierDomains) are left out.
func MarshalSection(cfg *limits.Config) ([]byte, error) { return Encode(sectionNode(cfg)) }

// sectionNode writes cfg as a section mapping.
func sectionNode(cfg *limits.Config) *yaml.Node {
	m := mappingNode()
	if cfg == nil {
		m.Style = yaml.FlowStyle
		return m
	}
	if cfg.GlobalDefault != nil {
		m.Content = append(m.Content, keyNode("global_default"), BucketNode(*cfg.GlobalDefault))
	}
	if len(cfg.Namespaces) > 0 {
		nss := mappingNode()
		for _, prefix := range sortedKeys(cfg.Namespaces) {
			nss.Content = append(nss.Content, keyNode(prefix), namespaceNode(cfg.Namespaces[prefix]))
		}
		m.Content = append(m.Content, keyNode("namespaces"), nss)
	}
	if len(cfg.Resources) > 0 {
		rs := mappingNode()
		for _, name := range sortedKeys(cfg.Resources) {
			rs.Content = append(rs.Content, keyNode(name), ResourceNode(cfg.Resources[name]))
		}
		m.Content = append(m.Content, keyNode("resources"), rs)
	}
	if len(m.Content) == 0 {
		m.Style = yaml.FlowStyle // {}
	}
	return m
}

// namespaceNode writes ns with the settings it sets, in flow style:
// {ignore_configured: true}; {} for none.
func namespaceNode(ns limits.Namespace) *yaml.Node {
	m := mappingNode()
	m.Style = yaml.FlowStyle
	if ns.IgnoreConfigured {
		m.Content = append(m.Content, keyNode("ignore_configured"), scalarNode("!!bool", "true"))
	}
	if ns.AllowUnconfigured {
		m.Content = append(m.Content, keyNode("allow_unconfigured"), scalarNode("!!bool", "true"))
	}
	return m
}

// ResourceNode writes r as a resource of Sluice's limits section, a new
// mapping holding the fields r sets, in the order algorithm (only when
// not token_bucket), hard_limit, global_limit, tiers, domains, template,
// max_dynamic_buckets, default, on_store_error (only when open): a
// token-bucket resource's domains are its Buckets, a burst-tier
// resource's its TierDomains (see MarshalSection). A resource that sets
// nothing, or a nil r, is {} in flow style; buckets are written by
// BucketNode, tiers in flow style with all their fields, a domain's
// hard limit limits.Unbounded as "none".
func ResourceNode(r *limits.Resource) *yaml.Node {
	m := mappingNode()
	if r == nil {
		m.Style = yaml.FlowStyle
		return m
	}
	add := func(k string, v *yaml.Node) { m.Content = append(m.Content, keyNode(k), v) }
	if r.Algorithm != limits.TokenBucket {
		add("algorithm", scalarNode("!!str", r.Algorithm.String()))
	}
	if r.HardLimit != 0 {
		add("hard_limit", intNode(r.HardLimit))
	}
	if r.GlobalLimit != 0 {
		add("global_limit", intNode(r.GlobalLimit))
	}
	if r.Tiers != nil {
		add("tiers", tiersNode(r.Tiers))
	}
	switch {
	case r.Algorithm == limits.BurstTiers && len(r.TierDomains) > 0:
		ds := mappingNode()
		for _, d := range sortedKeys(r.TierDomains) {
			ds.Content = append(ds.Content, keyNode(d), tierDomainNode(r.TierDomains[d]))
		}
		add("domains", ds)
	case r.Algorithm != limits.BurstTiers && len(r.Buckets) > 0:
		ds := mappingNode()
		for _, d := range sortedKeys(r.Buckets) {
			ds.Content = append(ds.Content, keyNode(d), BucketNode(r.Buckets[d]))
		}
		add("domains", ds)
	}
	if r.Template != nil {
		add("template", BucketNode(*r.Template))
	}
	if r.MaxDynamicBuckets != 0 {
		add("max_dynamic_buckets", intNode(r.MaxDynamicBuckets))
	}
	if r.Default != nil {
		add("default", BucketNode(*r.Default))
	}
	if r.OnStoreError != limits.FailClosed {
		add("on_store_error", scalarNode("!!str", r.OnStoreError.String()))
	}
	if len(m.Content) == 0 {
		m.Style = yaml.FlowStyle // {}: a resource with nothing configured
	}
	return m
}

// BucketNode writes b as a bucket of Sluice's limits section, a new
// mapping with every field given, in flow style: {size: 100, fill_rate:
// 50, wait_timeout: 1s, max_idle: never, max_debt: 10s,
// max_tokens_per_request: 50}. Durations are Go duration strings, a
// MaxIdle ≤ 0 is "never", a whole fill rate an integer;
// max_tokens_per_request is left out when 0 (the fill rate, rounded up).
// A bucket with budgets is written in block style instead, its budgets
// last, one a line, each in flow style with limit, unit and the fields it
// sets (BudgetNode):
//
//	size: 10
//	...
//	budgets:
//	  - {limit: 100000, unit: month, calendar: UTC}
func BucketNode(b limits.Bucket) *yaml.Node {
	rate := scalarNode("!!float", strconv.FormatFloat(b.FillRate, 'g', -1, 64))
	if b.FillRate == math.Trunc(b.FillRate) && math.Abs(b.FillRate) < 1<<53 {
		rate = intNode(int64(b.FillRate))
	}
	idle := scalarNode("!!str", "never")
	if b.MaxIdle > 0 {
		idle = durationNode(b.MaxIdle)
	}
	m := mappingNode()
	m.Style = yaml.FlowStyle
	m.Content = []*yaml.Node{
		keyNode("size"), intNode(b.Size),
		keyNode("fill_rate"), rate,
		keyNode("wait_timeout"), durationNode(b.WaitTimeout),
		keyNode("max_idle"), idle,
		keyNode("max_debt"), durationNode(b.MaxDebt),
	}
	if b.MaxTokensPerRequest != 0 {
		m.Content = append(m.Content, keyNode("max_tokens_per_request"), intNode(b.MaxTokensPerRequest))
	}
	if len(b.Budgets) > 0 {
		s := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		for _, bg := range b.Budgets {
			s.Content = append(s.Content, BudgetNode(bg))
		}
		m.Content = append(m.Content, keyNode("budgets"), s)
		m.Style = 0
	}
	return m
}

// BudgetNode writes b as a budget of a bucket of Sluice's limits
// section, a new mapping in flow style: limit and unit, then
// unit_multiplier, calendar (the zone's name), algorithm and burst when
// set: {limit: 100000, unit: month, calendar: Europe/Paris}.
func BudgetNode(b limits.Budget) *yaml.Node {
	m := mappingNode()
	m.Style = yaml.FlowStyle
	m.Content = []*yaml.Node{keyNode("limit"), intNode(b.Limit), keyNode("unit"), scalarNode("!!str", b.Unit.String())}
	if b.UnitMultiplier != 0 {
		m.Content = append(m.Content, keyNode("unit_multiplier"), intNode(b.UnitMultiplier))
	}
	if b.Calendar != nil {
		m.Content = append(m.Content, keyNode("calendar"), scalarNode("!!str", b.Calendar.String()))
	}
	if b.Algorithm != rls.AlgorithmDefault {
		m.Content = append(m.Content, keyNode("algorithm"), scalarNode("!!str", b.Algorithm.String()))
	}
	if b.Burst != 0 {
		m.Content = append(m.Content, keyNode("burst"), intNode(b.Burst))
	}
	return m
}

// tierDomainNode writes a burst-tier domain's configuration with the
// fields it sets, in flow style: {hard_limit: none, tiers: [...]}; {}
// keeps the resource's.
func tierDomainNode(td limits.TierDomain) *yaml.Node {
	m := mappingNode()
	m.Style = yaml.FlowStyle
	switch td.HardLimit {
	case 0:
	case limits.Unbounded:
		m.Content = append(m.Content, keyNode("hard_limit"), scalarNode("!!str", "none"))
	default:
		m.Content = append(m.Content, keyNode("hard_limit"), intNode(td.HardLimit))
	}
	if td.Tiers != nil {
		m.Content = append(m.Content, keyNode("tiers"), tiersNode(td.Tiers))
	}
	return m
}

// tiersNode writes tiers as a sequence, each tier in flow style with all
// its fields; none is [].
func tiersNode(tiers []limits.Tier) *yaml.Node {
	s := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
	if len(tiers) == 0 {
		s.Style = yaml.FlowStyle
	}
	for _, t := range tiers {
		m := mappingNode()
		m.Style = yaml.FlowStyle
		m.Content = []*yaml.Node{
			keyNode("limit"), intNode(t.Limit),
			keyNode("window"), durationNode(t.Window),
			keyNode("active"), durationNode(t.Active),
			keyNode("cooldown"), durationNode(t.Cooldown),
			keyNode("skippable"), scalarNode("!!bool", strconv.FormatBool(t.Skippable)),
		}
		s.Content = append(s.Content, m)
	}
	return s
}

func mappingNode() *yaml.Node { return &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"} }

func keyNode(s string) *yaml.Node { return scalarNode("!!str", s) }

func scalarNode(tag, v string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: v}
}

func intNode(v int64) *yaml.Node { return scalarNode("!!int", strconv.FormatInt(v, 10)) }

func durationNode(d time.Duration) *yaml.Node { return scalarNode("!!str", d.String()) }
