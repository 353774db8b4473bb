package admin

import (
	"math"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-rl/sluice/admin/effective"
	"github.com/sluice-rl/sluice/admin/internal/yamlnode"
	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/resources"
)

// ObjectView is one object of the resource repository: as written in its
// Document and as the loader (resources.Parse) sees it.
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
	// limit). Its shape is the kind's, from package admin/effective:
	// effective.Template, *effective.Resource, *effective.Bucket (domains,
	// defaults, templates, the global default), effective.TierDomain, an
	// int64 (a copy-limited resource's domain), effective.Namespace or
	// effective.EnvoyDomain. Absent when the document does not load.
	Effective any `json:"effective,omitempty"`
}

func newObjectView(o Object, n *yaml.Node, repo *resources.Repository) ObjectView {
	v := ObjectView{Object: o, Kind: o.Kind, Name: o.Name, Domain: o.Domain, Value: nodeValue(n, 0)}
	if b, err := encodeNode(n); err == nil {
		v.YAML = string(b)
	}
	if repo != nil {
		v.Effective = effectiveOf(o, repo)
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

// effectiveOf returns o as repo's loader sees it (package admin/effective),
// or nil when repo has no such object.
func effectiveOf(o Object, repo *resources.Repository) any {
	if o.Kind == KindEnvoyDomain {
		d := repo.EnvoyRateLimit().Domain(o.Name)
		if d == nil {
			return nil
		}
		return effective.EnvoyDomainOf(d)
	}
	if o.Kind == KindTemplate {
		for _, t := range repo.Templates() {
			if t.IdentifierGlob == o.Name {
				return effective.TemplateOf(t)
			}
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
			return effective.BucketOf(*lc.GlobalDefault)
		}
		return nil
	case KindNamespace:
		if lc != nil {
			if ns, ok := lc.Namespaces[o.Name]; ok {
				return effective.NamespaceOf(ns)
			}
		}
		return nil
	}
	if cc != nil {
		if r, ok := cc.Resources[o.Name]; ok {
			switch o.Kind {
			case KindResource:
				return effective.CopiesOf(r)
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
		return effective.ResourceOf(r)
	case KindDefault:
		if r.Default != nil {
			return effective.BucketOf(*r.Default)
		}
	case KindBucketTemplate:
		if r.Template != nil {
			return effective.BucketOf(*r.Template)
		}
	case KindDomain:
		if r.Algorithm == limits.BurstTiers {
			if td, ok := r.TierDomains[o.Domain]; ok {
				return effective.TierDomainOf(td)
			}
			return nil
		}
		if b, ok := r.Buckets[o.Domain]; ok {
			return effective.BucketOf(b)
		}
	}
	return nil
}
