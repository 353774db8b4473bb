package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/testutil/redistest"
	"github.com/sluice-rl/sluice/limits/copies"
)

// copiesConfig has one resource with a global limit, a per-domain
// override, and two groups sharing a domain.
func copiesConfig() *copies.Config {
	return &copies.Config{Resources: map[string]copies.Resource{
		"sandbox": {DomainLimit: 3, DomainLimits: map[string]int64{"acme": 4}, GlobalLimit: 5,
			Groups: []copies.Group{{Name: "gold", Limit: 4, Domains: []string{"acme", "beta"}}, {Name: "eu", Limit: 3, Domains: []string{"acme", "gamma"}}}},
		"conn:x": {DomainLimit: 2},
	}, AllowUnconfigured: []string{"free/"}}
}

// sharedEngine returns an engine on a CopyLog of c under prefix p with
// epoch, its ids from a source seeded with seed.
func sharedEngine(t testing.TB, c redis.UniversalClient, p, epoch string, seed uint64) (*copies.Engine, *CopyLog) {
	t.Helper()
	l := NewCopyLog(New(c, Options{Prefix: p}))
	l.SetEpoch(epoch)
	l.SetMembers([]string{}) // no data loss here: no learning period on a fresh Redis
	e, err := copies.New(copiesConfig(), copies.Options{Log: l, Rand: rand.NewChaCha8([32]byte{byte(seed)})})
	if err != nil {
		t.Fatal(err)
	}
	return e, l
}

// TestCopiesDifferential: an engine on the Redis copy log answers every
// Reserve, Release, Transfer, Seize and Close exactly as an engine with
// its own counts, over random sequences.
func TestCopiesDifferential(t *testing.T) {
	c := client(t)
	for seed := range uint64(12) {
		p := fmt.Sprintf("%s%d:", prefix(t), seed)
		shared, _ := sharedEngine(t, c, p, "e1", seed)
		own, err := copies.New(copiesConfig(), copies.Options{Rand: rand.NewChaCha8([32]byte{byte(seed)})})
		if err != nil {
			t.Fatal(err)
		}
		copiesSequence(t, seed, own, shared, 250)
	}
}

// copiesSequence runs steps random operations on both engines and
// compares the answers.
func copiesSequence(t *testing.T, seed uint64, a, b *copies.Engine, steps int) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 7))
	now := t0
	var sessions [][2]string // a's id, b's id (b's named after its epoch)
	var staged []string
	type held struct {
		session  [2]string
		res, dom string
		groups   []string
	}
	var holds []held
	resources := []string{"sandbox", "conn:x", "free/x", "nope"}
	domains := []string{"acme", "beta", "gamma", "delta", "a_b"}
	for step := range steps {
		now = now.Add(time.Millisecond)
		var ga, gb any
		var ea, eb error
		switch op := r.IntN(10); {
		case op == 0 || len(sessions) == 0:
			sa, err1 := a.Open(now, time.Hour)
			sb, err2 := b.Open(now, time.Hour)
			if copies.SessionEpoch(sb.ID) != "e1" || sb.ID[len("e1-"):] != sa.ID {
				t.Fatalf("seed %d step %d: shared session %q, own %q: want e1-%s", seed, step, sb.ID, sa.ID, sa.ID)
			}
			sb.ID = sa.ID
			ga, gb, ea, eb = sa, sb, err1, err2
			if err1 == nil {
				sessions = append(sessions, [2]string{sa.ID, "e1-" + sa.ID})
			}
		case op <= 4:
			s := sessions[r.IntN(len(sessions))]
			res, dom := resources[r.IntN(len(resources))], domains[r.IntN(len(domains))]
			n := 1 + r.Int64N(3)
			lo := 1 + r.Int64N(n)
			ra, err1 := a.Reserve(t.Context(), now, s[0], res, dom, n, lo)
			rb, err2 := b.Reserve(t.Context(), now, s[1], res, dom, n, lo)
			ga, gb, ea, eb = ra, rb, err1, err2
			if err1 == nil && ra.Granted > 0 {
				var gs []string
				for _, g := range ra.Groups {
					gs = append(gs, g.Name)
				}
				holds = append(holds, held{s, res, dom, gs})
			}
		case op <= 6 && len(holds) > 0:
			h := holds[r.IntN(len(holds))]
			n := 1 + r.Int64N(2)
			ea = a.Release(t.Context(), now, h.session[0], h.res, h.dom, n, h.groups)
			eb = b.Release(t.Context(), now, h.session[1], h.res, h.dom, n, h.groups)
		case op == 7 && len(holds) > 0:
			h := holds[r.IntN(len(holds))]
			sa, err1 := a.Transfer(t.Context(), now, h.session[0], h.res, h.dom, 1, h.groups, time.Hour)
			sb, err2 := b.Transfer(t.Context(), now, h.session[1], h.res, h.dom, 1, h.groups, time.Hour)
			ga, gb, ea, eb = sa.ID, sb.ID, err1, err2
			if err1 == nil {
				staged = append(staged, sa.ID)
			}
		case op == 8 && len(staged) > 0:
			id := staged[r.IntN(len(staged))]
			s := sessions[r.IntN(len(sessions))]
			za, err1 := a.Seize(t.Context(), now, s[0], id)
			zb, err2 := b.Seize(t.Context(), now, s[1], id)
			ga, gb, ea, eb = za, zb, err1, err2
			if err1 == nil {
				holds = append(holds, held{s, za.Resource, za.Domain, za.Groups})
			}
		default:
			i := r.IntN(len(sessions))
			s := sessions[i]
			ca, err1 := a.Close(t.Context(), now, s[0])
			cb, err2 := b.Close(t.Context(), now, s[1])
			cb.Session = ca.Session
			ga, gb, ea, eb = ca, cb, err1, err2
			sessions = append(sessions[:i], sessions[i+1:]...)
		}
		if d := cmp.Diff(ga, gb); d != "" {
			t.Fatalf("seed %d step %d: answers differ (-own +redis):\n%s", seed, step, d)
		}
		if !sameError(ea, eb) {
			t.Fatalf("seed %d step %d: errors differ: own %v, redis %v", seed, step, ea, eb)
		}
	}
}

// sameError reports whether the two engines' errors are the same, but
// for the session ids they quote (the shared engine's start with its
// epoch).
func sameError(a, b error) bool {
	var ea, eb *copies.Error
	if errors.As(a, &ea) && errors.As(b, &eb) && ea.Field == "session_id" {
		return eb.Field == "session_id" && errors.Is(b, ea.Err)
	}
	return fmt.Sprint(a) == fmt.Sprint(b)
}

// globalCount reads a resource's global count in Redis.
func globalCount(t testing.TB, c redis.UniversalClient, p, resource string) int64 {
	t.Helper()
	n, err := c.HGet(context.Background(), escape(p)+"{c"+escape(resource)+"}n:a", "_").Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
	return n
}

// TestCopiesSharedGlobalLimit: three engines (three servers) sharing one
// Redis, 1 000 concurrent reserve/release operations on a resource whose
// global limit is 5: no answer ever shows more than 5 held, and at the end
// the count is what the sessions hold.
func TestCopiesSharedGlobalLimit(t *testing.T) {
	for name, c := range map[string]redis.UniversalClient{"redis": client(t), "cluster": clusterClient(t)} {
		t.Run(name, func(t *testing.T) { sharedGlobalLimit(t, c) })
	}
}

func sharedGlobalLimit(t *testing.T, c redis.UniversalClient) {
	p := prefix(t)
	var engines []*copies.Engine
	for i := range 3 {
		e, _ := sharedEngine(t, c, p, fmt.Sprintf("e%d", i), uint64(i))
		engines = append(engines, e)
	}
	var most, granted atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 1000)
	for w := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e := engines[w%3]
			s, err := e.Open(time.Now(), time.Minute)
			if err != nil {
				errs <- err
				return
			}
			dom := []string{"acme", "beta", "gamma", "delta"}[w%4]
			for range 10 { // 50 × 10 reserves + their releases: 1 000 operations
				r, err := e.Reserve(t.Context(), time.Now(), s.ID, "sandbox", dom, 1, 1)
				if err != nil {
					errs <- err
					return
				}
				for {
					m := most.Load()
					if r.GlobalHolds <= m || most.CompareAndSwap(m, r.GlobalHolds) {
						break
					}
				}
				if r.Granted == 0 {
					continue
				}
				granted.Add(1)
				var gs []string
				for _, g := range r.Groups {
					gs = append(gs, g.Name)
				}
				if err := e.Release(t.Context(), time.Now(), s.ID, "sandbox", dom, 1, gs); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if m := most.Load(); m > 5 || m < 1 {
		t.Errorf("the most held seen by an answer is %d, want 1..5", m)
	}
	if granted.Load() == 0 {
		t.Error("nothing was granted")
	}
	if n := globalCount(t, c, p, "sandbox"); n != 0 {
		t.Errorf("global count %d after every release, want 0", n)
	}
}

// TestCopiesTransferAcrossServers: copies staged through one server are
// seized through another, once; an unseized transfer is released when its
// ttl passes, by whichever server sweeps first.
func TestCopiesTransferAcrossServers(t *testing.T) {
	c := client(t)
	p := prefix(t)
	a, _ := sharedEngine(t, c, p, "a", 1)
	b, _ := sharedEngine(t, c, p, "b", 2)
	now := time.Now()
	sa, _ := a.Open(now, time.Minute)
	sb, _ := b.Open(now, time.Minute)
	r, err := a.Reserve(t.Context(), now, sa.ID, "sandbox", "beta", 2, 2)
	if err != nil || r.Granted != 2 {
		t.Fatalf("reserve: %+v, %v", r, err)
	}
	st, err := a.Transfer(t.Context(), now, sa.ID, "sandbox", "beta", 2, []string{"gold"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Close(t.Context(), now, sa.ID); err != nil {
		t.Fatal(err)
	}
	if n := globalCount(t, c, p, "sandbox"); n != 2 {
		t.Fatalf("staged copies: global count %d, want 2", n)
	}
	z, err := b.Seize(t.Context(), now, sb.ID, st.ID)
	if err != nil || z.Copies != 2 || z.Domain != "beta" || fmt.Sprint(z.Groups) != "[gold]" {
		t.Fatalf("seize: %+v, %v", z, err)
	}
	if _, err := a.Seize(t.Context(), now, sb.ID, st.ID); copies.ClassOf(err) != copies.ClassNotFound {
		t.Fatalf("second seize: %v, want NotFound", err)
	}
	if err := b.Release(t.Context(), now, sb.ID, "sandbox", "beta", 2, z.Groups); err != nil {
		t.Fatal(err)
	}
	if n := globalCount(t, c, p, "sandbox"); n != 0 {
		t.Fatalf("after the release: global count %d, want 0", n)
	}

	// An unseized transfer: staged for 1 s, swept by b.
	sa, _ = a.Open(now, time.Minute)
	if _, err := a.Reserve(t.Context(), now, sa.ID, "sandbox", "gamma", 1, 1); err != nil {
		t.Fatal(err)
	}
	st, err = a.Transfer(t.Context(), now, sa.ID, "sandbox", "gamma", 1, []string{"eu"}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var ended []copies.Ended
		for _, e := range b.Expire(t.Context(), time.Now()) {
			if e.Transfer != "" {
				ended = append(ended, e)
			}
		}
		if len(ended) == 1 {
			if ended[0].Transfer != st.ID || ended[0].Session != sa.ID || ended[0].Released[0].Copies != 1 {
				t.Fatalf("expired %+v", ended[0])
			}
			break
		}
		if len(ended) > 1 || time.Now().After(deadline) {
			t.Fatalf("expired transfers %+v, want exactly the one staged", ended)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := globalCount(t, c, p, "sandbox"); n != 0 {
		t.Fatalf("after the expiry: global count %d, want 0", n)
	}
	if got := a.Expire(t.Context(), time.Now()); len(got) != 0 {
		t.Fatalf("the other server expired it again: %+v", got)
	}
}

// TestCopiesBury: burying a server's epoch subtracts exactly its
// contributions (3 copies, two domains, two groups), leaves the other
// server's untouched, and fences it: its next write fences its engine.
func TestCopiesBury(t *testing.T) {
	for name, c := range map[string]redis.UniversalClient{"redis": client(t), "cluster": clusterClient(t)} {
		t.Run(name, func(t *testing.T) {
			p := prefix(t)
			a, la := sharedEngine(t, c, p, "a", 1)
			b, _ := sharedEngine(t, c, p, "b", 2)
			now := time.Now()
			sa, _ := a.Open(now, time.Minute)
			sb, _ := b.Open(now, time.Minute)
			for _, q := range []struct {
				e      *copies.Engine
				s, dom string
				n      int64
			}{{a, sa.ID, "acme", 2}, {a, sa.ID, "gamma", 1}, {b, sb.ID, "beta", 1}} {
				if r, err := q.e.Reserve(t.Context(), now, q.s, "sandbox", q.dom, q.n, q.n); err != nil || r.Granted != q.n {
					t.Fatalf("reserve %s: %+v %v", q.dom, r, err)
				}
			}
			if n := globalCount(t, c, p, "sandbox"); n != 4 {
				t.Fatalf("global count %d, want 4", n)
			}
			buried, err := la.Bury(context.Background(), "a")
			if err != nil {
				t.Fatal(err)
			}
			if buried["sandbox"] != 3 {
				t.Fatalf("buried %v, want sandbox: 3", buried)
			}
			if n := globalCount(t, c, p, "sandbox"); n != 1 {
				t.Fatalf("after the burial: global count %d, want b's 1", n)
			}
			again, err := la.Bury(context.Background(), "a")
			if err != nil || again["sandbox"] != 0 {
				t.Fatalf("second burial: %v %v", again, err)
			}
			// b can now reserve what a held (acme's limit in group eu is 3).
			if r, err := b.Reserve(t.Context(), now, sb.ID, "sandbox", "acme", 3, 3); err != nil || r.Granted != 3 || r.GlobalHolds != 4 {
				t.Fatalf("b reserves a's copies: %+v %v", r, err)
			}
			// a, fenced in Redis, cannot release: its engine fences itself.
			err = a.Release(t.Context(), now, sa.ID, "sandbox", "acme", 1, []string{"eu", "gold"})
			if err != nil {
				t.Fatalf("release on a fenced epoch: %v (the hold set is dropped, not an error)", err)
			}
			if !a.Fenced() {
				t.Fatal("a's engine is not fenced after its epoch was buried")
			}
			if _, err := a.Reserve(t.Context(), now, sa.ID, "sandbox", "acme", 1, 1); copies.ClassOf(err) != copies.ClassUnavailable {
				t.Fatalf("reserve on a fenced engine: %v, want Unavailable", err)
			}
			if n := globalCount(t, c, p, "sandbox"); n != 4 {
				t.Fatalf("global count %d, want 4", n)
			}
			epochs, err := la.Epochs(context.Background())
			if err != nil || fmt.Sprint(epochs) != "[b]" {
				t.Fatalf("epochs %v %v, want [b]", epochs, err)
			}
		})
	}
}

// TestCopiesRestoreAfterFlush: two servers hold 20 copies; FLUSHALL
// loses every count. The first reserve after it finds the resource's
// record gone and starts the learning period: refused (ErrLearning, class
// Unavailable) on either server, even one that holds nothing, until the
// period ends; meanwhile each server's Reconcile writes its holds back,
// so that afterwards the limit counts all 20 again and not one copy more
// is granted. Releases never take a count below zero.
func TestCopiesRestoreAfterFlush(t *testing.T) {
	srv := startOwnRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv})
	defer c.Close()
	p := "f:"
	const learning = 300 * time.Millisecond
	cfg := &copies.Config{Resources: map[string]copies.Resource{"pool": {DomainLimit: 100, GlobalLimit: 30}}}
	var engines []*copies.Engine
	var logs []*CopyLog
	var sessions []string
	for i := range 2 {
		l := NewCopyLog(New(c, Options{Prefix: p}))
		l.learning = learning
		l.SetMembers([]string{"e0", "e1"})
		logs = append(logs, l)
		l.SetEpoch(fmt.Sprintf("e%d", i))
		e, err := copies.New(cfg, copies.Options{Log: l})
		if err != nil {
			t.Fatal(err)
		}
		s, _ := e.Open(time.Now(), time.Minute)
		engines, sessions = append(engines, e), append(sessions, s.ID)
	}
	reserve := func(i int, n int64) (copies.Reservation, error) {
		return engines[i%2].Reserve(t.Context(), time.Now(), sessions[i%2], "pool", fmt.Sprint("d", i%3), n, n)
	}
	// learns asserts that engine i's reserve is refused as learning.
	learns := func(when string, i int) {
		t.Helper()
		r, err := reserve(i, 1)
		if !errors.Is(err, copies.ErrLearning) || copies.ClassOf(err) != copies.ClassUnavailable || r.Granted != 0 {
			t.Fatalf("%s: reserve on engine %d: %+v %v, want refused, learning (Unavailable)", when, i%2, r, err)
		}
	}
	// With a peer, a fresh Redis cannot be told from an emptied one: the
	// first reserve starts the period.
	learns("fresh Redis, with a peer", 0)
	time.Sleep(learning + 50*time.Millisecond)
	for i := range 20 {
		if r, err := reserve(i, 1); err != nil || r.Granted != 1 {
			t.Fatalf("reserve %d: %+v %v", i, r, err)
		}
	}
	if n := globalCount(t, c, p, "pool"); n != 20 {
		t.Fatalf("global count %d, want 20", n)
	}
	if err := c.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	learns("after FLUSHALL", 1)
	learns("after FLUSHALL, the other server", 0)
	for _, e := range engines {
		done, err := e.Reconcile(t.Context())
		if err != nil || fmt.Sprint(done) != "[pool]" {
			t.Fatalf("reconcile: %v %v, want [pool]", done, err)
		}
	}
	if n := globalCount(t, c, p, "pool"); n != 20 {
		t.Fatalf("after FLUSHALL and reconcile: global count %d, want 20", n)
	}
	time.Sleep(learning + 50*time.Millisecond)
	// The period is over: the limit (30) counts the 20 written back.
	if r, err := reserve(0, 11); err != nil || r.Granted != 0 || r.GlobalHolds != 20 {
		t.Fatalf("reserve of 11 after the period: %+v %v, want refused with 20 held", r, err)
	}
	if r, err := reserve(0, 10); err != nil || r.Granted != 10 || r.GlobalHolds != 30 {
		t.Fatalf("reserve of 10 after the period: %+v %v, want granted, 30 held", r, err)
	}
	if err := engines[0].Release(t.Context(), time.Now(), sessions[0], "pool", "d0", 10, nil); err != nil {
		t.Fatal(err)
	}
	// Releasing everything brings it to 0, never below.
	for i := range 20 {
		if err := engines[i%2].Release(t.Context(), time.Now(), sessions[i%2], "pool", fmt.Sprint("d", i%3), 1, nil); err != nil {
			t.Fatal(err)
		}
		if n := globalCount(t, c, p, "pool"); n < 0 || n != int64(19-i) {
			t.Fatalf("after %d releases: global count %d, want %d", i+1, n, 19-i)
		}
	}
	// A second flush with nothing held: nothing to restore, nothing negative.
	_ = c.FlushAll(context.Background()).Err()
	for _, e := range engines {
		if done, err := e.Reconcile(t.Context()); err != nil || len(done) != 0 {
			t.Fatalf("reconcile with nothing held: %v %v", done, err)
		}
	}
	// Each server's Reconcile told the log that it holds none: the
	// period the first of them started ended with the second, and the
	// next reserve is granted at once. The flush also lost which
	// resources each epoch wrote to: that reserve registers the resource
	// again, so that a burial finds it.
	if r, err := reserve(0, 2); err != nil || r.Granted != 2 {
		t.Fatalf("reserve after the second flush: %+v %v", r, err)
	}
	buried, err := logs[0].Bury(context.Background(), "e0")
	if err != nil || buried["pool"] != 2 {
		t.Fatalf("bury after the second flush: %v %v, want pool: 2", buried, err)
	}
	if n := globalCount(t, c, p, "pool"); n != 0 {
		t.Fatalf("global count %d after the burial, want 0", n)
	}
}

// TestCopiesLearningAlone: a server with no peers in the fleet skips the
// learning period where nobody can hold copies (a fresh Redis: its first
// reserve is granted), and learns where it holds copies itself (after a
// FLUSHALL), even on a fail-open resource: Redis answered, so that is no
// outage, and nothing is granted fail-open. An unknown number of peers
// (a CopyLog not told) learns.
func TestCopiesLearningAlone(t *testing.T) {
	srv := startOwnRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv})
	defer c.Close()
	cfg := &copies.Config{Resources: map[string]copies.Resource{
		"pool": {DomainLimit: 4, OnStoreError: copies.FailOpen},
		"free": {DomainLimit: 4},
	}}
	l := NewCopyLog(New(c, Options{Prefix: "a:"}))
	l.learning = time.Minute // the test never waits it out
	l.SetEpoch("e0")
	e, err := copies.New(cfg, copies.Options{Log: l})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := e.Open(time.Now(), time.Minute)
	reserve := func(res string) (copies.Reservation, error) {
		return e.Reserve(t.Context(), time.Now(), s.ID, res, "d", 1, 1)
	}
	if _, err := reserve("pool"); !errors.Is(err, copies.ErrLearning) {
		t.Fatalf("peers unknown, fresh Redis: %v, want learning", err)
	}
	_ = c.FlushAll(context.Background()).Err()
	l.SetMembers([]string{})
	for range 3 {
		if r, err := reserve("pool"); err != nil || r.Granted != 1 || r.Degraded {
			t.Fatalf("alone, fresh Redis: %+v %v, want granted", r, err)
		}
	}
	_ = c.FlushAll(context.Background()).Err()
	if r, err := reserve("pool"); !errors.Is(err, copies.ErrLearning) || r.Granted != 0 || r.Degraded {
		t.Fatalf("alone, holding 3, after FLUSHALL: %+v %v, want refused, learning, not fail-open", r, err)
	}
	if r, err := reserve("free"); err != nil || r.Granted != 1 {
		t.Fatalf("alone, holding none of another resource: %+v %v, want granted", r, err)
	}
	if done, err := e.Reconcile(t.Context()); err != nil || fmt.Sprint(done) != "[pool]" {
		t.Fatalf("reconcile: %v %v", done, err)
	}
	if n := globalCount(t, c, "a:", "pool"); n != 3 {
		t.Fatalf("written back: %d, want 3", n)
	}
}

// TestCopiesLearningEndsEarly: three servers of one fleet (each log
// knowing the three epochs) on a fresh Redis. The first to look at a
// resource (Reconcile's Learn) finds no record and starts the learning
// period, waiting for the other two: their reserves are refused (naming
// how many servers it waits for) until each has looked too, and then
// granted at once, long before the period (a minute here) runs out. After
// a FLUSHALL with holds live, a server holding copies is waited for until
// it has restored them, not merely looked; a reserve that ignores its
// limits never waits; and a marker a server before this change left (a
// string) is respected until it runs out.
func TestCopiesLearningEndsEarly(t *testing.T) {
	srv := startOwnRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv})
	defer c.Close()
	p := "early:"
	cfg := &copies.Config{Resources: map[string]copies.Resource{
		"pool": {DomainLimit: 100},
		"free": {DomainLimit: 1, Ignore: true},
	}}
	epochs := []string{"e0", "e1", "e2"}
	var engines []*copies.Engine
	var logs []*CopyLog
	var sessions []string
	for _, epoch := range epochs {
		l := NewCopyLog(New(c, Options{Prefix: p}))
		l.learning = time.Minute // never waited out
		l.SetEpoch(epoch)
		l.SetMembers(epochs)
		e, err := copies.New(cfg, copies.Options{Log: l})
		if err != nil {
			t.Fatal(err)
		}
		s, _ := e.Open(time.Now(), time.Hour)
		engines, logs, sessions = append(engines, e), append(logs, l), append(sessions, s.ID)
	}
	marker := p + "{cpool}l"
	waiting := func(when, want string) {
		t.Helper()
		got, err := c.SMembers(t.Context(), marker).Result()
		slices.Sort(got)
		if err != nil || fmt.Sprint(got) != want {
			t.Fatalf("%s: the learning period waits for %v %v, want %s", when, got, err, want)
		}
	}
	reserve := func(i int, res string) (copies.Reservation, error) {
		return engines[i].Reserve(t.Context(), time.Now(), sessions[i], res, "d", 1, 1)
	}
	reconcile := func(i int) {
		t.Helper()
		if _, err := engines[i].Reconcile(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	reconcile(0)
	waiting("e0 looked", "[e1 e2]")
	if learning, _ := engines[0].Learning(); fmt.Sprint(learning) != "[pool]" {
		t.Fatalf("e0 knows as learning %v, want [pool]", learning)
	}
	if _, err := reserve(1, "pool"); !errors.Is(err, copies.ErrLearning) || !strings.Contains(err.Error(), "until 2 more server(s)") {
		t.Fatalf("reserve on e1 before it looked: %v, want learning, waiting for 2 servers", err)
	}
	if r, err := reserve(1, "free"); err != nil || r.Granted != 1 {
		t.Fatalf("reserve of a resource that ignores its limits while another learns: %+v %v, want granted", r, err)
	}
	reconcile(1)
	waiting("e1 looked", "[e2]")
	reconcile(2)
	if n, err := c.Exists(t.Context(), marker).Result(); err != nil || n != 0 {
		t.Fatalf("after every member looked: marker exists %d %v, want gone", n, err)
	}
	for i := range engines {
		if r, err := reserve(i, "pool"); err != nil || r.Granted != 1 {
			t.Fatalf("reserve on e%d after every member looked: %+v %v, want granted at once", i, r, err)
		}
	}
	for i := range engines {
		reconcile(i)
		if learning, unchecked := engines[i].Learning(); len(learning)+len(unchecked) != 0 {
			t.Fatalf("e%d: learning %v unchecked %v, want neither", i, learning, unchecked)
		}
	}

	// Redis loses the 3 holds. e1 looks first (it holds one, gone: it
	// waits for itself too); its own look does not count, its restore
	// does.
	if err := c.FlushAll(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	if left, err := logs[1].Learn(t.Context(), []copies.LearnCheck{{Resource: "pool", Holding: true}}); err != nil || left[0] <= 0 {
		t.Fatalf("learn after the flush: %v %v, want learning", left, err)
	}
	waiting("e1 looked, holding", "[e0 e1 e2]")
	if left, err := logs[1].Learn(t.Context(), []copies.LearnCheck{{Resource: "pool", Holding: true}}); err != nil || left[0] <= 0 {
		t.Fatalf("learn again before restoring: %v %v, want learning", left, err)
	}
	waiting("e1 looked again, its holds not written back", "[e0 e1 e2]")
	for i := range engines {
		reconcile(i)
	}
	waiting("every member restored", "[]")
	if n := globalCount(t, c, p, "pool"); n != 3 {
		t.Fatalf("written back: %d, want 3", n)
	}
	if r, err := reserve(0, "pool"); err != nil || r.Granted != 1 || r.GlobalHolds != 4 {
		t.Fatalf("reserve after the restores: %+v %v, want granted, 4 held", r, err)
	}

	// A string marker (a server before the marker was a set of epochs)
	// is waited out, whoever looks.
	if err := c.Set(t.Context(), marker, "1", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	reconcile(1)
	if _, err := reserve(1, "pool"); !errors.Is(err, copies.ErrLearning) {
		t.Fatalf("reserve under an old server's marker: %v, want learning", err)
	}
}

// startOwnRedis starts a redis-server of the test's own (for tests that
// flush or stop it), stopped with the test, and returns its address.
func startOwnRedis(t testing.TB) string {
	t.Helper()
	srv, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	return srv.Addr
}

// TestCopiesConcurrentOneServer: one engine's operations run their Redis
// calls concurrently (outside its lock). 20 goroutines reserve, release,
// transfer, seize and close, some sessions closed by others mid-request;
// afterwards the shared counts are exactly what the open sessions hold
// (after one Reconcile for the requests whose session ended meanwhile),
// and zero once every session is closed.
func TestCopiesConcurrentOneServer(t *testing.T) {
	c := client(t)
	p := fmt.Sprintf("%s%d:", prefix(t), time.Now().UnixNano()) // seeded ids: a run of its own
	e, _ := sharedEngine(t, c, p, "e", 1)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var staged []string
	for w := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 3))
			s, err := e.Open(time.Now(), time.Minute)
			if err != nil {
				t.Error(err)
				return
			}
			for range 30 {
				dom := []string{"acme", "beta", "gamma", "delta"}[r.IntN(4)]
				res, err := e.Reserve(t.Context(), time.Now(), s.ID, "sandbox", dom, 1, 1)
				if err != nil || res.Granted == 0 {
					continue
				}
				var gs []string
				for _, g := range res.Groups {
					gs = append(gs, g.Name)
				}
				switch r.IntN(3) {
				case 0:
					_ = e.Release(t.Context(), time.Now(), s.ID, "sandbox", dom, 1, gs)
				case 1:
					if st, err := e.Transfer(t.Context(), time.Now(), s.ID, "sandbox", dom, 1, gs, time.Minute); err == nil {
						mu.Lock()
						staged = append(staged, st.ID)
						mu.Unlock()
					}
				}
				mu.Lock()
				if len(staged) > 0 && r.IntN(2) == 0 {
					id := staged[len(staged)-1]
					staged = staged[:len(staged)-1]
					mu.Unlock()
					if _, err := e.Seize(t.Context(), time.Now(), s.ID, id); err != nil {
						t.Errorf("seize: %v", err)
					}
				} else {
					mu.Unlock()
				}
			}
			_, _ = e.Close(t.Context(), time.Now(), s.ID)
		}()
	}
	wg.Wait()
	if _, err := e.Reconcile(t.Context()); err != nil {
		t.Fatal(err)
	}
	// What is still counted: the transfers left staged (they belong to no
	// session), nothing else.
	if n, want := globalCount(t, c, p, "sandbox"), int64(len(staged)); n != want {
		h, _ := c.HGetAll(context.Background(), escape(p)+"{csandbox}n:a").Result()
		t.Fatalf("global count %d with every session closed, want the %d copies left staged: %v %+v", n, want, h, e.Stats())
	}
}
