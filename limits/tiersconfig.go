package limits

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"
)

// validateTierResource reports every problem of burst-tier resource r at
// path rp.
func validateTierResource(r *Resource, rp string, v vocab, bad func(path, format string, args ...any)) {
	for _, f := range []struct {
		name string
		set  bool
	}{{v.buckets, r.Buckets != nil}, {v.template, r.Template != nil}, {v.def, r.Default != nil}} {
		if f.set {
			bad(rp+"."+f.name, "token-bucket settings are only for algorithm %s (this resource's is %s)", TokenBucket, BurstTiers)
		}
	}
	validateHits(r.HardLimit, rp+".hard_limit", false, bad)
	validateHits(r.GlobalLimit, rp+".global_limit", false, bad)
	validateTiers(r.Tiers, rp+".tiers", bad)
	for _, d := range sortedKeys(r.TierDomains) {
		dp := key(rp+"."+v.buckets, d)
		if err := checkName(d); err != "" {
			bad(dp, "domain name %s", err)
		}
		td := r.TierDomains[d]
		validateHits(td.HardLimit, dp+".hard_limit", true, bad)
		validateTiers(td.Tiers, dp+".tiers", bad)
	}
}

// validateHits checks a hard or global limit: 0 (unbounded, or for a
// domain the resource's), Unbounded when unbounded is allowed, or 1 to
// MaxTokens hits per second.
func validateHits(h int64, path string, unbounded bool, bad func(path, format string, args ...any)) {
	switch {
	case h == Unbounded && unbounded:
	case h < 0:
		if unbounded {
			bad(path, "%d is negative (0: the resource's; %d: unbounded)", h, Unbounded)
		} else {
			bad(path, "%d is negative (0: unbounded)", h)
		}
	case h > MaxTokens:
		bad(path, "%d exceeds %d (2^53) hits per second", h, int64(MaxTokens))
	}
}

// validateTiers reports every problem of tiers at path.
func validateTiers(tiers []Tier, path string, bad func(path, format string, args ...any)) {
	if len(tiers) > MaxTiers {
		bad(path, "%d tiers; at most %d", len(tiers), MaxTiers)
	}
	maxDur := MaxDuration.String() + " (ten years)"
	for i, t := range tiers {
		tp := path + "[" + strconv.Itoa(i) + "]"
		switch {
		case t.Limit <= 0:
			bad(tp+".limit", "%d must be ≥ 1 (hits in a window)", t.Limit)
		case t.Limit > MaxTokens:
			bad(tp+".limit", "%d exceeds %d (2^53)", t.Limit, int64(MaxTokens))
		}
		switch {
		case t.Window <= 0:
			bad(tp+".window", "%v must be > 0", t.Window)
		case t.Window > MaxDuration:
			bad(tp+".window", "%v exceeds %s", t.Window, maxDur)
		}
		for _, f := range []struct {
			name string
			d    time.Duration
		}{{"active", t.Active}, {"cooldown", t.Cooldown}} {
			switch {
			case f.d < 0:
				bad(tp+"."+f.name, "%v is negative", f.d)
			case f.d > MaxDuration:
				bad(tp+"."+f.name, "%v exceeds %s", f.d, maxDur)
			}
		}
	}
}

// Normalize rewrites c's burst tiers as Charon's configuration API does
// before it commits a configuration, and returns a note for each change,
// naming the tier by its path as Validate does (prefix "limits." for a
// configuration read from Sluice's limits section), for example
//
//	resources.cookbook/x.tiers[1].window: 10s is longer than the active time 5s: shortened to 5s
//
// In order, for each tier: a tier with an active time of 0 is removed (it
// could never be active); a window longer than the active time is
// shortened to it; an active time that is not a whole number of windows
// is trimmed to one, "so that no partial windows occur at the tail of the
// active period". Normalize changes c in place, is idempotent, and leaves
// alone what Validate would refuse. The engine normalizes its own copy of
// every configuration it is given (New, SetConfig); call Normalize to
// learn what it changes (`sluice config validate` prints the notes).
//
// Source: charon-paper.md, section 4.1.
func (c *Config) Normalize() []string {
	if c == nil {
		return nil
	}
	var notes []string
	for _, name := range sortedKeys(c.Resources) {
		r := c.Resources[name]
		if r == nil || r.Algorithm != BurstTiers {
			continue
		}
		rp := key("resources", name)
		r.Tiers = normalizeTiers(r.Tiers, rp+".tiers", &notes)
		for _, d := range sortedKeys(r.TierDomains) {
			td := r.TierDomains[d]
			if td.Tiers != nil {
				td.Tiers = normalizeTiers(td.Tiers, key(rp+".domains", d)+".tiers", &notes)
				r.TierDomains[d] = td
			}
		}
	}
	return notes
}

// normalizeTiers normalizes tiers in place (a non-nil slice stays non-nil,
// even empty), appending a note per change.
func normalizeTiers(tiers []Tier, path string, notes *[]string) []Tier {
	out := tiers[:0]
	for i, t := range tiers {
		tp := path + "[" + strconv.Itoa(i) + "]"
		if t.Window <= 0 || t.Active < 0 {
			out = append(out, t) // invalid: Validate's to report
			continue
		}
		if t.Active == 0 {
			*notes = append(*notes, fmt.Sprintf("%s: active time 0s: the tier is removed (it could never be active)", tp))
			continue
		}
		if t.Window > t.Active {
			*notes = append(*notes, fmt.Sprintf("%s.window: %v is longer than the active time %v: shortened to %v", tp, t.Window, t.Active, t.Active))
			t.Window = t.Active
		}
		if rest := t.Active % t.Window; rest != 0 {
			trimmed := t.Active - rest
			*notes = append(*notes, fmt.Sprintf("%s.active: %v is not a whole number of %v windows: trimmed to %v (no partial window at the end of the active period)", tp, t.Active, t.Window, trimmed))
			t.Active = trimmed
		}
		out = append(out, t)
	}
	return out
}

// cloneResource returns a deep copy of r.
func cloneResource(r *Resource) *Resource {
	rc := *r
	rc.Template, rc.Default = cloneBucket(r.Template), cloneBucket(r.Default)
	rc.Buckets = maps.Clone(r.Buckets)
	for d, b := range rc.Buckets {
		rc.Buckets[d] = *cloneBucket(&b) // (its budgets too)
	}
	rc.Tiers = slices.Clone(r.Tiers)
	if r.TierDomains != nil {
		rc.TierDomains = make(map[string]TierDomain, len(r.TierDomains))
		for d, td := range r.TierDomains {
			rc.TierDomains[d] = TierDomain{HardLimit: td.HardLimit, Tiers: slices.Clone(td.Tiers)}
		}
	}
	return &rc
}
