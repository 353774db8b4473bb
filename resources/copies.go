package resources

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-rl/sluice/limits/copies"
)

// Copy-limited resources (Charon's counting semaphores) sit in the limits
// section beside the rate-limited ones, marked `algorithm: copies`:
//
//	limits:
//	  namespaces:
//	    open/:  {allow_unconfigured: true}   # unconfigured resources: unlimited, still counted
//	    muted/: {ignore_configured: true}    # configured ones: limits ignored, still counted
//	  resources:
//	    cookbook/sandboxes:
//	      algorithm: copies
//	      domain_limit: 3          # copies one domain may hold
//	      domain_limits: {acme: 4} # per-domain overrides
//	      global_limit: 5          # across domains; absent: unbounded
//	      groups:                  # a domain in several groups takes one copy from each pool
//	        - {name: trusted, limit: 4, domains: [acme, initech]}
//	      on_store_error: closed   # shared copy log (--redis) failing: closed (refuse, the default) or open (grant, flagged degraded)
//
// Parse hands them to package limits/copies (Repository.Copies) and the
// rest of the section to package limits/limitsyaml. Normalization (charon-paper.md
// §4.1: limits above the global limit lowered to it) is reported by
// Repository.Notes.

// rawCopies is one copy-limited resource as written.
type rawCopies struct {
	Algorithm    string           `yaml:"algorithm"`
	DomainLimit  *int64           `yaml:"domain_limit"`
	DomainLimits map[string]int64 `yaml:"domain_limits"`
	GlobalLimit  *int64           `yaml:"global_limit"`
	Groups       []rawGroup       `yaml:"groups"`
	OnStoreError string           `yaml:"on_store_error"`
}

type rawGroup struct {
	Name    string   `yaml:"name"`
	Limit   *int64   `yaml:"limit"`
	Domains []string `yaml:"domains"`
}

// splitCopies takes the copy-limited resources out of a limits section
// node: it returns the section without them (for limitsyaml.DecodeSection),
// their configuration (nil when there are none and no namespace applies
// to them) and every problem found, each naming its path under "limits".
func splitCopies(section *yaml.Node) (*yaml.Node, *copies.Config, error) {
	if section == nil || section.Kind != yaml.MappingNode {
		return section, nil, nil
	}
	out := *section
	out.Content = nil
	cfg := &copies.Config{Resources: map[string]copies.Resource{}}
	var ignore []string
	var errs []error
	for i := 0; i+1 < len(section.Content); i += 2 {
		k, v := section.Content[i], section.Content[i+1]
		switch {
		case k.Value == "resources" && v.Kind == yaml.MappingNode:
			rest := *v
			rest.Content = nil
			for j := 0; j+1 < len(v.Content); j += 2 {
				name, body := v.Content[j], v.Content[j+1]
				if !isCopies(body) {
					rest.Content = append(rest.Content, name, body)
					continue
				}
				path := "limits.resources." + name.Value
				r, err := decodeCopies(body, path)
				if err != nil {
					errs = append(errs, err)
					continue
				}
				cfg.Resources[name.Value] = r
			}
			out.Content = append(out.Content, k, &rest)
			continue
		case k.Value == "namespaces" && v.Kind == yaml.MappingNode:
			// Read here for the copies too; package limits checks them.
			for j := 0; j+1 < len(v.Content); j += 2 {
				var ns struct {
					AllowUnconfigured bool `yaml:"allow_unconfigured"`
					IgnoreConfigured  bool `yaml:"ignore_configured"`
				}
				if v.Content[j+1].Decode(&ns) != nil {
					continue // limits reports it
				}
				if ns.AllowUnconfigured {
					cfg.AllowUnconfigured = append(cfg.AllowUnconfigured, v.Content[j].Value)
				}
				if ns.IgnoreConfigured {
					ignore = append(ignore, v.Content[j].Value)
				}
			}
		}
		out.Content = append(out.Content, k, v)
	}
	if len(errs) > 0 {
		return nil, nil, errors.Join(errs...)
	}
	for name, r := range cfg.Resources {
		for _, p := range ignore {
			if strings.HasPrefix(name, p) {
				r.Ignore = true
				cfg.Resources[name] = r
			}
		}
	}
	if len(cfg.Resources) == 0 && len(cfg.AllowUnconfigured) == 0 {
		return &out, nil, nil
	}
	sort.Strings(cfg.AllowUnconfigured)
	if err := cfg.Validate(); err != nil {
		return nil, nil, prefixErrors("limits.", err)
	}
	return &out, cfg, nil
}

// isCopies reports whether a resource's node says `algorithm: copies`.
func isCopies(n *yaml.Node) bool {
	if n.Kind != yaml.MappingNode {
		return false
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == "algorithm" {
			return n.Content[i+1].Value == "copies"
		}
	}
	return false
}

// decodeCopies decodes one copy-limited resource strictly (unknown fields
// are errors), naming path in its errors.
func decodeCopies(n *yaml.Node, path string) (copies.Resource, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	if err := enc.Encode(n); err != nil {
		return copies.Resource{}, fmt.Errorf("%s: %w", path, err)
	}
	dec := yaml.NewDecoder(&buf)
	dec.KnownFields(true)
	var raw rawCopies
	if err := dec.Decode(&raw); err != nil {
		return copies.Resource{}, fmt.Errorf("%s (line %d): %w", path, n.Line, err)
	}
	r := copies.Resource{DomainLimits: raw.DomainLimits}
	if raw.DomainLimit == nil {
		return copies.Resource{}, fmt.Errorf("%s.domain_limit: required (copies one domain may hold)", path)
	}
	r.DomainLimit = *raw.DomainLimit
	if raw.GlobalLimit != nil {
		if *raw.GlobalLimit <= 0 {
			return copies.Resource{}, fmt.Errorf("%s.global_limit: %d must be > 0 (leave it out for no global limit)", path, *raw.GlobalLimit)
		}
		r.GlobalLimit = *raw.GlobalLimit
	}
	for i, g := range raw.Groups {
		if g.Limit == nil {
			return copies.Resource{}, fmt.Errorf("%s.groups[%d].limit: required", path, i)
		}
		r.Groups = append(r.Groups, copies.Group{Name: g.Name, Limit: *g.Limit, Domains: g.Domains})
	}
	switch raw.OnStoreError {
	case "", "closed":
	case "open":
		r.OnStoreError = copies.FailOpen
	default:
		return copies.Resource{}, fmt.Errorf("%s.on_store_error: %q, want closed or open", path, raw.OnStoreError)
	}
	return r, nil
}

// prefixErrors prefixes every joined error's message with p.
func prefixErrors(p string, err error) error {
	var out []error
	for _, e := range unjoin(err) {
		out = append(out, fmt.Errorf("%s%w", p, e))
	}
	return errors.Join(out...)
}
