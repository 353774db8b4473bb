package limitsyaml

import (
	"strconv"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-rl/sluice/limits"
)

// The burst-tier parts of Sluice's limits section (charon-paper.md,
// section 2.1): a resource's hard_limit, global_limit and tiers, and its
// domains' configurations.

// rawTierDomain is a domain-specific configuration of a burst-tier
// resource as written: nil fields keep the resource's.
type rawTierDomain struct {
	hardLimit *int64 // 0: "none"
	tiers     *[]rawTier
}

// rawTier is one burst tier as written; nil fields are absent.
type rawTier struct {
	limit                    *int64
	window, active, cooldown *time.Duration
	skippable                *bool
}

// sectionTierDomain reads a burst-tier domain (null: the resource's
// configuration).
func (w *walker) sectionTierDomain(n *yaml.Node, path string) *rawTierDomain {
	d := &rawTierDomain{}
	pairs, _ := w.mapping(n, path, tierDomainFields)
	for _, p := range pairs {
		fp := join(path, p.key)
		switch p.key {
		case "hard_limit":
			d.hardLimit = w.hitsLimit(p.value, fp)
		case "tiers":
			d.tiers = w.sectionTiers(p.value, fp)
		}
	}
	return d
}

// sectionTiers reads a list of tiers; nil when null.
func (w *walker) sectionTiers(n *yaml.Node, path string) *[]rawTier {
	items, ok := w.sequence(n, path)
	if !ok {
		return nil
	}
	tiers := make([]rawTier, 0, len(items))
	for i, item := range items {
		tp := path + "[" + strconv.Itoa(i) + "]"
		var t rawTier
		pairs, ok := w.mapping(item, tp, tierFields)
		if !ok && isNull(w.deref(item)) {
			w.bad(tp, item, "want a tier {limit, window, active, cooldown, skippable}, got null")
		}
		for _, p := range pairs {
			fp := join(tp, p.key)
			switch p.key {
			case "limit":
				t.limit = w.int64(p.value, fp, "hits in a window")
			case "window":
				t.window = w.duration(p.value, fp, false)
			case "active":
				t.active = w.duration(p.value, fp, false)
			case "cooldown":
				t.cooldown = w.duration(p.value, fp, false)
			case "skippable":
				t.skippable = w.boolean(p.value, fp)
			}
		}
		tiers = append(tiers, t)
	}
	return &tiers
}

// hitsLimit reads a hard or global limit: a count ≥ 1, or "none" (0);
// nil when absent.
func (w *walker) hitsLimit(n *yaml.Node, path string) *int64 {
	s, ok := w.scalar(n, path)
	if !ok {
		return nil
	}
	if s.Tag == "!!str" && s.Value == "none" {
		h := int64(0)
		return &h
	}
	if s.Tag != "!!int" {
		w.bad(path, s, `want a count of hits per second or "none", got %s`, kindName(s))
		return nil
	}
	var v int64
	if err := s.Decode(&v); err != nil {
		w.bad(path, s, "%q is not a 64-bit integer (hits per second)", s.Value)
		return nil
	}
	if v <= 0 {
		w.bad(path, s, `%d must be ≥ 1 (hits per second; unbounded: "none", or leave it out)`, v)
		return nil
	}
	return &v
}

// tierResource converts sr's burst-tier fields into r.
func (sr *rawResource) tierResource(w *walker, r *limits.Resource, rp string) {
	if sr.hardLimit != nil {
		r.HardLimit = *sr.hardLimit
	}
	if sr.globalLimit != nil {
		r.GlobalLimit = *sr.globalLimit
	}
	if sr.tiers != nil {
		r.Tiers = tierList(w, *sr.tiers, rp+".tiers")
	}
	if sr.tierDomains != nil {
		r.TierDomains = make(map[string]limits.TierDomain, len(sr.tierDomains))
	}
	for _, d := range sortedKeys(sr.tierDomains) {
		var td limits.TierDomain
		if sd := sr.tierDomains[d]; sd != nil {
			if sd.hardLimit != nil {
				td.HardLimit = *sd.hardLimit
				if td.HardLimit == 0 {
					td.HardLimit = limits.Unbounded
				}
			}
			if sd.tiers != nil {
				td.Tiers = tierList(w, *sd.tiers, key(rp+".domains", d)+".tiers")
			}
		}
		r.TierDomains[d] = td
	}
}

// tierList converts tiers (never nil, even empty), reporting the required
// fields that are absent.
func tierList(w *walker, tiers []rawTier, path string) []limits.Tier {
	out := make([]limits.Tier, 0, len(tiers))
	for i, st := range tiers {
		tp := path + "[" + strconv.Itoa(i) + "]"
		t := limits.Tier{Limit: 1, Window: time.Second, Active: time.Second}
		if st.limit != nil {
			t.Limit = *st.limit
		} else {
			w.bad(tp+".limit", nil, "required (hits in a window, ≥ 1)")
		}
		if st.window != nil {
			t.Window = *st.window
		} else {
			w.bad(tp+".window", nil, `required (a Go duration such as "1s")`)
		}
		if st.active != nil {
			t.Active = *st.active
		} else {
			w.bad(tp+".active", nil, `required (a Go duration such as "1h")`)
		}
		if st.cooldown != nil {
			t.Cooldown = *st.cooldown
		}
		if st.skippable != nil {
			t.Skippable = *st.skippable
		}
		out = append(out, t)
	}
	return out
}
