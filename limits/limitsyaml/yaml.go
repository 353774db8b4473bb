package limitsyaml

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-rl/sluice/internal/names"
	"github.com/sluice-rl/sluice/limits"
)

// The YAML formats are read by walking yaml.Node trees rather than by
// yaml's struct decoding, so that every error names its field by path
// (`namespaces.db.buckets.users.fill_rate`) and line, unknown fields are
// errors at every level (strict), and absent fields are told apart from
// zeros. Aliases and merge keys (<<) are followed, within a budget of
// nodes (an alias bomb is an error, not an explosion).

// A walk visits at most yamlNodesPerNode times the nodes of the document
// (counting an alias as one node) plus yamlNodesExtra, aliases and merges
// expanded: enough for any configuration that shares bucket settings
// through anchors, and a bound on an alias bomb's cost.
const (
	yamlNodesPerNode = 16
	yamlNodesExtra   = 1 << 18
)

// walker reads a YAML tree and collects errors.
type walker struct {
	errs   []error
	budget int
	limit  int
	active map[*yaml.Node]bool // mappings being read: a merge into one is a cycle
	// sluice reports an envoy_ratelimit section of Sluice's own
	// configuration, where rate_limit.burst_tiers is allowed.
	sluice bool
}

// newWalker returns a walker for the document rooted at root.
func newWalker(root *yaml.Node) *walker {
	n := yamlNodesPerNode*countNodes(root, 0) + yamlNodesExtra
	return &walker{budget: n, limit: n, active: map[*yaml.Node]bool{}}
}

// countNodes counts the nodes of the tree at n, not following aliases,
// up to a bound.
func countNodes(n *yaml.Node, c int) int {
	if n == nil || c > 1<<26 {
		return c
	}
	c++
	for _, k := range n.Content {
		c = countNodes(k, c)
	}
	return c
}

func (w *walker) bad(path string, n *yaml.Node, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if n != nil && n.Line > 0 {
		msg += fmt.Sprintf(" (line %d)", n.Line)
	}
	w.errs = append(w.errs, &limits.ConfigError{Path: path, Msg: msg})
}

func (w *walker) err() error { return errors.Join(w.errs...) }

// deref follows aliases; it returns nil when the budget is spent.
func (w *walker) deref(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode; i++ {
		if i > 100 {
			return nil
		}
		n = n.Alias
	}
	if w.budget--; w.budget < 0 {
		if w.budget == -1 {
			w.errs = append(w.errs, &limits.ConfigError{Path: "(document)", Msg: fmt.Sprintf("more than %d YAML nodes to read (aliases expanded)", w.limit)})
		}
		return nil
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n == nil || n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a sequence"
	case yaml.ScalarNode:
		return fmt.Sprintf("%s %q", strings.TrimPrefix(n.Tag, "!!"), n.Value)
	case yaml.DocumentNode:
		return "a document"
	}
	return "an alias"
}

// pair is one key and value of a mapping.
type pair struct {
	key   string
	knode *yaml.Node
	value *yaml.Node
}

// mapOf reads mapping n of user-named keys (resources, namespaces,
// domains, buckets) with f on each value and its path; nil when null or
// empty.
func mapOf[T any](w *walker, n *yaml.Node, path string, f func(n *yaml.Node, path string) T) map[string]T {
	pairs, _ := w.mapping(n, path, nil)
	if len(pairs) == 0 {
		return nil
	}
	m := make(map[string]T, len(pairs))
	for _, p := range pairs {
		m[p.key] = f(p.value, key(path, p.key))
	}
	return m
}

// mapping returns the pairs of the mapping n (merge keys applied: keys
// given explicitly win), reporting under path a node that is not a
// mapping, a key that is not a string, a duplicate key, and, when fields
// is not nil, a key not in fields. ok is false when n is null or not a
// mapping.
func (w *walker) mapping(n *yaml.Node, path string, fields []string) (pairs []pair, ok bool) {
	n = w.deref(n)
	if isNull(n) {
		return nil, false
	}
	if n.Kind != yaml.MappingNode {
		w.bad(path, n, "want a mapping, got %s", kindName(n))
		return nil, false
	}
	if w.active[n] {
		w.bad(path, n, "the mapping includes itself (an alias or merge of an enclosing anchor)")
		return nil, false
	}
	w.active[n] = true
	defer delete(w.active, n)
	seen := map[string]bool{}
	var merged []pair
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := w.deref(n.Content[i]), n.Content[i+1]
		if k == nil {
			return nil, false
		}
		if k.Kind == yaml.ScalarNode && k.Tag == "!!merge" {
			merged = append(merged, w.merge(v, path, fields)...)
			continue
		}
		if k.Kind != yaml.ScalarNode {
			w.bad(path, k, "a key must be a string, got %s", kindName(k))
			continue
		}
		if seen[k.Value] {
			w.bad(key(path, k.Value), k, "given more than once")
			continue
		}
		seen[k.Value] = true
		if fields != nil && !slices.Contains(fields, k.Value) {
			w.bad(join(path, k.Value), k, "unknown field (want one of %s)", strings.Join(fields, ", "))
			continue
		}
		pairs = append(pairs, pair{key: k.Value, knode: k, value: v})
	}
	for _, p := range merged {
		if !seen[p.key] {
			seen[p.key] = true
			pairs = append(pairs, p)
		}
	}
	return pairs, true
}

// merge returns the pairs a merge key's value (a mapping or a sequence of
// mappings) contributes, in order, keys repeated: mapping keeps the first
// of each, so earlier mappings win.
func (w *walker) merge(v *yaml.Node, path string, fields []string) []pair {
	v = w.deref(v)
	if v == nil {
		return nil
	}
	if v.Kind == yaml.SequenceNode {
		var out []pair
		for _, m := range v.Content {
			ps, _ := w.mapping(m, path, fields)
			out = append(out, ps...)
		}
		return out
	}
	ps, _ := w.mapping(v, path, fields)
	return ps
}

// scalar returns n as a scalar, reporting under path anything else; ok is
// false for null or non-scalars.
func (w *walker) scalar(n *yaml.Node, path string) (*yaml.Node, bool) {
	n = w.deref(n)
	if isNull(n) {
		return nil, false
	}
	if n.Kind != yaml.ScalarNode {
		w.bad(path, n, "want a scalar, got %s", kindName(n))
		return nil, false
	}
	return n, true
}

// int64 reads an integer (decimal, or as YAML 1.1 writes them: 0x…, 0o…,
// underscores); nil when absent.
func (w *walker) int64(n *yaml.Node, path, unit string) *int64 {
	s, ok := w.scalar(n, path)
	if !ok {
		return nil
	}
	if s.Tag != "!!int" {
		w.bad(path, s, "want an integer (%s), got %s", unit, kindName(s))
		return nil
	}
	var v int64
	if err := s.Decode(&v); err != nil {
		w.bad(path, s, "%q is not a 64-bit integer (%s)", s.Value, unit)
		return nil
	}
	return &v
}

// float reads a number (integer or not); nil when absent.
func (w *walker) float(n *yaml.Node, path, unit string) *float64 {
	s, ok := w.scalar(n, path)
	if !ok {
		return nil
	}
	if s.Tag != "!!int" && s.Tag != "!!float" {
		w.bad(path, s, "want a number (%s), got %s", unit, kindName(s))
		return nil
	}
	var v float64
	if err := s.Decode(&v); err != nil {
		w.bad(path, s, "%q is not a number (%s)", s.Value, unit)
		return nil
	}
	return &v
}

// boolean reads true or false; nil when absent.
func (w *walker) boolean(n *yaml.Node, path string) *bool {
	s, ok := w.scalar(n, path)
	if !ok {
		return nil
	}
	var v bool
	if s.Tag != "!!bool" || s.Decode(&v) != nil {
		w.bad(path, s, "want true or false, got %s", kindName(s))
		return nil
	}
	return &v
}

// sequence returns the items of the sequence n, reporting under path
// anything else; ok is false for null or non-sequences.
func (w *walker) sequence(n *yaml.Node, path string) ([]*yaml.Node, bool) {
	n = w.deref(n)
	if isNull(n) {
		return nil, false
	}
	if n.Kind != yaml.SequenceNode {
		w.bad(path, n, "want a sequence, got %s", kindName(n))
		return nil, false
	}
	return n.Content, true
}

// str reads a string; nil when absent.
func (w *walker) str(n *yaml.Node, path string) *string {
	s, ok := w.scalar(n, path)
	if !ok {
		return nil
	}
	if s.Tag != "!!str" {
		w.bad(path, s, "want a string, got %s", kindName(s))
		return nil
	}
	v := s.Value
	return &v
}

// duration reads a Go duration string ("1s", "250ms"), or, when never is
// allowed, the word "never" (returned as -1); nil when absent.
func (w *walker) duration(n *yaml.Node, path string, never bool) *time.Duration {
	s, ok := w.scalar(n, path)
	if !ok {
		return nil
	}
	want := `a Go duration string such as "1s" or "250ms"`
	if never {
		want += ` or "never"`
	}
	if s.Tag != "!!str" {
		w.bad(path, s, "want %s, got %s", want, kindName(s))
		return nil
	}
	if never && s.Value == "never" {
		d := time.Duration(-1)
		return &d
	}
	d, err := time.ParseDuration(s.Value)
	if err != nil {
		w.bad(path, s, "%q is not %s", s.Value, want)
		return nil
	}
	return &d
}

// parseDocument returns the root node of a YAML document (nil for an empty
// document), reporting more than one document.
func parseDocument(data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, &limits.ConfigError{Path: "(document)", Msg: err.Error()}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, &limits.ConfigError{Path: "(document)", Msg: "more than one YAML document; want one"}
	}
	if len(doc.Content) == 0 {
		return nil, nil
	}
	return doc.Content[0], nil
}

// millis converts whole milliseconds to a duration, reporting under path
// values beyond MaxDuration.
func (w *walker) millis(v int64, path string) time.Duration {
	if v > limits.MaxDuration.Milliseconds() || v < -limits.MaxDuration.Milliseconds() {
		w.bad(path, nil, "%d ms exceeds %d ms (ten years)", v, limits.MaxDuration.Milliseconds())
		return 0
	}
	return time.Duration(v) * time.Millisecond
}

// join returns prefix.field, or field when prefix is empty.
func join(prefix, field string) string { return names.Join(prefix, field) }

// key returns path.name, or path["name"] when name is ambiguous in a path.
func key(path, name string) string { return names.Key(path, name) }

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// roundUpTokens is the default max tokens per request for a fill rate.
func roundUpTokens(rate float64) int64 {
	if math.IsNaN(rate) || rate <= 0 {
		return 0
	}
	return int64(math.Min(math.Ceil(rate), limits.MaxTokens))
}
