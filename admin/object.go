package admin

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// Kind is the kind of an Object of the resource repository.
type Kind int

// The kinds of objects, with their paths (names URL path-escaped, so that
// a name holding '/' is one segment: "db%2F*").
const (
	// KindDocument is the whole document: "config".
	KindDocument Kind = iota
	// KindTemplate is one Doorman resource template, an item of the
	// `resources:` list, found by its identifier_glob:
	// "templates/{identifier_glob}".
	KindTemplate
	// KindResource is one resource of the limits section (token buckets,
	// burst tiers or copies): "limits/resources/{name}".
	KindResource
	// KindDomain is one domain of a limits resource: a token bucket, a
	// burst-tier domain configuration, or (algorithm: copies) one entry of
	// domain_limits: "limits/resources/{name}/domains/{domain}".
	KindDomain
	// KindDefault is a token-bucket resource's default bucket (shared by
	// its unlisted domains): "limits/resources/{name}/default".
	KindDefault
	// KindBucketTemplate is a token-bucket resource's template (a bucket
	// per unlisted domain, the quota service's dynamic buckets):
	// "limits/resources/{name}/template".
	KindBucketTemplate
	// KindNamespace is one namespace prefix of the limits section:
	// "limits/namespaces/{prefix}".
	KindNamespace
	// KindGlobalDefault is the limits section's global default bucket:
	// "limits/global_default".
	KindGlobalDefault
	// KindEnvoyDomain is one domain of Envoy's rate limit service's rules,
	// an item of the `envoy_ratelimit:` list (envoyproxy/ratelimit's
	// format), found by its domain: "envoy_ratelimit/{domain}".
	KindEnvoyDomain
)

var kindNames = [...]string{"document", "template", "resource", "domain", "default", "bucket_template", "namespace", "global_default", "envoy_domain"}

// itemKinds are the kinds whose objects are items of a top-level list of
// the document, each named by a field of its own.
var itemKinds = map[Kind]struct{ list, name, what string }{
	KindTemplate:    {list: "resources", name: "identifier_glob", what: "template"},
	KindEnvoyDomain: {list: "envoy_ratelimit", name: "domain", what: "domain"},
}

// IsItem reports whether objects of kind k are items of a top-level list
// of the document, each named by a field of its own (templates and Envoy
// domains): their collection (templates/, envoy_ratelimit/) takes a
// create, whose value names the new item.
func (k Kind) IsItem() bool {
	_, ok := itemKinds[k]
	return ok
}

// String returns the kind's name: document, template, resource, domain,
// default, bucket_template, namespace, global_default or envoy_domain.
func (k Kind) String() string {
	if k >= 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// MarshalText writes the kind's name.
func (k Kind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText reads a kind's name.
func (k *Kind) UnmarshalText(b []byte) error {
	for i, n := range kindNames {
		if n == string(b) {
			*k = Kind(i)
			return nil
		}
	}
	return fmt.Errorf("admin: unknown kind %q", b)
}

// Object addresses one object of the resource repository, in its
// Document. Name is the template's identifier_glob, the resource's name
// or the namespace's prefix; Domain the domain of a KindDomain. The zero
// Object is the whole document.
//
// A collection (what List lists) is an Object whose last name is empty:
// Object{Kind: KindTemplate} lists the templates, Object{Kind:
// KindResource} the resources, Object{Kind: KindDomain, Name: "api"} the
// domains of resource api, Object{Kind: KindNamespace} the namespaces.
type Object struct {
	Kind   Kind   `json:"kind"`
	Name   string `json:"name,omitempty"`
	Domain string `json:"domain,omitempty"`
}

// Template, Resource, Domain, Namespace and GlobalDefault return the
// Objects of those kinds.
func Template(glob string) Object { return Object{Kind: KindTemplate, Name: glob} }

// Resource returns the Object of limits resource name.
func Resource(name string) Object { return Object{Kind: KindResource, Name: name} }

// Domain returns the Object of domain domain of limits resource name.
func Domain(name, domain string) Object {
	return Object{Kind: KindDomain, Name: name, Domain: domain}
}

// Namespace returns the Object of the namespace prefix.
func Namespace(prefix string) Object { return Object{Kind: KindNamespace, Name: prefix} }

// GlobalDefault returns the Object of the global default bucket.
func GlobalDefault() Object { return Object{Kind: KindGlobalDefault} }

// EnvoyDomain returns the Object of Envoy rate limit domain name.
func EnvoyDomain(name string) Object { return Object{Kind: KindEnvoyDomain, Name: name} }

// IsCollection reports whether o names a collection (its last name is
// empty) rather than one object.
func (o Object) IsCollection() bool {
	switch o.Kind {
	case KindTemplate, KindResource, KindNamespace, KindEnvoyDomain:
		return o.Name == ""
	case KindDomain:
		return o.Domain == ""
	}
	return false
}

// String returns o's path (as in the HTTP API after /admin/v1/, names
// path-escaped): "templates/db%2F*", "limits/resources/api/domains/x",
// "limits/global_default", "config"; a collection's path ends with its
// collection name ("limits/resources/api/domains").
func (o Object) String() string {
	e := url.PathEscape
	switch o.Kind {
	case KindDocument:
		return "config"
	case KindTemplate:
		if o.Name == "" {
			return "templates"
		}
		return "templates/" + e(o.Name)
	case KindResource:
		if o.Name == "" {
			return "limits/resources"
		}
		return "limits/resources/" + e(o.Name)
	case KindDomain:
		if o.Domain == "" {
			return "limits/resources/" + e(o.Name) + "/domains"
		}
		return "limits/resources/" + e(o.Name) + "/domains/" + e(o.Domain)
	case KindDefault:
		return "limits/resources/" + e(o.Name) + "/default"
	case KindBucketTemplate:
		return "limits/resources/" + e(o.Name) + "/template"
	case KindNamespace:
		if o.Name == "" {
			return "limits/namespaces"
		}
		return "limits/namespaces/" + e(o.Name)
	case KindGlobalDefault:
		return "limits/global_default"
	case KindEnvoyDomain:
		if o.Name == "" {
			return "envoy_ratelimit"
		}
		return "envoy_ratelimit/" + e(o.Name)
	}
	return o.Kind.String()
}

// MarshalText writes o's path (String).
func (o Object) MarshalText() ([]byte, error) { return []byte(o.String()), nil }

// UnmarshalText reads a path (ParseObject).
func (o *Object) UnmarshalText(b []byte) error {
	p, err := ParseObject(string(b))
	if err != nil {
		return err
	}
	*o = p
	return nil
}

// ErrBadObject is wrapped by ParseObject's errors.
var ErrBadObject = errors.New("admin: not an object path")

// ParseObject parses an object or collection path as String writes it
// (segments path-escaped; a leading "/" or "/admin/v1/" is ignored).
// Errors wrap ErrBadObject and say which paths exist.
func ParseObject(path string) (Object, error) {
	path = strings.TrimPrefix(path, "/")
	path = strings.TrimPrefix(path, "admin/v1/")
	path = strings.TrimSuffix(path, "/")
	raw := strings.Split(path, "/")
	seg := make([]string, len(raw))
	for i, s := range raw {
		u, err := url.PathUnescape(s)
		if err != nil {
			return Object{}, fmt.Errorf("%w: %q: segment %d: %v", ErrBadObject, path, i, err)
		}
		seg[i] = u
	}
	bad := func() (Object, error) {
		return Object{}, fmt.Errorf("%w: %q; want config, templates[/GLOB], limits/resources[/NAME[/domains[/DOMAIN]|/default|/template]], limits/namespaces[/PREFIX], limits/global_default or envoy_ratelimit[/DOMAIN] (names path-escaped)", ErrBadObject, path)
	}
	nonEmpty := func(s string) bool { return s != "" }
	switch {
	case len(seg) == 1 && seg[0] == "config":
		return Object{}, nil
	case (seg[0] == "templates" || seg[0] == "envoy_ratelimit") && len(seg) <= 2:
		o := Object{Kind: KindTemplate}
		if seg[0] == "envoy_ratelimit" {
			o.Kind = KindEnvoyDomain
		}
		if len(seg) == 2 {
			if !nonEmpty(seg[1]) {
				return bad()
			}
			o.Name = seg[1]
		}
		return o, nil
	case seg[0] != "limits" || len(seg) < 2:
		return bad()
	case seg[1] == "global_default" && len(seg) == 2:
		return GlobalDefault(), nil
	case seg[1] == "namespaces" && len(seg) <= 3:
		o := Object{Kind: KindNamespace}
		if len(seg) == 3 {
			if !nonEmpty(seg[2]) {
				return bad()
			}
			o.Name = seg[2]
		}
		return o, nil
	case seg[1] != "resources" || len(seg) > 6:
		return bad()
	case len(seg) == 2:
		return Object{Kind: KindResource}, nil
	case !nonEmpty(seg[2]):
		return bad()
	case len(seg) == 3:
		return Resource(seg[2]), nil
	case len(seg) == 4 && seg[3] == "default":
		return Object{Kind: KindDefault, Name: seg[2]}, nil
	case len(seg) == 4 && seg[3] == "template":
		return Object{Kind: KindBucketTemplate, Name: seg[2]}, nil
	case seg[3] != "domains":
		return bad()
	case len(seg) == 4:
		return Object{Kind: KindDomain, Name: seg[2]}, nil
	case len(seg) == 5 && nonEmpty(seg[4]):
		return Domain(seg[2], seg[4]), nil
	}
	return bad()
}
