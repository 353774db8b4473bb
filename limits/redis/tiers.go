package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/limits"
)

//go:embed tiers.lua
var tiersLua string

var tiersScript = newScript("tiers", tiersLua)

// errNotTiers answers TakeHits with a token-bucket Limit.
var errNotTiers = errors.New("limits/redis: TakeHits on a limit without burst tiers (use Take)")

// TakeHits implements limits.Store: one EVALSHA of the tiers script (EVAL
// when Redis does not have it yet; sharing round trips and the circuit
// breaker with Take, whose errors it returns), which reads Redis TIME
// (now is ignored, except in this package's own tests) and mirrors
// limits.StepTiers exactly over the domain's TierState and, when
// l.Tiers.GlobalLimit > 0, the resource's global log, all in the
// resource's slot. A rejection writes nothing. A domain last configured
// under another burst-tier Limit keeps its one-second log and its tiers
// by index; one that was a token bucket starts fresh (not Created). The dynamic count, TooManyBuckets,
// ErrStaleConfig and ctx are as for Take. See the package documentation
// for the key layout and expiry.
func (s *Store) TakeHits(ctx context.Context, now int64, k limits.Key, l *limits.Limit, a limits.Ask) (limits.HitOutcome, error) {
	p := l.Tiers
	if p == nil {
		return limits.HitOutcome{}, errNotTiers
	}
	if l.Gen < s.minGen.Load() {
		return limits.HitOutcome{}, limits.ErrStaleConfig
	}
	nowArg := ""
	if s.callerTime {
		nowArg = strconv.FormatInt(now, 10)
	}
	req := packInts(now, floorDiv(now, int64(time.Millisecond)), a.Tokens, a.Min)
	la := s.limitArgs(l)
	dyn, maxDyn := la.dyn(k.Domain), int64(0)
	if dyn == 1 {
		maxDyn = l.MaxDynamic
	}
	member := escape(k.Domain)
	base := s.resourceKey(k.Resource)
	keys := []string{s.domainKey(k.Resource, member), base + "d", base + "g", base + "s:" + member}
	cmd, err := s.eval(ctx, tiersScript, keys, req, la.tp, nowArg, l.Gen, dynArg[dyn], maxDyn, member, int(l.Kind), l.Name,
		la.tierConfig[dyn])
	if err != nil {
		return limits.HitOutcome{}, err
	}
	v, err := cmd.Text()
	if err != nil {
		return limits.HitOutcome{}, scriptError(err)
	}
	return parseTiers(v, p)
}

// tierConfig returns the tiers script's configuration argument: the
// dynamic flag, the kind, the name and the packed parameters in one string
// (unambiguously: the name's length comes before it), which a domain's
// hash keeps (its c field) so that the script notices a change of any of
// them by reading one field.
func tierConfig(dyn string, kind int, name, tp string) string {
	return dyn + strconv.Itoa(kind) + "|" + strconv.Itoa(len(name)) + "|" + name + tp
}

// configParams returns the packed parameters in a tierConfig string.
func configParams(c string) (string, bool) {
	_, rest, ok1 := strings.Cut(c, "|")
	n, rest, ok2 := strings.Cut(rest, "|")
	k, err := strconv.Atoi(n)
	if !ok1 || !ok2 || err != nil || k < 0 || k > len(rest) {
		return "", false
	}
	return rest[k:], true
}

// tierReply is the number of int64s in the tiers script's reply.
const tierReply = 12

// parseTiers decodes the tiers script's reply under p.
func parseTiers(v string, p *limits.TierParams) (limits.HitOutcome, error) {
	if len(v) != 8*tierReply {
		return limits.HitOutcome{}, fmt.Errorf("limits/redis: take hits: reply of %d bytes, want %d", len(v), 8*tierReply)
	}
	n := func(i int) int64 { return intAt(v, i) }
	if n(0) == 2 {
		return limits.HitOutcome{TooManyBuckets: true}, nil
	}
	r := limits.TierResult{
		TierContext: limits.TierContext{
			HardLimit: p.HardLimit, GlobalLimit: p.GlobalLimit,
			Tier: int(n(5)), TierHits: n(6),
			DomainHitsLastSecond: n(7), GlobalHitsLastSecond: n(8),
			Burst: n(9) == 1, HardLimited: n(10) == 1, GlobalLimited: n(11) == 1,
		},
		Granted: n(2), RetryAfter: n(3), Available: n(4),
	}
	if r.Tier > 0 && r.Tier <= len(p.Tiers) {
		r.TierLimit, r.TierWindow = p.Tiers[r.Tier-1].Limit, p.Tiers[r.Tier-1].Window
	}
	return limits.HitOutcome{TierResult: r, Created: n(1) == 1}, nil
}

// packTierParams returns p packed for the tiers script (int64s: H, G,
// unlimited, Most, the number of tiers, then per tier its limit, window,
// active time, cooldown and skippable).
func packTierParams(p *limits.TierParams) string {
	ints := []int64{p.HardLimit, p.GlobalLimit, b2i(p.Unlimited), p.Most(), int64(len(p.Tiers))}
	for _, t := range p.Tiers {
		ints = append(ints, t.Limit, int64(t.Window), int64(t.Active), int64(t.Cooldown), b2i(t.Skippable))
	}
	return packInts(ints...)
}

// unpackTierParams inverts packTierParams.
func unpackTierParams(v string) (*limits.TierParams, bool) {
	if len(v)%8 != 0 || len(v) < 5*8 {
		return nil, false
	}
	n := intAt(v, 4)
	if n < 0 || n > limits.MaxTiers || len(v) != int(5+5*n)*8 {
		return nil, false
	}
	tiers := make([]limits.Tier, n)
	for i := range tiers {
		j := 5 + 5*i
		tiers[i] = limits.Tier{Limit: intAt(v, j), Window: time.Duration(intAt(v, j+1)), Active: time.Duration(intAt(v, j+2)),
			Cooldown: time.Duration(intAt(v, j+3)), Skippable: intAt(v, j+4) == 1}
	}
	return limits.NewTierParams(intAt(v, 0), intAt(v, 1), tiers, intAt(v, 2) == 1), true
}

// unpackTierState decodes a domain's s field: int64s, a header (the
// number of runs; the one-second log's base and length; per run its
// entry instant, in use 0/1, its window's base and length) and then the
// logs' entries in that order, each an instant and the log's cumulative
// count of hits (see tiers.lua).
func unpackTierState(v string) (*limits.TierState, bool) {
	if len(v)%8 != 0 || len(v) < 3*8 {
		return nil, false
	}
	nr := intAt(v, 0)
	if nr < 0 || nr > limits.MaxTiers || len(v) < int(3+4*nr)*8 {
		return nil, false
	}
	at := int(3 + 4*nr) // the next entry, in int64s
	readLog := func(l *limits.HitLog, k int) bool {
		prev, n := intAt(v, k), intAt(v, k+1)
		if n < 0 || n > int64(len(v)/16) || at+2*int(n) > len(v)/8 {
			return false
		}
		for range n {
			t, cum := intAt(v, at), intAt(v, at+1)
			if cum <= prev {
				return false
			}
			l.Add(t, cum-prev)
			prev, at = cum, at+2
		}
		return true
	}
	st := &limits.TierState{Tiers: make([]limits.TierRun, nr)}
	if !readLog(&st.Second, 1) {
		return nil, false
	}
	for i := range st.Tiers {
		k := 3 + 4*i
		r := &st.Tiers[i]
		r.Entered, r.InUse = intAt(v, k), intAt(v, k+1) == 1
		if !readLog(&r.Window, k+2) {
			return nil, false
		}
	}
	return st, at == len(v)/8
}

// tierSnapshot decodes a burst-tier domain's hash (false for a hash
// without its parameters and state).
func tierSnapshot(k limits.Key, h map[string]string) (limits.Snapshot, bool) {
	tp, ok := h["tp"] // (a hash written before c was)
	if c, isC := h["c"]; isC {
		tp, ok = configParams(c)
	}
	p, ok1 := unpackTierParams(tp)
	st, ok2 := unpackTierState(h["s"])
	if !ok || !ok1 || !ok2 {
		return limits.Snapshot{}, false
	}
	num := func(f string) int64 { n, _ := strconv.ParseInt(h[f], 10, 64); return n }
	l := &limits.Limit{Resource: k.Resource, Name: h["nm"], Kind: limits.Kind(num("k")), Algorithm: limits.BurstTiers,
		Tiers: p, Unlimited: p.Unlimited, Gen: uint64(num("g"))}
	return limits.Snapshot{Key: k, Limit: l, Tiers: st, LastUsed: num("l"), Grants: uint64(num("n"))}, true
}

// packInts returns ints as little-endian 8-byte words.
func packInts(ints ...int64) string {
	b := make([]byte, 8*len(ints))
	for i, x := range ints {
		u := uint64(x)
		for j := range 8 {
			b[8*i+j] = byte(u >> (8 * j))
		}
	}
	return string(b)
}

// intAt returns the i-th little-endian 8-byte word of v.
func intAt(v string, i int) int64 {
	var u uint64
	for j := range 8 {
		u |= uint64(v[8*i+j]) << (8 * j)
	}
	return int64(u)
}

// doubleAt returns the i-th little-endian IEEE double of v, an integer
// (take.lua packs its numbers so), as an int64.
func doubleAt(v string, i int) int64 {
	return int64(math.Float64frombits(uint64(intAt(v, i))))
}

// floorDiv returns ⌊a ÷ b⌋ for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
