// Package effective is the resource repository's objects as the servers'
// loader (resources.Parse) sees them: defaults applied and normalized, as
// plain values for JSON. It is the shape of admin.ObjectView's Effective,
// which the admin API (/admin/v1/) answers beside the object as written,
// so that whoever edits the repository sees what the servers will apply.
//
// Each type is one kind of object, and its ...Of function builds it from
// the loader's value:
//
//	Template, Algorithm    a Doorman resource template (resources.Template); durations in whole seconds
//	Resource               a limits resource: token buckets, burst tiers (ResourceOf) or copies (CopiesOf)
//	Bucket                 a token bucket (a domain, a default, a template, the global default)
//	TierDomain, Tier       a burst-tier resource's domain and its tiers
//	Group                  a group of a copy-limited resource
//	Namespace              a namespace prefix's flags
//	EnvoyDomain            an Envoy rate limit domain: its algorithm and number of rules
//
// Durations of the limits are Go duration strings ("1s", "1m0s"); counts
// that may be unbounded (a hard limit, a global limit) are a number as a
// string, or "none". The functions are pure and the values plain data,
// safe to share once built. This package depends on the loader's types
// only (resources, limits, limits/copies, limits/rls), not on package
// admin.
//
// Source: charon-paper.md §4.1 (a configuration API that shows the
// configuration normalized: tiers with an active time of 0 removed,
// windows shortened, copy limits lowered to the global limit).
package effective
