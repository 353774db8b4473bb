package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluice-rl/sluice/admin"
	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/internal/testutil/etcdtest"
	"github.com/sluice-rl/sluice/resources"
)

const doc = `# shared limits
limits:
  resources:
    api:
      domains:
        big: {size: 100, fill_rate: 50} # the big tenant
`

func client(t *testing.T, e *etcdtest.Etcd) *clientv3.Client {
	t.Helper()
	cli := e.Client(t)
	t.Cleanup(func() { cli.Close() })
	return cli
}

func bucket(t *testing.T, size int) admin.Change {
	t.Helper()
	n, err := admin.DecodeBody(fmt.Appendf(nil, `{"size": %d, "fill_rate": 1}`, size), "application/json")
	if err != nil {
		t.Fatal(err)
	}
	return admin.Change{Op: admin.OpUpdate, Object: admin.Domain("api", "big"), Value: n, User: "u"}
}

// The etcd store: versions are the key's; a stale write is a conflict
// naming the current version; a value put by another tool is recorded on
// the next write; a new store (a restart) sees every version; a rollback
// restores a version byte for byte; the history keeps the newest Keep; a
// server's watcher applies every change.
func TestStore(t *testing.T) {
	ctx := context.Background()
	e := etcdtest.StartEtcd(t)
	cli := client(t, e)
	const key = "/sluice/config"
	if _, err := cli.Put(ctx, key, doc); err != nil {
		t.Fatal(err)
	}
	applied := make(chan *resources.Repository, 100)
	w, err := NewWatcher(ctx, cli, key, func(r *resources.Repository) { applied <- r }, nil)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _ = w.Run(wctx) }()

	s := admin.New(New(cli, key, Options{Keep: 4}), admin.Options{})
	cur, err := s.Config(ctx)
	if err != nil || cur.Version != 1 || cur.Document != doc || cur.Store != "etcd key /sluice/config" {
		t.Fatalf("Config: %+v %v", cur, err)
	}
	c := bucket(t, 7)
	c.IfVersion = 1
	res, err := s.Apply(ctx, c)
	if err != nil || res.Version != 2 {
		t.Fatalf("change: %+v %v", res, err)
	}
	select {
	case r := <-applied:
		if r.Hash() != res.Hash || r.Limits().Resources["api"].Buckets["big"].Size != 7 {
			t.Errorf("the watcher loaded %s, want %s", r.Hash(), res.Hash)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the watcher did not apply the change")
	}
	// Stale.
	c = bucket(t, 8)
	c.IfVersion = 1
	var ce *admin.ConflictError
	if _, err := s.Apply(ctx, c); !errors.As(err, &ce) || ce.Current != 2 {
		t.Fatalf("stale change: %v", err)
	}
	// The store's own compare-and-swap (the Service checks first): a write
	// against version 1 fails in the transaction.
	if _, err := New(cli, key, Options{}).Write(ctx, 1, []byte(doc), admin.Audit{}); !errors.As(err, &ce) || ce.Current != 2 {
		t.Fatalf("stale Write: %v", err)
	}
	// Another tool puts a value: version 3, no entry; the next change
	// records it, so that it can be rolled back to.
	other := strings.Replace(doc, "# shared limits", "# edited with etcdctl", 1)
	if _, err := cli.Put(ctx, key, other); err != nil {
		t.Fatal(err)
	}
	if e, err := s.Version(ctx, 3); err != nil || string(e.Document) != other || e.Op != admin.OpImport {
		t.Fatalf("version 3 (etcdctl's): %+v %v", e, err)
	}
	if res, err = s.Apply(ctx, bucket(t, 9)); err != nil || res.Version != 4 {
		t.Fatalf("change after etcdctl: %+v %v", res, err)
	}
	// A restart: a new store sees every version.
	s = admin.New(New(cli, key, Options{Keep: 4}), admin.Options{})
	h, err := s.History(ctx)
	if err != nil || len(h) != 4 || h[0].Version != 4 || h[1].Version != 3 || h[1].Op != admin.OpImport || h[2].User != "u" || h[3].Op != admin.OpImport {
		t.Fatalf("history: %+v %v", h, err)
	}
	// Rollback to 1: byte for byte.
	res, err = s.Rollback(ctx, 1, admin.Change{IfVersion: 4, User: "v"})
	if err != nil || res.Version != 5 {
		t.Fatalf("rollback: %+v %v", res, err)
	}
	got, err := cli.Get(ctx, key)
	if err != nil || string(got.Kvs[0].Value) != doc || got.Kvs[0].Version != 5 {
		t.Fatalf("after the rollback: %q version %d, %v", got.Kvs[0].Value, got.Kvs[0].Version, err)
	}
	// Keep 4: versions 2 to 5.
	h, _ = s.History(ctx)
	if len(h) != 4 || h[0].Version != 5 || h[3].Version != 2 || h[0].From != 1 || h[0].User != "v" {
		t.Fatalf("kept: %+v", h)
	}
	if _, err := s.Version(ctx, 1); !errors.Is(err, admin.ErrNotFound) {
		t.Errorf("a dropped version: %v", err)
	}
	if d, err := s.DiffVersions(ctx, 3, 5); err != nil || !strings.Contains(d, "-# edited with etcdctl\n+# shared limits\n") {
		t.Errorf("diff 3 5: %q %v", d, err)
	}
	keys, _ := cli.Get(ctx, key+"/history/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if len(keys.Kvs) != 4 || string(keys.Kvs[0].Key) != key+"/history/00000000000000000002" {
		t.Errorf("history keys: %d, first %q", len(keys.Kvs), keys.Kvs[0].Key)
	}
}

// A store on a key that does not exist: version 0; the first change
// creates it.
func TestStoreNewKey(t *testing.T) {
	ctx := context.Background()
	cli := client(t, etcdtest.StartEtcd(t))
	s := admin.New(New(cli, "/fresh", Options{}), admin.Options{})
	if cur, err := s.Config(ctx); err != nil || cur.Version != 0 {
		t.Fatalf("Config: %+v %v", cur, err)
	}
	n, _ := admin.DecodeBody([]byte(`{"size": 1, "fill_rate": 1}`), "application/json")
	res, err := s.Apply(ctx, admin.Change{Op: admin.OpCreate, Object: admin.GlobalDefault(), Value: n})
	if err != nil || res.Version != 1 {
		t.Fatalf("create: %+v %v", res, err)
	}
	if h, _ := s.History(ctx); len(h) != 1 || h[0].Op != admin.OpCreate {
		t.Errorf("history: %+v", h)
	}
}

// Acceptance on etcd: 20 writers through 20 stores (as on 20 servers)
// from one version: exactly one succeeds; retrying, every change lands
// once.
func TestStoreConcurrentWriters(t *testing.T) {
	ctx := context.Background()
	e := etcdtest.StartEtcd(t)
	cli := client(t, e)
	const key = "/sluice/config"
	if _, err := cli.Put(ctx, key, doc); err != nil {
		t.Fatal(err)
	}
	const writers = 20
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		first  []error
		won    = map[int64]int{}
		start  = make(chan struct{})
		loaded sync.WaitGroup
	)
	loaded.Add(writers)
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := client(t, e) // one client per writer, as servers have
			s := admin.New(New(c, key, Options{}), admin.Options{})
			round := 0
			for {
				v, ver, err := s.Get(ctx, admin.Domain("api", "big"))
				if round == 0 {
					loaded.Done()
					<-start
				}
				if err != nil {
					t.Errorf("writer %d: %v", i, err)
					return
				}
				ch := bucket(t, int(v.Value.(map[string]any)["size"].(int64))+1)
				ch.IfVersion = ver
				res, err := s.Apply(ctx, ch)
				mu.Lock()
				if round == 0 {
					first = append(first, err)
				}
				round++
				if err == nil {
					won[res.Version]++
				}
				mu.Unlock()
				var ce *admin.ConflictError
				if errors.As(err, &ce) {
					continue
				}
				if err != nil {
					t.Errorf("writer %d: %v", i, err)
				}
				return
			}
		}()
	}
	loaded.Wait()
	close(start)
	wg.Wait()
	ok := 0
	for _, err := range first {
		if err == nil {
			ok++
		}
	}
	if ok != 1 {
		t.Errorf("from one version, %d writers succeeded; want exactly 1", ok)
	}
	for v := int64(2); v <= writers+1; v++ {
		if won[v] != 1 {
			t.Errorf("version %d made %d times", v, won[v])
		}
	}
	s := admin.New(New(cli, key, Options{}), admin.Options{})
	v, ver, err := s.Get(ctx, admin.Domain("api", "big"))
	if err != nil || ver != writers+1 || v.Value.(map[string]any)["size"] != int64(100+writers) {
		t.Errorf("after %d increments: %v at version %d, %v", writers, v.Value, ver, err)
	}
}

func TestMain(m *testing.M) {
	testutil.QuietLogs()
	os.Exit(m.Run())
}
