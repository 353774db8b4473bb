package rlsxds

import (
	"errors"
	"strings"
	"testing"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/limits/limitsyaml"
	"github.com/sluice-rl/sluice/limits/rls"
)

// The calendar units by their numbers: v0.1.0 of the protos names only
// SECOND … DAY, the newer ones WEEK 7, MONTH 5 and YEAR 6.
const (
	unitWeek  rlsconfv3.RateLimitUnit = 7
	unitMonth rlsconfv3.RateLimitUnit = 5
	unitYear  rlsconfv3.RateLimitUnit = 6
)

func policy(unit rlsconfv3.RateLimitUnit, n uint32) *rlsconfv3.RateLimitPolicy {
	return &rlsconfv3.RateLimitPolicy{Unit: unit, RequestsPerUnit: n}
}

// edgeConfigs are resources holding every field of the format, and
// edgeYAML the same rules as envoyproxy/ratelimit's files write them.
func edgeConfigs() []*rlsconfv3.RateLimitConfig {
	return []*rlsconfv3.RateLimitConfig{{
		Name:   "edge-config",
		Domain: "edge",
		Descriptors: []*rlsconfv3.RateLimitDescriptor{
			{Key: "remote_address", RateLimit: policy(rlsconfv3.RateLimitUnit_SECOND, 10)},
			{Key: "path", Value: "/api/*", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: 100, Name: "api"}, DetailedMetric: true},
			{Key: "tenant", Descriptors: []*rlsconfv3.RateLimitDescriptor{
				{Key: "plan", Value: "free", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_DAY, RequestsPerUnit: 1000,
					Replaces: []*rlsconfv3.RateLimitReplace{{Name: "api"}}}, ShadowMode: true},
				{Key: "plan", Value: "internal", RateLimit: &rlsconfv3.RateLimitPolicy{Unlimited: true}},
				{Key: "plan", Value: "blocked", RateLimit: policy(rlsconfv3.RateLimitUnit_HOUR, 0)},
			}},
			{Key: "weekly", RateLimit: policy(unitWeek, 7)},
			{Key: "monthly", RateLimit: policy(unitMonth, 30)},
			{Key: "yearly", RateLimit: policy(unitYear, 365)},
			{Key: "allowed"},
		},
	}, {
		Name:        "db-config",
		Domain:      "db",
		Descriptors: []*rlsconfv3.RateLimitDescriptor{{Key: "user", RateLimit: policy(rlsconfv3.RateLimitUnit_SECOND, 5)}},
	}}
}

const edgeYAML = `domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: path
    value: "/api/*"
    rate_limit: {unit: minute, requests_per_unit: 100, name: api}
    detailed_metric: true
  - key: tenant
    descriptors:
      - key: plan
        value: free
        rate_limit: {unit: day, requests_per_unit: 1000, replaces: [{name: api}]}
        shadow_mode: true
      - key: plan
        value: internal
        rate_limit: {unlimited: true}
      - key: plan
        value: blocked
        rate_limit: {unit: hour, requests_per_unit: 0}
  - key: weekly
    rate_limit: {unit: week, requests_per_unit: 7}
  - key: monthly
    rate_limit: {unit: month, requests_per_unit: 30}
  - key: yearly
    rate_limit: {unit: year, requests_per_unit: 365}
  - key: allowed
---
domain: db
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 5}
`

// TestConvertAsTheFileReads: resources convert to the very rules the
// same configuration read from envoyproxy/ratelimit's files gives (equal
// hashes: every field of every rule), the calendar units included, and
// each domain's Source names its resource.
func TestConvertAsTheFileReads(t *testing.T) {
	got, err := Convert(edgeConfigs())
	if err != nil {
		t.Fatal(err)
	}
	ds, err := limitsyaml.ParseEnvoyRateLimit("edge.yaml", []byte(edgeYAML))
	if err != nil {
		t.Fatal(err)
	}
	want, err := rls.NewConfig(ds...)
	if err != nil {
		t.Fatal(err)
	}
	if got.Hash() != want.Hash() {
		t.Errorf("the rules differ from the file's: domains %v, want %v", got.Names(), want.Names())
	}
	if src := got.Domain("edge").Source; src != `RateLimitConfig "edge-config"` {
		t.Errorf("Source = %q", src)
	}
	for _, c := range []struct {
		entries []rls.Entry
		unit    rls.Unit
		n       uint32
	}{
		{[]rls.Entry{{Key: "remote_address", Value: "192.0.2.1"}}, rls.Second, 10},
		{[]rls.Entry{{Key: "weekly", Value: "x"}}, rls.Week, 7},
		{[]rls.Entry{{Key: "monthly", Value: "x"}}, rls.Month, 30},
		{[]rls.Entry{{Key: "yearly", Value: "x"}}, rls.Year, 365},
	} {
		m := got.Match("edge", c.entries)
		if m.Rule == nil || m.Rule.Limit.Unit != c.unit || m.Rule.Limit.RequestsPerUnit != c.n {
			t.Errorf("%v: matched %+v, want %d per %v", c.entries, m.Rule, c.n, c.unit)
		}
	}
	if empty, err := Convert(nil); err != nil || empty.Len() != 0 {
		t.Errorf("no resources: %v domains, %v", empty.Len(), err)
	}
}

// withUnknown returns d carrying field number num (a varint 1), as a
// newer control plane's descriptor with quota_mode: true arrives here.
func withUnknown(d *rlsconfv3.RateLimitDescriptor, num protowire.Number) *rlsconfv3.RateLimitDescriptor {
	b := protowire.AppendTag(nil, num, protowire.VarintType)
	d.ProtoReflect().SetUnknown(protowire.AppendVarint(b, 1))
	return d
}

// TestConvertRefusals: every refusal names the resource, the field by
// its path and why, in the words the file's reading uses, and wraps
// limits.ErrInvalidConfig; every resource's problems are reported.
func TestConvertRefusals(t *testing.T) {
	one := func(name, domain string, ds ...*rlsconfv3.RateLimitDescriptor) *rlsconfv3.RateLimitConfig {
		return &rlsconfv3.RateLimitConfig{Name: name, Domain: domain, Descriptors: ds}
	}
	sec := policy(rlsconfv3.RateLimitUnit_SECOND, 1)
	for _, tc := range []struct {
		name    string
		configs []*rlsconfv3.RateLimitConfig
		want    []string
	}{
		{"empty domain", []*rlsconfv3.RateLimitConfig{one("a", "")}, []string{`RateLimitConfig "a": domain: empty`}},
		{"empty key", []*rlsconfv3.RateLimitConfig{one("a", "d", &rlsconfv3.RateLimitDescriptor{RateLimit: sec})},
			[]string{`RateLimitConfig "a": descriptors[0].key: missing or empty`}},
		{"nested empty key", []*rlsconfv3.RateLimitConfig{one("a", "d", &rlsconfv3.RateLimitDescriptor{Key: "k", Descriptors: []*rlsconfv3.RateLimitDescriptor{{Key: "x"}, {Value: "v"}}})},
			[]string{`RateLimitConfig "a": descriptors[0].descriptors[1].key: missing or empty`}},
		{"same key and value", []*rlsconfv3.RateLimitConfig{one("a", "d", &rlsconfv3.RateLimitDescriptor{Key: "k", Value: "v"}, &rlsconfv3.RateLimitDescriptor{Key: "k", Value: "v"})},
			[]string{`RateLimitConfig "a": descriptors[1]: the same key and value as descriptors[0]`}},
		{"no unit", []*rlsconfv3.RateLimitConfig{one("a", "d", &rlsconfv3.RateLimitDescriptor{Key: "k", RateLimit: policy(rlsconfv3.RateLimitUnit_UNKNOWN, 5)})},
			[]string{`RateLimitConfig "a": descriptors[0].rate_limit.unit: missing (second, minute, hour, day, week, month or year)`}},
		{"unknown unit number", []*rlsconfv3.RateLimitConfig{one("a", "d", &rlsconfv3.RateLimitDescriptor{Key: "k", RateLimit: policy(9, 5)})},
			[]string{`RateLimitConfig "a": descriptors[0].rate_limit.unit: "RateLimitUnit 9" is not a unit`}},
		{"unit with unlimited", []*rlsconfv3.RateLimitConfig{one("a", "d", &rlsconfv3.RateLimitDescriptor{Key: "k", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_SECOND, Unlimited: true}})},
			[]string{`descriptors[0].rate_limit.unit: given with unlimited: true`}},
		{"empty replaces", []*rlsconfv3.RateLimitConfig{one("a", "d", &rlsconfv3.RateLimitDescriptor{Key: "k", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_SECOND, Replaces: []*rlsconfv3.RateLimitReplace{{}}}})},
			[]string{`descriptors[0].rate_limit.replaces[0].name: missing or empty`}},
		{"replaces itself", []*rlsconfv3.RateLimitConfig{one("a", "d", &rlsconfv3.RateLimitDescriptor{Key: "k", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_SECOND, Name: "n", Replaces: []*rlsconfv3.RateLimitReplace{{Name: "n"}}}})},
			[]string{`descriptors[0].rate_limit.replaces[0].name: "n" is this limit's own name`}},
		{"a newer field", []*rlsconfv3.RateLimitConfig{one("a", "d", withUnknown(&rlsconfv3.RateLimitDescriptor{Key: "k"}, 7))},
			[]string{`RateLimitConfig "a": descriptors[0].quota_mode: unknown field`}},
		{"an unknown field", []*rlsconfv3.RateLimitConfig{one("a", "d", withUnknown(&rlsconfv3.RateLimitDescriptor{Key: "k"}, 42))},
			[]string{`descriptors[0].field_42: unknown field`}},
		{"nil descriptor", []*rlsconfv3.RateLimitConfig{one("a", "d", nil)}, []string{`RateLimitConfig "a": descriptors[0]: want a mapping with a key, got null`}},
		{"nil resource", []*rlsconfv3.RateLimitConfig{nil}, []string{`RateLimitConfig [0] (no name): a nil resource`}},
		{"unnamed", []*rlsconfv3.RateLimitConfig{one("x", "d"), one("", "")}, []string{`RateLimitConfig [1] (no name): domain: empty`}},
		{"a domain twice", []*rlsconfv3.RateLimitConfig{one("a", "d"), one("b", "d")},
			[]string{`domain "d" defined twice: in RateLimitConfig "a" and in RateLimitConfig "b"`}},
		{"every resource's problems", []*rlsconfv3.RateLimitConfig{
			one("a", "d", &rlsconfv3.RateLimitDescriptor{Key: "k", RateLimit: policy(rlsconfv3.RateLimitUnit_UNKNOWN, 1)}),
			one("b", "e", &rlsconfv3.RateLimitDescriptor{RateLimit: sec})},
			[]string{`RateLimitConfig "a": descriptors[0].rate_limit.unit: missing`, `RateLimitConfig "b": descriptors[0].key: missing or empty`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Convert(tc.configs)
			if err == nil {
				t.Fatalf("accepted: %v", c.Names())
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\nlacks %q", err, w)
				}
			}
			if tc.name != "a domain twice" && tc.name != "nil resource" && !errors.Is(err, limits.ErrInvalidConfig) {
				t.Errorf("error %v does not wrap limits.ErrInvalidConfig", err)
			}
		})
	}
}

// TestConvertMerged: with MERGE_DOMAIN_CONFIG's behaviour, the resources
// of one domain are one domain, their rules in the resources' order; two
// first-level rules alike across them are refused naming both resources.
func TestConvertMerged(t *testing.T) {
	a := &rlsconfv3.RateLimitConfig{Name: "a", Domain: "edge", Descriptors: []*rlsconfv3.RateLimitDescriptor{{Key: "x", RateLimit: policy(rlsconfv3.RateLimitUnit_SECOND, 1)}}}
	b := &rlsconfv3.RateLimitConfig{Name: "b", Domain: "edge", Descriptors: []*rlsconfv3.RateLimitDescriptor{{Key: "y", RateLimit: policy(rlsconfv3.RateLimitUnit_MINUTE, 2)}}}
	other := &rlsconfv3.RateLimitConfig{Name: "c", Domain: "db"}
	c, err := ConvertMerged([]*rlsconfv3.RateLimitConfig{a, other, b})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Names(); len(got) != 2 {
		t.Fatalf("domains %v, want db and edge", got)
	}
	if d := c.Domain("edge"); d.Rules() != 2 || !strings.Contains(d.Source, `RateLimitConfig "a", RateLimitConfig "b"`) {
		t.Errorf("edge: %d rules from %q, want 2 from a and b", d.Rules(), d.Source)
	}
	if m := c.Match("edge", []rls.Entry{{Key: "y", Value: "1"}}); m.Rule == nil || m.Rule.Limit.RequestsPerUnit != 2 {
		t.Errorf("y: %+v", m.Rule)
	}
	dup := &rlsconfv3.RateLimitConfig{Name: "dup", Domain: "edge", Descriptors: []*rlsconfv3.RateLimitDescriptor{{Key: "x", RateLimit: policy(rlsconfv3.RateLimitUnit_HOUR, 3)}}}
	_, err = ConvertMerged([]*rlsconfv3.RateLimitConfig{a, b, dup})
	if err == nil || !strings.Contains(err.Error(), `RateLimitConfig "a", RateLimitConfig "b", RateLimitConfig "dup"`) ||
		!strings.Contains(err.Error(), "descriptors[2]: the same key and value as descriptors[0]") {
		t.Errorf("a rule in two merged resources: %v", err)
	}
	if _, err := Convert([]*rlsconfv3.RateLimitConfig{a, b}); err == nil {
		t.Error("Convert merged a domain given twice")
	}
}
