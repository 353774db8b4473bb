package identity

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Policy is a policy file: for each identity, the resources it may use
// through each API, as patterns; a default for the identities it does
// not name; and the identities of the fleet's servers. An identity with
// no entry and no default, or an API its entry does not name, may use
// nothing. Immutable once parsed; safe for concurrent use.
//
// The file (YAML, strict: unknown keys are errors):
//
//	identities:
//	  spiffe://example.org/ns/shop/sa/checkout:   # a SPIFFE ID, or a certificate's CN
//	    lease: [checkout/*]                        # doorman.Capacity resource ids
//	    allow: [checkout/**, shared/search]        # Allow: resources; the quota service: namespaces
//	    reserve: [sandboxes]                       # Reserve: copy-limited resources
//	    ratelimit: [edge]                          # Envoy's ShouldRateLimit: domains
//	default:                                       # every identity not named above (absent: nothing)
//	  allow: [public/**]
//	fleet: [spiffe://example.org/ns/sluice/*]      # servers trusted to forward session requests
//
// Patterns are path.Match's (`*` stops at `/`), and "**" alone matches
// everything, "p/**" p and everything under p/.
type Policy struct {
	path       string
	hash       string
	identities map[string]*grants
	def        *grants
	fleetOf    []string // patterns
}

// grants are the patterns of resources an identity may use, by API.
type grants [numAPIs][]string

// LoadPolicy reads and parses the policy file at file (ParsePolicy); its
// errors start with the file's name.
func LoadPolicy(file string) (*Policy, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("identity policy: %w", err)
	}
	p, err := ParsePolicy(data)
	if err != nil {
		return nil, fmt.Errorf("identity policy %s: %w", file, err)
	}
	p.path = file
	return p, nil
}

// ParsePolicy parses a policy file's content. Errors name the field and
// its line: "identities.alice.lease[1] (line 4): bad pattern \"[\"", an
// unknown key, a value of the wrong kind, an identity or key given twice.
// An empty file is a policy that grants nothing.
func ParsePolicy(data []byte) (*Policy, error) {
	sum := sha256.Sum256(data)
	p := &Policy{hash: hex.EncodeToString(sum[:]), identities: map[string]*grants{}}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	if len(doc.Content) == 0 {
		return p, nil
	}
	root := doc.Content[0]
	if root.Tag == "!!null" { // comments only
		return p, nil
	}
	if err := kind(root, yaml.MappingNode, "", "a mapping of identities, default and fleet"); err != nil {
		return nil, err
	}
	err := eachKey(root, "", []string{"identities", "default", "fleet"}, func(key string, v *yaml.Node) error {
		switch key {
		case "identities":
			if err := kind(v, yaml.MappingNode, key, "a mapping of identities to their grants"); err != nil {
				return err
			}
			return eachKey(v, key, nil, func(id string, g *yaml.Node) error {
				where := key + "." + id
				if strings.TrimSpace(id) == "" {
					return fieldErr(where, g, "an identity must not be empty")
				}
				gs, err := parseGrants(g, where)
				p.identities[id] = gs
				return err
			})
		case "default":
			gs, err := parseGrants(v, key)
			p.def = gs
			return err
		default: // fleet
			var err error
			p.fleetOf, err = patterns(v, key)
			return err
		}
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}

// parseGrants parses an identity's grants: a mapping of API names to
// lists of patterns (null: none).
func parseGrants(n *yaml.Node, where string) (*grants, error) {
	g := new(grants)
	if n.Tag == "!!null" {
		return g, nil
	}
	if err := kind(n, yaml.MappingNode, where, "a mapping of "+strings.Join(apiNames[:], ", ")+" to lists of patterns"); err != nil {
		return nil, err
	}
	err := eachKey(n, where, apiNames[:], func(key string, v *yaml.Node) error {
		api := API(slices.Index(apiNames[:], key))
		var err error
		g[api], err = patterns(v, where+"."+key)
		return err
	})
	return g, err
}

// patterns parses a list of patterns (null: none), checking each.
func patterns(n *yaml.Node, where string) ([]string, error) {
	if n.Tag == "!!null" {
		return nil, nil
	}
	if err := kind(n, yaml.SequenceNode, where, "a list of patterns"); err != nil {
		return nil, err
	}
	out := make([]string, 0, len(n.Content))
	for i, e := range n.Content {
		at := fmt.Sprintf("%s[%d]", where, i)
		if err := kind(e, yaml.ScalarNode, at, "a pattern"); err != nil {
			return nil, err
		}
		if e.Value == "" {
			return nil, fieldErr(at, e, "an empty pattern matches nothing")
		}
		if _, err := path.Match(strings.TrimSuffix(e.Value, "/**"), ""); err != nil {
			return nil, fieldErr(at, e, "bad pattern %q: %v", e.Value, err)
		}
		out = append(out, e.Value)
	}
	return out, nil
}

// eachKey calls f for each key of mapping n in order; a key not in
// allowed (nil: any) or given twice is an error.
func eachKey(n *yaml.Node, where string, allowed []string, f func(key string, v *yaml.Node) error) error {
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		at := joinField(where, k.Value)
		if err := kind(k, yaml.ScalarNode, at, "a name"); err != nil {
			return err
		}
		if allowed != nil && !slices.Contains(allowed, k.Value) {
			return fieldErr(at, k, "unknown key; want one of %s", strings.Join(allowed, ", "))
		}
		if line, dup := seen[k.Value]; dup {
			return fieldErr(at, k, "given twice (first on line %d)", line)
		}
		seen[k.Value] = k.Line
		if err := f(k.Value, v); err != nil {
			return err
		}
	}
	return nil
}

func kind(n *yaml.Node, k yaml.Kind, where, want string) error {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind != k {
		return fieldErr(where, n, "want %s", want)
	}
	return nil
}

func joinField(where, key string) string {
	if where == "" {
		return key
	}
	return where + "." + key
}

func fieldErr(where string, n *yaml.Node, format string, args ...any) error {
	if where == "" {
		where = "the file"
	}
	return fmt.Errorf("%s (line %d): %s", where, n.Line, fmt.Sprintf(format, args...))
}

// Path returns the file the policy was loaded from ("" when parsed from
// bytes).
func (p *Policy) Path() string { return p.path }

// Hash returns a digest of the file's content (filewatch.Hashed).
func (p *Policy) Hash() string { return p.hash }

// Len returns the number of identities the policy names.
func (p *Policy) Len() int { return len(p.identities) }

// Allows reports whether identity may use resource through api: one of
// its entry's patterns for api matches resource (identities the policy
// does not name: the default entry's; none: nothing is allowed).
func (p *Policy) Allows(identity string, api API, resource string) bool {
	g := p.identities[identity]
	if g == nil {
		g = p.def
	}
	if g == nil || api < 0 || api >= numAPIs {
		return false
	}
	for _, pat := range g[api] {
		if Match(pat, resource) {
			return true
		}
	}
	return false
}

// GrantsAny reports whether identity has at least one pattern for api
// (its entry's, else the default entry's): whether it may use api at all.
func (p *Policy) GrantsAny(identity string, api API) bool {
	g := p.identities[identity]
	if g == nil {
		g = p.def
	}
	return g != nil && api >= 0 && api < numAPIs && len(g[api]) > 0
}

// fleet reports whether identity is one of the fleet's servers.
func (p *Policy) fleet(identity string) bool {
	for _, pat := range p.fleetOf {
		if Match(pat, identity) {
			return true
		}
	}
	return false
}

// longerOwner returns the longest identity the policy names that lies
// under who ("who/…") and owns id (Owns), or "": id then belongs to that
// identity, not to who. It costs a map lookup per "/" of id after who.
func (p *Policy) longerOwner(who, id string) string {
	owner := ""
	for i := len(who) + 1; i <= len(id); i++ {
		if i == len(id) || id[i] == '/' {
			if _, ok := p.identities[id[:i]]; ok {
				owner = id[:i]
			}
		}
	}
	return owner
}

// Match reports whether name matches pattern: "**" matches everything;
// "p/**" matches p and every name under p/ (p itself a path.Match
// pattern, matched against name's leading segments); any other pattern
// is path.Match's (`*` does not cross `/`). A malformed pattern matches
// nothing (ParsePolicy refuses one).
func Match(pattern, name string) bool {
	if pattern == "**" {
		return true
	}
	if prefix, ok := strings.CutSuffix(pattern, "/**"); ok {
		for i := 0; i <= len(name); i++ {
			if i == len(name) || name[i] == '/' {
				if m, _ := path.Match(prefix, name[:i]); m {
					return true
				}
			}
		}
		return false
	}
	m, _ := path.Match(pattern, name)
	return m
}
