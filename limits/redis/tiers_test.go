package redisstore

import (
	"cmp"
	"context"
	"maps"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/limits"
)

// rapidOnce applies the suite's property-test settings (a fixed seed, 200
// checks unless the command line says otherwise) once: the package's
// TestMain, which starts Redis, predates its property tests.
var rapidOnce sync.Once

func rapidChecks() { rapidOnce.Do(func() { testutil.RapidChecks(200) }) }

// genTiers draws normalized burst tiers: 0 to 4 of them, limits small or,
// sometimes, up to MaxTokens (so that sums pass 2⁵³), windows from 1 ms to
// 2 s or, sometimes, years long, active times of 1 to 4 windows,
// cooldowns from none to several windows, some skippable.
func genTiers(t *rapid.T, label string) []limits.Tier {
	n := rapid.IntRange(0, 4).Draw(t, label+" tiers")
	tiers := make([]limits.Tier, n)
	for i := range tiers {
		w := time.Duration(rapid.SampledFrom([]int64{1e6, 1e8, 5e8, 1e9, 1e9, 2e9, int64(limits.MaxDuration / 4)}).Draw(t, "window"))
		active := w * time.Duration(rapid.Int64Range(1, 4).Draw(t, "windows active"))
		cool := w * time.Duration(rapid.SampledFrom([]int64{0, 0, 1, 3}).Draw(t, "windows cooldown"))
		lim := rapid.OneOf(rapid.Int64Range(1, 6), rapid.Just(int64(limits.MaxTokens)), rapid.Int64Range(limits.MaxTokens/2, limits.MaxTokens)).Draw(t, "limit")
		tiers[i] = limits.Tier{Limit: lim, Window: w, Active: min(active, limits.MaxDuration), Cooldown: min(cool, limits.MaxDuration),
			Skippable: rapid.Bool().Draw(t, "skippable")}
		if tiers[i].Active == limits.MaxDuration {
			tiers[i].Window = tiers[i].Active
		}
	}
	return tiers
}

// tierLimits is one configuration generation of the differential test's
// resources: "r" (with a global limit, a template and a named domain "b"),
// "s" (no global limit) and "u" (a namespace's unlimited resource).
type tierLimits struct {
	r, rb, s, u *limits.Limit
}

func genTierLimits(t *rapid.T, gen uint64) tierLimits {
	h := func(label string) int64 {
		return rapid.OneOf(rapid.Just(int64(0)), rapid.Int64Range(1, 10), rapid.Just(int64(limits.MaxTokens))).Draw(t, label)
	}
	g := rapid.OneOf(rapid.Int64Range(1, 15), rapid.Just(int64(limits.MaxTokens))).Draw(t, "G")
	mk := func(res, name string, kind limits.Kind, p *limits.TierParams) *limits.Limit {
		return &limits.Limit{Resource: res, Name: name, Kind: kind, Algorithm: limits.BurstTiers, Tiers: p, Unlimited: p.Unlimited, Gen: gen}
	}
	return tierLimits{
		r:  mk("r", "", limits.KindTemplate, limits.NewTierParams(h("H r"), g, genTiers(t, "r"), false)),
		rb: mk("r", "b", limits.KindNamed, limits.NewTierParams(h("H r/b"), g, genTiers(t, "r/b"), false)),
		s:  mk("s", "", limits.KindTemplate, limits.NewTierParams(h("H s"), 0, genTiers(t, "s"), false)),
		u:  mk("u", "ns/", limits.KindNamespace, limits.NewTierParams(h("H u"), rapid.SampledFrom([]int64{0, 5}).Draw(t, "G u"), genTiers(t, "u"), true)),
	}
}

// pick returns the key and Limit of domain i under ls.
func (ls tierLimits) pick(i int) (limits.Key, *limits.Limit) {
	switch i {
	case 0:
		return limits.Key{Resource: "r", Domain: "a"}, ls.r
	case 1:
		return limits.Key{Resource: "r", Domain: "b"}, ls.rb
	case 2:
		return limits.Key{Resource: "r", Domain: "c{x}"}, ls.r
	case 3:
		return limits.Key{Resource: "s", Domain: "a"}, ls.s
	case 4:
		return limits.Key{Resource: "s", Domain: "b_1"}, ls.s
	}
	return limits.Key{Resource: "u", Domain: "a"}, ls.u
}

const tierDomains = 6

// caseID numbers the property tests' cases, for their own key prefixes.
var caseID atomic.Int64

// tierDifferential runs random sequences of TakeHits on the memory store
// and on a Redis store on c (virtual time: Options.callerTime) and
// requires identical HitOutcomes; halfway through, the Limits change to a
// new generation (the domains keep their logs and tiers by index). At the
// end, every domain's snapshot describes the same state in both stores.
func tierDifferential(t *testing.T, c redis.UniversalClient, steps int) {
	rapidChecks()
	rapid.Check(t, func(rt *rapid.T) {
		pre := prefix(t) + strconv.FormatInt(caseID.Add(1), 10) + ":"
		st := New(c, Options{Prefix: pre, callerTime: true})
		mem := limits.NewMemoryStore()
		gen1 := genTierLimits(rt, 1)
		gen2 := genTierLimits(rt, 2)
		now := rapid.SampledFrom([]int64{t0.UnixNano(), -3e9, 1 << 62, math.MaxInt64 - 5e9}).Draw(rt, "start")
		n := rapid.IntRange(1, steps).Draw(rt, "steps")
		for i := range n {
			dt := rapid.OneOf(
				rapid.Just(int64(0)),
				rapid.Just(int64(1)),
				rapid.Int64Range(-2e6, 0), // concurrent callers: a little out of order
				rapid.Int64Range(0, 3e9),
				rapid.SampledFrom([]int64{1e6, 1e8, 5e8, 1e9, 1e9 + 1, 2e9}),
			).Draw(rt, "dt")
			now = min(now+dt, math.MaxInt64-1) // (the start is far enough from overflow)
			ls := gen1
			if i >= n/2 {
				ls = gen2
			}
			k, l := ls.pick(rapid.IntRange(0, tierDomains-1).Draw(rt, "domain"))
			tok := rapid.OneOf(rapid.Int64Range(1, 10), rapid.Int64Range(limits.MaxTokens-3, limits.MaxTokens)).Draw(rt, "tokens")
			a := limits.Ask{Tokens: tok, Min: rapid.Int64Range(1, tok).Draw(rt, "min")}
			om, err := mem.TakeHits(t.Context(), now, k, l, a)
			if err != nil {
				rt.Fatal(err)
			}
			or, err := st.TakeHits(t.Context(), now, k, l, a)
			if err != nil {
				rt.Fatalf("step %d: %v", i, err)
			}
			if om != or {
				rt.Fatalf("step %d at %d, %v %+v under %+v:\nmemory %+v\nredis  %+v", i, now, k, a, *l.Tiers, om, or)
			}
		}
		// Walk: the same domains, the same state (as Describe shows it).
		// Redis applies a new configuration lazily (at a domain's next
		// grant) and shows a domain under the Limit of its last grant, so
		// both states are described under the memory store's Limit, and
		// Redis's must be one of the domain's two.
		seen := map[limits.Key]limits.Snapshot{}
		if err := mem.Walk(t.Context(), func(s limits.Snapshot) bool { seen[s.Key] = s; return true }); err != nil {
			rt.Fatal(err)
		}
		got := 0
		if err := st.Walk(t.Context(), func(s limits.Snapshot) bool {
			got++
			ms, ok := seen[s.Key]
			if !ok {
				rt.Fatalf("walk: %v not in memory", s.Key)
			}
			if !sameLimit(s.Limit, gen1, s.Key) && !sameLimit(s.Limit, gen2, s.Key) {
				rt.Fatalf("walk %v: Limit %+v (tiers %+v)", s.Key, s.Limit, s.Limit.Tiers)
			}
			want := limits.Describe(ms, now)
			s.Limit = ms.Limit
			d := limits.Describe(s, now)
			// Redis writes nothing on a rejection: no rejections, and the
			// last use is the last grant.
			want.Rejections, want.LastUsed, d.LastUsed = 0, time.Time{}, time.Time{}
			if d != want {
				rt.Fatalf("walk %v:\nmemory %+v\nredis  %+v", s.Key, want, d)
			}
			return true
		}); err != nil {
			rt.Fatal(err)
		}
		if got != len(seen) {
			rt.Fatalf("walk: %d domains on Redis, %d in memory", got, len(seen))
		}
	})
}

// sameLimit reports whether l (rebuilt by Walk) is k's Limit in ls.
func sameLimit(l *limits.Limit, ls tierLimits, k limits.Key) bool {
	var want *limits.Limit
	for i := range tierDomains {
		if k2, l2 := ls.pick(i); k2 == k {
			want = l2
		}
	}
	p, q := l.Tiers, want.Tiers
	return l.Resource == want.Resource && l.Name == want.Name && l.Kind == want.Kind && l.Gen == want.Gen &&
		l.Algorithm == limits.BurstTiers && l.Unlimited == want.Unlimited &&
		p.HardLimit == q.HardLimit && p.GlobalLimit == q.GlobalLimit && p.Unlimited == q.Unlimited &&
		p.Most() == q.Most() && slices.Equal(p.Tiers, q.Tiers)
}

// TestTiersDifferential: TakeHits on Redis gives the memory store's
// HitOutcomes over random sequences on domains of three resources (one
// with a global limit shared by a template and a named domain, one
// without, one unlimited), with sums past 2⁵³ hits and instants near the
// int64 range's end, across a change of configuration.
func TestTiersDifferential(t *testing.T) { tierDifferential(t, client(t), 60) }

// TestClusterTiersDifferential: the same on the three-master cluster
// (every script touches one slot, or Redis would refuse it with
// CROSSSLOT).
func TestClusterTiersDifferential(t *testing.T) { tierDifferential(t, clusterClient(t), 20) }

// TestTierConfig: the configuration argument (a domain's c field) gives
// back its parameters whatever the name holds, and tells apart what
// differs in the dynamic flag, the kind, the name or the parameters.
func TestTierConfig(t *testing.T) {
	p1 := packTierParams(limits.NewTierParams(3, 0, []limits.Tier{{Limit: 2, Window: time.Second, Active: time.Second}}, false))
	p2 := packTierParams(limits.NewTierParams(4, 0, nil, false))
	seen := map[string]bool{}
	for _, dyn := range []string{"0", "1"} {
		for _, kind := range []int{1, 12} {
			for _, name := range []string{"", "a", "a|1|", "|", "1|a"} {
				for _, tp := range []string{p1, p2} {
					c := tierConfig(dyn, kind, name, tp)
					if got, ok := configParams(c); !ok || got != tp {
						t.Fatalf("%q: params %q %v", c, got, ok)
					}
					if seen[c] {
						t.Fatalf("%q twice", c)
					}
					seen[c] = true
				}
			}
		}
	}
	for _, c := range []string{"", "0", "01|", "01|x|", "01|-1|", "01|5|ab"} {
		if _, ok := configParams(c); ok {
			t.Errorf("%q: ok", c)
		}
	}
}

// TestTierSnapshotBeforeC: a burst-tier domain's hash last written before
// its configuration moved into c (parameters in tp) reads as the same
// snapshot as one written now.
func TestTierSnapshotBeforeC(t *testing.T) {
	c := client(t)
	st := New(c, Options{Prefix: prefix(t), callerTime: true})
	e, err := limits.New(tiersConfig(), limits.Options{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	if d := e.Allow(t.Context(), t0, limits.Request{Resource: "api", Domain: "acme", Tokens: 2}); d.Status != limits.StatusOK {
		t.Fatalf("%+v", d)
	}
	h, err := c.HGetAll(context.Background(), st.domainKey("api", "acme")).Result()
	if err != nil {
		t.Fatal(err)
	}
	k := limits.Key{Resource: "api", Domain: "acme"}
	now, okNow := tierSnapshot(k, h)
	tp, ok := configParams(h["c"])
	if !okNow || !ok {
		t.Fatalf("snapshot %v, c %q %v", okNow, h["c"], ok)
	}
	old := maps.Clone(h)
	delete(old, "c")
	old["tp"] = tp
	before, okBefore := tierSnapshot(k, old)
	if !okBefore || !reflect.DeepEqual(before, now) {
		t.Fatalf("with tp:\n%+v %v\nwith c:\n%+v", before, okBefore, now)
	}
	delete(old, "tp")
	if _, ok := tierSnapshot(k, old); ok {
		t.Fatal("a hash with neither c nor tp read as a domain")
	}
}

// tiersConfig is an engine configuration with one burst-tier resource:
// tier 1 takes 3 hits per 2 s, tier 2 four more for 2 s then cools down
// for 4 s; H 6, G 8 across domains.
func tiersConfig() *limits.Config {
	return &limits.Config{Resources: map[string]*limits.Resource{
		"api": {Algorithm: limits.BurstTiers, HardLimit: 6, GlobalLimit: 8, Tiers: []limits.Tier{
			{Limit: 3, Window: 2 * time.Second, Active: 6 * time.Second},
			{Limit: 4, Window: 2 * time.Second, Active: 2 * time.Second, Cooldown: 4 * time.Second},
		}},
		"tb": {Template: &limits.Bucket{Size: 2, FillRate: 1, MaxTokensPerRequest: 2}},
	}}
}

// TestEngineTiers: an engine on the Redis store answers a burst-tier
// resource as an engine on the memory store does, through Allow (the
// paper's response context included), Walk and a change of
// configuration; a domain that was a token bucket starts fresh.
func TestEngineTiers(t *testing.T) {
	mem, err := limits.New(tiersConfig(), limits.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st := New(client(t), Options{Prefix: prefix(t), callerTime: true})
	red, err := limits.New(tiersConfig(), limits.Options{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		at      time.Duration
		domain  string
		hits    int64
		granted int64
	}{
		{0, "acme", 2, 2},            // tier 0 bursts into tier 1
		{time.Second, "acme", 4, 4},  // fills tier 1, bursts into tier 2
		{time.Second, "acme", 5, 0},  // H 6: none left this second (MinTokens 5)
		{time.Second, "other", 3, 2}, // G 8: two left across domains
		{3*time.Second + 1, "acme", 5, 3},
		{3*time.Second + 1, "acme", 1, 0},
	}
	for i, s := range steps {
		req := limits.Request{Resource: "api", Domain: s.domain, Tokens: s.hits, MinTokens: min(s.hits, 1+s.hits/2)}
		dm, dr := mem.Allow(t.Context(), t0.Add(s.at), req), red.Allow(t.Context(), t0.Add(s.at), req)
		if dm != dr {
			t.Fatalf("step %d %+v:\nmemory %+v\nredis  %+v", i, req, dm, dr)
		}
		if dr.Granted != s.granted || dr.Err != nil {
			t.Fatalf("step %d %+v: %+v, want %d granted", i, req, dr, s.granted)
		}
		if i == 3 && (!dr.Tiers.GlobalLimited || dr.Tiers.GlobalHitsLastSecond != 8 || dr.Tiers.DomainHitsLastSecond != 2) {
			t.Fatalf("step %d: the global limit's context: %+v", i, dr.Tiers)
		}
	}

	// Walk describes the domains as the memory engine does.
	at := t0.Add(3 * time.Second)
	infos := func(e *limits.Engine, at time.Time) []limits.BucketInfo {
		var out []limits.BucketInfo
		if err := e.Walk(t.Context(), at, func(b limits.BucketInfo) bool {
			b.LastUsed, b.Rejections = time.Time{}, 0
			out = append(out, b)
			return true
		}); err != nil {
			t.Fatal(err)
		}
		slices.SortFunc(out, func(a, b limits.BucketInfo) int {
			return cmp.Or(strings.Compare(a.Resource, b.Resource), strings.Compare(a.Domain, b.Domain))
		})
		return out
	}
	if m, r := infos(mem, at), infos(red, at); !slices.Equal(m, r) || len(r) != 2 || r[0].Tier != 1 || r[0].Size != 6 {
		t.Fatalf("walk:\nmemory %+v\nredis  %+v", m, r)
	}

	// A configuration change: "api" loses tier 2 and becomes a token
	// bucket for "tb"'s domain; "tb" becomes burst tiers.
	cfg2 := tiersConfig()
	cfg2.Resources["api"].Tiers = cfg2.Resources["api"].Tiers[:1]
	cfg2.Resources["tb"] = &limits.Resource{Algorithm: limits.BurstTiers, Tiers: []limits.Tier{{Limit: 5, Window: time.Second, Active: time.Second}}}
	for _, e := range []*limits.Engine{mem, red} {
		if d := e.Allow(t.Context(), t0.Add(4*time.Second), limits.Request{Resource: "tb", Domain: "acme", Tokens: 2}); d.Status != limits.StatusOK {
			t.Fatalf("token bucket: %+v", d)
		}
		if err := e.SetConfig(t0.Add(4*time.Second), cfg2); err != nil {
			t.Fatal(err)
		}
	}
	for i, s := range []struct {
		at  time.Duration
		req limits.Request
	}{
		{5 * time.Second, limits.Request{Resource: "api", Domain: "acme", Tokens: 3, MinTokens: 1}}, // keeps its log and tier 1 (full)
		{5 * time.Second, limits.Request{Resource: "tb", Domain: "acme", Tokens: 5}},                // was a token bucket: fresh
		{5 * time.Second, limits.Request{Resource: "tb", Domain: "acme", Tokens: 1}},
		{9 * time.Second, limits.Request{Resource: "api", Domain: "acme", Tokens: 2}},
		{9 * time.Second, limits.Request{Resource: "api", Domain: "other", Tokens: 1}},
	} {
		dm, dr := mem.Allow(t.Context(), t0.Add(s.at), s.req), red.Allow(t.Context(), t0.Add(s.at), s.req)
		if dm != dr {
			t.Fatalf("after the change, %d %+v:\nmemory %+v\nredis  %+v", i, s.req, dm, dr)
		}
		if i == 1 && (dr.Granted != 5 || dr.Tiers.Tier != 1) {
			t.Fatalf("the token bucket's domain under tiers: %+v", dr)
		}
	}
	// (Redis applies a configuration lazily: a domain shows the Limit of
	// its last grant, here the new one for every domain.)
	if m, r := infos(mem, t0.Add(9*time.Second)), infos(red, t0.Add(9*time.Second)); !slices.Equal(m, r) {
		t.Fatalf("walk after the change:\nmemory %+v\nredis  %+v", m, r)
	}

	// And back: "tb" a token bucket again, full, its grants kept; one
	// domain each, in memory and on Redis ("api"'s domains show their new
	// Limit on Redis only after their next grant).
	tb := func(e *limits.Engine, at time.Time) []limits.BucketInfo {
		return slices.DeleteFunc(infos(e, at), func(b limits.BucketInfo) bool { return b.Resource != "tb" })
	}
	for _, e := range []*limits.Engine{mem, red} {
		if err := e.SetConfig(t0.Add(10*time.Second), tiersConfig()); err != nil {
			t.Fatal(err)
		}
	}
	if m, r := tb(mem, t0.Add(10*time.Second)), tb(red, t0.Add(10*time.Second)); !slices.Equal(m, r) || len(r) != 1 || r[0].Grants != 2 || r[0].Tokens != 2 {
		t.Fatalf("walk after the change back:\nmemory %+v\nredis  %+v", m, r)
	}
	req := limits.Request{Resource: "tb", Domain: "acme", Tokens: 2}
	if dm, dr := mem.Allow(t.Context(), t0.Add(10*time.Second), req), red.Allow(t.Context(), t0.Add(10*time.Second), req); dm != dr || dr.Status != limits.StatusOK {
		t.Fatalf("the burst-tier domain as a token bucket again:\nmemory %+v\nredis  %+v", dm, dr)
	}
	if m, r := tb(mem, t0.Add(10*time.Second)), tb(red, t0.Add(10*time.Second)); !slices.Equal(m, r) || len(r) != 1 || r[0].Grants != 3 {
		t.Fatalf("walk after a grant:\nmemory %+v\nredis  %+v", m, r)
	}
}

// TestTiersRejectionWritesNothing: a rejected request, or one past
// max_dynamic_buckets, changes no key (nor its TTL); a new domain
// rejected creates none.
func TestTiersRejectionWritesNothing(t *testing.T) {
	c := client(t)
	ctx := context.Background()
	st := New(c, Options{Prefix: prefix(t), callerTime: true})
	cfg := &limits.Config{Resources: map[string]*limits.Resource{
		"r": {Algorithm: limits.BurstTiers, HardLimit: 3, GlobalLimit: 4, MaxDynamicBuckets: 2,
			Tiers: []limits.Tier{{Limit: 5, Window: time.Second, Active: 3 * time.Second, Cooldown: time.Second}}},
	}}
	e, err := limits.New(cfg, limits.Options{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	dump := func() map[string]string {
		keys, err := c.Keys(ctx, escape(prefix(t))+"*").Result()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, k := range keys {
			v, err := c.Dump(ctx, k).Result()
			if err != nil {
				t.Fatal(err)
			}
			out[k] = v
		}
		return out
	}
	allow := func(dom string, tok, lo int64, want limits.Status) {
		t.Helper()
		d := e.Allow(ctx, t0, limits.Request{Resource: "r", Domain: dom, Tokens: tok, MinTokens: lo})
		if d.Status != want {
			t.Fatalf("%s ×%d: %+v, want %v", dom, tok, d, want)
		}
	}
	allow("d1", 4, 4, limits.StatusTimeout) // above H: no key at all
	if k := dump(); len(k) != 0 {
		t.Fatalf("a rejection wrote %v", k)
	}
	allow("d1", 2, 2, limits.StatusOK)
	allow("d2", 1, 1, limits.StatusOK)
	before := dump()
	if len(before) != 4 { // two domains, the dynamic set, the global log
		t.Fatalf("after two grants: %d keys", len(before))
	}
	keys := slices.Sorted(maps.Keys(before))
	ttl := func() []time.Duration {
		var out []time.Duration
		for _, k := range keys {
			d, _ := c.PTTL(ctx, k).Result()
			out = append(out, d)
		}
		return out
	}
	ttls := ttl()
	allow("d1", 2, 2, limits.StatusTimeout) // H
	allow("d2", 2, 2, limits.StatusTimeout) // G
	allow("d3", 1, 1, limits.StatusTooManyBuckets)
	if after := dump(); len(after) != len(before) {
		t.Fatalf("keys %v, then %v", before, after)
	} else {
		for k, v := range before {
			if after[k] != v {
				t.Errorf("%s changed", k)
			}
		}
	}
	for i, d := range ttl() {
		if d > ttls[i] {
			t.Errorf("a TTL grew from %v to %v", ttls[i], d)
		}
	}
}

// TestTiersExpiry: a domain's key expires once the domain would be fresh
// (no tier active or in cooldown, no hit in the last second) plus a
// second, the global log's once it has no hit in the last second plus a
// second; the domain then starts afresh (Created).
func TestTiersExpiry(t *testing.T) {
	c := client(t)
	ctx := context.Background()
	st := New(c, Options{Prefix: prefix(t)})
	cfg := &limits.Config{Resources: map[string]*limits.Resource{
		"r": {Algorithm: limits.BurstTiers, GlobalLimit: 100, Tiers: []limits.Tier{
			{Limit: 1, Window: 100 * time.Millisecond, Active: 200 * time.Millisecond, Cooldown: 300 * time.Millisecond},
			{Limit: 1, Window: 500 * time.Millisecond, Active: 500 * time.Millisecond, Cooldown: 1500 * time.Millisecond},
		}},
	}}
	created := 0
	e, err := limits.New(cfg, limits.Options{Store: st, Listener: limits.ListenerFunc(func(ev limits.Event) {
		if ev.Type == limits.EventBucketCreated {
			created++
		}
	})})
	if err != nil {
		t.Fatal(err)
	}
	if d := e.Allow(ctx, time.Now(), limits.Request{Resource: "r", Domain: "d", Tokens: 2}); d.Status != limits.StatusOK || d.Tiers.Tier != 2 {
		t.Fatalf("%+v", d)
	}
	dom, glob := st.domainKey("r", "d"), st.resourceKey("r")+"g"
	for _, k := range []struct {
		key      string
		lo, high time.Duration
	}{
		// Tier 2: active 0.5 s, cooldown 1.5 s: fresh after 2 s.
		{dom, 2900 * time.Millisecond, 3001 * time.Millisecond},
		// The last hit leaves the last second after 1 s.
		{glob, 1900 * time.Millisecond, 2001 * time.Millisecond},
	} {
		ttl, err := c.PTTL(ctx, k.key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if ttl < k.lo || ttl > k.high {
			t.Errorf("%s: TTL %v, want in [%v, %v]", k.key, ttl, k.lo, k.high)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := c.Exists(ctx, dom, glob).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of the keys still there after 10 s", n)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if d := e.Allow(ctx, time.Now(), limits.Request{Resource: "r", Domain: "d", Tokens: 2}); d.Status != limits.StatusOK || d.Tiers.Tier != 2 || d.Tiers.GlobalHitsLastSecond != 2 || created != 2 {
		t.Fatalf("after expiry: %+v, %d created", d, created)
	}
}

// TestTiersKeys: a burst-tier domain's keys (its hash, the dynamic set,
// the global log) share the resource's slot, also for names with braces;
// on the cluster the script runs (no CROSSSLOT).
func TestTiersKeys(t *testing.T) {
	cc := clusterClient(t)
	ctx := context.Background()
	st := New(cc, Options{Prefix: prefix(t), callerTime: true})
	p := limits.NewTierParams(0, 5, []limits.Tier{{Limit: 3, Window: time.Second, Active: time.Second}}, false)
	for _, k := range []limits.Key{{Resource: "r{1}", Domain: "a}b"}, {Resource: "x", Domain: "{y}"}, {Resource: "", Domain: "z"}} {
		l := &limits.Limit{Resource: k.Resource, Kind: limits.KindTemplate, Algorithm: limits.BurstTiers, Tiers: p, MaxDynamic: 10, Gen: 1}
		out, err := st.TakeHits(ctx, t0.UnixNano(), k, l, limits.Ask{Tokens: 2, Min: 1})
		if err != nil || out.Granted != 2 || !out.Created || out.GlobalHitsLastSecond != 2 {
			t.Fatalf("%q: %+v, %v", k, out, err)
		}
		base := st.resourceKey(k.Resource)
		var slot int64 = -1
		for _, key := range []string{base + "b:" + escape(k.Domain), base + "d", base + "g"} {
			if n, _ := cc.Exists(ctx, key).Result(); n != 1 {
				t.Errorf("%q: no key %q", k, key)
			}
			s, err := cc.ClusterKeySlot(ctx, key).Result()
			if err != nil {
				t.Fatal(err)
			}
			if slot >= 0 && s != slot {
				t.Errorf("%q: %q in slot %d, not %d", k, key, s, slot)
			}
			slot = s
		}
	}
}

// BenchmarkTakeHits: Allow on a two-tier resource on the local
// redis-server, through the engine (the request's whole path but the
// network front end), from 50 goroutines as sluice server's quota service
// path does: spread over 1000 domains without and with a global limit
// (whose log holds every hit of the last second across domains: one entry
// per instant), and on one hot domain whose hard limit of 100 a second
// rejects most requests. Reports Redis's own CPU per request (INFO cpu:
// user + sys, as BenchmarkAllowRedisCPU), the scripts' share of it (INFO
// commandstats) and the requests per round trip:
//
//	go test -run '^$' -bench TakeHits -benchtime 100000x ./limits/redis
func BenchmarkTakeHits(b *testing.B) {
	tiers := []limits.Tier{
		{Limit: 1e9, Window: time.Second, Active: time.Hour},
		{Limit: 1e9, Window: time.Second, Active: time.Second, Cooldown: time.Second},
	}
	for _, bc := range []struct {
		name    string
		h, g    int64
		domains int
	}{
		{"domains=1000", 1e9, 0, 1000},
		{"domains=1000,global", 1e9, 1e9, 1000},
		{"hot,H=100", 100, 0, 1},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c := client(b)
			st := New(c, Options{Prefix: prefix(b)})
			cfg := &limits.Config{Resources: map[string]*limits.Resource{
				"r": {Algorithm: limits.BurstTiers, HardLimit: bc.h, GlobalLimit: bc.g, Tiers: tiers},
			}}
			e, err := limits.New(cfg, limits.Options{Store: st})
			if err != nil {
				b.Fatal(err)
			}
			if err := c.ConfigResetStat(context.Background()).Err(); err != nil {
				b.Fatal(err)
			}
			allowParallel(b, c, st, e, "d", bc.domains, func(d limits.Decision) bool {
				return d.Err == nil && (d.Status == limits.StatusOK || bc.h <= 100)
			})
			b.ReportMetric(scriptMicros(b, c), "script-µs/op")
		})
	}
}

// scriptMicros returns the mean Redis CPU time of a script call (EVALSHA
// and EVAL) since the last CONFIG RESETSTAT, in µs (INFO commandstats).
func scriptMicros(b *testing.B, c *redis.Client) float64 {
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var calls, usec float64
	for _, line := range strings.Split(info, "\n") {
		if !strings.HasPrefix(line, "cmdstat_evalsha:") && !strings.HasPrefix(line, "cmdstat_eval:") {
			continue
		}
		for _, f := range strings.Split(strings.TrimSpace(line[strings.IndexByte(line, ':')+1:]), ",") {
			k, v, _ := strings.Cut(f, "=")
			x, _ := strconv.ParseFloat(v, 64)
			switch k {
			case "calls":
				calls += x
			case "usec":
				usec += x
			}
		}
	}
	if calls == 0 {
		return 0
	}
	return usec / calls
}

// TestTiersLargeCounts: the logs count exactly past 2⁵³ hits, rebase
// their cumulative counts past 2⁶², and saturate at 2⁶¹ hits held, as the
// memory store's do: an unlimited domain (its one-second log and the
// resource's global log take every hit) gets MaxTokens hits at a time.
func TestTiersLargeCounts(t *testing.T) {
	st := New(client(t), Options{Prefix: prefix(t), callerTime: true})
	mem := limits.NewMemoryStore()
	p := limits.NewTierParams(0, 5, []limits.Tier{{Limit: 3, Window: time.Second, Active: time.Hour}}, true)
	l := &limits.Limit{Resource: "u", Kind: limits.KindNamespace, Algorithm: limits.BurstTiers, Tiers: p, Unlimited: true, Gen: 1}
	a := limits.Ask{Tokens: limits.MaxTokens, Min: 1}
	now := t0.UnixNano()
	step := func(i int, k limits.Key) limits.HitOutcome {
		om, err := mem.TakeHits(t.Context(), now, k, l, a)
		if err != nil {
			t.Fatal(err)
		}
		or, err := st.TakeHits(t.Context(), now, k, l, a)
		if err != nil {
			t.Fatal(err)
		}
		if om != or {
			t.Fatalf("step %d:\nmemory %+v\nredis  %+v", i, om, or)
		}
		return or
	}
	// 600 × 2⁵³ hits, half a second apart (three in a second: [now − 1 s,
	// now]): past 2⁶² in all.
	for i := range 600 {
		now += int64(500 * time.Millisecond)
		if out := step(i, limits.Key{Resource: "u", Domain: "a"}); i >= 2 && out.DomainHitsLastSecond != 3*limits.MaxTokens {
			t.Fatalf("step %d: %+v", i, out)
		}
	}
	// 300 × 2⁵³ hits in one instant: saturates at 2⁶¹.
	now += int64(2 * time.Second)
	var out limits.HitOutcome
	for i := range 300 {
		out = step(i, limits.Key{Resource: "u", Domain: "b"})
	}
	if out.DomainHitsLastSecond != 1<<61 || out.GlobalHitsLastSecond != 1<<61 {
		t.Fatalf("saturated: %+v", out)
	}
}

// TestAlgorithmChangeLazy: a resource that changes algorithm (token
// bucket ↔ burst tiers) keeps its domains' keys under the old one until
// their next grant, which starts them fresh under the new one, keeps
// their grants and deletes the old key; a rejection writes nothing, and
// a dynamic domain keeps its one place in the resource's count.
func TestAlgorithmChangeLazy(t *testing.T) {
	c := client(t)
	st := New(c, Options{Prefix: prefix(t), callerTime: true})
	bucket := &limits.Config{Resources: map[string]*limits.Resource{
		"r": {Template: &limits.Bucket{Size: 2, FillRate: 1, MaxTokensPerRequest: 2}, MaxDynamicBuckets: 1}}}
	tiers := &limits.Config{Resources: map[string]*limits.Resource{
		"r": {Algorithm: limits.BurstTiers, MaxDynamicBuckets: 1, Tiers: []limits.Tier{{Limit: 3, Window: time.Second, Active: time.Second}}}}}
	e, err := limits.New(bucket, limits.Options{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	sKey, bKey := st.bucketKey("r", "d"), st.domainKey("r", "d")
	exists := func(k string) bool { return c.Exists(t.Context(), k).Val() == 1 }
	req := limits.Request{Resource: "r", Domain: "d", Tokens: 2}
	if d := e.Allow(t.Context(), t0, req); d.Status != limits.StatusOK {
		t.Fatalf("token bucket: %+v", d)
	}
	if err := e.SetConfig(t0, tiers); err != nil {
		t.Fatal(err)
	}
	if !exists(sKey) || exists(bKey) {
		t.Fatal("SetConfig touched the keys")
	}
	// 4 hits over the tier's 3: rejected, nothing written.
	if d := e.Allow(t.Context(), t0, limits.Request{Resource: "r", Domain: "d", Tokens: 4}); d.Status == limits.StatusOK {
		t.Fatalf("4 over a tier of 3: %+v", d)
	}
	if !exists(sKey) || exists(bKey) {
		t.Fatal("a rejection moved the domain")
	}
	if d := e.Allow(t.Context(), t0, limits.Request{Resource: "r", Domain: "d", Tokens: 3}); d.Status != limits.StatusOK || d.Granted != 3 {
		t.Fatalf("the token bucket's domain under tiers, fresh, max dynamic 1: %+v", d)
	}
	if exists(sKey) || !exists(bKey) {
		t.Fatal("the grant did not move the domain")
	}
	grants := func() uint64 {
		var n uint64
		err := e.Walk(t.Context(), t0, func(b limits.BucketInfo) bool { n += b.Grants; return true })
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if g := grants(); g != 2 {
		t.Fatalf("grants %d after the move, want 2", g)
	}
	// And back: a full bucket, its grants kept.
	if err := e.SetConfig(t0.Add(time.Second), bucket); err != nil {
		t.Fatal(err)
	}
	if d := e.Allow(t.Context(), t0.Add(time.Second), req); d.Status != limits.StatusOK || d.Granted != 2 {
		t.Fatalf("back to a token bucket, full: %+v", d)
	}
	if !exists(sKey) || exists(bKey) {
		t.Fatal("the grant did not move the domain back")
	}
	if g := grants(); g != 3 {
		t.Fatalf("grants %d after the move back, want 3", g)
	}
	if n := c.ZCard(t.Context(), st.dynKey("r")).Val(); n != 1 {
		t.Fatalf("the dynamic count holds %d, want 1", n)
	}
}
