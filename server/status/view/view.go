// Package view holds the rows the status site (package status) shows:
// what each service's read-only view returns (the capacity service's
// node, configuration, resources and leases; the sessions' fleet; Envoy's
// rate limit rules and counters; the RLQS streams and their buckets). The
// services build them and the site renders them, so that the site imports
// no service. It imports nothing of the module: a leaf, plain data with
// JSON tags, which are the pages' JSON.
package view

import "time"

// The capacity service's view (capacity.View).

// Node is the capacity service's view of its node: its identity,
// mastership, election, and its parent at an intermediate server.
type Node struct {
	ID       string        `json:"id"`
	Address  string        `json:"address"`
	Started  time.Time     `json:"started"` // wall time
	IsMaster bool          `json:"is_master"`
	Master   string        `json:"master"`           // the master's address, "" if unknown
	Election string        `json:"election"`         // how this node elects (capacity.Options.Election); "standalone" if not set
	Parent   *ParentStatus `json:"parent,omitempty"` // intermediate servers
}

// ParentStatus describes an intermediate server's link to its parent
// (parentlink.Status, field for field).
type ParentStatus struct {
	// Addresses are the configured parent addresses.
	Addresses []string
	// Current is the address in use (the parent's master when known).
	Current string
	// LastOK is when the parent last answered; zero if never.
	LastOK time.Time
	// LastError is the last failure, "" after a success.
	LastError string
}

// ConfigStatus describes the loaded configuration.
type ConfigStatus struct {
	Hash      string        `json:"hash"`
	Templates []TemplateRow `json:"templates"`
}

// TemplateRow is one configured template. Durations are seconds.
type TemplateRow struct {
	Glob            string   `json:"identifier_glob"`
	Capacity        float64  `json:"capacity"`
	SafeCapacity    *float64 `json:"safe_capacity,omitempty"`
	Algorithm       string   `json:"algorithm"`
	LeaseLength     float64  `json:"lease_length"`
	RefreshInterval float64  `json:"refresh_interval"`
	Learning        float64  `json:"learning_mode_duration"`
	Description     string   `json:"description,omitempty"`
}

// ResourceRow is one resource in the resources table. Capacity and
// SafeCapacity are null when unlimited (NO_ALGORITHM).
type ResourceRow struct {
	ID           string   `json:"id"`
	Template     string   `json:"template"`
	Algorithm    string   `json:"algorithm"`
	Capacity     *float64 `json:"capacity"`
	SumHas       float64  `json:"sum_has"`
	SumWants     float64  `json:"sum_wants"`
	Clients      int      `json:"clients"`
	Learning     bool     `json:"learning"`
	SafeCapacity *float64 `json:"safe_capacity"`
}

// ResourcePage is one resource's detail: its row, its leases (unsorted),
// its history, and at an intermediate server when its lease from the
// parent ends (RFC 3339; "" at the root or without a lease).
type ResourcePage struct {
	Resource ResourceRow `json:"resource"`
	Leases   []LeaseRow  `json:"leases"`
	History  []Point     `json:"history"` // oldest first, one per second
	ParentOf string      `json:"parent_expiry,omitempty"`
}

// LeaseRow is one lease. Expiry is RFC 3339; durations are seconds.
type LeaseRow struct {
	Client          string    `json:"client"`
	Priority        int64     `json:"priority"`
	Has             float64   `json:"has"`
	Wants           float64   `json:"wants"`
	Subclients      int64     `json:"subclients"`
	Expiry          time.Time `json:"expiry"`
	ExpiresIn       float64   `json:"expires_in"`
	RefreshInterval float64   `json:"refresh_interval"`
}

// Point is one history sample: unix seconds and the resource's capacity
// (null: unlimited), Σ has and Σ wants.
type Point struct {
	T        int64    `json:"t"`
	Capacity *float64 `json:"capacity"`
	Has      float64  `json:"has"`
	Wants    float64  `json:"wants"`
}

// The sessions service's view (sessions.Service).

// FleetStatus is this server's membership of the fleet sharing
// copy-limited resources on Redis (package fleet's Status): its epoch (""
// while it has none), whether it leads the fleet, and how many dead
// epochs it buried as leader.
type FleetStatus struct {
	Epoch  string
	Leader bool
	Buried int
}

// Envoy's rate limit service's view (envoyrls.Service).

// RuleRow is one configured rule with a limit, for the status page.
type RuleRow struct {
	Domain string `json:"domain"`
	// Rule names the rule as the metrics do (key_value.key).
	Rule string `json:"rule"`
	// Name is the limit's name; Replaces the names it replaces.
	Name     string   `json:"name,omitempty"`
	Replaces []string `json:"replaces,omitempty"`
	// Limit is "10/second", "unlimited", "0/minute" (always over), or
	// for a burst-tier rule the resource of the limits section whose
	// tiers decide it.
	Limit string `json:"limit"`
	// Algorithm is the one counting it (the rule's, the domain's or the
	// server's).
	Algorithm string `json:"algorithm"`
	// Flags lists shadow_mode, detailed_metric, value_to_metric and
	// share_threshold when set.
	Flags []string `json:"flags,omitempty"`
}

// CounterPage is one page of the service's counters.
type CounterPage struct {
	// Total is every counter looked at; Matched those with the prefix.
	// Complete is false when the walk's budget stopped it before the
	// last counter.
	Total    int          `json:"total"`
	Matched  int          `json:"matched"`
	Complete bool         `json:"complete"`
	Rows     []CounterRow `json:"rows"`
}

// CounterRow is one counter of the service's store, for the buckets page.
type CounterRow struct {
	// Key is the domain and the entries' values, joined by '/'
	// ("edge/10.0.0.1"): what the page's prefix filter reads.
	Key    string `json:"key"`
	Domain string `json:"domain"`
	// Entries are the descriptor's, "key=value, key=value" (a shared
	// wildcard's pattern as its value).
	Entries string `json:"entries"`
	// Rule names the rule that counts it now, as the metrics do
	// (key_value.key); "" for an override's counter, or when no rule
	// matches it any more (the configuration changed).
	Rule string `json:"rule,omitempty"`
	// Override is a descriptor's own limit ("5/minute", "5/minute*2").
	Override  string `json:"override,omitempty"`
	Algorithm string `json:"algorithm"`
	// Limit is the limit it counts for ("10/second"; "" when none).
	Limit string `json:"limit,omitempty"`
	// Remaining and ResetSeconds are what a request would be told now:
	// whole hits left, and the time until the bucket is full again or the
	// window ends (both 0 when no limit applies).
	Remaining    uint32  `json:"remaining"`
	ResetSeconds float64 `json:"reset_seconds"`
}

// The Rate Limit Quota Service's view (rlqs.Service).

// StreamStatus is one RLQS stream, for the status page.
type StreamStatus struct {
	Client  string         `json:"client"` // its client id in the lease tree
	Peer    string         `json:"peer"`
	Domain  string         `json:"domain"`
	Buckets []BucketStatus `json:"buckets"`
}

// BucketStatus is one of a stream's buckets, one (stream, bucket) pair,
// for the status page. Rates are requests per second.
type BucketStatus struct {
	Resource     string    `json:"resource"`
	Priority     int64     `json:"priority"`
	Wants        float64   `json:"wants"`    // the smoothed demand
	Has          float64   `json:"has"`      // the lease's capacity
	Sent         bool      `json:"sent"`     // an assignment was sent
	Assigned     float64   `json:"assigned"` // the rate sent (when Sent; 0: DENY_ALL)
	Expiry       time.Time `json:"expiry"`   // the lease's end (zero: none)
	Unconfigured bool      `json:"unconfigured"`
}
