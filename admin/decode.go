package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-rl/sluice/admin/internal/yamlnode"
)

// MaxBodyBytes bounds a request body (the HTTP API refuses a larger one
// with 413).
const MaxBodyBytes = 4 << 20

// maxDepth bounds the nesting of a request body's mappings and lists.
const maxDepth = 32

// DecodeError is one problem of a request body, naming the field by its
// dotted path from the body's top ("domains.x.size", "tiers[1]"; "" for the
// body itself).
type DecodeError struct {
	Field string
	Msg   string
}

// Error returns "body: msg" or "body.FIELD: msg".
func (e *DecodeError) Error() string {
	switch {
	case e.Field == "":
		return "body: " + e.Msg
	case strings.HasPrefix(e.Field, "["):
		return "body" + e.Field + ": " + e.Msg
	}
	return "body." + e.Field + ": " + e.Msg
}

// ErrBadBody is wrapped by every error of DecodeBody (each a
// *DecodeError, or several joined).
var ErrBadBody = errors.New("bad request body")

// Unwrap returns ErrBadBody.
func (e *DecodeError) Unwrap() error { return ErrBadBody }

// DecodeBody reads the value of an object (a YAML or JSON document) from
// a request body into a node tree, strictly: one document, nothing after
// it, keys unique strings, no anchors, aliases, merge keys or tags other
// than the core ones (str, int, float, bool, null, map, seq), nested at
// most 32 levels deep, at most MaxBodyBytes bytes. contentType
// application/json (or +json) reads JSON (numbers: integers as !!int, others as !!float;
// strings stay strings, so "10" is not the number 10); anything else,
// YAML comments included, reads YAML (of which JSON is a part). Every
// problem is returned, joined, each a *DecodeError naming the field. It
// does not check the value against the configuration's fields:
// resources.Parse does that on the whole new document.
func DecodeBody(data []byte, contentType string) (*yaml.Node, error) {
	mt, _, _ := mime.ParseMediaType(contentType)
	if mt == "application/json" || strings.HasSuffix(mt, "+json") {
		return decodeJSON(data)
	}
	return decodeYAML(data)
}

// decodeJSON is DecodeBody for a JSON body.
func decodeJSON(data []byte) (*yaml.Node, error) {
	if len(data) > MaxBodyBytes {
		return nil, &DecodeError{Msg: fmt.Sprintf("%d bytes; at most %d", len(data), MaxBodyBytes)}
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, &DecodeError{Msg: "empty; want a JSON or YAML object"}
	}
	if !utf8.Valid(data) {
		return nil, &DecodeError{Msg: "not valid UTF-8"}
	}
	d := &jsonDecoder{dec: json.NewDecoder(bytes.NewReader(data))}
	d.dec.UseNumber()
	n, err := d.value("", 0)
	if err != nil {
		return nil, err
	}
	if _, err := d.dec.Token(); !errors.Is(err, io.EOF) {
		return nil, &DecodeError{Msg: fmt.Sprintf("more after the JSON value (offset %d); want one value", d.dec.InputOffset())}
	}
	if len(d.errs) > 0 {
		return nil, errors.Join(d.errs...)
	}
	return n, nil
}

type jsonDecoder struct {
	dec  *json.Decoder
	errs []error
}

func (d *jsonDecoder) syntax(path string, err error) error {
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return &DecodeError{Field: path, Msg: fmt.Sprintf("bad JSON at offset %d: %v", d.dec.InputOffset(), err)}
}

// value reads one JSON value at path.
func (d *jsonDecoder) value(path string, depth int) (*yaml.Node, error) {
	tok, err := d.dec.Token()
	if err != nil {
		return nil, d.syntax(path, err)
	}
	switch t := tok.(type) {
	case json.Delim:
		if depth >= maxDepth {
			return nil, &DecodeError{Field: path, Msg: fmt.Sprintf("nested more than %d levels deep", maxDepth)}
		}
		if t == '[' {
			seq := yamlnode.NewSequence()
			for i := 0; d.dec.More(); i++ {
				item, err := d.value(fmt.Sprintf("%s[%d]", path, i), depth+1)
				if err != nil {
					return nil, err
				}
				seq.Content = append(seq.Content, item)
			}
			if _, err := d.dec.Token(); err != nil {
				return nil, d.syntax(path, err)
			}
			return seq, nil
		}
		m := yamlnode.NewMapping()
		seen := map[string]bool{}
		for d.dec.More() {
			kt, err := d.dec.Token()
			if err != nil {
				return nil, d.syntax(path, err)
			}
			k, _ := kt.(string) // the decoder guarantees a string here
			kp := fieldPath(path, k)
			if seen[k] {
				d.errs = append(d.errs, &DecodeError{Field: kp, Msg: "given more than once"})
			}
			seen[k] = true
			v, err := d.value(kp, depth+1)
			if err != nil {
				return nil, err
			}
			m.Content = append(m.Content, yamlnode.NewKey(k), v)
		}
		if _, err := d.dec.Token(); err != nil {
			return nil, d.syntax(path, err)
		}
		return m, nil
	case string:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: t}, nil
	case bool:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(t)}, nil
	case nil:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"}, nil
	case json.Number:
		if i, err := strconv.ParseInt(string(t), 10, 64); err == nil {
			return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.FormatInt(i, 10)}, nil
		}
		f, err := strconv.ParseFloat(string(t), 64)
		if err != nil || math.IsInf(f, 0) {
			d.errs = append(d.errs, &DecodeError{Field: path, Msg: fmt.Sprintf("%s is not a finite 64-bit number", t)})
			return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"}, nil
		}
		if f == math.Trunc(f) && !strings.ContainsAny(string(t), ".eE") {
			// An integer beyond int64: say so rather than round it.
			d.errs = append(d.errs, &DecodeError{Field: path, Msg: fmt.Sprintf("%s is not a 64-bit integer", t)})
		}
		return floatNode(f), nil
	}
	return nil, &DecodeError{Field: path, Msg: fmt.Sprintf("unexpected JSON token %v", tok)}
}

// floatNode writes f so that YAML reads it back as the same float.
func floatNode(f float64) *yaml.Node {
	s := strconv.FormatFloat(f, 'g', -1, 64)
	if !strings.ContainsAny(s, ".eEn") { // "1e+21" and "NaN" aside, make it read as a float
		s += ".0"
	}
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!float", Value: s}
}

// fieldPath returns path.key, or path["key"] when key would make the path
// ambiguous.
func fieldPath(path, key string) string {
	plain := key != ""
	for _, c := range key {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '/' || c == ':') {
			plain = false
			break
		}
	}
	if !plain {
		return path + "[" + strconv.Quote(key) + "]"
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

// coreTags are the tags a body's nodes may carry.
var coreTags = map[string]bool{"!!str": true, "!!int": true, "!!float": true, "!!bool": true, "!!null": true, "!!map": true, "!!seq": true}

// decodeYAML is DecodeBody for a YAML body. Comments are kept on the
// nodes (and so in the document).
func decodeYAML(data []byte) (n *yaml.Node, err error) {
	if len(data) > MaxBodyBytes {
		return nil, &DecodeError{Msg: fmt.Sprintf("%d bytes; at most %d", len(data), MaxBodyBytes)}
	}
	defer func() {
		if r := recover(); r != nil { // the YAML library on input it cannot handle
			n, err = nil, &DecodeError{Msg: fmt.Sprintf("unreadable YAML: %v", r)}
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &DecodeError{Msg: "empty; want a JSON or YAML object"}
		}
		return nil, &DecodeError{Msg: "bad YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, &DecodeError{Msg: "more than one YAML document; want one"}
	}
	if len(doc.Content) == 0 || yamlnode.IsNull(doc.Content[0]) {
		return nil, &DecodeError{Msg: "empty; want a JSON or YAML object"}
	}
	root := doc.Content[0]
	if doc.HeadComment != "" && root.HeadComment == "" {
		root.HeadComment = doc.HeadComment
	}
	var errs []error
	checkYAML(root, "", 0, &errs)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return root, nil
}

// checkYAML reports, under path, what a body may not hold.
func checkYAML(n *yaml.Node, path string, depth int, errs *[]error) {
	bad := func(p, format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		if n.Line > 0 {
			msg += fmt.Sprintf(" (line %d)", n.Line)
		}
		*errs = append(*errs, &DecodeError{Field: p, Msg: msg})
	}
	if depth > maxDepth {
		bad(path, "nested more than %d levels deep", maxDepth)
		return
	}
	if n.Kind == yaml.AliasNode {
		bad(path, "aliases (*%s) are not allowed in a request body; write the value out", n.Value)
		return
	}
	if n.Anchor != "" {
		bad(path, "anchors (&%s) are not allowed in a request body", n.Anchor)
	}
	if !coreTags[n.Tag] {
		bad(path, "tag %s is not allowed; want a plain value, mapping or list", n.Tag)
	}
	switch n.Kind {
	case yaml.ScalarNode:
		if n.Tag == "!!null" && n.Value == "" {
			n.Value = "null" // written empty, it could read back as ""
		}
		if n.Style&yaml.FoldedStyle != 0 {
			// The YAML library writes some folded strings back as other
			// strings (more-indented lines); literal style keeps them.
			n.Style = n.Style&^yaml.FoldedStyle | yaml.LiteralStyle
		}
		if n.Tag == "!!float" {
			var f float64
			if n.Decode(&f) != nil || math.IsNaN(f) || math.IsInf(f, 0) {
				bad(path, "%q is not a finite number", n.Value)
			}
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			checkYAML(c, fmt.Sprintf("%s[%d]", path, i), depth+1, errs)
		}
	case yaml.MappingNode:
		seen := map[string]bool{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode || k.Tag == "!!merge" || k.Anchor != "" {
				what := "merge keys (<<) are not allowed in a request body"
				if k.Tag != "!!merge" {
					what = "a key must be a plain string"
				}
				*errs = append(*errs, &DecodeError{Field: path, Msg: fmt.Sprintf("%s (line %d)", what, k.Line)})
				continue
			}
			kp := fieldPath(path, k.Value)
			if seen[k.Value] {
				*errs = append(*errs, &DecodeError{Field: kp, Msg: fmt.Sprintf("given more than once (line %d)", k.Line)})
			}
			seen[k.Value] = true
			if k.Tag != "!!str" {
				// A key YAML reads as a number or a boolean (1:, true:) is
				// a name: keep it a string.
				k.Tag, k.Style = "!!str", 0
			}
			checkYAML(v, kp, depth+1, errs)
		}
	}
}

// checkShape reports a value that cannot be o's: every object is a
// mapping but a copy-limited resource's domain, whose value is a count.
func checkShape(o Object, v *yaml.Node, copiesDomain bool) error {
	switch {
	case copiesDomain:
		if v.Kind != yaml.ScalarNode || v.Tag != "!!int" {
			return &DecodeError{Msg: fmt.Sprintf("want a count of copies (the domain's limit), got %s", yamlnode.KindName(v))}
		}
	case v.Kind != yaml.MappingNode:
		return &DecodeError{Msg: fmt.Sprintf("want a mapping (the %s's fields), got %s", o.Kind, yamlnode.KindName(v))}
	}
	return nil
}
