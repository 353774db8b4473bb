// Package yamlnode holds the small helpers over go.yaml.in/yaml/v3 node
// trees that the admin packages' edits of the resource repository share:
// building nodes, following aliases, looking up a mapping's keys,
// and naming a node's kind in an error.
package yamlnode

import (
	"fmt"

	"go.yaml.in/yaml/v3"
)

// NewMapping returns an empty mapping.
func NewMapping() *yaml.Node { return &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"} }

// NewSequence returns an empty sequence.
func NewSequence() *yaml.Node { return &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"} }

// NewKey returns a string scalar: a mapping key.
func NewKey(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s} }

// IsNull reports whether n is absent or a null scalar (null, ~, or empty).
func IsNull(n *yaml.Node) bool {
	return n == nil || n.Kind == yaml.ScalarNode && (n.Tag == "!!null" || n.Tag == "" && (n.Value == "" || n.Value == "~" || n.Value == "null"))
}

// KindName names n's kind for an error: "a mapping", "a sequence", `int "3"`, "an alias".
func KindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a sequence"
	case yaml.ScalarNode:
		return fmt.Sprintf("%s %q", ShortTag(n), n.Value)
	case yaml.AliasNode:
		return "an alias"
	}
	return "a document"
}

// ShortTag is n's tag without "!!" ("int", "str").
func ShortTag(n *yaml.Node) string {
	t := n.ShortTag()
	if len(t) > 2 && t[:2] == "!!" {
		return t[2:]
	}
	return t
}

// Deref follows aliases (at most 100).
func Deref(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 100; i++ {
		n = n.Alias
	}
	return n
}

// MapIndex returns the index in m.Content of key's key node, or -1. Keys
// are compared as written; merge keys (<<) are not followed.
func MapIndex(m *yaml.Node, key string) int {
	if m == nil || m.Kind != yaml.MappingNode {
		return -1
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if k := Deref(m.Content[i]); k != nil && k.Kind == yaml.ScalarNode && k.Value == key && k.Tag != "!!merge" {
			return i
		}
	}
	return -1
}

// MapGet returns the value of key in mapping m (aliases followed), or nil.
func MapGet(m *yaml.Node, key string) *yaml.Node {
	m = Deref(m)
	if i := MapIndex(m, key); i >= 0 {
		return m.Content[i+1]
	}
	return nil
}
