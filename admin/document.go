package admin

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/sluice-rl/sluice/limits/limitsyaml"
	"go.yaml.in/yaml/v3"
)

// ErrNotFound is wrapped by the errors for an object, a parent object or
// a version that does not exist.
var ErrNotFound = errors.New("not found")

// ErrExists is wrapped by the error of a create whose object exists.
var ErrExists = errors.New("already exists")

// document is a configuration document as a YAML node tree: edits change
// nodes in place, so comments and the order of keys survive them.
type document struct {
	root *yaml.Node // a DocumentNode whose Content[0] is the top mapping
}

// parseDocument reads one YAML document. An empty one is an empty
// mapping.
func parseDocument(data []byte) (*document, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var root yaml.Node
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return &document{root: &yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{newMapping()}}}, nil
		}
		return nil, fmt.Errorf("the configuration document: %w", err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("the configuration document: more than one YAML document; want one")
	}
	if len(root.Content) == 0 {
		root.Content = []*yaml.Node{newMapping()}
	}
	top := root.Content[0]
	if isNull(top) {
		m := newMapping()
		m.HeadComment, m.LineComment, m.FootComment = top.HeadComment, top.LineComment, top.FootComment
		root.Content[0] = m
	} else if top.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("the configuration document: want a mapping (resources:, limits:), got %s", kindName(top))
	}
	keepStrings(&root)
	return &document{root: &root}, nil
}

// keepStrings turns folded strings (>) into literal ones (|): the YAML
// library writes some folded strings back as other strings.
func keepStrings(n *yaml.Node) {
	if n.Kind == yaml.ScalarNode && n.Style&yaml.FoldedStyle != 0 {
		n.Style = n.Style&^yaml.FoldedStyle | yaml.LiteralStyle
	}
	for _, c := range n.Content {
		keepStrings(c)
	}
}

// encode writes the document as YAML, indented by two spaces.
func (d *document) encode() ([]byte, error) {
	return encodeNode(d.root)
}

func encodeNode(n *yaml.Node) ([]byte, error) { return limitsyaml.Encode(n) }

func (d *document) top() *yaml.Node { return d.root.Content[0] }

func newMapping() *yaml.Node { return &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"} }

func newSequence() *yaml.Node { return &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"} }

func newKey(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s} }

func isNull(n *yaml.Node) bool {
	return n == nil || n.Kind == yaml.ScalarNode && (n.Tag == "!!null" || n.Tag == "" && (n.Value == "" || n.Value == "~" || n.Value == "null"))
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a sequence"
	case yaml.ScalarNode:
		return fmt.Sprintf("%s %q", shortTag(n), n.Value)
	case yaml.AliasNode:
		return "an alias"
	}
	return "a document"
}

func shortTag(n *yaml.Node) string {
	t := n.ShortTag()
	if len(t) > 2 && t[:2] == "!!" {
		return t[2:]
	}
	return t
}

// deref follows aliases (at most 100).
func deref(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 100; i++ {
		n = n.Alias
	}
	return n
}

// mapIndex returns the index in m.Content of key's key node, or -1. Keys
// are compared as written; merge keys (<<) are not followed.
func mapIndex(m *yaml.Node, key string) int {
	if m == nil || m.Kind != yaml.MappingNode {
		return -1
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if k := deref(m.Content[i]); k != nil && k.Kind == yaml.ScalarNode && k.Value == key && k.Tag != "!!merge" {
			return i
		}
	}
	return -1
}

// mapGet returns the value of key in mapping m (aliases followed), or nil.
func mapGet(m *yaml.Node, key string) *yaml.Node {
	m = deref(m)
	if i := mapIndex(m, key); i >= 0 {
		return m.Content[i+1]
	}
	return nil
}

// child returns the mapping under key in m, creating it (at the end of m)
// when absent or null when create is set. where names m in errors.
func child(m *yaml.Node, key, where string, create bool) (*yaml.Node, error) {
	i := mapIndex(m, key)
	if i < 0 {
		if !create {
			return nil, fmt.Errorf("%s: %w", join(where, key), ErrNotFound)
		}
		c := newMapping()
		m.Content = append(m.Content, newKey(key), c)
		return c, nil
	}
	v := m.Content[i+1]
	if isNull(v) {
		if !create {
			return nil, fmt.Errorf("%s: %w", join(where, key), ErrNotFound)
		}
		c := newMapping()
		c.HeadComment, c.LineComment, c.FootComment = v.HeadComment, v.LineComment, v.FootComment
		m.Content[i+1] = c
		return c, nil
	}
	if d := deref(v); d.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s: want a mapping, got %s", join(where, key), kindName(d))
	} else if d != v {
		return nil, fmt.Errorf("%s: is an alias; edit the anchored mapping it refers to (or replace the alias by its own mapping)", join(where, key))
	}
	return v, nil
}

func join(a, b string) string {
	if a == "" {
		return b
	}
	return a + "." + b
}

// slot is where an object's value lives: the value of key in mapping m,
// or (templates, Envoy domains) item index of sequence seq.
type slot struct {
	m     *yaml.Node // mapping holding the object (nil for a template)
	key   string
	seq   *yaml.Node // the resources: or envoy_ratelimit: sequence
	index int        // the template's index, -1 when absent
}

// value returns the slot's value node (nil when absent).
func (s slot) value() *yaml.Node {
	if s.seq != nil {
		if s.index < 0 {
			return nil
		}
		return s.seq.Content[s.index]
	}
	if i := mapIndex(s.m, s.key); i >= 0 {
		return s.m.Content[i+1]
	}
	return nil
}

// locate finds o's slot. With create, the mappings above it are made when
// absent (but never the resource of a domain, default or template: that
// must exist). Errors wrap ErrNotFound for a missing parent.
func (d *document) locate(o Object, create bool) (slot, error) {
	top := d.top()
	if ik, ok := itemKinds[o.Kind]; ok {
		i := mapIndex(top, ik.list)
		var seq *yaml.Node
		switch {
		case i >= 0 && !isNull(top.Content[i+1]):
			seq = deref(top.Content[i+1])
			if seq.Kind != yaml.SequenceNode {
				return slot{}, fmt.Errorf("%s: want a sequence of %ss, got %s", ik.list, ik.what, kindName(seq))
			}
			if seq != top.Content[i+1] {
				return slot{}, fmt.Errorf("%s: is an alias; edit the anchored sequence it refers to", ik.list)
			}
		case !create:
			return slot{seq: newSequence(), index: -1}, nil
		case i >= 0:
			seq = newSequence()
			top.Content[i+1] = seq
		default:
			seq = newSequence()
			top.Content = append(top.Content, newKey(ik.list), seq)
		}
		s := slot{seq: seq, index: -1}
		for j, t := range seq.Content {
			if g := mapGet(deref(t), ik.name); g != nil && deref(g).Kind == yaml.ScalarNode && deref(g).Value == o.Name {
				s.index = j
				break
			}
		}
		return s, nil
	}
	if o.Kind == KindDocument {
		return slot{}, errors.New("the whole document has no slot")
	}
	lim, err := child(top, "limits", "", create)
	if err != nil {
		return slot{}, err
	}
	switch o.Kind {
	case KindGlobalDefault:
		return slot{m: lim, key: "global_default"}, nil
	case KindNamespace:
		ns, err := child(lim, "namespaces", "limits", create)
		if err != nil {
			return slot{}, err
		}
		return slot{m: ns, key: o.Name}, nil
	}
	rs, err := child(lim, "resources", "limits", create && o.Kind == KindResource)
	if err != nil {
		return slot{}, err
	}
	if o.Kind == KindResource {
		return slot{m: rs, key: o.Name}, nil
	}
	r, err := child(rs, o.Name, "limits.resources", false)
	if err != nil {
		return slot{}, fmt.Errorf("%s: %w", Resource(o.Name), ErrNotFound)
	}
	switch o.Kind {
	case KindDefault:
		return slot{m: r, key: "default"}, nil
	case KindBucketTemplate:
		return slot{m: r, key: "template"}, nil
	}
	field := "domains"
	if isCopiesNode(r) {
		field = "domain_limits" // a copy-limited resource's domains
	}
	ds, err := child(r, field, "limits.resources."+o.Name, create)
	if err != nil {
		return slot{}, err
	}
	return slot{m: ds, key: o.Domain}, nil
}

// isCopiesNode reports whether a resource's mapping says algorithm: copies.
func isCopiesNode(r *yaml.Node) bool {
	a := deref(mapGet(r, "algorithm"))
	return a != nil && a.Kind == yaml.ScalarNode && a.Value == "copies"
}

// get returns o's value node. Errors wrap ErrNotFound.
func (d *document) get(o Object) (*yaml.Node, error) {
	if o.Kind == KindDocument {
		return d.top(), nil
	}
	s, err := d.locate(o, false)
	if err != nil {
		return nil, err
	}
	v := s.value()
	if v == nil {
		return nil, fmt.Errorf("%s: %w", o, ErrNotFound)
	}
	return v, nil
}

// putMode says what put does with an object that exists or does not.
type putMode int

const (
	modeCreate putMode = iota // fails with ErrExists when it exists
	modeUpdate                // fails with ErrNotFound when it does not
	modeUpsert                // either
)

// put sets o's value to v (a node tree of its own): a new object is
// appended at the end of its mapping (or list), an existing one keeps its
// place, its key's comments, its anchor, and the comments of the fields
// and items v keeps.
func (d *document) put(o Object, v *yaml.Node, mode putMode) error {
	if o.Kind == KindDocument {
		if deref(v).Kind != yaml.MappingNode {
			return fmt.Errorf("the document: want a mapping, got %s", kindName(v))
		}
		carryComments(d.top(), v)
		d.root.Content[0] = v
		return nil
	}
	s, err := d.locate(o, mode != modeUpdate)
	if err != nil {
		return err
	}
	old := s.value()
	switch {
	case old != nil && mode == modeCreate:
		return fmt.Errorf("%s: %w", o, ErrExists)
	case old == nil && mode == modeUpdate:
		return fmt.Errorf("%s: %w", o, ErrNotFound)
	}
	if old != nil {
		carryComments(old, v)
		if old.Anchor != "" && v.Anchor == "" {
			v.Anchor = old.Anchor // aliases elsewhere keep referring to it
		}
	}
	fixLineComments(v)
	if s.seq != nil {
		if isBlock(v) && v.LineComment != "" {
			v.HeadComment = strings.TrimSpace(v.HeadComment + "\n" + v.LineComment)
			v.LineComment = ""
		}
		if s.index >= 0 {
			s.seq.Content[s.index] = v
		} else {
			if len(s.seq.Content) == 0 {
				s.seq.Style = 0 // an empty flow [] becomes a block list
			}
			s.seq.Content = append(s.seq.Content, v)
		}
		return nil
	}
	i := mapIndex(s.m, s.key)
	if i < 0 {
		if len(s.m.Content) == 0 {
			s.m.Style = 0 // an empty flow {} becomes a block mapping
		}
		s.m.Content = append(s.m.Content, newKey(s.key), v)
		i = len(s.m.Content) - 2
	}
	s.m.Content[i+1] = v
	liftLineComment(s.m.Content[i], v)
	return nil
}

// isBlock reports whether n is a mapping or sequence in block style.
func isBlock(n *yaml.Node) bool {
	return (n.Kind == yaml.MappingNode || n.Kind == yaml.SequenceNode) && n.Style&yaml.FlowStyle == 0 && len(n.Content) > 0
}

// liftLineComment moves the line comment of a block collection v (carried
// from a flow one: "small: {size: 1} # note") to its key k, where YAML
// writes it on the key's line: the encoder would put it after v's last
// line, on the next key's.
func liftLineComment(k, v *yaml.Node) {
	if !isBlock(v) || v.LineComment == "" {
		return
	}
	if k.LineComment == "" {
		k.LineComment = v.LineComment
	} else {
		v.HeadComment = strings.TrimSpace(v.HeadComment + "\n" + v.LineComment)
	}
	v.LineComment = ""
}

// fixLineComments lifts, throughout n, the line comments of block
// collections to their keys (liftLineComment), or for list items to a
// comment above them.
func fixLineComments(n *yaml.Node) {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			liftLineComment(n.Content[i], n.Content[i+1])
			fixLineComments(n.Content[i+1])
		}
	case yaml.SequenceNode:
		for _, c := range n.Content {
			if isBlock(c) && c.LineComment != "" {
				c.HeadComment = strings.TrimSpace(c.HeadComment + "\n" + c.LineComment)
				c.LineComment = ""
			}
			fixLineComments(c)
		}
	}
}

// remove deletes o. Errors wrap ErrNotFound when it does not exist.
func (d *document) remove(o Object) error {
	if o.Kind == KindDocument {
		return errors.New("the whole document cannot be deleted")
	}
	s, err := d.locate(o, false)
	if err != nil {
		return err
	}
	if s.value() == nil {
		return fmt.Errorf("%s: %w", o, ErrNotFound)
	}
	if s.seq != nil {
		s.seq.Content = append(s.seq.Content[:s.index], s.seq.Content[s.index+1:]...)
		if len(s.seq.Content) == 0 {
			s.seq.Style = yaml.FlowStyle
		}
		return nil
	}
	i := mapIndex(s.m, s.key)
	// A comment above the removed key moves to the next key, if any.
	if hc := s.m.Content[i].HeadComment; hc != "" && i+2 < len(s.m.Content) && s.m.Content[i+2].HeadComment == "" {
		s.m.Content[i+2].HeadComment = hc
	}
	s.m.Content = append(s.m.Content[:i], s.m.Content[i+2:]...)
	if len(s.m.Content) == 0 {
		s.m.Style = yaml.FlowStyle
	}
	return nil
}

// list returns the objects of collection c, in document order.
func (d *document) list(c Object) ([]Object, error) {
	var out []Object
	if ik, ok := itemKinds[c.Kind]; ok {
		s, err := d.locate(c, false)
		if err != nil {
			return nil, err
		}
		for _, t := range s.seq.Content {
			if g := deref(mapGet(deref(t), ik.name)); g != nil && g.Kind == yaml.ScalarNode {
				out = append(out, Object{Kind: c.Kind, Name: g.Value})
			}
		}
		return out, nil
	}
	var m *yaml.Node
	switch c.Kind {
	case KindResource, KindNamespace:
		lim := deref(mapGet(d.top(), "limits"))
		field := "resources"
		if c.Kind == KindNamespace {
			field = "namespaces"
		}
		m = deref(mapGet(lim, field))
	case KindDomain:
		rs := deref(mapGet(deref(mapGet(d.top(), "limits")), "resources"))
		if mapIndex(rs, c.Name) < 0 {
			return nil, fmt.Errorf("%s: %w", Resource(c.Name), ErrNotFound)
		}
		r := deref(mapGet(rs, c.Name))
		field := "domains"
		if isCopiesNode(r) {
			field = "domain_limits"
		}
		m = deref(mapGet(r, field))
	default:
		return nil, fmt.Errorf("%s is not a collection", c)
	}
	if m == nil || m.Kind != yaml.MappingNode {
		return out, nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k := deref(m.Content[i])
		if k == nil || k.Kind != yaml.ScalarNode || k.Tag == "!!merge" {
			continue
		}
		o := c
		if c.Kind == KindDomain {
			o.Domain = k.Value
		} else {
			o.Name = k.Value
		}
		out = append(out, o)
	}
	return out, nil
}

// flat reports whether n is a mapping or list of scalars only.
func flat(n *yaml.Node) bool {
	if n.Kind != yaml.MappingNode && n.Kind != yaml.SequenceNode {
		return false
	}
	for _, c := range n.Content {
		if c.Kind != yaml.ScalarNode {
			return false
		}
	}
	return true
}

// carryComments copies onto v the comments of old where v has none (and
// old's flow style, for a flat value): its own, and recursively those of the mapping fields (matched by key) and
// sequence items (matched by index) v keeps.
func carryComments(old, v *yaml.Node) {
	if old == nil || v == nil {
		return
	}
	if v.HeadComment == "" {
		v.HeadComment = old.HeadComment
	}
	if v.LineComment == "" {
		v.LineComment = old.LineComment
	}
	if v.FootComment == "" {
		v.FootComment = old.FootComment
	}
	// A flat mapping or list written in flow style ({size: 1, fill_rate:
	// 1}) stays so when its new value is flat too.
	if old.Kind == v.Kind && old.Style&yaml.FlowStyle != 0 && v.Style == 0 && flat(v) {
		v.Style = yaml.FlowStyle
	}
	switch {
	case old.Kind == yaml.MappingNode && v.Kind == yaml.MappingNode:
		for i := 0; i+1 < len(v.Content); i += 2 {
			k := v.Content[i]
			if k.Kind != yaml.ScalarNode {
				continue
			}
			if j := mapIndex(old, k.Value); j >= 0 {
				carryComments(old.Content[j], k)
				carryComments(old.Content[j+1], v.Content[i+1])
			}
		}
	case old.Kind == yaml.SequenceNode && v.Kind == yaml.SequenceNode:
		for i := range min(len(old.Content), len(v.Content)) {
			carryComments(old.Content[i], v.Content[i])
		}
	}
}
