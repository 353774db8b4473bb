package admin

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

func TestParseObject(t *testing.T) {
	cases := []struct {
		path string
		want Object
	}{
		{"config", Object{}},
		{"templates", Object{Kind: KindTemplate}},
		{"templates/db%2F%2A", Template("db/*")},
		{"/admin/v1/templates/db%2F*", Template("db/*")},
		{"limits/resources", Object{Kind: KindResource}},
		{"limits/resources/api%2Fsearch", Resource("api/search")},
		{"limits/resources/api/domains", Object{Kind: KindDomain, Name: "api"}},
		{"limits/resources/api/domains/rate_limit%2F10.0.0.1", Domain("api", "rate_limit/10.0.0.1")},
		{"limits/resources/api/default", Object{Kind: KindDefault, Name: "api"}},
		{"limits/resources/api/template", Object{Kind: KindBucketTemplate, Name: "api"}},
		{"limits/namespaces/open%2F", Namespace("open/")},
		{"limits/namespaces", Object{Kind: KindNamespace}},
		{"limits/global_default", GlobalDefault()},
		{"envoy_ratelimit", Object{Kind: KindEnvoyDomain}},
		{"envoy_ratelimit/edge%2Fproxy", EnvoyDomain("edge/proxy")},
	}
	for _, c := range cases {
		got, err := ParseObject(c.path)
		if err != nil || got != c.want {
			t.Errorf("ParseObject(%q) = %+v, %v; want %+v", c.path, got, err, c.want)
			continue
		}
		back, err := ParseObject(got.String())
		if err != nil || back != got {
			t.Errorf("ParseObject(%q.String() = %q) = %+v, %v", c.path, got.String(), back, err)
		}
	}
	for _, bad := range []string{"", "nothing", "templates/a/b", "limits", "limits/resources/a/b",
		"limits/resources/a/domains/x/y", "limits/global_default/x", "limits/namespaces/a/b", "templates/%zz", "limits/resources//domains"} {
		if o, err := ParseObject(bad); !errors.Is(err, ErrBadObject) {
			t.Errorf("ParseObject(%q) = %+v, %v; want ErrBadObject", bad, o, err)
		}
	}
}

func TestDecodeBodyErrors(t *testing.T) {
	cases := []struct {
		name, body, ctype string
		want              []string
	}{
		{"empty", "  ", "application/json", []string{"body: empty"}},
		{"empty YAML", "# nothing\n", "application/yaml", []string{"body: empty"}},
		{"duplicate JSON key", `{"a": 1, "b": {"c": 1, "c": 2}}`, "application/json", []string{"body.b.c: given more than once"}},
		{"duplicate YAML key", "a: 1\nb:\n  c: 1\n  c: 2\n", "", []string{"body.b.c: given more than once (line 4)"}},
		{"trailing JSON", `{"a": 1} {"b": 2}`, "application/json", []string{"body: more after the JSON value"}},
		{"bad JSON", `{"a": }`, "application/json", []string{"body.a: bad JSON at offset"}},
		{"truncated JSON", `{"a": [1, 2`, "application/json", []string{"bad JSON", "unexpected EOF"}},
		{"two YAML documents", "a: 1\n---\nb: 2\n", "", []string{"body: more than one YAML document"}},
		{"alias", "a: &x {size: 1}\nb: *x\n", "", []string{"body.a: anchors (&x) are not allowed", "body.b: aliases (*x) are not allowed"}},
		{"merge key", "a:\n  <<: {size: 1}\n", "", []string{"body.a: merge keys (<<) are not allowed"}},
		{"custom tag", "a: !secret x\n", "", []string{"body.a: tag !secret is not allowed"}},
		{"infinite float", "a: .inf\n", "", []string{`body.a: ".inf" is not a finite number`}},
		{"huge JSON integer", `{"size": 123456789012345678901234567890}`, "application/json", []string{"body.size: 123456789012345678901234567890 is not a 64-bit integer"}},
		{"JSON too deep", strings.Repeat("[", maxDepth+2) + strings.Repeat("]", maxDepth+2), "application/json", []string{"nested more than"}},
		{"YAML too deep", strings.Repeat("[", maxDepth+2) + strings.Repeat("]", maxDepth+2), "", []string{"nested more than"}},
		{"non-string YAML key", "{[1]: 2}\n", "", []string{"a key must be a plain string"}},
		{"odd key", `{"a.b": {"x": [1, {"y": {"y": 1, "y": 2}}]}}`, "application/json", []string{`body["a.b"].x[1].y.y: given more than once`}},
		{"bad YAML", "a: [1, 2\n", "", []string{"body: bad YAML"}},
	}
	for _, c := range cases {
		_, err := DecodeBody([]byte(c.body), c.ctype)
		if !errors.Is(err, ErrBadBody) {
			t.Errorf("%s: %v, want ErrBadBody", c.name, err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q lacks %q", c.name, err, w)
			}
		}
	}
}

// JSON and YAML bodies of the same value give the same tree; strings stay
// strings whatever they look like.
func TestDecodeBodyValues(t *testing.T) {
	j, err := decodeJSON([]byte(`{"size": 10, "fill_rate": 0.5, "wait_timeout": "1s", "name": "10", "on": "true", "x": null, "big": 1e3, "list": [true, false]}`))
	if err != nil {
		t.Fatal(err)
	}
	y, err := decodeYAML([]byte("size: 10\nfill_rate: 0.5\nwait_timeout: 1s\nname: \"10\"\non: \"true\"\nx: null\nbig: 1000.0\nlist: [true, false]\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"size": int64(10), "fill_rate": 0.5, "wait_timeout": "1s", "name": "10", "on": "true", "x": nil, "big": 1000.0, "list": []any{true, false}}
	for name, n := range map[string]*yaml.Node{"JSON": j, "YAML": y} {
		if got := nodeValue(n, 0); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %v, want %v", name, got, want)
		}
		if got := roundTrip(t, n); !reflect.DeepEqual(got, want) {
			t.Errorf("%s written and read back: %v, want %v", name, got, want)
		}
	}
}

// roundTrip writes n as YAML and reads it back as a JSON value.
func roundTrip(t testing.TB, n *yaml.Node) any {
	t.Helper()
	b, err := encodeNode(n)
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
	var back yaml.Node
	if err := yaml.Unmarshal(b, &back); err != nil {
		t.Fatalf("the body written as YAML does not read back: %v\n%s", err, b)
	}
	return nodeValue(&back, 0)
}

// decodeSeeds are the seed corpus of the decoders' fuzz targets.
var decodeSeeds = []string{
	`{"size": 10, "fill_rate": 0.5, "wait_timeout": "1s", "max_idle": "never"}`,
	`{"algorithm": "burst_tiers", "hard_limit": "none", "tiers": [{"limit": 10, "window": "1m", "active": "1h"}]}`,
	`{"identifier_glob": "db/*", "capacity": 100, "algorithm": {"kind": "FAIR_SHARE", "lease_length": 60, "refresh_interval": 10}}`,
	`{"a": {"b": {"c": [1, 2, {"d": null}]}}, "e": -1.5e-3, "f": true}`,
	`{"a": 1, "a": 2}`,
	`{"x": "\u0000\u00ff\ud83d\ude00", "": ""}`,
	"size: 10 # ten\nfill_rate: 1\n",
	"domains:\n  x: {size: 1, fill_rate: 1}\n  'y': &a {size: 2}\n  z: *a\n",
	"- 1\n- [2, 3]\n- {a: b}\n",
	"a: !!binary aGVsbG8=\n",
	"? [a]\n: b\n",
	"'0x10': 0x10\n1: 0o7\ntrue: .5\n",
	"a: |\n  multi\n  line\nb: >\n  folded\n",
	"3",
	"\"just a string\"",
	"[",
	"{",
}

// FuzzDecodeJSON: the JSON decoder never panics; what it accepts is
// written as YAML that reads back to the same value, and whose anchors,
// aliases and tags are none.
func FuzzDecodeJSON(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		n, err := decodeJSON(data)
		if err != nil {
			if !errors.Is(err, ErrBadBody) {
				t.Fatalf("error %v does not wrap ErrBadBody", err)
			}
			return
		}
		if got, want := roundTrip(t, n), nodeValue(n, 0); !reflect.DeepEqual(got, want) {
			t.Fatalf("read back as %#v, want %#v", got, want)
		}
	})
}

// FuzzDecodeYAML: likewise for YAML bodies.
func FuzzDecodeYAML(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		n, err := decodeYAML(data)
		if err != nil {
			if !errors.Is(err, ErrBadBody) {
				t.Fatalf("error %v does not wrap ErrBadBody", err)
			}
			return
		}
		if got, want := roundTrip(t, n), nodeValue(n, 0); !reflect.DeepEqual(got, want) {
			t.Fatalf("read back as %#v, want %#v", got, want)
		}
	})
}

// FuzzChange: a body put anywhere in the document is either refused
// (a decode error, *InvalidError, not found, exists) or leaves a document
// that resources.Parse loads and that holds the body's value; nothing panics.
func FuzzChange(f *testing.F) {
	for i, s := range decodeSeeds {
		f.Add([]byte(s), uint8(i), i%2 == 0)
	}
	f.Add([]byte(`{"size": 3, "fill_rate": 1}`), uint8(2), true)
	f.Add([]byte(`5`), uint8(7), false)
	objects := []Object{Template("db/*"), Template("new/*"), Domain("api", "big"), Domain("api", "new"), Resource("api"),
		Resource("search"), Resource("new"), Domain("sandboxes", "acme"), Domain("search", "acme"), Namespace("open/"),
		Namespace("new/"), GlobalDefault(), {Kind: KindDefault, Name: "api"}, {Kind: KindBucketTemplate, Name: "api"}, {Kind: KindTemplate}}
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, body []byte, which uint8, asJSON bool) {
		s, _ := newMemService(testDoc)
		o := objects[int(which)%len(objects)]
		ctype := "application/yaml"
		if asJSON {
			ctype = "application/json"
		}
		v, err := DecodeBody(body, ctype)
		if err != nil {
			return
		}
		res, err := s.Apply(ctx, Change{Op: OpUpdate, Upsert: true, Object: o, Value: v, DryRun: true})
		if err != nil {
			if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrExists) {
				t.Fatalf("%s: unexpected error %v", o, err)
			}
			return
		}
		if res.Unchanged {
			return
		}
		d, err := ParseDocument([]byte(res.Document))
		if err != nil {
			t.Fatalf("the new document does not parse: %v", err)
		}
		got, err := d.Get(res.Object)
		if err != nil {
			t.Fatalf("%s: not in the new document: %v", res.Object, err)
		}
		if !reflect.DeepEqual(nodeValue(got, 0), nodeValue(v, 0)) {
			t.Fatalf("%s: %v in the document, want %v", res.Object, nodeValue(got, 0), nodeValue(v, 0))
		}
	})
}
