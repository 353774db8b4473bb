package redisstore

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/testutil/redistest"
	"github.com/sluice-rl/sluice/limits"
)

// TestClusterDifferential: on a three-master Redis Cluster the store
// gives the memory store's Decisions, across a configuration change (its
// Reconfigure is lazy: the scripts rescale on every master).
func TestClusterDifferential(t *testing.T) { differential(t, clusterClient(t), 20, 300) }

// TestClusterTwoEngines: two engines, each with its own ClusterClient,
// sharing the cluster answer as one memory engine does.
func TestClusterTwoEngines(t *testing.T) {
	twoEngines(t, [2]redis.UniversalClient{clusterClient(t), clusterClient(t)})
}

// TestClusterSlots: resources whose hash tags land in different slots
// (and on different masters) all work; every key one Take touches (a
// bucket and its resource's dynamic set) is in its resource's one slot;
// Walk and Len, over every master, see every bucket; Reconfigure sends
// no SCAN to any master. A script over two resources' keys would get
// CROSSSLOT, so the grants prove that no Take mixes slots.
func TestClusterSlots(t *testing.T) {
	cc := clusterClient(t)
	ctx := context.Background()
	st := New(cc, Options{Prefix: prefix(t), callerTime: true})
	b := &limits.Bucket{Size: 3, FillRate: 1}
	cfg := &limits.Config{Resources: map[string]*limits.Resource{}}
	var res []string
	for _, r := range []string{"r0", "r1", "r2", "r3", "r4", "r5", "r6", "r7", "a:b", "x.y/z"} {
		res = append(res, r)
		cfg.Resources[r] = &limits.Resource{Default: b}
	}
	cfg.Resources["dyn"] = &limits.Resource{Template: b, MaxDynamicBuckets: 2}
	e, err := limits.New(cfg, limits.Options{Store: st})
	if err != nil {
		t.Fatal(err)
	}

	// Where the resources live.
	slots, masters, slotOf := map[int64][]string{}, map[string][]string{}, map[string]int64{}
	for _, r := range append(res, "dyn") {
		key := st.bucketKey(r, "")
		slot, err := cc.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if s2, _ := cc.ClusterKeySlot(ctx, st.dynKey(r)).Result(); s2 != slot {
			t.Errorf("%q: bucket in slot %d, dynamic set in %d", r, slot, s2)
		}
		m, err := cc.MasterForKey(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		slots[slot] = append(slots[slot], r)
		slotOf[r] = slot
		masters[m.Options().Addr] = append(masters[m.Options().Addr], r)
	}
	if len(slots) < 2 || len(masters) < 2 {
		t.Fatalf("resources by slot %v, by master %v: want at least two of each", slots, masters)
	}
	t.Logf("resources by master: %v", masters)

	// Every resource grants its 3 tokens and refuses a 4th.
	want := map[limits.Key]bool{}
	for _, r := range res {
		for i := range 4 {
			d := e.Allow(ctx, t0, limits.Request{Resource: r, Domain: "d"})
			if ok := i < 3; (d.Status == limits.StatusOK) != ok || d.Err != nil {
				t.Fatalf("%q, request %d: %+v", r, i+1, d)
			}
		}
		want[limits.Key{Resource: r}] = true
	}
	// Dynamic buckets: the bucket and the resource's set in one script.
	for i, dom := range []string{"p", "q:1", "s"} {
		d := e.Allow(ctx, t0, limits.Request{Resource: "dyn", Domain: dom})
		if ok := i < 2; (d.Status == limits.StatusOK) != ok || d.Err != nil {
			t.Fatalf("dyn/%s: %+v", dom, d)
		}
		if i < 2 {
			want[limits.Key{Resource: "dyn", Domain: dom}] = true
		} else if d.Status != limits.StatusTooManyBuckets {
			t.Fatalf("dyn/%s, past max_dynamic_buckets: %+v", dom, d)
		}
	}

	// Every key, found on the master that holds it: one slot per tag,
	// and every resource's keys on its own master.
	tagSlot := map[string]int64{}
	perMaster := map[string]int{}
	var mu sync.Mutex
	err = cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
		keys, err := n.Keys(ctx, escape(prefix(t))+"*").Result()
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for _, k := range keys {
			slot, err := n.ClusterKeySlot(ctx, k).Result()
			if err != nil {
				return err
			}
			tag := tagOf(k)
			if s, seen := tagSlot[tag]; seen && s != slot {
				t.Errorf("tag %q in slots %d and %d (key %q)", tag, s, slot, k)
			}
			tagSlot[tag] = slot
			perMaster[n.Options().Addr]++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(tagSlot) != len(res)+1 || len(perMaster) < 2 {
		t.Fatalf("tags %v over masters %v", tagSlot, perMaster)
	}
	if total := sum(perMaster); total != len(want)+1 { // + the dynamic set
		t.Fatalf("%d keys, want %d", total, len(want)+1)
	}

	// A script over two resources in different slots is refused: the
	// grants above are not luck.
	a, z := res[0], ""
	for _, r := range res[1:] {
		if slotOf[r] != slotOf[a] {
			z = r
			break
		}
	}
	if z == "" {
		t.Fatalf("all of %v in slot %d", res, slotOf[a])
	}
	err = cc.Eval(ctx, "return 1", []string{st.bucketKey(a, ""), st.bucketKey(z, "")}).Err()
	if err == nil || !strings.Contains(err.Error(), "CROSSSLOT") {
		t.Fatalf("a script over %q and %q: %v, want CROSSSLOT", a, z, err)
	}

	// Walk and Len over every master.
	got := map[limits.Key]bool{}
	if err := st.Walk(ctx, func(s limits.Snapshot) bool {
		if s.Grants == 0 || got[s.Key] {
			t.Errorf("walk: %+v", s)
		}
		got[s.Key] = true
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("walk saw %v, want %v", got, want)
	}
	for k := range want {
		if !got[k] {
			t.Errorf("walk missed %q", k)
		}
	}
	if n := walkLen(t, st); n != len(want) {
		t.Fatalf("walk counts %d, want %d", n, len(want))
	}

	// Reconfigure sends no SCAN to any master; the engine's walk no
	// longer shows the resources that vanished (Redis expires them).
	scans := redistest.CommandCalls(t, cc, "scan")
	cfg2 := &limits.Config{Resources: map[string]*limits.Resource{a: {Default: b}, z: {Default: b}}}
	if err := e.SetConfig(t0.Add(time.Second), cfg2); err != nil {
		t.Fatal(err)
	}
	if n := redistest.CommandCalls(t, cc, "scan") - scans; n != 0 {
		t.Errorf("Reconfigure sent %d SCANs", n)
	}
	shown := 0
	if err := e.Walk(ctx, t0.Add(time.Second), func(limits.BucketInfo) bool { shown++; return true }); err != nil {
		t.Fatal(err)
	}
	if shown != 2 {
		t.Fatalf("the engine's walk shows %d buckets after keeping %q and %q", shown, a, z)
	}
	for _, r := range []string{a, z} {
		if d := e.Allow(ctx, t0.Add(time.Second), limits.Request{Resource: r, Domain: "d"}); d.Status != limits.StatusOK || d.Remaining > 0.1 {
			t.Fatalf("%q after reconfiguring: %+v", r, d)
		}
	}
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
