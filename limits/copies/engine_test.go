package copies

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/testutil"
)

func TestMain(m *testing.M) {
	testutil.RapidChecks(1000)
	os.Exit(m.Run())
}

// t0 is an arbitrary instant.
var t0 = time.Unix(1_700_000_000, 0)

// seeded returns a deterministic id source.
func seeded(seed uint64) *rand.ChaCha8 {
	var s [32]byte
	s[0] = byte(seed)
	s[1] = byte(seed >> 8)
	s[2] = byte(seed >> 16)
	return rand.NewChaCha8(s)
}

// sandboxes is cookbook/sandboxes of examples/charon.yaml: domain limit 3
// (acme: 4), global limit 5, group trusted = {acme, initech} with limit 4.
func sandboxes() *Config {
	return &Config{Resources: map[string]Resource{
		"cookbook/sandboxes": {
			DomainLimit:  3,
			DomainLimits: map[string]int64{"acme": 4},
			GlobalLimit:  5,
			Groups:       []Group{{Name: "trusted", Limit: 4, Domains: []string{"acme", "initech"}}},
		},
	}}
}

// harness runs steps against an engine, naming sessions and transfers.
type harness struct {
	t         *testing.T
	e         *Engine
	now       time.Time
	sessions  map[string]string // name → id
	transfers map[string]string // name → id
}

func newHarness(t *testing.T, cfg *Config) *harness {
	t.Helper()
	e, err := New(cfg, Options{Rand: seeded(1)})
	if err != nil {
		t.Fatal(err)
	}
	return &harness{t: t, e: e, now: t0, sessions: map[string]string{}, transfers: map[string]string{}}
}

// sess returns the id of session name, opening it (ttl 1 h) on first use.
func (h *harness) sess(name string) string {
	h.t.Helper()
	if id, ok := h.sessions[name]; ok {
		return id
	}
	s, err := h.e.Open(h.now, time.Hour)
	if err != nil {
		h.t.Fatal(err)
	}
	h.sessions[name] = s.ID
	return s.ID
}

// step is one operation and what it must answer.
type step struct {
	do      string // reserve, release, transfer, seize, close, expire, config, advance
	s       string // session name
	res     string // resource ("" : the case's)
	dom     string
	n, lo   int64
	groups  []string
	ttl     time.Duration
	tid     string // transfer name
	cfg     *Config
	want    Reservation // reserve: the whole answer
	seized  Seized      // seize
	ended   int         // expire: how many ended
	err     error       // the sentinel expected, or nil
	comment string
}

func (h *harness) run(i int, res string, st step) {
	h.t.Helper()
	if st.res == "" {
		st.res = res
	}
	where := fmt.Sprintf("step %d (%s %s %s %d %s)", i, st.do, st.s, st.dom, st.n, st.comment)
	check := func(err error) bool {
		h.t.Helper()
		if !errors.Is(err, st.err) || (err == nil) != (st.err == nil) {
			h.t.Fatalf("%s: error %v, want %v", where, err, st.err)
		}
		return err == nil
	}
	switch st.do {
	case "reserve":
		got, err := h.e.Reserve(context.Background(), h.now, h.sess(st.s), st.res, st.dom, st.n, st.lo)
		if check(err) && !reflect.DeepEqual(got, st.want) {
			h.t.Fatalf("%s:\n got %+v\nwant %+v", where, got, st.want)
		}
	case "release":
		check(h.e.Release(context.Background(), h.now, h.sess(st.s), st.res, st.dom, st.n, st.groups))
	case "transfer":
		got, err := h.e.Transfer(context.Background(), h.now, h.sess(st.s), st.res, st.dom, st.n, st.groups, st.ttl)
		if check(err) {
			h.transfers[st.tid] = got.ID
		}
	case "seize":
		id, ok := h.transfers[st.tid]
		if !ok {
			id = st.tid
		}
		got, err := h.e.Seize(context.Background(), h.now, h.sess(st.s), id)
		if check(err) && !reflect.DeepEqual(got, st.seized) {
			h.t.Fatalf("%s: seized %+v, want %+v", where, got, st.seized)
		}
	case "close":
		_, err := h.e.Close(context.Background(), h.now, h.sess(st.s))
		check(err)
	case "expire":
		if got := h.e.Expire(context.Background(), h.now); len(got) != st.ended {
			h.t.Fatalf("%s: %d ended, want %d: %+v", where, len(got), st.ended, got)
		}
	case "config":
		check(h.e.SetConfig(st.cfg))
	case "advance":
		h.now = h.now.Add(st.ttl)
	default:
		h.t.Fatalf("%s: unknown op", where)
	}
	h.checkCounts(where)
}

// checkCounts checks that every count of the engine is the sum of the
// holds of its sessions and transfers.
func (h *harness) checkCounts(where string) {
	h.t.Helper()
	if err := consistent(h.e.Snapshot()); err != nil {
		h.t.Fatalf("%s: %v", where, err)
	}
}

// consistent checks a snapshot: each count (domain, group, global) is the
// sum of the session holds and staged transfers under it, and nothing
// else is counted.
func consistent(s Snapshot) error {
	type dk struct{ res, name string }
	dom, grp, glob := map[dk]int64{}, map[dk]int64{}, map[string]int64{}
	add := func(h Hold) {
		dom[dk{h.Resource, h.Domain}] += h.Copies
		glob[h.Resource] += h.Copies
		for _, g := range h.Groups {
			grp[dk{h.Resource, g}] += h.Copies
		}
	}
	for _, ss := range s.Sessions {
		for _, h := range ss.Holds {
			if h.Copies <= 0 {
				return fmt.Errorf("session %s holds %+v", ss.ID, h)
			}
			add(h)
		}
	}
	for _, t := range s.Transfers {
		add(t.Hold)
	}
	for _, r := range s.Resources {
		if r.GlobalHolds != glob[r.Resource] {
			return fmt.Errorf("%s: global count %d, holds sum to %d", r.Resource, r.GlobalHolds, glob[r.Resource])
		}
		delete(glob, r.Resource)
		if !r.Configured && r.GlobalHolds == 0 {
			return fmt.Errorf("%s: an unconfigured resource without holds is kept", r.Resource)
		}
		for _, d := range r.Domains {
			if d.Holds <= 0 || d.Holds != dom[dk{r.Resource, d.Domain}] {
				return fmt.Errorf("%s/%s: domain count %d, holds sum to %d", r.Resource, d.Domain, d.Holds, dom[dk{r.Resource, d.Domain}])
			}
			delete(dom, dk{r.Resource, d.Domain})
		}
		for _, g := range r.Groups {
			if g.Holds < 0 || g.Holds != grp[dk{r.Resource, g.Name}] {
				return fmt.Errorf("%s group %s: count %d, holds sum to %d", r.Resource, g.Name, g.Holds, grp[dk{r.Resource, g.Name}])
			}
			if !g.Configured && g.Holds == 0 {
				return fmt.Errorf("%s group %s: unconfigured and empty, yet listed", r.Resource, g.Name)
			}
			delete(grp, dk{r.Resource, g.Name})
		}
	}
	for k, v := range glob {
		if v != 0 {
			return fmt.Errorf("%s: %d copies held, no count", k, v)
		}
	}
	for k, v := range dom {
		return fmt.Errorf("%v: %d copies held, no domain count", k, v)
	}
	for k, v := range grp {
		return fmt.Errorf("%v: %d copies held, no group count", k, v)
	}
	return nil
}

func trusted(holds int64) []GroupHolds {
	return []GroupHolds{{Name: "trusted", Limit: 4, Holds: holds}}
}

// The Bulkheads pattern (charon-paper.md, section 2.3) on cookbook/sandboxes
// of examples/charon.yaml, and the other uses of groups the paper names.
func TestBulkheads(t *testing.T) {
	tr := []string{"trusted"}
	tests := []struct {
		name  string
		cfg   *Config
		res   string
		steps []step
	}{
		{
			name: "cookbook/sandboxes",
			cfg:  sandboxes(),
			res:  "cookbook/sandboxes",
			steps: []step{
				{do: "reserve", s: "a", dom: "acme", n: 4, comment: "acme's override", want: Reservation{Granted: 4, DomainLimit: 4, GlobalLimit: 5, DomainHolds: 4, GlobalHolds: 4, Groups: trusted(4)}},
				{do: "reserve", s: "a", dom: "acme", n: 1, comment: "acme at its limit", want: Reservation{DomainLimit: 4, GlobalLimit: 5, DomainHolds: 4, GlobalHolds: 4, Groups: trusted(4)}},
				{do: "reserve", s: "b", dom: "initech", n: 1, comment: "the trusted pool is empty: the bulkhead holds", want: Reservation{DomainLimit: 3, GlobalLimit: 5, DomainHolds: 0, GlobalHolds: 4, Groups: trusted(4)}},
				{do: "reserve", s: "b", dom: "globex", n: 3, comment: "all or nothing: 1 left globally", want: Reservation{DomainLimit: 3, GlobalLimit: 5, GlobalHolds: 4}},
				{do: "reserve", s: "b", dom: "globex", n: 3, lo: 1, comment: "partial", want: Reservation{Granted: 1, DomainLimit: 3, GlobalLimit: 5, DomainHolds: 1, GlobalHolds: 5}},
				{do: "reserve", s: "b", dom: "umbrella", n: 0, comment: "0 means 1; global full", want: Reservation{DomainLimit: 3, GlobalLimit: 5, GlobalHolds: 5}},
				{do: "release", s: "a", dom: "acme", n: 2, groups: tr},
				{do: "reserve", s: "b", dom: "initech", n: 3, lo: 1, comment: "2 in the pool and globally", want: Reservation{Granted: 2, DomainLimit: 3, GlobalLimit: 5, DomainHolds: 2, GlobalHolds: 5, Groups: trusted(4)}},
				{do: "release", s: "a", dom: "acme", n: 3, groups: tr, err: ErrNotHeld, comment: "a holds 2"},
				{do: "release", s: "b", dom: "acme", n: 1, groups: tr, err: ErrNotHeld, comment: "b holds no acme"},
				{do: "release", s: "a", dom: "acme", n: 1, err: ErrNotHeld, comment: "acme's copies are in trusted"},
				{do: "release", s: "a", dom: "acme", n: 2, groups: tr},
				{do: "reserve", s: "b", dom: "globex", n: 5, lo: 1, comment: "globex's limit: 3", want: Reservation{Granted: 2, DomainLimit: 3, GlobalLimit: 5, DomainHolds: 3, GlobalHolds: 5}},
				{do: "reserve", s: "a", dom: "acme", n: 1, comment: "global full", want: Reservation{DomainLimit: 4, GlobalLimit: 5, GlobalHolds: 5, Groups: trusted(2)}},
				{do: "close", s: "b", comment: "releases initech 2 and globex 3"},
				{do: "reserve", s: "a", dom: "acme", n: 5, lo: 1, want: Reservation{Granted: 4, DomainLimit: 4, GlobalLimit: 5, DomainHolds: 4, GlobalHolds: 4, Groups: trusted(4)}},
				{do: "reserve", s: "c", dom: "initech", n: 1, want: Reservation{DomainLimit: 3, GlobalLimit: 5, GlobalHolds: 4, Groups: trusted(4)}},
				{do: "reserve", s: "c", dom: "hooli", n: 1, want: Reservation{Granted: 1, DomainLimit: 3, GlobalLimit: 5, DomainHolds: 1, GlobalHolds: 5}},
			},
		},
		{
			name: "a reserved pool for high-volume domains",
			cfg: &Config{Resources: map[string]Resource{"r": {DomainLimit: 5, GlobalLimit: 5,
				Groups: []Group{{Name: "high-volume", Limit: 2, Domains: []string{"big1", "big2"}}}}}},
			res: "r",
			steps: []step{
				{do: "reserve", s: "a", dom: "big1", n: 5, lo: 1, want: Reservation{Granted: 2, DomainLimit: 5, GlobalLimit: 5, DomainHolds: 2, GlobalHolds: 2, Groups: []GroupHolds{{"high-volume", 2, 2}}}},
				{do: "reserve", s: "a", dom: "big2", n: 1, want: Reservation{DomainLimit: 5, GlobalLimit: 5, GlobalHolds: 2, Groups: []GroupHolds{{"high-volume", 2, 2}}}},
				{do: "reserve", s: "a", dom: "small", n: 3, want: Reservation{Granted: 3, DomainLimit: 5, GlobalLimit: 5, DomainHolds: 3, GlobalHolds: 5}},
			},
		},
		{
			name: "probation, then trusted: the limit changes at once",
			cfg: &Config{Resources: map[string]Resource{"r": {DomainLimit: 3,
				Groups: []Group{{Name: "probation", Limit: 1, Domains: []string{"new1", "new2"}}}}}},
			res: "r",
			steps: []step{
				{do: "reserve", s: "a", dom: "new1", n: 1, want: Reservation{Granted: 1, DomainLimit: 3, DomainHolds: 1, GlobalHolds: 1, Groups: []GroupHolds{{"probation", 1, 1}}}},
				{do: "reserve", s: "a", dom: "new2", n: 1, want: Reservation{DomainLimit: 3, GlobalHolds: 1, Groups: []GroupHolds{{"probation", 1, 1}}}},
				{do: "config", cfg: &Config{Resources: map[string]Resource{"r": {DomainLimit: 3,
					Groups: []Group{{Name: "probation", Limit: 1, Domains: []string{"new1"}}}}}}},
				{do: "reserve", s: "a", dom: "new2", n: 3, want: Reservation{Granted: 3, DomainLimit: 3, DomainHolds: 3, GlobalHolds: 4}},
			},
		},
		{
			name: "a blacklist group of limit 0",
			cfg: &Config{Resources: map[string]Resource{"r": {DomainLimit: 3,
				Groups: []Group{{Name: "blacklist", Limit: 0, Domains: []string{"evil"}}}}}},
			res: "r",
			steps: []step{
				{do: "reserve", s: "a", dom: "evil", n: 1, want: Reservation{DomainLimit: 3, Groups: []GroupHolds{{"blacklist", 0, 0}}}},
				{do: "reserve", s: "a", dom: "good", n: 1, want: Reservation{Granted: 1, DomainLimit: 3, DomainHolds: 1, GlobalHolds: 1}},
			},
		},
		{
			name: "a domain in two groups takes a copy from each pool",
			cfg: &Config{Resources: map[string]Resource{"r": {DomainLimit: 10, Groups: []Group{
				{Name: "g2", Limit: 2, Domains: []string{"acme"}},
				{Name: "g1", Limit: 3, Domains: []string{"acme", "other"}},
			}}}},
			res: "r",
			steps: []step{
				{do: "reserve", s: "a", dom: "acme", n: 3, lo: 1, comment: "g2 allows 2", want: Reservation{Granted: 2, DomainLimit: 10, DomainHolds: 2, GlobalHolds: 2, Groups: []GroupHolds{{"g1", 3, 2}, {"g2", 2, 2}}}},
				{do: "reserve", s: "a", dom: "other", n: 3, lo: 1, comment: "g1 has 1 left", want: Reservation{Granted: 1, DomainLimit: 10, DomainHolds: 1, GlobalHolds: 3, Groups: []GroupHolds{{"g1", 3, 3}}}},
				{do: "release", s: "a", dom: "acme", n: 1, groups: []string{"g2", "g1"}, comment: "groups in any order"},
				{do: "release", s: "a", dom: "acme", n: 1, groups: []string{"g1"}, err: ErrNotHeld, comment: "not under g1 alone"},
				{do: "release", s: "a", dom: "acme", n: 1, groups: []string{"g1", "g1"}, err: ErrInvalidArgument},
				{do: "reserve", s: "a", dom: "other", n: 1, want: Reservation{Granted: 1, DomainLimit: 10, DomainHolds: 2, GlobalHolds: 3, Groups: []GroupHolds{{"g1", 3, 3}}}},
			},
		},
		{
			name: "limits above the global limit are lowered to it",
			cfg: &Config{Resources: map[string]Resource{"r": {DomainLimit: 9, DomainLimits: map[string]int64{"acme": 7}, GlobalLimit: 2,
				Groups: []Group{{Name: "g", Limit: 8, Domains: []string{"acme"}}}}}},
			res: "r",
			steps: []step{
				{do: "reserve", s: "a", dom: "acme", n: 1, want: Reservation{Granted: 1, DomainLimit: 2, GlobalLimit: 2, DomainHolds: 1, GlobalHolds: 1, Groups: []GroupHolds{{"g", 2, 1}}}},
				{do: "reserve", s: "a", dom: "x", n: 3, lo: 1, want: Reservation{Granted: 1, DomainLimit: 2, GlobalLimit: 2, DomainHolds: 1, GlobalHolds: 2}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, tt.cfg)
			for i, st := range tt.steps {
				h.run(i, tt.res, st)
			}
		})
	}
}

// Reconfiguration keeps every hold where it was counted; new limits and
// memberships apply to new reserves.
func TestReconfigure(t *testing.T) {
	res := "cookbook/sandboxes"
	moved := sandboxes()
	r := moved.Resources[res]
	r.GlobalLimit = 10
	r.Groups = []Group{{Name: "trusted", Limit: 4, Domains: []string{"initech"}}, {Name: "probation", Limit: 1, Domains: []string{"acme"}}}
	moved.Resources[res] = r
	tighter := sandboxes()
	r = tighter.Resources[res]
	r.DomainLimits = map[string]int64{"acme": 1}
	tighter.Resources[res] = r
	h := newHarness(t, sandboxes())
	steps := []step{
		{do: "reserve", s: "a", dom: "acme", n: 3, want: Reservation{Granted: 3, DomainLimit: 4, GlobalLimit: 5, DomainHolds: 3, GlobalHolds: 3, Groups: trusted(3)}},
		{do: "config", cfg: tighter, comment: "acme's limit 1 < its 3 holds"},
		{do: "reserve", s: "a", dom: "acme", n: 1, comment: "over its new limit", want: Reservation{DomainLimit: 1, GlobalLimit: 5, DomainHolds: 3, GlobalHolds: 3, Groups: trusted(3)}},
		{do: "release", s: "a", dom: "acme", n: 1, groups: []string{"trusted"}},
		{do: "config", cfg: moved, comment: "acme leaves trusted for probation"},
		{do: "reserve", s: "a", dom: "acme", n: 2, lo: 1, comment: "probation's pool: 1", want: Reservation{Granted: 1, DomainLimit: 4, GlobalLimit: 10, DomainHolds: 3, GlobalHolds: 3, Groups: []GroupHolds{{"probation", 1, 1}}}},
		{do: "reserve", s: "b", dom: "initech", n: 3, lo: 1, comment: "acme's 2 old copies still count in trusted", want: Reservation{Granted: 2, DomainLimit: 3, GlobalLimit: 10, DomainHolds: 2, GlobalHolds: 5, Groups: trusted(4)}},
		{do: "release", s: "a", dom: "acme", n: 2, groups: []string{"probation"}, err: ErrNotHeld, comment: "1 under probation"},
		{do: "transfer", s: "a", dom: "acme", n: 2, groups: []string{"trusted"}, tid: "t1", comment: "the old copies travel with their groups"},
		{do: "seize", s: "b", tid: "t1", seized: Seized{Resource: res, Domain: "acme", Groups: []string{"trusted"}, Copies: 2}},
		{do: "config", cfg: &Config{}, comment: "the resource is gone"},
		{do: "reserve", s: "a", dom: "acme", n: 1, err: ErrUnknownResource},
		{do: "release", s: "b", dom: "acme", n: 2, groups: []string{"trusted"}, comment: "its holds are still released"},
		{do: "release", s: "b", dom: "acme", n: 1, groups: []string{"trusted"}, err: ErrUnknownResource, comment: "nothing held of an unknown resource"},
		{do: "release", s: "b", dom: "initech", n: 2, groups: []string{"trusted"}},
		{do: "release", s: "a", dom: "acme", n: 1, groups: []string{"probation"}},
	}
	for i, st := range steps {
		h.run(i, res, st)
	}
	if _, ok := h.e.Resource(res); ok {
		t.Fatal("a removed resource without holds keeps its copy log")
	}
}

// The groups of the snapshot: a group removed from the configuration is
// listed while copies reserved under it are held.
func TestSnapshotGroups(t *testing.T) {
	h := newHarness(t, sandboxes())
	res := "cookbook/sandboxes"
	h.run(0, res, step{do: "reserve", s: "a", dom: "acme", n: 2, want: Reservation{Granted: 2, DomainLimit: 4, GlobalLimit: 5, DomainHolds: 2, GlobalHolds: 2, Groups: trusted(2)}})
	cfg := sandboxes()
	r := cfg.Resources[res]
	r.Groups = []Group{{Name: "new", Limit: 1, Domains: []string{"acme"}}}
	cfg.Resources[res] = r
	h.run(1, res, step{do: "config", cfg: cfg})
	got, _ := h.e.Resource(res)
	want := ResourceHolds{Resource: res, Configured: true, DomainLimit: 3, GlobalLimit: 5, GlobalHolds: 2,
		Domains: []DomainHolds{{Domain: "acme", Limit: 4, Holds: 2, Groups: []string{"new"}}},
		Groups:  []GroupState{{Name: "new", Configured: true, Limit: 1}, {Name: "trusted", Holds: 2}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("\n got %+v\nwant %+v", got, want)
	}
}

// Ignore and AllowUnconfigured: every reserve granted, still counted.
func TestUnlimited(t *testing.T) {
	cfg := sandboxes()
	r := cfg.Resources["cookbook/sandboxes"]
	r.Ignore = true
	cfg.Resources["muted/sandboxes"] = r
	cfg.AllowUnconfigured = []string{"open/"}
	h := newHarness(t, cfg)
	steps := []step{
		{do: "reserve", res: "muted/sandboxes", s: "a", dom: "acme", n: 9, want: Reservation{Granted: 9, DomainLimit: 4, GlobalLimit: 5, DomainHolds: 9, GlobalHolds: 9, Groups: trusted(9), Unlimited: true}},
		{do: "reserve", res: "open/anything", s: "a", dom: "acme", n: 1000, want: Reservation{Granted: 1000, DomainLimit: MaxCopies, DomainHolds: 1000, GlobalHolds: 1000, Unlimited: true}},
		{do: "reserve", res: "open/anything", s: "a", dom: "x", n: MaxCopies, lo: 1, comment: "no count exceeds MaxCopies", want: Reservation{Granted: MaxCopies - 1000, DomainLimit: MaxCopies, DomainHolds: MaxCopies - 1000, GlobalHolds: MaxCopies, Unlimited: true}},
		{do: "reserve", res: "open/anything", s: "a", dom: "y", n: 1, want: Reservation{DomainLimit: MaxCopies, GlobalHolds: MaxCopies, Unlimited: true}},
		{do: "reserve", res: "closed/anything", s: "a", dom: "acme", n: 1, err: ErrUnknownResource},
		{do: "release", res: "open/anything", s: "a", dom: "acme", n: 1000},
		{do: "release", res: "open/anything", s: "a", dom: "x", n: MaxCopies - 1000},
	}
	for i, st := range steps {
		h.run(i, "", st)
	}
	if _, ok := h.e.Resource("open/anything"); ok {
		t.Fatal("an unconfigured resource without holds keeps its copy log")
	}
	if _, ok := h.e.Resource("muted/sandboxes"); !ok {
		t.Fatal("a configured resource has no copy log")
	}
	// A rejected reserve of an unconfigured resource leaves nothing.
	if _, err := h.e.Reserve(t.Context(), h.now, h.sess("a"), "open/x", "d", MaxCopies, 0); err != nil {
		t.Fatal(err)
	}
	if st := h.e.Stats(); st.Resources != 3 {
		t.Fatalf("%d resources, want 3", st.Resources)
	}
}

// Sessions: ttls, keep-alives, close, expiry; each hold released once.
func TestSessions(t *testing.T) {
	e, err := New(sandboxes(), Options{Rand: seeded(2)})
	if err != nil {
		t.Fatal(err)
	}
	res := "cookbook/sandboxes"
	for _, tc := range []struct {
		ask, want time.Duration
	}{{0, DefaultSessionTTL}, {time.Millisecond, MinSessionTTL}, {2 * time.Hour, MaxSessionTTL}, {3 * time.Second, 3 * time.Second}} {
		s, err := e.Open(t0, tc.ask)
		if err != nil || s.TTL != tc.want || !s.Expires.Equal(t0.Add(tc.want)) || len(s.ID) != 32 {
			t.Fatalf("Open(%v) = %+v, %v; want ttl %v", tc.ask, s, err, tc.want)
		}
		if _, err := e.Close(t.Context(), t0, s.ID); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.Open(t0, -time.Second); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("negative ttl: %v", err)
	}

	a, _ := e.Open(t0, 2*time.Second)
	b, _ := e.Open(t0, 2*time.Second)
	if a.ID == b.ID {
		t.Fatal("two sessions share an id")
	}
	mustReserve := func(now time.Time, id, dom string, n int64) {
		t.Helper()
		if r, err := e.Reserve(t.Context(), now, id, res, dom, n, 0); err != nil || r.Granted != n {
			t.Fatalf("reserve %d for %s: %+v %v", n, dom, r, err)
		}
	}
	mustReserve(t0, a.ID, "acme", 2)
	mustReserve(t0, a.ID, "globex", 1)
	mustReserve(t0, b.ID, "globex", 1)
	// Kept alive at 1.5 s, a lives until 3.5 s; b ends at 2 s.
	if s, err := e.KeepAlive(t0.Add(1500*time.Millisecond), a.ID); err != nil || !s.Expires.Equal(t0.Add(3500*time.Millisecond)) || s.TTL != 2*time.Second {
		t.Fatalf("keep-alive: %+v %v", s, err)
	}
	// A renewal read from an earlier clock does not shorten the session.
	if s, _ := e.KeepAlive(t0.Add(time.Second), a.ID); !s.Expires.Equal(t0.Add(3500 * time.Millisecond)) {
		t.Fatalf("an earlier keep-alive shortened the session to %v", s.Expires)
	}
	if got := e.Expire(t.Context(), t0.Add(1999*time.Millisecond)); got != nil {
		t.Fatalf("expired early: %+v", got)
	}
	// At its deadline b can no longer be used, though Expire has not run.
	at2 := t0.Add(2 * time.Second)
	for name, err := range map[string]error{
		"keep-alive": func() error { _, err := e.KeepAlive(at2, b.ID); return err }(),
		"reserve":    func() error { _, err := e.Reserve(t.Context(), at2, b.ID, res, "globex", 1, 0); return err }(),
		"release":    e.Release(t.Context(), at2, b.ID, res, "globex", 1, nil),
		"transfer":   func() error { _, err := e.Transfer(t.Context(), at2, b.ID, res, "globex", 1, nil, 0); return err }(),
		"seize":      func() error { _, err := e.Seize(t.Context(), at2, b.ID, "x"); return err }(),
	} {
		if !errors.Is(err, ErrUnknownSession) || ClassOf(err) != ClassNotFound || !strings.Contains(err.Error(), "ttl (2s) passed") {
			t.Fatalf("%s on an expired session: %v", name, err)
		}
	}
	if r, _ := e.Reserve(t.Context(), at2, a.ID, res, "hooli", 5, 1); r.Granted != 1 || r.GlobalHolds != 5 {
		t.Fatalf("b's copies stop counting before Expire: %+v", r)
	}
	got := e.Expire(t.Context(), at2)
	want := []Ended{{Session: b.ID, Reason: Expired, Released: []Hold{{Resource: res, Domain: "globex", Copies: 1}}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Expire:\n got %+v\nwant %+v", got, want)
	}
	if got := e.Expire(t.Context(), at2); got != nil {
		t.Fatalf("expired twice: %+v", got)
	}
	if _, err := e.Close(t.Context(), at2, b.ID); !errors.Is(err, ErrUnknownSession) {
		t.Fatalf("close of an expired session: %v", err)
	}
	ended, err := e.Close(t.Context(), at2, a.ID)
	want = []Ended{{Session: a.ID, Reason: Closed, Released: []Hold{
		{Resource: res, Domain: "acme", Groups: []string{"trusted"}, Copies: 2},
		{Resource: res, Domain: "globex", Copies: 1},
		{Resource: res, Domain: "hooli", Copies: 1},
	}}}
	if err != nil || !reflect.DeepEqual([]Ended{ended}, want) {
		t.Fatalf("Close:\n got %+v %v\nwant %+v", ended, err, want)
	}
	if _, err := e.Close(t.Context(), at2, a.ID); !errors.Is(err, ErrUnknownSession) {
		t.Fatalf("second close: %v", err)
	}
	// Closing a session whose ttl passed before Expire: it ended expired.
	c, _ := e.Open(at2, time.Second)
	mustReserve(at2, c.ID, "acme", 1)
	if ended, err := e.Close(t.Context(), at2.Add(time.Second), c.ID); err != nil || ended.Reason != Expired || len(ended.Released) != 1 {
		t.Fatalf("close after the ttl: %+v %v", ended, err)
	}
	if got := e.Expire(t.Context(), at2.Add(time.Hour)); got != nil {
		t.Fatalf("released again: %+v", got)
	}
	r, _ := e.Resource(res)
	st := e.Stats()
	if r.GlobalHolds != 0 || st.Sessions != 0 || st.Opened != 7 || st.Closed != 5 || st.Expired != 2 || st.Released != 6 {
		t.Fatalf("after every session ended: %+v, %+v", r, st)
	}
}

// Transfer and seize, as in the paper's Figure 6; a staged transfer
// outlives the session that staged it and is released by its own ttl.
func TestTransfer(t *testing.T) {
	res := "pool"
	h := newHarness(t, &Config{Resources: map[string]Resource{res: {DomainLimit: 20, GlobalLimit: 20}}})
	seized := func(n int64) Seized { return Seized{Resource: res, Domain: "d", Copies: n} }
	steps := []step{
		{do: "reserve", s: "p1", dom: "d", n: 15, want: Reservation{Granted: 15, DomainLimit: 20, GlobalLimit: 20, DomainHolds: 15, GlobalHolds: 15}},
		{do: "transfer", s: "p1", dom: "d", n: 10, ttl: 30 * time.Second, tid: "t", comment: "stage 10"},
		{do: "release", s: "p1", dom: "d", n: 6, err: ErrNotHeld, comment: "p1 has 5 left"},
		{do: "reserve", s: "p3", dom: "d", n: 6, lo: 1, comment: "the staged copies still count", want: Reservation{Granted: 5, DomainLimit: 20, GlobalLimit: 20, DomainHolds: 20, GlobalHolds: 20}},
		{do: "seize", s: "p2", tid: "t", seized: seized(10)},
		{do: "seize", s: "p2", tid: "t", err: ErrUnknownTransfer, comment: "once"},
		{do: "release", s: "p2", dom: "d", n: 5, comment: "has 5"},
		{do: "release", s: "p1", dom: "d", n: 5},
		{do: "transfer", s: "p2", dom: "d", n: 5, ttl: 2 * time.Second, tid: "t2"},
		{do: "close", s: "p2", comment: "the transfer stays staged"},
		{do: "advance", ttl: time.Second},
		{do: "expire", ended: 0},
		{do: "seize", s: "p1", tid: "t2", seized: seized(5), comment: "seized after its stager ended"},
		{do: "transfer", s: "p1", dom: "d", n: 2, tid: "t3", comment: "ttl 0: 30 s"},
		{do: "transfer", s: "p1", dom: "d", n: 4, tid: "t4", err: ErrNotHeld},
		{do: "advance", ttl: 30 * time.Second},
		{do: "seize", s: "p1", tid: "t3", err: ErrUnknownTransfer, comment: "its ttl passed, Expire not run yet"},
		{do: "expire", ended: 1},
		{do: "seize", s: "p1", tid: "t3", err: ErrUnknownTransfer},
		{do: "seize", s: "p1", tid: "nonsense", err: ErrUnknownTransfer},
		{do: "transfer", s: "p1", dom: "d", n: 3, ttl: -time.Second, err: ErrInvalidArgument},
		{do: "reserve", s: "p1", dom: "d", n: 20, lo: 1, comment: "p1's 3 and p3's 5 remain", want: Reservation{Granted: 12, DomainLimit: 20, GlobalLimit: 20, DomainHolds: 20, GlobalHolds: 20}},
	}
	for i, st := range steps {
		h.run(i, res, st)
	}
	st := h.e.Stats()
	if st.Staged != 3 || st.Seized != 2 || st.TransfersExpired != 1 || st.Transfers != 0 {
		t.Fatalf("%+v", st)
	}
}

// The expiry of a transfer reports what it released, once.
func TestTransferExpiry(t *testing.T) {
	e, _ := New(sandboxes(), Options{Rand: seeded(3)})
	res := "cookbook/sandboxes"
	s, _ := e.Open(t0, time.Hour)
	if _, err := e.Reserve(t.Context(), t0, s.ID, res, "acme", 3, 0); err != nil {
		t.Fatal(err)
	}
	tr, err := e.Transfer(t.Context(), t0, s.ID, res, "acme", 2, []string{"trusted"}, 5*time.Second)
	if err != nil || tr.TTL != 5*time.Second || !tr.Expires.Equal(t0.Add(5*time.Second)) || len(tr.ID) != 32 {
		t.Fatalf("%+v %v", tr, err)
	}
	if long, err := e.Transfer(t.Context(), t0, s.ID, res, "acme", 1, []string{"trusted"}, 2*time.Hour); err != nil || long.TTL != MaxTransferTTL {
		t.Fatalf("a 2 h transfer: %+v %v", long, err)
	}
	if _, err := e.Close(t.Context(), t0, s.ID); err != nil {
		t.Fatal(err)
	}
	if r, _ := e.Resource(res); r.GlobalHolds != 3 {
		t.Fatalf("after the close, %d held; want the 2 staged", r.GlobalHolds)
	}
	got := e.Expire(t.Context(), t0.Add(5*time.Second))
	want := []Ended{{Session: s.ID, Transfer: tr.ID, Reason: Expired, Released: []Hold{{Resource: res, Domain: "acme", Groups: []string{"trusted"}, Copies: 2}}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("\n got %+v\nwant %+v", got, want)
	}
	if r, _ := e.Resource(res); r.GlobalHolds != 1 || len(r.Domains) != 1 || r.Groups[0].Holds != 1 {
		t.Fatalf("%+v", r)
	}
	if got := e.Expire(t.Context(), t0.Add(MaxTransferTTL)); len(got) != 1 || got[0].Released[0].Copies != 1 {
		t.Fatalf("%+v", got)
	}
	if r, _ := e.Resource(res); r.GlobalHolds != 0 || len(r.Domains) != 0 || r.Groups[0].Holds != 0 {
		t.Fatalf("%+v", r)
	}
}

// Every malformed request is InvalidArgument naming its field; unknown
// things are NotFound; what the state does not allow is
// FailedPrecondition.
func TestErrors(t *testing.T) {
	e, _ := New(sandboxes(), Options{Rand: seeded(4)})
	res := "cookbook/sandboxes"
	s, _ := e.Open(t0, time.Hour)
	id := s.ID
	long := strings.Repeat("a", MaxNameLen+1)
	reserve := func(sess, r, d string, n, lo int64) error {
		_, err := e.Reserve(t.Context(), t0, sess, r, d, n, lo)
		return err
	}
	release := func(sess, r, d string, n int64, g ...string) error {
		return e.Release(t.Context(), t0, sess, r, d, n, g)
	}
	transfer := func(sess, r, d string, n int64, ttl time.Duration, g ...string) error {
		_, err := e.Transfer(t.Context(), t0, sess, r, d, n, g, ttl)
		return err
	}
	tests := []struct {
		name  string
		err   error
		class Class
		field string
	}{
		{"reserve: empty session", reserve("", res, "acme", 1, 0), ClassInvalidArgument, "session_id"},
		{"reserve: empty resource", reserve(id, "", "acme", 1, 0), ClassInvalidArgument, "resource"},
		{"reserve: bad resource", reserve(id, "a b", "acme", 1, 0), ClassInvalidArgument, "resource"},
		{"reserve: long domain", reserve(id, res, long, 1, 0), ClassInvalidArgument, "domain"},
		{"reserve: negative copies", reserve(id, res, "acme", -1, 0), ClassInvalidArgument, "copies"},
		{"reserve: too many copies", reserve(id, res, "acme", MaxCopies+1, 0), ClassInvalidArgument, "copies"},
		{"reserve: negative min", reserve(id, res, "acme", 1, -1), ClassInvalidArgument, "min_copies"},
		{"reserve: min above copies", reserve(id, res, "acme", 2, 3), ClassInvalidArgument, "min_copies"},
		{"reserve: min above the default 1", reserve(id, res, "acme", 0, 2), ClassInvalidArgument, "min_copies"},
		{"reserve: unknown session", reserve("nope", res, "acme", 1, 0), ClassNotFound, "session_id"},
		{"reserve: unknown resource", reserve(id, "nope", "acme", 1, 0), ClassNotFound, "resource"},
		{"release: zero copies", release(id, res, "acme", 0), ClassInvalidArgument, "copies"},
		{"release: bad group", release(id, res, "acme", 1, "a,b"), ClassInvalidArgument, "groups"},
		{"release: duplicate group", release(id, res, "acme", 1, "x", "y", "x"), ClassInvalidArgument, "groups"},
		{"release: not held", release(id, res, "acme", 1, "trusted"), ClassFailedPrecondition, "copies"},
		{"release: unknown resource", release(id, "nope", "acme", 1), ClassNotFound, "resource"},
		{"release: unknown session", release("nope", res, "acme", 1), ClassNotFound, "session_id"},
		{"transfer: negative ttl", transfer(id, res, "acme", 1, -1), ClassInvalidArgument, "ttl"},
		{"transfer: too many copies", transfer(id, res, "acme", MaxCopies+1, 0), ClassInvalidArgument, "copies"},
		{"transfer: not held", transfer(id, res, "acme", 1, 0), ClassFailedPrecondition, "copies"},
		{"seize: empty id", func() error { _, err := e.Seize(t.Context(), t0, id, ""); return err }(), ClassInvalidArgument, "transfer_id"},
		{"seize: empty session", func() error { _, err := e.Seize(t.Context(), t0, "", "x"); return err }(), ClassInvalidArgument, "session_id"},
		{"seize: unknown", func() error { _, err := e.Seize(t.Context(), t0, id, "x"); return err }(), ClassNotFound, "transfer_id"},
		{"keep-alive: empty", func() error { _, err := e.KeepAlive(t0, ""); return err }(), ClassInvalidArgument, "session_id"},
		{"keep-alive: unknown", func() error { _, err := e.KeepAlive(t0, "x"); return err }(), ClassNotFound, "session_id"},
		{"close: empty", func() error { _, err := e.Close(t.Context(), t0, ""); return err }(), ClassInvalidArgument, "session_id"},
		{"close: unknown", func() error { _, err := e.Close(t.Context(), t0, "x"); return err }(), ClassNotFound, "session_id"},
		{"open: negative ttl", func() error { _, err := e.Open(t0, -1); return err }(), ClassInvalidArgument, "ttl"},
		{"wrong kind", WrongKind("api", "rate-limited"), ClassFailedPrecondition, "resource"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ce *Error
			if !errors.As(tt.err, &ce) || ce.Field != tt.field || ClassOf(tt.err) != tt.class || !strings.HasPrefix(tt.err.Error(), tt.field+": ") {
				t.Fatalf("%v (class %v), want class %v on field %s", tt.err, ClassOf(tt.err), tt.class, tt.field)
			}
		})
	}
	if st := e.Stats(); st.Granted != 0 || st.Rejected != 0 || st.Staged != 0 {
		t.Fatalf("a failed request changed the engine: %+v", st)
	}
	if err := consistent(e.Snapshot()); err != nil {
		t.Fatal(err)
	}
	if ClassOf(nil) != ClassOK || ClassOf(errors.New("x")) != ClassInternal || ClassOf(fmt.Errorf("w: %w", ErrNotHeld)) != ClassFailedPrecondition {
		t.Fatal("ClassOf")
	}
	if ClassNotFound.String() != "NotFound" || Class(9).String() != "Class(9)" {
		t.Fatal("Class.String")
	}
}

// The release error says what the session does hold.
func TestNotHeldMessage(t *testing.T) {
	e, _ := New(sandboxes(), Options{Rand: seeded(5)})
	res := "cookbook/sandboxes"
	s, _ := e.Open(t0, time.Hour)
	e.Reserve(t.Context(), t0, s.ID, res, "acme", 2, 0)
	err := e.Release(t.Context(), t0, s.ID, res, "acme", 1, nil)
	want := `copies: release of 1 copies of "cookbook/sandboxes" for domain "acme" in no group; the session holds 0 (and 2 in [trusted])`
	if err == nil || err.Error() != want {
		t.Fatalf("\n got %v\nwant %s", err, want)
	}
}

// Ids come from the random source: unpredictable with crypto/rand,
// repeatable with a seeded source, and a failing source is an error.
func TestIDs(t *testing.T) {
	a, _ := New(nil, Options{Rand: seeded(7)})
	b, _ := New(nil, Options{Rand: seeded(7)})
	sa, _ := a.Open(t0, 0)
	sb, _ := b.Open(t0, 0)
	if sa.ID != sb.ID {
		t.Fatal("a seeded source gives different ids")
	}
	c, _ := New(nil, Options{})
	seen := map[string]bool{}
	for range 100 {
		s, err := c.Open(t0, 0)
		if err != nil || seen[s.ID] || len(s.ID) != 32 {
			t.Fatalf("%+v %v", s, err)
		}
		seen[s.ID] = true
	}
	bad, _ := New(nil, Options{Rand: strings.NewReader("short")})
	if _, err := bad.Open(t0, 0); err == nil || ClassOf(err) != ClassInternal {
		t.Fatalf("a failing source: %v", err)
	}
	same, _ := New(nil, Options{Rand: zeros{}})
	if _, err := same.Open(t0, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := same.Open(t0, 0); err == nil {
		t.Fatal("a repeated id was handed out twice")
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

func TestOptions(t *testing.T) {
	for _, o := range []Options{
		{MinSessionTTL: 20 * time.Second},
		{DefaultSessionTTL: 2 * time.Hour},
		{MinSessionTTL: -1},
		{DefaultTransferTTL: 2 * time.Hour},
		{DefaultTransferTTL: -1},
	} {
		if _, err := New(nil, o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
	e, err := New(nil, Options{MinSessionTTL: time.Millisecond, DefaultSessionTTL: time.Second, MaxSessionTTL: time.Minute, DefaultTransferTTL: time.Second, MaxTransferTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := e.Open(t0, 5*time.Millisecond); s.TTL != 5*time.Millisecond {
		t.Fatalf("%+v", s)
	}
	if s, _ := e.Open(t0, 0); s.TTL != time.Second {
		t.Fatalf("%+v", s)
	}
}

// Many groups in a release: duplicates found, order ignored.
func TestManyGroups(t *testing.T) {
	var groups []Group
	var names []string
	for i := range 40 {
		names = append(names, fmt.Sprintf("g%02d", i))
		groups = append(groups, Group{Name: names[i], Limit: 10, Domains: []string{"d"}})
	}
	e, _ := New(&Config{Resources: map[string]Resource{"r": {DomainLimit: 10, Groups: groups}}}, Options{})
	s, _ := e.Open(t0, 0)
	if r, err := e.Reserve(t.Context(), t0, s.ID, "r", "d", 2, 0); err != nil || r.Granted != 2 || len(r.Groups) != 40 {
		t.Fatal(r, err)
	}
	dup := append(slices.Clone(names), "g07")
	if err := e.Release(t.Context(), t0, s.ID, "r", "d", 1, dup); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), `"g07" is named twice`) {
		t.Fatal(err)
	}
	slices.Reverse(names)
	if err := e.Release(t.Context(), t0, s.ID, "r", "d", 1, names); err != nil {
		t.Fatal(err)
	}
	if err := e.Release(t.Context(), t0, s.ID, "r", "d", 1, names[1:]); !errors.Is(err, ErrNotHeld) {
		t.Fatal(err)
	}
	if err := e.Release(t.Context(), t0, s.ID, "r", "d", 1, names[:5]); !errors.Is(err, ErrNotHeld) {
		t.Fatal(err)
	}
	if err := e.Release(t.Context(), t0, s.ID, "r", "d", 1, names); err != nil {
		t.Fatal(err)
	}
}

// A session's owner (OpenOwned) is known while the session lives, through
// keep-alives, and forgotten when it ends: closed, expired, or fenced.
func TestOwner(t *testing.T) {
	e, _ := New(sandboxes(), Options{})
	a, err := e.OpenOwned(t0, 2*time.Second, "alice")
	if err != nil || a.Owner != "alice" {
		t.Fatalf("OpenOwned: %+v, %v", a, err)
	}
	plain, _ := e.Open(t0, 2*time.Second)
	if o, ok := e.Owner(a.ID); o != "alice" || !ok {
		t.Errorf("Owner(alice's) = %q, %v", o, ok)
	}
	if o, ok := e.Owner(plain.ID); o != "" || !ok {
		t.Errorf("Owner(Open's) = %q, %v; want \"\", true", o, ok)
	}
	if k, err := e.KeepAlive(t0.Add(time.Second), a.ID); err != nil || k.Owner != "alice" {
		t.Errorf("KeepAlive: %+v, %v", k, err)
	}
	if _, err := e.Close(context.Background(), t0.Add(time.Second), a.ID); err != nil {
		t.Fatal(err)
	}
	if o, ok := e.Owner(a.ID); ok {
		t.Errorf("Owner after Close = %q, true", o)
	}
	b, _ := e.OpenOwned(t0, time.Second, "bob")
	e.Expire(context.Background(), t0.Add(5*time.Second))
	if _, ok := e.Owner(b.ID); ok {
		t.Error("Owner known after the session expired")
	}
	c, _ := e.OpenOwned(t0.Add(5*time.Second), time.Minute, "carol")
	e.Fence()
	if _, ok := e.Owner(c.ID); ok {
		t.Error("Owner known after Fence dropped the session")
	}
}
