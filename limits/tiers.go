package limits

import (
	"math"
	"sort"
	"time"
)

// The arithmetic of Charon's rate-limited resources (charon-paper.md,
// section 2.1): per (resource, domain), a hard limit H on the hits of the
// last second, burst tiers each with an exact sliding window, and per
// resource a global limit G on the hits of the last second across its
// domains. Like Step for token buckets, StepTiers is deterministic (now is
// an argument) and is the whole rule, so that a Redis Lua script can mirror
// it; the stores run it under the locks that make a decision atomic.
//
// Time: a hit at t is in a window of span W at now while t ≥ now − W, and
// leaves it once now > t + W (the paper: "the next request can be granted
// only when now > t + Tʷ"); "the last second" is a window of span one
// second. A tier entered at e is active while e ≤ now < e + Tᵃ, in
// cooldown while e + Tᵃ ≤ now < e + Tᵃ + Tᶜ, and inactive otherwise.

// second is the span of the hard and global limits' window.
const second = int64(time.Second)

// MaxTiers bounds the burst tiers of one configuration.
const MaxTiers = 64

// Unbounded is TierDomain.HardLimit's "no hard limit" (where 0 means the
// resource's).
const Unbounded = -1

// Tier configures one burst tier: the paper's (Lᵢ, Tᵢʷ, Tᵢᵃ, Tᵢᶜ, Sᵢ).
//
// Source: charon-paper.md, section 2.1, "Rate-Limited Resources".
type Tier struct {
	// Limit is Lᵢ, the most hits the tier's window holds (≥ 1, ≤
	// MaxTokens).
	Limit int64
	// Window is Tᵢʷ, the span of its sliding window (> 0, ≤ MaxDuration).
	Window time.Duration
	// Active is Tᵢᵃ, the length of its active period (≥ 0, ≤ MaxDuration;
	// Normalize removes a tier whose active time is 0).
	Active time.Duration
	// Cooldown is Tᵢᶜ, the length of the cooldown after its active period
	// (≥ 0, ≤ MaxDuration).
	Cooldown time.Duration
	// Skippable is Sᵢ: a burst may pass over the tier while it is in
	// cooldown (or full) to the next one; a tier that is not skippable
	// blocks the burst while in cooldown.
	Skippable bool
}

// TierParams are one burst-tier configuration as StepTiers runs it: the
// resource's or a domain's hard limit and tiers, the resource's global
// limit. Tiers must be valid and normalized (Config.Normalize): 0 < Window
// ≤ Active, Active a whole number of windows. The engine builds them from
// the configuration; a Store reads them.
type TierParams struct {
	// HardLimit is H, the most hits a domain is granted in any second
	// (0: unbounded).
	HardLimit int64
	// GlobalLimit is G, the most hits the resource's domains together are
	// granted in any second (0: unbounded; then no store keeps a global
	// log, and GlobalHitsLastSecond is 0).
	GlobalLimit int64
	// Tiers are the burst tiers, tier 1 first; none makes the resource
	// inaccessible (every request rejected).
	Tiers []Tier
	// Unlimited grants every request in full, still recording it (a
	// namespace that ignores configured limits, or an unconfigured
	// resource in one that allows them): the tiers take what they can,
	// bursting as usual; the one-second logs take it all.
	Unlimited bool

	sum int64 // Σ Lᵢ
}

// newTierParams returns the parameters of tiers (normalized) with hard
// limit h and global limit g.
func newTierParams(h, g int64, tiers []Tier, unlimited bool) *TierParams {
	p := &TierParams{HardLimit: h, GlobalLimit: g, Tiers: tiers, Unlimited: unlimited}
	for _, t := range tiers {
		p.sum += t.Limit
	}
	return p
}

// NewTierParams returns the parameters of tiers (valid and normalized, as
// in TierParams) with hard limit h and global limit g (0: unbounded):
// what a Store outside this package rebuilds from what it stored, for a
// Snapshot's Limit. The engine builds its own from the configuration.
func NewTierParams(h, g int64, tiers []Tier, unlimited bool) *TierParams {
	return newTierParams(h, g, tiers, unlimited)
}

// Most returns the most hits one request can ever be granted:
// min(H, G, Σ Lᵢ), the unbounded ones left out. A request whose minimum
// is above it always fails ("If min_copies exceeds the hard limit of the
// resource, the request will always fail").
func (p *TierParams) Most() int64 {
	m := p.sum
	if p.HardLimit > 0 {
		m = min(m, p.HardLimit)
	}
	if p.GlobalLimit > 0 {
		m = min(m, p.GlobalLimit)
	}
	return m
}

// Phase is the state of a burst tier: inactive, in its active period, or
// in its cooldown period (the paper's Figure 1).
type Phase uint8

// The phases.
const (
	PhaseInactive Phase = iota
	PhaseActive
	PhaseCooldown
)

// String returns "inactive", "active" or "cooldown".
func (p Phase) String() string {
	switch p {
	case PhaseActive:
		return "active"
	case PhaseCooldown:
		return "cooldown"
	}
	return "inactive"
}

// HitLog is an exact log of hits in time order: one entry per instant
// with hits, so that the hits of any window ending now are counted
// exactly (no approximation) in O(log entries). The zero HitLog is empty.
// Entries are added at the end; an entry for an instant earlier than the
// last one joins the last one (hits recorded late leave windows late, so
// a log never undercounts). Counts saturate at 2⁶¹ hits held.
//
// It is the paper's ordered set of successful hits, with the count of a
// bulk request kept in one entry.
type HitLog struct {
	e    []hitEntry // live entries are e[head:]
	head int
	base int64 // cumulative count before e[head]
}

// hitEntry is one instant's hits: cum counts them and every earlier
// entry's since the log's origin (the count of entry i is cum − the
// previous cum, or − base).
type hitEntry struct{ at, cum int64 }

// maxLogHits bounds the hits a log holds (live).
const maxLogHits = 1 << 61

// Len returns the number of entries (instants with hits) held.
func (l *HitLog) Len() int { return len(l.e) - l.head }

// Total returns the hits held.
func (l *HitLog) Total() int64 {
	if len(l.e) == l.head {
		return 0
	}
	return l.e[len(l.e)-1].cum - l.base
}

// first returns the index of the first live entry at or after t. Entries
// leave from the front and are pruned often, so it looks at the first
// few before it searches.
func (l *HitLog) first(t int64) int {
	i, n := l.head, len(l.e)
	for k := 0; i < n && k < 4; i, k = i+1, k+1 {
		if l.e[i].at >= t {
			return i
		}
	}
	for i < n { // binary search of [i, n)
		h := int(uint(i+n) >> 1)
		if l.e[h].at < t {
			i = h + 1
		} else {
			n = h
		}
	}
	return i
}

// before returns the cumulative count before entry i.
func (l *HitLog) before(i int) int64 {
	if i > l.head {
		return l.e[i-1].cum
	}
	return l.base
}

// Since returns the hits at or after t.
func (l *HitLog) Since(t int64) int64 {
	n := len(l.e)
	if n == l.head {
		return 0
	}
	i := l.first(t)
	if i == n {
		return 0
	}
	return l.e[n-1].cum - l.before(i)
}

// Add records n ≥ 1 hits at t (or at the last entry's instant, if t is
// earlier).
func (l *HitLog) Add(t, n int64) {
	tot := l.Total()
	if n > maxLogHits-tot {
		n = maxLogHits - tot
	}
	if n <= 0 {
		return
	}
	if k := len(l.e); k > l.head {
		if last := &l.e[k-1]; t <= last.at {
			last.cum += n
			return
		}
	}
	cum := l.base + tot + n
	if len(l.e) == cap(l.e) && l.head > 0 {
		// Slide the live entries down rather than grow.
		k := copy(l.e, l.e[l.head:])
		l.e, l.head = l.e[:k], 0
	}
	if cum > 1<<62 {
		// Keep the cumulative counts small.
		for i := l.head; i < len(l.e); i++ {
			l.e[i].cum -= l.base
		}
		cum -= l.base
		l.base = 0
	}
	l.e = append(l.e, hitEntry{at: t, cum: cum})
}

// Prune forgets the hits before t.
func (l *HitLog) Prune(t int64) {
	i := l.first(t)
	if i == l.head {
		return
	}
	if i == len(l.e) {
		l.Reset()
		return
	}
	l.base, l.head = l.e[i-1].cum, i
}

// Reset forgets every hit (keeping the memory for new ones).
func (l *HitLog) Reset() { l.e, l.head, l.base = l.e[:0], 0, 0 }

// Entries calls fn for each entry, oldest first, with its instant and
// its hits, until fn returns false.
func (l *HitLog) Entries(fn func(at, hits int64) bool) {
	for i := l.head; i < len(l.e); i++ {
		if !fn(l.e[i].at, l.e[i].cum-l.before(i)) {
			return
		}
	}
}

// Clone returns a copy of l that shares no memory with it.
func (l *HitLog) Clone() HitLog {
	if l.Len() == 0 {
		return HitLog{}
	}
	return HitLog{e: append([]hitEntry(nil), l.e[l.head:]...), base: l.base}
}

// untilAtMost returns the earliest t ≥ from at which the hits in [t − w,
// t] are at most y ≥ 0 if no hit is added: hits only leave.
func (l *HitLog) untilAtMost(from, w, y int64) int64 {
	n := len(l.e)
	if n == l.head {
		return from
	}
	i := l.first(subSat(from, w))
	if i == n {
		return from
	}
	before := l.before(i)
	x := l.e[n-1].cum - before - y // hits that must leave
	if x <= 0 {
		return from
	}
	q := i + sort.Search(n-i, func(j int) bool { return l.e[i+j].cum-before >= x })
	return max(from, addSat(addSat(l.e[q].at, w), 1)) // (rejections only)
}

// TierState is one domain's state on a burst-tier resource: the paper's
// access log ("a snapshot of the burst tiers at the point of last access
// with respect to a resource and domain") plus the domain's hits of the
// last second, for the hard limit. The zero TierState is a domain never
// seen: every tier inactive, no hits. Tiers may be shorter or longer than
// the configuration's (after a change of configuration): missing tiers
// are inactive, extra ones are ignored and dropped at the next grant.
//
// Memory: a tier's window holds its hits of its current active period
// still within its span, at most Lᵢ entries; Second holds the hits of the
// last second, at most H entries, or without a hard limit at most
// Σᵢ Lᵢ·(⌊1 s ÷ Tᵢʷ⌋ + 2) (a one-second span meets at most ⌊1 s ÷ Tʷ⌋ + 2
// windows' worth of an active period, since active periods are whole
// numbers of windows). Entries are 16 bytes, in slices up to twice as
// long as what they hold. Logs are pruned on every grant, and a rejection
// writes nothing, so the bounds hold at all times. (In a namespace that
// ignores configured limits, Second holds one entry per instant with hits
// in the last second: the traffic itself.)
type TierState struct {
	// Tiers holds tier i + 1's state at index i.
	Tiers []TierRun
	// Second is the domain's hits of the last second (all tiers).
	Second HitLog
}

// TierRun is one tier's state.
type TierRun struct {
	// Entered is the start of the tier's current or last active period
	// (Unix nanoseconds), when InUse.
	Entered int64
	// InUse reports that the tier was entered and has not been seen
	// inactive since: its phase follows from Entered.
	InUse bool
	// Window holds the hits granted in the tier during its current active
	// period (the paper's "set of successful hits", forgotten, as the
	// paper's access log removes a tier's keys, once its cooldown ends).
	Window HitLog
}

// phase returns the run's phase at now under t, and when that phase ends
// (math.MaxInt64 for inactive).
func (r *TierRun) phase(t *Tier, now int64) (Phase, int64) {
	if r == nil || !r.InUse {
		return PhaseInactive, math.MaxInt64
	}
	end := addSat(r.Entered, int64(t.Active))
	if now < end {
		return PhaseActive, end
	}
	if cend := addSat(end, int64(t.Cooldown)); now < cend {
		return PhaseCooldown, cend
	}
	return PhaseInactive, math.MaxInt64
}

// Clone returns a deep copy of s.
func (s *TierState) Clone() *TierState {
	if s == nil {
		return nil
	}
	c := &TierState{Second: s.Second.Clone()}
	if s.Tiers != nil {
		c.Tiers = make([]TierRun, len(s.Tiers))
		for i := range s.Tiers {
			c.Tiers[i] = TierRun{Entered: s.Tiers[i].Entered, InUse: s.Tiers[i].InUse, Window: s.Tiers[i].Window.Clone()}
		}
	}
	return c
}

// run returns tier i's (0-based) state, nil when s has none for it.
func (s *TierState) run(i int) *TierRun {
	if i < len(s.Tiers) {
		return &s.Tiers[i]
	}
	return nil
}

// Fresh reports whether s, at now, is indistinguishable from a domain
// never seen: no tier active or in cooldown, no hit in the last second.
// Removing it then loses nothing.
func (s *TierState) Fresh(p *TierParams, now int64) bool {
	for i := range p.Tiers {
		if ph, _ := s.run(i).phase(&p.Tiers[i], now); ph != PhaseInactive {
			return false
		}
	}
	return s.Second.Since(subSat(now, second)) == 0
}

// TierContext is the context of a decision on a burst-tier resource: the
// paper's request response payload.
//
// Source: charon-paper.md, section 3.1, request(r, d, copies, min_copies).
type TierContext struct {
	// HardLimit and GlobalLimit are the limits applied (0: unbounded).
	HardLimit, GlobalLimit int64
	// Tier is the domain's current tier after the decision (its index,
	// 1-based; 0 is the fake tier: none active); TierLimit its limit and
	// TierWindow its window (0 for the fake tier), TierHits the hits in
	// its window.
	Tier       int
	TierLimit  int64
	TierWindow time.Duration
	TierHits   int64
	// DomainHitsLastSecond and GlobalHitsLastSecond are the hits granted
	// in the last second, after the decision, to the domain and to every
	// domain of the resource (GlobalHitsLastSecond: 0 when the resource
	// has no global limit, whose log is then not kept).
	DomainHitsLastSecond, GlobalHitsLastSecond int64
	// Burst reports that the request entered a tier (began its active
	// period), as every first request from tier 0 does.
	Burst bool
	// HardLimited and GlobalLimited report that the hard or the global
	// limit, alone, allowed fewer hits than the request's Tokens: that
	// limit cut the grant or refused it. A rejection with both false was
	// the tiers'.
	HardLimited, GlobalLimited bool
}

// TierResult is what StepTiers decided.
type TierResult struct {
	TierContext
	// Granted is the hits granted: 0 when rejected, else in [Ask.Min,
	// Ask.Tokens].
	Granted int64
	// RetryAfter is, when rejected, the nanoseconds after now at which the
	// same request would be granted if no other hit came meanwhile (> 0),
	// or RetryNever when none would (Ask.Min above Most). 0 when granted.
	RetryAfter int64
	// Available is the most hits a request could be granted at now after
	// the decision (in [0, Most]).
	Available int64
}

// tierPlan is one domain's tiers evaluated at an instant: the current
// tier and where the next hits would go.
type tierPlan struct {
	cur   int   // the current tier (1-based; 0: the fake tier)
	count int64 // hits in its window
	room  int64 // hits its window can still take
	total int64 // hits the tiers can take now: room + the burst path's limits
	next  int64 // the next instant a tier changes phase (math.MaxInt64: none)
}

// plan evaluates the tiers of s at now. The current tier is the highest
// active one; when its window is full (always, for the fake tier 0), hits
// burst into the next tier, past every tier in cooldown that is
// skippable, up to a tier in cooldown that is not (blocked) or the last
// tier; each tier burst into takes up to its limit (its window is empty:
// an inactive tier has forgotten its hits), then the burst goes on.
func (p *TierParams) plan(s *TierState, now int64) tierPlan {
	pl := tierPlan{next: math.MaxInt64}
	n := len(p.Tiers)
	for i := n - 1; i >= 0; i-- {
		ph, until := s.run(i).phase(&p.Tiers[i], now)
		if ph != PhaseInactive {
			pl.next = min(pl.next, until)
		}
		if ph == PhaseActive && pl.cur == 0 {
			pl.cur = i + 1
			t := &p.Tiers[i]
			pl.count = s.Tiers[i].Window.Since(subSat(now, int64(t.Window)))
			pl.room = max(0, t.Limit-pl.count)
		}
	}
	pl.total = pl.room
	for j := pl.cur; j < n; j++ {
		if ph, _ := s.run(j).phase(&p.Tiers[j], now); ph == PhaseCooldown {
			if p.Tiers[j].Skippable {
				continue
			}
			break
		}
		pl.total += p.Tiers[j].Limit
	}
	return pl
}

// StepTiers is one decision on a domain of a burst-tier resource at now
// (Unix nanoseconds): it grants the most hits in [a.Min, a.Tokens] that
// the hard limit (over the domain's last second), the global limit (over
// the resource's last second, g: nil when GlobalLimit is 0) and the tiers
// allow, and records them, or grants nothing and changes neither s nor g.
// a.MaxWait is not used: a request is decided at once (the paper's
// "Each response is calculated immediately").
//
// The hits go to the current tier while its window has room, then burst
// into the tiers above as plan describes; a bulk request may pass through
// several tiers, each entered (its active period begun at now) when it
// takes its first hit. Tiers that have become inactive forget their hits,
// tiers in cooldown drop theirs (no hit counts in them any more), active
// tiers forget what left their windows; the one-second logs forget what is
// over a second old.
//
// With p.Unlimited every request is granted a.Tokens: the tiers take what
// they can, the logs take it all.
//
// Source: charon-paper.md, sections 2.1 ("Window", "State", "Moving
// Through Tiers") and 3.1 (request).
func StepTiers(p *TierParams, s *TierState, g *HitLog, now int64, a Ask) TierResult {
	r := TierResult{TierContext: TierContext{HardLimit: p.HardLimit, GlobalLimit: p.GlobalLimit}}
	from := subSat(now, second)
	dom := s.Second.Since(from)
	glob := int64(0)
	if p.GlobalLimit > 0 && g != nil {
		glob = g.Since(from)
	}
	pl := p.plan(s, now)
	avail := pl.total // the most any request could be granted now
	if p.HardLimit > 0 {
		availH := max(0, p.HardLimit-dom)
		r.HardLimited = availH < a.Tokens
		avail = min(avail, availH)
	}
	if p.GlobalLimit > 0 {
		availG := max(0, p.GlobalLimit-glob)
		r.GlobalLimited = availG < a.Tokens
		avail = min(avail, availG)
	}
	n := min(a.Tokens, avail)
	if p.Unlimited {
		n = a.Tokens
	} else if n < a.Min {
		r.Tier, r.TierHits = pl.cur, pl.count
		if pl.cur > 0 {
			r.TierLimit, r.TierWindow = p.Tiers[pl.cur-1].Limit, p.Tiers[pl.cur-1].Window
		}
		r.DomainHitsLastSecond, r.GlobalHitsLastSecond = dom, glob
		r.Available = avail
		r.RetryAfter = p.retry(s, g, now, a.Min)
		return r
	}

	// Grant n: forget what no window holds any more, then place the hits.
	if len(s.Tiers) != len(p.Tiers) {
		s.Tiers = resizeRuns(s.Tiers, len(p.Tiers))
	}
	for i := range s.Tiers {
		run, t := &s.Tiers[i], &p.Tiers[i]
		switch ph, _ := run.phase(t, now); ph {
		case PhaseActive:
			run.Window.Prune(subSat(now, int64(t.Window)))
		case PhaseCooldown:
			run.Window.Reset()
		default:
			run.InUse = false
			run.Window.Reset()
		}
	}
	left := min(n, pl.total)
	placed := left
	cur := pl.cur
	if cur > 0 && pl.room > 0 && left > 0 {
		x := min(left, pl.room)
		s.Tiers[cur-1].Window.Add(now, x)
		left -= x
	}
	for j := pl.cur; j < len(p.Tiers) && left > 0; j++ {
		run, t := &s.Tiers[j], &p.Tiers[j]
		if ph, _ := run.phase(t, now); ph == PhaseCooldown {
			if t.Skippable {
				continue
			}
			break
		}
		x := min(left, t.Limit)
		run.InUse, run.Entered = true, now
		run.Window.Reset()
		run.Window.Add(now, x)
		left -= x
		cur, r.Burst = j+1, true
	}
	s.Second.Prune(from)
	s.Second.Add(now, n)
	if p.GlobalLimit > 0 && g != nil {
		g.Prune(from)
		g.Add(now, n)
	}
	// Every log was just pruned to its window: its total is its count.
	r.Granted = n
	r.Tier = cur
	if cur > 0 {
		r.TierLimit, r.TierWindow = p.Tiers[cur-1].Limit, p.Tiers[cur-1].Window
		r.TierHits = s.Tiers[cur-1].Window.Total()
	}
	r.DomainHitsLastSecond = s.Second.Total()
	if p.GlobalLimit > 0 && g != nil {
		r.GlobalHitsLastSecond = g.Total()
	}
	avail = pl.total - placed
	if p.HardLimit > 0 {
		avail = min(avail, p.HardLimit-r.DomainHitsLastSecond)
	}
	if p.GlobalLimit > 0 {
		avail = min(avail, p.GlobalLimit-r.GlobalHitsLastSecond)
	}
	r.Available = max(0, avail)
	return r
}

// resizeRuns returns runs with n entries: missing ones inactive, extra ones
// dropped.
func resizeRuns(runs []TierRun, n int) []TierRun {
	if n <= len(runs) {
		clear(runs[n:])
		return runs[:n]
	}
	return append(runs, make([]TierRun, n-len(runs))...)
}

// retry returns the nanoseconds after now at which a request of at least
// m hits would be granted if no hit came meanwhile, or RetryNever.
//
// The hard and global limits only loosen with time (hits leave their
// windows), so each gives the earliest instant it allows m; from the
// later of the two, the tiers are followed from phase change to phase
// change: between two changes the current tier and the burst path are
// fixed and only the current tier's window loosens, so the earliest
// instant in each stretch is where enough of its hits have left.
func (p *TierParams) retry(s *TierState, g *HitLog, now, m int64) int64 {
	if m > p.Most() {
		return RetryNever
	}
	t := now
	if p.HardLimit > 0 {
		t = max(t, s.Second.untilAtMost(now, second, p.HardLimit-m))
	}
	if p.GlobalLimit > 0 && g != nil {
		t = max(t, g.untilAtMost(now, second, p.GlobalLimit-m))
	}
	for range 2*len(p.Tiers) + 2 {
		pl := p.plan(s, t)
		if pl.total >= m {
			return retryAfter(t, now)
		}
		if pl.cur > 0 {
			tier := &p.Tiers[pl.cur-1]
			path := pl.total - pl.room
			if need := m - path; need <= tier.Limit {
				if t2 := s.Tiers[pl.cur-1].Window.untilAtMost(t, int64(tier.Window), tier.Limit-need); t2 < pl.next {
					return retryAfter(t2, now)
				}
			}
		}
		if pl.next == math.MaxInt64 {
			break
		}
		t = pl.next
	}
	// Not reached for valid parameters (once every tier is inactive the
	// tiers take Σ Lᵢ ≥ m), unless time saturates.
	return RetryNever
}

// retryAfter returns t − now (≥ 1), or RetryNever when it overflows.
func retryAfter(t, now int64) int64 {
	d := subSat(t, now)
	if d == math.MaxInt64 {
		return RetryNever
	}
	return max(d, 1)
}

// status returns tier i's (1-based) phase at now under p, the time left in
// it (0 when inactive) and the hits in its window (0 unless active).
func (s *TierState) status(p *TierParams, i int, now int64) (Phase, time.Duration, int64) {
	t := &p.Tiers[i-1]
	run := s.run(i - 1)
	ph, until := run.phase(t, now)
	switch ph {
	case PhaseActive:
		return ph, time.Duration(subSat(until, now)), run.Window.Since(subSat(now, int64(t.Window)))
	case PhaseCooldown:
		return ph, time.Duration(subSat(until, now)), 0
	}
	return ph, 0, 0
}
