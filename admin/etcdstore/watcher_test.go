package etcdstore

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/resources"

	"github.com/sluice-rl/sluice/internal/testutil/etcdtest"
)

// valid is a configuration the watcher loads (its capacity: 500 is edited
// by the tests).
const valid = `
resources:
  - identifier_glob: "db/replica-1"
    capacity: 500
    algorithm: {kind: FAIR_SHARE, lease_length: 60, refresh_interval: 16}
`

func TestWatcher(t *testing.T) {
	etcd := etcdtest.StartEtcd(t)
	cli := etcd.Client(t)
	ctx := context.Background()
	const key = "/sluice/config"

	if _, err := NewWatcher(ctx, cli, key, nil, nil); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("missing key: err %v", err)
	}
	put := func(v string) {
		t.Helper()
		if _, err := cli.Put(ctx, key, v); err != nil {
			t.Fatal(err)
		}
	}
	put("resources:\n  - {identifier_glob: a, capacity: -1}\n")
	if _, err := NewWatcher(ctx, cli, key, nil, nil); err == nil || !strings.Contains(err.Error(), "capacity") {
		t.Fatalf("bad value at start: err %v", err)
	}

	put(valid)
	loads := make(chan *resources.Repository, 10)
	errs := make(chan error, 10)
	w, err := NewWatcher(ctx, cli, key, func(r *resources.Repository) { loads <- r }, func(err error) { errs <- err })
	if err != nil {
		t.Fatal(err)
	}
	if tmpl, _ := w.Current().Find("db/replica-1"); tmpl.Capacity != 500 {
		t.Fatalf("initial capacity %v", tmpl.Capacity)
	}
	// A change made before Run starts is not lost: the watch starts from
	// the revision the first read saw.
	put(strings.Replace(valid, "capacity: 500", "capacity: 600", 1))
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- w.Run(rctx) }()
	defer func() { cancel(); <-done }()

	wantLoad := func(capacity float64) {
		t.Helper()
		select {
		case r := <-loads:
			if tmpl, _ := r.Find("db/replica-1"); tmpl.Capacity != capacity {
				t.Fatalf("loaded capacity %v, want %v", tmpl.Capacity, capacity)
			}
		case err := <-errs:
			t.Fatalf("error %v, want a load", err)
		case <-time.After(10 * time.Second):
			t.Fatal("no load after the key changed")
		}
	}
	wantError := func(substr string) {
		t.Helper()
		select {
		case err := <-errs:
			if !strings.Contains(err.Error(), substr) {
				t.Fatalf("error %v, want %q", err, substr)
			}
		case r := <-loads:
			t.Fatalf("loaded %v, want an error", r.Hash())
		case <-time.After(10 * time.Second):
			t.Fatal("no error after a bad value")
		}
	}
	wantLoad(600)
	put(strings.Replace(valid, "capacity: 500", "capacity: 700", 1))
	wantLoad(700)
	good := w.Current()

	put("resources: [")
	wantError("etcd:" + key)
	if w.Current() != good {
		t.Fatal("a bad value replaced the last good configuration")
	}
	if _, err := cli.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	wantError("deleted")
	if w.Current() != good {
		t.Fatal("deleting the key dropped the last good configuration")
	}
	put(valid)
	wantLoad(500)
}

// Sync applies the key's value before it returns (read-your-writes for the
// admin API), and the watch running beside it never installs an older
// value after a newer one: 50 writes, each followed at once by Sync, each
// seen by Current at once, the loads in the order of the writes.
func TestWatcherSync(t *testing.T) {
	etcd := etcdtest.StartEtcd(t)
	cli := etcd.Client(t)
	ctx := context.Background()
	const key = "/sluice/config"
	capacity := func(r *resources.Repository) float64 {
		tmpl, _ := r.Find("db/replica-1")
		return tmpl.Capacity
	}
	with := func(c int) string {
		return strings.Replace(valid, "capacity: 500", "capacity: "+strconv.Itoa(c), 1)
	}
	if _, err := cli.Put(ctx, key, valid); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var loaded []float64
	w, err := NewWatcher(ctx, cli, key, func(r *resources.Repository) {
		mu.Lock()
		loaded = append(loaded, capacity(r))
		mu.Unlock()
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- w.Run(rctx) }()
	defer func() { cancel(); <-done }()
	for c := 1; c <= 50; c++ {
		if _, err := cli.Put(ctx, key, with(c)); err != nil {
			t.Fatal(err)
		}
		if err := w.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		if got := capacity(w.Current()); got != float64(c) {
			t.Fatalf("write %d: Current has capacity %v right after Sync", c, got)
		}
	}
	time.Sleep(200 * time.Millisecond) // the watch's events for the writes arrive, and must change nothing
	// An event for an early write delivered late (as the watch may, after
	// Sync read a later one) is ignored.
	w.apply([]byte(with(1)), false, 2)
	mu.Lock()
	defer mu.Unlock()
	if capacity(w.Current()) != 50 {
		t.Fatalf("after the watch's events: capacity %v, want 50", capacity(w.Current()))
	}
	for i := 1; i < len(loaded); i++ {
		if loaded[i] <= loaded[i-1] {
			t.Fatalf("loads out of order: %v", loaded)
		}
	}
	if len(loaded) != 50 {
		t.Fatalf("%d loads for 50 writes: %v", len(loaded), loaded)
	}
}
