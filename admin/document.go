package admin

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-rl/sluice/admin/internal/yamlnode"
	"github.com/sluice-rl/sluice/limits/limitsyaml"
)

// ErrNotFound is wrapped by the errors for an object, a parent object or
// a version that does not exist.
var ErrNotFound = errors.New("not found")

// ErrExists is wrapped by the error of a create whose object exists.
var ErrExists = errors.New("already exists")

// Document is the resource repository as written: its document, the YAML
// a Store keeps (what `sluice server --config` reads), as a node tree.
// It is the repository's text, where resources.Repository is its meaning
// (resources.Parse reads the same bytes into one; ObjectView shows an
// object both ways): edits change nodes in place, so comments and the
// order of keys survive them. The Service edits one per change; the quota
// service's API (admin/quotaapi) edits one for its whole-configuration
// writes. A Document is not safe for concurrent use.
type Document struct {
	root *yaml.Node // a DocumentNode whose Content[0] is the top mapping
}

// ParseDocument reads one YAML document. An empty one is an empty
// mapping.
func ParseDocument(data []byte) (*Document, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var root yaml.Node
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return &Document{root: &yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{yamlnode.NewMapping()}}}, nil
		}
		return nil, fmt.Errorf("the resource repository: %w", err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("the resource repository: more than one YAML document; want one")
	}
	if len(root.Content) == 0 {
		root.Content = []*yaml.Node{yamlnode.NewMapping()}
	}
	top := root.Content[0]
	if yamlnode.IsNull(top) {
		m := yamlnode.NewMapping()
		m.HeadComment, m.LineComment, m.FootComment = top.HeadComment, top.LineComment, top.FootComment
		root.Content[0] = m
	} else if top.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("the resource repository: want a mapping (resources:, limits:), got %s", yamlnode.KindName(top))
	}
	keepStrings(&root)
	return &Document{root: &root}, nil
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

// Encode writes the document as YAML, indented by two spaces.
func (d *Document) Encode() ([]byte, error) {
	return encodeNode(d.root)
}

func encodeNode(n *yaml.Node) ([]byte, error) { return limitsyaml.Encode(n) }

func (d *Document) top() *yaml.Node { return d.root.Content[0] }

// child returns the mapping under key in m, creating it (at the end of m)
// when absent or null when create is set. where names m in errors.
func child(m *yaml.Node, key, where string, create bool) (*yaml.Node, error) {
	i := yamlnode.MapIndex(m, key)
	if i < 0 {
		if !create {
			return nil, fmt.Errorf("%s: %w", join(where, key), ErrNotFound)
		}
		c := yamlnode.NewMapping()
		m.Content = append(m.Content, yamlnode.NewKey(key), c)
		return c, nil
	}
	v := m.Content[i+1]
	if yamlnode.IsNull(v) {
		if !create {
			return nil, fmt.Errorf("%s: %w", join(where, key), ErrNotFound)
		}
		c := yamlnode.NewMapping()
		c.HeadComment, c.LineComment, c.FootComment = v.HeadComment, v.LineComment, v.FootComment
		m.Content[i+1] = c
		return c, nil
	}
	if d := yamlnode.Deref(v); d.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s: want a mapping, got %s", join(where, key), yamlnode.KindName(d))
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
	if i := yamlnode.MapIndex(s.m, s.key); i >= 0 {
		return s.m.Content[i+1]
	}
	return nil
}

// locate finds o's slot. With create, the mappings above it are made when
// absent (but never the resource of a domain, default or template: that
// must exist). Errors wrap ErrNotFound for a missing parent.
func (d *Document) locate(o Object, create bool) (slot, error) {
	top := d.top()
	if ik, ok := itemKinds[o.Kind]; ok {
		i := yamlnode.MapIndex(top, ik.list)
		var seq *yaml.Node
		switch {
		case i >= 0 && !yamlnode.IsNull(top.Content[i+1]):
			seq = yamlnode.Deref(top.Content[i+1])
			if seq.Kind != yaml.SequenceNode {
				return slot{}, fmt.Errorf("%s: want a sequence of %ss, got %s", ik.list, ik.what, yamlnode.KindName(seq))
			}
			if seq != top.Content[i+1] {
				return slot{}, fmt.Errorf("%s: is an alias; edit the anchored sequence it refers to", ik.list)
			}
		case !create:
			return slot{seq: yamlnode.NewSequence(), index: -1}, nil
		case i >= 0:
			seq = yamlnode.NewSequence()
			top.Content[i+1] = seq
		default:
			seq = yamlnode.NewSequence()
			top.Content = append(top.Content, yamlnode.NewKey(ik.list), seq)
		}
		s := slot{seq: seq, index: -1}
		for j, t := range seq.Content {
			if g := yamlnode.MapGet(yamlnode.Deref(t), ik.name); g != nil && yamlnode.Deref(g).Kind == yaml.ScalarNode && yamlnode.Deref(g).Value == o.Name {
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
	a := yamlnode.Deref(yamlnode.MapGet(r, "algorithm"))
	return a != nil && a.Kind == yaml.ScalarNode && a.Value == "copies"
}

// Get returns o's value node. Errors wrap ErrNotFound.
func (d *Document) Get(o Object) (*yaml.Node, error) {
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

// PutMode says what Put does with an object that exists or does not:
// PutCreate, PutUpdate or PutUpsert.
type PutMode int

const (
	PutCreate PutMode = iota // fails with ErrExists when it exists
	PutUpdate                // fails with ErrNotFound when it does not
	PutUpsert                // either
)

// Put sets o's value to v (a node tree of its own): a new object is
// appended at the end of its mapping (or list), an existing one keeps its
// place, its key's comments, its anchor, and the comments of the fields
// and items v keeps.
func (d *Document) Put(o Object, v *yaml.Node, mode PutMode) error {
	if o.Kind == KindDocument {
		if yamlnode.Deref(v).Kind != yaml.MappingNode {
			return fmt.Errorf("the document: want a mapping, got %s", yamlnode.KindName(v))
		}
		carryComments(d.top(), v)
		d.root.Content[0] = v
		return nil
	}
	s, err := d.locate(o, mode != PutUpdate)
	if err != nil {
		return err
	}
	old := s.value()
	switch {
	case old != nil && mode == PutCreate:
		return fmt.Errorf("%s: %w", o, ErrExists)
	case old == nil && mode == PutUpdate:
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
	i := yamlnode.MapIndex(s.m, s.key)
	if i < 0 {
		if len(s.m.Content) == 0 {
			s.m.Style = 0 // an empty flow {} becomes a block mapping
		}
		s.m.Content = append(s.m.Content, yamlnode.NewKey(s.key), v)
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

// Remove deletes o. Errors wrap ErrNotFound when it does not exist.
func (d *Document) Remove(o Object) error {
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
	i := yamlnode.MapIndex(s.m, s.key)
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

// List returns the objects of collection c, in document order.
func (d *Document) List(c Object) ([]Object, error) {
	var out []Object
	if ik, ok := itemKinds[c.Kind]; ok {
		s, err := d.locate(c, false)
		if err != nil {
			return nil, err
		}
		for _, t := range s.seq.Content {
			if g := yamlnode.Deref(yamlnode.MapGet(yamlnode.Deref(t), ik.name)); g != nil && g.Kind == yaml.ScalarNode {
				out = append(out, Object{Kind: c.Kind, Name: g.Value})
			}
		}
		return out, nil
	}
	var m *yaml.Node
	switch c.Kind {
	case KindResource, KindNamespace:
		lim := yamlnode.Deref(yamlnode.MapGet(d.top(), "limits"))
		field := "resources"
		if c.Kind == KindNamespace {
			field = "namespaces"
		}
		m = yamlnode.Deref(yamlnode.MapGet(lim, field))
	case KindDomain:
		rs := yamlnode.Deref(yamlnode.MapGet(yamlnode.Deref(yamlnode.MapGet(d.top(), "limits")), "resources"))
		if yamlnode.MapIndex(rs, c.Name) < 0 {
			return nil, fmt.Errorf("%s: %w", Resource(c.Name), ErrNotFound)
		}
		r := yamlnode.Deref(yamlnode.MapGet(rs, c.Name))
		field := "domains"
		if isCopiesNode(r) {
			field = "domain_limits"
		}
		m = yamlnode.Deref(yamlnode.MapGet(r, field))
	default:
		return nil, fmt.Errorf("%s is not a collection", c)
	}
	if m == nil || m.Kind != yaml.MappingNode {
		return out, nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k := yamlnode.Deref(m.Content[i])
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
			if j := yamlnode.MapIndex(old, k.Value); j >= 0 {
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
