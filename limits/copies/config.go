package copies

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/sluice-rl/sluice/internal/names"
)

// MaxCopies bounds every limit, every request's copies and every count
// (domain, group, global): 2⁵³, the largest integer a float64 (and a Lua
// number, for a Redis store) holds exactly. A count never exceeds it, even
// on a resource that ignores its limits: a reserve that would push a count
// past it gets fewer copies, or none.
const MaxCopies = 1 << 53

// Unbounded is the GlobalLimit of a resource without a global limit.
//
// Source: charon-paper.md, section 2.2 ("If a global limit is not supplied
// for a resource, it is unbounded").
const Unbounded = 0

// MaxNameLen bounds resource, domain and group names, in bytes.
const MaxNameLen = names.MaxLen

// NameChars describes the characters allowed in resource, domain and group
// names, for messages: the same names as package limits accepts.
const NameChars = names.Chars

// Resource configures one copy-limited resource: copies a domain holds for
// a while (a sandbox, a connection, a licence), rather than hits.
//
// Every limit counts copies held at once, is in [0, MaxCopies], and 0
// means none (a domain whose limit is 0 may hold no copy), except
// GlobalLimit, whose 0 is Unbounded. The zero Resource is valid and lets
// no domain hold anything; Unlimited returns the most permissive one.
//
// A reserve for a domain must fit its domain limit, the limit of each
// group the domain belongs to (a domain in two groups takes one copy from
// each group's pool), and the global limit.
//
// Source: charon-paper.md, sections 2.2 (domain, global and group limits;
// domain-specific configurations) and 2.3 (Bulkheads).
type Resource struct {
	// DomainLimit is the most copies one domain may hold (unless
	// DomainLimits overrides it for that domain). 0: none; a resource whose
	// default is 0 admits only the domains it names in DomainLimits.
	DomainLimit int64
	// DomainLimits overrides DomainLimit for the domains it names (the
	// paper's domain-specific configurations). A domain mapped to 0 may
	// hold nothing.
	DomainLimits map[string]int64
	// GlobalLimit is the most copies held across every domain; Unbounded
	// (0): no global limit.
	GlobalLimit int64
	// Groups are the domain groups, each with its own pool. Names are
	// unique within the resource.
	Groups []Group
	// Ignore grants every reserve in full whatever the limits (the
	// resource's namespace ignores configured limits); copies are still
	// counted, per domain, group and globally, and released as usual.
	// Reservation.Unlimited is set on its answers.
	//
	// Source: charon-paper.md, section 4.3 (ignore configured resources).
	Ignore bool
	// OnStoreError says what a reserve answers when the shared copy log
	// (Options.Log, Redis) fails: FailClosed (the zero value) or FailOpen.
	// Source: docs/redis.md, "Copy-limited resources".
	OnStoreError OnStoreError
}

// Group is one domain group of a resource and its pool: the most copies
// held across all of its domains.
//
// Source: charon-paper.md, section 2.2 (domain groups and group limits).
type Group struct {
	// Name identifies the group in answers and in the groups of Release,
	// Transfer and Seize: a valid name (NameChars), unique within its
	// resource.
	Name string
	// Limit is the most copies the group's domains hold together (0:
	// none, the paper's blacklist).
	Limit int64
	// Domains lists the group's domains, each at most once. A domain may
	// belong to several groups of the same resource. Empty is valid (a
	// group being emptied while some of its holds remain).
	Domains []string
}

// Unlimited returns the most permissive resource: MaxCopies per domain,
// no global limit, no groups. It is what a resource that is not
// configured, in a namespace that allows unconfigured resources
// (Config.AllowUnconfigured), behaves as.
//
// Source: charon-paper.md, section 4.3 ("the most permissive values
// possible (e.g. maximum value limits ... and no global or hard limits)").
func Unlimited() Resource { return Resource{DomainLimit: MaxCopies, GlobalLimit: Unbounded} }

// Config is the configuration of an Engine: the copy-limited resources
// and the namespaces that allow unconfigured ones. A nil *Config
// configures nothing.
type Config struct {
	// Resources holds the copy-limited resources, by name (NameChars).
	Resources map[string]Resource
	// AllowUnconfigured lists resource-name prefixes (for example
	// "open/") under which a resource that Resources does not name behaves
	// as Unlimited(): every reserve is granted and counted. "" is the
	// prefix of every name. Other unconfigured resources are
	// ErrUnknownResource.
	//
	// Source: charon-paper.md, section 4.3 (allow unconfigured resource
	// access, per namespace prefix).
	AllowUnconfigured []string
}

// ErrInvalidConfig is wrapped by every configuration error (a
// *ConfigError).
var ErrInvalidConfig = errors.New("invalid copy-limited configuration")

// ConfigError is one problem of a configuration, naming the field by its
// path, for example
//
//	resources.cookbook/sandboxes.groups[0].limit: -1 is negative (copies)
//
// Field names are the snake_case of the Go fields (domain_limit,
// domain_limits, global_limit, groups[i].name, groups[i].limit,
// groups[i].domains[j], allow_unconfigured[i]). It wraps ErrInvalidConfig.
type ConfigError struct {
	// Path names the field.
	Path string
	// Msg says what is wrong.
	Msg string
}

// Error returns "path: msg".
func (e *ConfigError) Error() string { return e.Path + ": " + e.Msg }

// Unwrap returns ErrInvalidConfig.
func (e *ConfigError) Unwrap() error { return ErrInvalidConfig }

// Note is one change normalization made, naming the field by its path as
// ConfigError does.
type Note struct {
	Path string
	Msg  string
}

// String returns "path: msg".
func (n Note) String() string { return n.Path + ": " + n.Msg }

// Validate checks c and returns every problem found, joined, each a
// *ConfigError wrapping ErrInvalidConfig; resources' paths are under
// "resources" (resources.NAME.domain_limit). A nil Config is valid.
func (c *Config) Validate() error {
	if c == nil {
		return nil
	}
	var errs []error
	for i, p := range c.AllowUnconfigured {
		if p == "" {
			continue
		}
		if msg := checkName(p); msg != "" {
			errs = append(errs, &ConfigError{Path: "allow_unconfigured[" + strconv.Itoa(i) + "]", Msg: "prefix " + msg})
		}
	}
	for _, name := range slices.Sorted(maps.Keys(c.Resources)) {
		p := key("resources", name)
		if msg := checkName(name); msg != "" {
			errs = append(errs, &ConfigError{Path: p, Msg: "resource name " + msg})
		}
		if err := c.Resources[name].Validate(p); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Validate checks r and returns every problem found, joined, each a
// *ConfigError whose path starts with path (for example
// "resources.sandboxes"; "" for paths relative to the resource).
func (r Resource) Validate(path string) error {
	var errs []error
	bad := func(p, format string, args ...any) {
		errs = append(errs, &ConfigError{Path: p, Msg: fmt.Sprintf(format, args...)})
	}
	limit := func(p string, v int64) {
		switch {
		case v < 0:
			bad(p, "%d is negative (copies)", v)
		case v > MaxCopies:
			bad(p, "%d exceeds %d (2^53)", v, int64(MaxCopies))
		}
	}
	limit(join(path, "domain_limit"), r.DomainLimit)
	limit(join(path, "global_limit"), r.GlobalLimit)
	for _, d := range slices.Sorted(maps.Keys(r.DomainLimits)) {
		p := key(join(path, "domain_limits"), d)
		if msg := checkName(d); msg != "" {
			bad(p, "domain name %s", msg)
		}
		limit(p, r.DomainLimits[d])
	}
	seen := make(map[string]int, len(r.Groups))
	for i, g := range r.Groups {
		gp := join(path, "groups["+strconv.Itoa(i)+"]")
		if msg := checkName(g.Name); msg != "" {
			bad(gp+".name", "group name %s", msg)
		} else if j, dup := seen[g.Name]; dup {
			bad(gp+".name", "group %q is also groups[%d]: group names are unique within a resource", g.Name, j)
		} else {
			seen[g.Name] = i
		}
		limit(gp+".limit", g.Limit)
		in := make(map[string]int, len(g.Domains))
		for j, d := range g.Domains {
			dp := gp + ".domains[" + strconv.Itoa(j) + "]"
			if msg := checkName(d); msg != "" {
				bad(dp, "domain name %s", msg)
			} else if k, dup := in[d]; dup {
				bad(dp, "domain %q is also domains[%d] of the group", d, k)
			} else {
				in[d] = j
			}
		}
	}
	return errors.Join(errs...)
}

// Normalize returns a copy of c with every resource normalized
// (Resource.Normalize) and what was changed; c is unchanged. The Engine
// applies the same normalization to the configurations it is given.
//
// Source: charon-paper.md, section 4.1.
func (c *Config) Normalize() (*Config, []Note) {
	if c == nil {
		return nil, nil
	}
	out := c.Clone()
	var notes []Note
	for _, name := range slices.Sorted(maps.Keys(c.Resources)) {
		r, n := c.Resources[name].Normalize(key("resources", name))
		out.Resources[name] = r
		notes = append(notes, n...)
	}
	return out, notes
}

// Normalize returns a copy of r in which every limit above the global
// limit (the domain limit, each domain's override, each group's limit) is
// lowered to it — the effective limit, since no domain or group can hold
// more than every domain together — and a note for each, naming its field
// under path. A resource without a global limit is unchanged.
//
// Source: charon-paper.md, section 4.1 ("If the limit of a copy-limited
// resource, including domain and group overrides, exceeds the global
// limit, the effective limit is lowered for that resource or override").
func (r Resource) Normalize(path string) (Resource, []Note) {
	r = r.clone()
	g := r.GlobalLimit
	if g == Unbounded {
		return r, nil
	}
	var notes []Note
	lower := func(p, what string, v *int64) {
		if *v > g {
			notes = append(notes, Note{Path: p, Msg: fmt.Sprintf("%s %d lowered to the global limit %d", what, *v, g)})
			*v = g
		}
	}
	lower(join(path, "domain_limit"), "domain limit", &r.DomainLimit)
	for _, d := range slices.Sorted(maps.Keys(r.DomainLimits)) {
		v := r.DomainLimits[d]
		lower(key(join(path, "domain_limits"), d), "domain "+strconv.Quote(d)+"'s limit", &v)
		r.DomainLimits[d] = v
	}
	for i := range r.Groups {
		lower(join(path, "groups["+strconv.Itoa(i)+"].limit"), "group "+strconv.Quote(r.Groups[i].Name)+"'s limit", &r.Groups[i].Limit)
	}
	return r, notes
}

// Clone returns a deep copy of c.
func (c *Config) Clone() *Config {
	if c == nil {
		return nil
	}
	out := &Config{AllowUnconfigured: slices.Clone(c.AllowUnconfigured)}
	if c.Resources != nil {
		out.Resources = make(map[string]Resource, len(c.Resources))
		for name, r := range c.Resources {
			out.Resources[name] = r.clone()
		}
	}
	return out
}

// clone returns a deep copy of r.
func (r Resource) clone() Resource {
	r.DomainLimits = maps.Clone(r.DomainLimits)
	r.Groups = slices.Clone(r.Groups)
	for i := range r.Groups {
		r.Groups[i].Domains = slices.Clone(r.Groups[i].Domains)
	}
	return r
}

// allowsUnconfigured reports whether resource falls under one of c's
// AllowUnconfigured prefixes.
func (c *Config) allowsUnconfigured(resource string) bool {
	if c == nil {
		return false
	}
	for _, p := range c.AllowUnconfigured {
		if strings.HasPrefix(resource, p) {
			return true
		}
	}
	return false
}

// ValidName reports whether s is a valid resource, domain or group name:
// 1 to MaxNameLen bytes, each one of NameChars (package limits' names).
func ValidName(s string) bool { return checkName(s) == "" }

// checkName returns "" for a valid name, else what is wrong with it.
func checkName(s string) string { return names.Check(s) }

// join returns prefix.field, or field when prefix is empty.
func join(prefix, field string) string { return names.Join(prefix, field) }

// key returns path.name, or path["name"] when name is ambiguous in a path.
func key(path, name string) string { return names.Key(path, name) }
