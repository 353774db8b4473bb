package copies

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// The universe of the property tests: two configurable resources, one
// unconfigured under an AllowUnconfigured prefix, one unknown; four
// domains; three groups.
var (
	propResources = []string{"r0", "r1", "open/x", "nope"}
	propDomains   = []string{"d0", "d1", "d2", "d3"}
	propGroups    = []string{"g0", "g1", "g2"}
)

// genResource draws a resource configuration; with prev, one whose every
// effective limit is at least prev's (limits only loosen), with the same
// groups or more, and Ignore unset.
func genResource(t *rapid.T, prev *Resource, label string) Resource {
	small := rapid.Int64Range(0, 6)
	if prev != nil {
		r := prev.clone()
		inc := func(v *int64) { *v += rapid.Int64Range(0, 2).Draw(t, label+" increase") }
		inc(&r.DomainLimit)
		for _, d := range slices.Sorted(maps.Keys(r.DomainLimits)) {
			v := r.DomainLimits[d]
			inc(&v)
			r.DomainLimits[d] = v
		}
		for _, d := range propDomains {
			if _, ok := r.DomainLimits[d]; !ok && rapid.IntRange(0, 5).Draw(t, label+" new override") == 0 {
				r.DomainLimits[d] = r.DomainLimit + rapid.Int64Range(0, 2).Draw(t, label+" override")
			}
		}
		if r.GlobalLimit != Unbounded {
			if rapid.IntRange(0, 5).Draw(t, label+" unbound") == 0 {
				r.GlobalLimit = Unbounded
			} else {
				inc(&r.GlobalLimit)
			}
		}
		for i := range r.Groups {
			inc(&r.Groups[i].Limit)
			r.Groups[i].Domains = rapid.SliceOfDistinct(rapid.SampledFrom(propDomains), rapid.ID[string]).Draw(t, label+" members")
		}
		return r
	}
	r := Resource{DomainLimit: small.Draw(t, label+" domain limit"), DomainLimits: map[string]int64{}}
	for _, d := range propDomains {
		if rapid.IntRange(0, 3).Draw(t, label+" has override") == 0 {
			r.DomainLimits[d] = small.Draw(t, label+" override")
		}
	}
	if rapid.Bool().Draw(t, label+" bounded") {
		r.GlobalLimit = rapid.Int64Range(1, 10).Draw(t, label+" global limit")
	}
	for _, g := range propGroups {
		if rapid.Bool().Draw(t, label+" has group") {
			r.Groups = append(r.Groups, Group{Name: g, Limit: small.Draw(t, label+" group limit"),
				Domains: rapid.SliceOfDistinct(rapid.SampledFrom(propDomains), rapid.ID[string]).Draw(t, label+" members")})
		}
	}
	return r
}

// genConfig draws a configuration of r0 and r1 (each maybe absent, maybe
// ignoring its limits), with "open/" allowing unconfigured resources; in
// loosen mode, from prev, loosening only.
func genConfig(t *rapid.T, prev *Config, loosen bool) *Config {
	c := &Config{Resources: map[string]Resource{}, AllowUnconfigured: []string{"open/"}}
	for _, name := range propResources[:2] {
		if loosen && prev != nil {
			if p, ok := prev.Resources[name]; ok {
				c.Resources[name] = genResource(t, &p, name)
				continue
			}
		}
		if rapid.IntRange(0, 4).Draw(t, name+" absent") == 0 {
			continue
		}
		r := genResource(t, nil, name)
		r.Ignore = !loosen && rapid.IntRange(0, 5).Draw(t, name+" ignore") == 0
		c.Resources[name] = r
	}
	return c
}

type mSession struct {
	deadline, ttl int64
	holds         map[holdKey]int64
}

type mTransfer struct {
	deadline int64
	from     string
	k        holdKey
	n        int64
}

// model is what the engine must hold, kept the plain way: hold sets and
// staged transfers, counts summed from them on demand.
type model struct {
	cfg       *Config // normalized
	sessions  map[string]*mSession
	transfers map[string]*mTransfer
	sids      []string // every session id handed out
	tids      []string // every transfer id handed out
	granted   int64    // copies granted
	released  int64    // copies released, by the model's reckoning
	reported  int64    // copies the engine said it released
}

func (m *model) counts() (dom, grp map[[2]string]int64, glob map[string]int64) {
	dom, grp, glob = map[[2]string]int64{}, map[[2]string]int64{}, map[string]int64{}
	add := func(k holdKey, n int64) {
		dom[[2]string{k.res, k.dom}] += n
		glob[k.res] += n
		for g := range eachGroup(k.groups) {
			grp[[2]string{k.res, g}] += n
		}
	}
	for _, s := range m.sessions {
		for k, n := range s.holds {
			add(k, n)
		}
	}
	for _, t := range m.transfers {
		add(t.k, t.n)
	}
	return dom, grp, glob
}

func (m *model) live(ns int64, id string) *mSession {
	if s := m.sessions[id]; s != nil && ns < s.deadline {
		return s
	}
	return nil
}

// conf returns the (normalized) configuration answering for res, and
// whether it is unconfigured-but-allowed; ok is false for an unknown one.
func (m *model) conf(res string) (r Resource, unlimited, ok bool) {
	if r, ok := m.cfg.Resources[res]; ok {
		return r, false, true
	}
	if strings.HasPrefix(res, "open/") {
		return Unlimited(), true, true
	}
	return Resource{}, false, false
}

// reserve is the model's answer to a reserve.
func (m *model) reserve(ns int64, sid, res, dom string, copies, lo int64) (Reservation, error) {
	s := m.live(ns, sid)
	if s == nil {
		return Reservation{}, ErrUnknownSession
	}
	r, unl, ok := m.conf(res)
	if !ok {
		return Reservation{}, ErrUnknownResource
	}
	if copies == 0 {
		copies = 1
	}
	if lo == 0 {
		lo = copies
	}
	dl := r.DomainLimit
	if v, ok := r.DomainLimits[dom]; ok {
		dl = v
	}
	var names []string
	limits := map[string]int64{}
	for _, g := range r.Groups {
		if slices.Contains(g.Domains, dom) {
			names = append(names, g.Name)
			limits[g.Name] = g.Limit
		}
	}
	slices.Sort(names)
	doms, grps, globs := m.counts()
	dh, gh := doms[[2]string{res, dom}], globs[res]
	free := min(MaxCopies-dh, MaxCopies-gh)
	ignore := r.Ignore || unl
	if !ignore {
		free = min(free, dl-dh)
		if r.GlobalLimit != Unbounded {
			free = min(free, r.GlobalLimit-gh)
		}
	}
	for _, g := range names {
		free = min(free, MaxCopies-grps[[2]string{res, g}])
		if !ignore {
			free = min(free, limits[g]-grps[[2]string{res, g}])
		}
	}
	n := min(copies, free)
	if n < lo {
		n = 0
	}
	if n > 0 {
		s.holds[holdKey{res, dom, strings.Join(names, ",")}] += n
		m.granted += n
	}
	out := Reservation{Granted: n, DomainLimit: dl, GlobalLimit: r.GlobalLimit, DomainHolds: dh + n, GlobalHolds: gh + n, Unlimited: ignore}
	for _, g := range names {
		out.Groups = append(out.Groups, GroupHolds{Name: g, Limit: limits[g], Holds: grps[[2]string{res, g}] + n})
	}
	return out, nil
}

// take is the model's release or transfer: the session's hold, or the
// error.
func (m *model) take(ns int64, sid string, k holdKey, n int64) error {
	s := m.live(ns, sid)
	if s == nil {
		return ErrUnknownSession
	}
	if s.holds[k] < n {
		if _, _, ok := m.conf(k.res); !ok && s.holds[k] == 0 {
			return ErrUnknownResource
		}
		return ErrNotHeld
	}
	if s.holds[k] -= n; s.holds[k] == 0 {
		delete(s.holds, k)
	}
	return nil
}

func holdsOf(m map[holdKey]int64) []Hold { return sortedHolds(m) }

// expire is the model's Expire.
func (m *model) expire(ns int64) []Ended {
	var out []Ended
	for _, id := range slices.SortedFunc(maps.Keys(m.sessions), func(a, b string) int {
		if c := m.sessions[a].deadline - m.sessions[b].deadline; c != 0 {
			return int(max(-1, min(1, c)))
		}
		return strings.Compare(a, b)
	}) {
		if s := m.sessions[id]; s.deadline <= ns {
			out = append(out, m.end(id, Expired))
		}
	}
	for _, id := range slices.SortedFunc(maps.Keys(m.transfers), func(a, b string) int {
		if c := m.transfers[a].deadline - m.transfers[b].deadline; c != 0 {
			return int(max(-1, min(1, c)))
		}
		return strings.Compare(a, b)
	}) {
		if t := m.transfers[id]; t.deadline <= ns {
			delete(m.transfers, id)
			m.released += t.n
			out = append(out, Ended{Session: t.from, Transfer: id, Reason: Expired, Released: holdsOf(map[holdKey]int64{t.k: t.n})})
		}
	}
	return out
}

func (m *model) end(id string, why EndReason) Ended {
	s := m.sessions[id]
	delete(m.sessions, id)
	for _, n := range s.holds {
		m.released += n
	}
	return Ended{Session: id, Reason: why, Released: holdsOf(s.holds)}
}

func (m *model) report(ended ...Ended) {
	for _, e := range ended {
		for _, h := range e.Released {
			m.reported += h.Copies
		}
	}
}

// check compares the engine with the model.
func (m *model) check(e *Engine, loosen bool) error {
	snap := e.Snapshot()
	if err := consistent(snap); err != nil {
		return err
	}
	if len(snap.Sessions) != len(m.sessions) || len(snap.Transfers) != len(m.transfers) {
		return fmt.Errorf("%d sessions and %d transfers, want %d and %d", len(snap.Sessions), len(snap.Transfers), len(m.sessions), len(m.transfers))
	}
	var held int64
	for _, s := range snap.Sessions {
		ms := m.sessions[s.ID]
		if ms == nil || s.Expires.UnixNano() != ms.deadline || fmt.Sprint(s.Holds) != fmt.Sprint(holdsOf(ms.holds)) {
			return fmt.Errorf("session %s: %+v, want %+v", s.ID, s, ms)
		}
		for _, h := range s.Holds {
			held += h.Copies
		}
	}
	for _, t := range snap.Transfers {
		mt := m.transfers[t.ID]
		if mt == nil || t.Expires.UnixNano() != mt.deadline || t.Session != mt.from || fmt.Sprint(t.Hold) != fmt.Sprint(holdsOf(map[holdKey]int64{mt.k: mt.n})[0]) {
			return fmt.Errorf("transfer %s: %+v, want %+v", t.ID, t, mt)
		}
		held += t.Hold.Copies
	}
	// Every copy granted is held, staged, or was released exactly once.
	if m.granted != m.released+held || m.reported != m.released || e.Stats().Released != uint64(m.released) {
		return fmt.Errorf("granted %d, released %d (reported %d, counted %d), held %d", m.granted, m.released, m.reported, e.Stats().Released, held)
	}
	for _, r := range snap.Resources {
		c, ok := m.cfg.Resources[r.Resource]
		if !ok || c.Ignore {
			continue
		}
		if r.GlobalHolds > MaxCopies {
			return fmt.Errorf("%s: %d held", r.Resource, r.GlobalHolds)
		}
		if !loosen {
			continue
		}
		// Limits only loosened: no count exceeds its limit.
		if c.GlobalLimit != Unbounded && r.GlobalHolds > c.GlobalLimit {
			return fmt.Errorf("%s: %d held, global limit %d", r.Resource, r.GlobalHolds, c.GlobalLimit)
		}
		for _, d := range r.Domains {
			if d.Holds > d.Limit {
				return fmt.Errorf("%s/%s: %d held, limit %d", r.Resource, d.Domain, d.Holds, d.Limit)
			}
		}
		for _, g := range r.Groups {
			if g.Configured && g.Holds > g.Limit {
				return fmt.Errorf("%s group %s: %d held, limit %d", r.Resource, g.Name, g.Holds, g.Limit)
			}
		}
	}
	return nil
}

// sameErr reports whether got is the model's error (by sentinel).
func sameErr(got, want error) bool {
	if want == nil {
		return got == nil
	}
	return errors.Is(got, want)
}

// After any sequence of open, keep-alive, close, expire, reserve,
// release, transfer, seize and reconfiguration at random times, the
// engine answers exactly as the model (every grant is the most that fits
// the domain's, its groups' and the global limit), every count (domain,
// group, global) equals the sum of live holds and staged transfers, every
// granted copy is held, staged or released exactly once, and — when
// limits only loosen — no count ever exceeds its limit.
func TestPropertyCopyLog(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		loosen := rapid.Bool().Draw(t, "loosen only")
		m := &model{sessions: map[string]*mSession{}, transfers: map[string]*mTransfer{}}
		cfg := genConfig(t, nil, loosen)
		m.cfg, _ = cfg.Normalize()
		e, err := New(cfg, Options{Rand: seeded(rapid.Uint64().Draw(t, "seed"))})
		if err != nil {
			t.Fatal(err)
		}
		ns := t0.UnixNano()
		now := func() time.Time { return time.Unix(0, ns) }
		pickSession := func() string {
			if len(m.sids) == 0 || rapid.IntRange(0, 15).Draw(t, "bogus session") == 0 {
				return "bogus"
			}
			return rapid.SampledFrom(m.sids).Draw(t, "session")
		}
		// pickHold draws what to release or transfer: mostly something the
		// session holds (its groups in a random order), else anything.
		pickHold := func(sid string) (holdKey, []string) {
			if s := m.sessions[sid]; s != nil && len(s.holds) > 0 && rapid.IntRange(0, 4).Draw(t, "held") > 0 {
				k := rapid.SampledFrom(slices.SortedFunc(maps.Keys(s.holds), func(a, b holdKey) int {
					return strings.Compare(a.res+" "+a.dom+" "+a.groups, b.res+" "+b.dom+" "+b.groups)
				})).Draw(t, "hold")
				groups := splitGroups(k.groups)
				if len(groups) > 1 && rapid.Bool().Draw(t, "reverse") {
					slices.Reverse(groups)
				}
				return k, groups
			}
			k := holdKey{res: rapid.SampledFrom(propResources).Draw(t, "resource"), dom: rapid.SampledFrom(propDomains).Draw(t, "domain")}
			groups := rapid.SliceOfDistinct(rapid.SampledFrom(propGroups), rapid.ID[string]).Draw(t, "groups")
			k.groups = strings.Join(slices.Sorted(slices.Values(groups)), ",")
			return k, groups
		}
		copiesFor := func(sid string, k holdKey) int64 {
			held := int64(0)
			if s := m.sessions[sid]; s != nil {
				held = s.holds[k]
			}
			return rapid.Int64Range(1, held+1).Draw(t, "copies")
		}
		steps := rapid.IntRange(1, 100).Draw(t, "steps")
		for i := range steps {
			ns += rapid.SampledFrom([]int64{0, 0, int64(100 * time.Millisecond), int64(time.Second), int64(3 * time.Second)}).Draw(t, "dt")
			var op string
			switch rapid.IntRange(0, 19).Draw(t, "op") {
			case 0, 1:
				op = "open"
				ttl := rapid.SampledFrom([]time.Duration{0, 500 * time.Millisecond, time.Second, 2 * time.Second, 5 * time.Second, 2 * time.Hour}).Draw(t, "ttl")
				s, err := e.Open(now(), ttl)
				if err != nil {
					t.Fatal(err)
				}
				want := ttl
				if want == 0 {
					want = DefaultSessionTTL
				}
				want = max(MinSessionTTL, min(want, MaxSessionTTL))
				if s.TTL != want || m.sessions[s.ID] != nil || slices.Contains(m.sids, s.ID) {
					t.Fatalf("Open(%v): %+v", ttl, s)
				}
				m.sessions[s.ID] = &mSession{deadline: ns + int64(want), ttl: int64(want), holds: map[holdKey]int64{}}
				m.sids = append(m.sids, s.ID)
			case 2, 3:
				op = "keep-alive"
				id := pickSession()
				s, err := e.KeepAlive(now(), id)
				ms := m.live(ns, id)
				if ms == nil {
					if !errors.Is(err, ErrUnknownSession) {
						t.Fatalf("keep-alive of an ended session: %v", err)
					}
					break
				}
				ms.deadline = max(ms.deadline, ns+ms.ttl)
				if err != nil || s.Expires.UnixNano() != ms.deadline {
					t.Fatalf("keep-alive: %+v %v", s, err)
				}
			case 4:
				op = "close"
				id := pickSession()
				got, err := e.Close(context.Background(), now(), id)
				ms := m.sessions[id]
				if ms == nil {
					if !errors.Is(err, ErrUnknownSession) {
						t.Fatalf("close of an ended session: %v", err)
					}
					break
				}
				why := Closed
				if ns >= ms.deadline {
					why = Expired
				}
				want := m.end(id, why)
				if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("close:\n got %+v %v\nwant %+v", got, err, want)
				}
				m.report(got)
			case 5, 6:
				op = "expire"
				got := e.Expire(context.Background(), now())
				want := m.expire(ns)
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("expire:\n got %+v\nwant %+v", got, want)
				}
				m.report(got...)
			case 7, 8, 9, 10, 11:
				op = "reserve"
				id := pickSession()
				res := rapid.SampledFrom(propResources).Draw(t, "resource")
				dom := rapid.SampledFrom(propDomains).Draw(t, "domain")
				n := rapid.Int64Range(0, 4).Draw(t, "copies")
				lo := rapid.Int64Range(0, max(n, 1)).Draw(t, "min")
				got, err := e.Reserve(context.Background(), now(), id, res, dom, n, lo)
				want, werr := m.reserve(ns, id, res, dom, n, lo)
				if !sameErr(err, werr) || fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("reserve %s %s %d..%d:\n got %+v %v\nwant %+v %v", res, dom, lo, n, got, err, want, werr)
				}
				if got.Granted > 0 && !got.Unlimited {
					if got.DomainHolds > got.DomainLimit || got.GlobalLimit != Unbounded && got.GlobalHolds > got.GlobalLimit {
						t.Fatalf("a grant beyond a limit: %+v", got)
					}
					for _, g := range got.Groups {
						if g.Holds > g.Limit {
							t.Fatalf("a grant beyond a group's limit: %+v", got)
						}
					}
				}
			case 12, 13, 14:
				op = "release"
				id := pickSession()
				k, groups := pickHold(id)
				n := copiesFor(id, k)
				err := e.Release(context.Background(), now(), id, k.res, k.dom, n, groups)
				werr := m.take(ns, id, k, n)
				if !sameErr(err, werr) {
					t.Fatalf("release %+v %d: %v, want %v", k, n, err, werr)
				}
				if err == nil {
					m.released += n
					m.reported += n
				}
			case 15, 16:
				op = "transfer"
				id := pickSession()
				k, groups := pickHold(id)
				n := copiesFor(id, k)
				ttl := rapid.SampledFrom([]time.Duration{0, time.Second, 3 * time.Second, 2 * time.Hour}).Draw(t, "transfer ttl")
				got, err := e.Transfer(context.Background(), now(), id, k.res, k.dom, n, groups, ttl)
				werr := m.take(ns, id, k, n)
				if !sameErr(err, werr) {
					t.Fatalf("transfer %+v %d: %v, want %v", k, n, err, werr)
				}
				if err != nil {
					break
				}
				want := ttl
				if want == 0 {
					want = DefaultTransferTTL
				}
				want = min(want, MaxTransferTTL)
				if got.TTL != want || m.transfers[got.ID] != nil || slices.Contains(m.tids, got.ID) {
					t.Fatalf("transfer: %+v", got)
				}
				m.transfers[got.ID] = &mTransfer{deadline: ns + int64(want), from: id, k: k, n: n}
				m.tids = append(m.tids, got.ID)
			case 17, 18:
				op = "seize"
				id := pickSession()
				tid := "bogus"
				if len(m.tids) > 0 && rapid.IntRange(0, 9).Draw(t, "bogus transfer") > 0 {
					tid = rapid.SampledFrom(m.tids).Draw(t, "transfer")
				}
				got, err := e.Seize(context.Background(), now(), id, tid)
				s, tr := m.live(ns, id), m.transfers[tid]
				switch {
				case s == nil:
					if !errors.Is(err, ErrUnknownSession) {
						t.Fatalf("seize into an ended session: %v", err)
					}
				case tr == nil || ns >= tr.deadline:
					if !errors.Is(err, ErrUnknownTransfer) {
						t.Fatalf("seize of a gone transfer: %v", err)
					}
				default:
					want := Seized{Resource: tr.k.res, Domain: tr.k.dom, Groups: splitGroups(tr.k.groups), Copies: tr.n}
					if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
						t.Fatalf("seize:\n got %+v %v\nwant %+v", got, err, want)
					}
					delete(m.transfers, tid)
					s.holds[tr.k] += tr.n
				}
			case 19:
				op = "reconfigure"
				cfg := genConfig(t, m.cfg, loosen)
				if err := e.SetConfig(cfg); err != nil {
					t.Fatal(err)
				}
				m.cfg, _ = cfg.Normalize()
			}
			if err := m.check(e, loosen); err != nil {
				t.Fatalf("step %d (%s): %v", i, op, err)
			}
		}
		// Ending everything releases everything.
		m.report(e.Expire(context.Background(), time.Unix(0, ns).Add(2*time.Hour))...)
		m.expire(ns + int64(2*time.Hour))
		if err := m.check(e, loosen); err != nil {
			t.Fatal(err)
		}
		if st := e.Stats(); st.Sessions != 0 || st.Transfers != 0 || m.granted != m.released {
			t.Fatalf("after the end: %+v; granted %d, released %d", st, m.granted, m.released)
		}
		for _, r := range e.Snapshot().Resources {
			if r.GlobalHolds != 0 || len(r.Domains) != 0 {
				t.Fatalf("after the end: %+v", r)
			}
		}
	})
}
