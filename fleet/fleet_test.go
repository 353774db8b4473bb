package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluice-rl/sluice/fleet"
	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/internal/testutil/etcdtest"
	"github.com/sluice-rl/sluice/internal/testutil/redistest"
	"github.com/sluice-rl/sluice/limits/copies"
	redisstore "github.com/sluice-rl/sluice/limits/redis"
)

var redisAddr string

func TestMain(m *testing.M) {
	srv, err := redistest.Start()
	switch {
	case errors.Is(err, redistest.ErrSkip):
		fmt.Println("fleet:", err, "- skipping the package's tests")
		os.Exit(0)
	case err != nil:
		fmt.Fprintln(os.Stderr, "fleet:", err)
		os.Exit(1)
	}
	redisAddr = srv.Addr
	code := m.Run()
	srv.Stop()
	os.Exit(code)
}

// server is one member: its engine, copy log, etcd client and Run.
type server struct {
	eng    *copies.Engine
	log    *redisstore.CopyLog
	cli    *clientv3.Client
	member *fleet.Member
	stop   context.CancelFunc
	done   chan struct{}
}

var cfg = &copies.Config{Resources: map[string]copies.Resource{
	"sandbox": {DomainLimit: 5, GlobalLimit: 5, Groups: []copies.Group{
		{Name: "gold", Limit: 5, Domains: []string{"acme"}}, {Name: "eu", Limit: 5, Domains: []string{"beta"}}}},
}}

func start(t *testing.T, etcd *etcdtest.Etcd, rc redis.UniversalClient, p, name string, buried chan<- string) *server {
	t.Helper()
	cli := etcd.Client(t)
	l := redisstore.NewCopyLog(redisstore.New(rc, redisstore.Options{Prefix: p}))
	e, err := copies.New(cfg, copies.Options{Log: l})
	if err != nil {
		t.Fatal(err)
	}
	m, err := fleet.New(cli, l, e, fleet.Options{Prefix: "/" + p, TTL: 2 * time.Second, Address: name, Logger: testutil.Logger(),
		OnBury: func(epoch string, _ map[string]int64) {
			if buried != nil {
				buried <- epoch
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &server{eng: e, log: l, cli: cli, member: m, stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		_ = m.Run(ctx)
	}()
	t.Cleanup(func() {
		s.stop()
		<-s.done
		_ = cli.Close()
	})
	testutil.Eventually(t, 20*time.Second, name+" joins", func() bool { return m.Status().Epoch != "" })
	return s
}

func global(t *testing.T, rc redis.UniversalClient, p string) int64 {
	n, err := rc.HGet(context.Background(), p+"{csandbox}n:a", "_").Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
	return n
}

// TestCrashCleanup: a server holding 3 copies (two domains, two groups)
// loses its etcd connection as if killed: within its session TTL plus a
// generous margin the leader has subtracted exactly its contributions,
// another server reserves those copies, and the other server's hold is
// untouched.
func TestCrashCleanup(t *testing.T) {
	etcd := etcdtest.StartEtcd(t)
	rc := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rc.Close()
	p := "crash:"
	buried := make(chan string, 10)
	a := start(t, etcd, rc, p, "a", buried)
	now := time.Now()
	sa, err := a.eng.Open(now, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// Alone in the fleet (its count of peers read before it joined), a
	// needs no learning period on a fresh Redis.
	if r, err := a.eng.Reserve(t.Context(), now, sa.ID, "sandbox", "acme", 2, 2); err != nil || r.Granted != 2 {
		t.Fatalf("a alone, fresh Redis: %+v %v", r, err)
	}
	b := start(t, etcd, rc, p, "b", buried)
	sb, _ := b.eng.Open(now, time.Minute)
	for _, q := range []struct {
		e      *copies.Engine
		s, dom string
		n      int64
	}{{a.eng, sa.ID, "beta", 1}, {b.eng, sb.ID, "acme", 1}} {
		if r, err := q.e.Reserve(t.Context(), now, q.s, "sandbox", q.dom, q.n, q.n); err != nil || r.Granted != q.n {
			t.Fatalf("reserve %s: %+v %v", q.dom, r, err)
		}
	}
	if n := global(t, rc, p); n != 4 {
		t.Fatalf("global count %d, want 4", n)
	}
	// b cannot have a's copies yet.
	if r, _ := b.eng.Reserve(t.Context(), now, sb.ID, "sandbox", "acme", 2, 2); r.Granted != 0 {
		t.Fatalf("b got %d copies over the global limit", r.Granted)
	}
	epoch := a.member.Status().Epoch
	// The crash: a's etcd client goes away, its lease is no longer kept
	// alive, and etcd deletes its member key after the TTL.
	killed := time.Now()
	_ = a.cli.Close()
	select {
	case got := <-buried:
		if got != epoch {
			t.Fatalf("buried %s, want a's epoch %s", got, epoch)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a's epoch was not buried within 30 s")
	}
	t.Logf("a buried %v after its etcd connection closed (session TTL 2 s)", time.Since(killed).Round(time.Millisecond))
	if n := global(t, rc, p); n != 1 {
		t.Fatalf("after the burial: global count %d, want b's 1", n)
	}
	if r, err := b.eng.Reserve(t.Context(), time.Now(), sb.ID, "sandbox", "acme", 3, 3); err != nil || r.Granted != 3 {
		t.Fatalf("b reserves a's copies: %+v %v", r, err)
	}
	// a's engine no longer serves its holds.
	testutil.Eventually(t, 30*time.Second, "a's engine is fenced", a.eng.Fenced)
	if err := a.eng.Release(t.Context(), time.Now(), sa.ID, "sandbox", "acme", 1, []string{"gold"}); copies.ClassOf(err) != copies.ClassUnavailable {
		t.Fatalf("a releases after its burial: %v, want Unavailable", err)
	}
	if n := global(t, rc, p); n != 4 {
		t.Fatalf("global count %d, want 4", n)
	}
}

// TestStaleEpochsBuried: a lone first server buries the epochs an earlier
// generation left in Redis (reconcile, not wipe), and no live member's.
func TestStaleEpochsBuried(t *testing.T) {
	etcd := etcdtest.StartEtcd(t)
	rc := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rc.Close()
	p := "stale:"
	// An earlier generation: epoch "dead1" holds 4 copies, never buried.
	old := redisstore.NewCopyLog(redisstore.New(rc, redisstore.Options{Prefix: p}))
	old.SetEpoch("dead1")
	old.SetMembers([]string{})
	oe, err := copies.New(cfg, copies.Options{Log: old})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := oe.Open(time.Now(), time.Minute)
	if r, err := oe.Reserve(t.Context(), time.Now(), s.ID, "sandbox", "acme", 4, 4); err != nil || r.Granted != 4 {
		t.Fatalf("%+v %v", r, err)
	}
	var mu sync.Mutex
	var got []string
	buried := make(chan string, 10)
	a := start(t, etcd, rc, p, "a", buried)
	select {
	case e := <-buried:
		mu.Lock()
		got = append(got, e)
		mu.Unlock()
	case <-time.After(30 * time.Second):
		t.Fatal("the stale epoch was not buried")
	}
	if fmt.Sprint(got) != "[dead1]" {
		t.Fatalf("buried %v, want [dead1]", got)
	}
	if n := global(t, rc, p); n != 0 {
		t.Fatalf("global count %d after the burial, want 0", n)
	}
	sa, _ := a.eng.Open(time.Now(), time.Minute)
	if r, err := a.eng.Reserve(t.Context(), time.Now(), sa.ID, "sandbox", "acme", 5, 5); err != nil || r.Granted != 5 {
		t.Fatalf("the new server reserves all 5: %+v %v", r, err)
	}
	// A second member joining is not buried, and its copies count.
	b := start(t, etcd, rc, p, "b", buried)
	sb, _ := b.eng.Open(time.Now(), time.Minute)
	if r, _ := b.eng.Reserve(t.Context(), time.Now(), sb.ID, "sandbox", "beta", 1, 1); r.Granted != 0 {
		t.Fatalf("b was granted over the global limit: %+v", r)
	}
	select {
	case e := <-buried:
		t.Fatalf("buried a live epoch %s", e)
	case <-time.After(3 * time.Second):
	}
}

// TestPeersLearn: the copy log knows the fleet's other members. With a
// peer, a resource whose record Redis lost (here: never had) is learnt
// before it is granted, since the peer may hold copies of it, until the
// peer looked (its Reconcile: the period waits for its epoch); once the
// peer left (the member's watch sees its key go), a server holding
// nothing of the resource grants at once on an emptied Redis.
func TestPeersLearn(t *testing.T) {
	etcd := etcdtest.StartEtcd(t)
	rc := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rc.Close()
	p := "peers:"
	a := start(t, etcd, rc, p, "a", nil)
	b := start(t, etcd, rc, p, "b", nil)
	sa, _ := a.eng.Open(time.Now(), time.Minute)
	del := func() {
		keys, _ := rc.Keys(context.Background(), p+"*").Result()
		if len(keys) > 0 {
			_ = rc.Del(context.Background(), keys...).Err()
		}
	}
	// try reserves a copy on an emptied Redis, and gives back what it got
	// (a copy a holds would make it learn whatever its peers).
	try := func() error {
		del()
		r, err := a.eng.Reserve(t.Context(), time.Now(), sa.ID, "sandbox", "acme", 1, 1)
		if err == nil && r.Granted > 0 {
			err = a.eng.Release(t.Context(), time.Now(), sa.ID, "sandbox", "acme", r.Granted, []string{"gold"})
			if err != nil {
				t.Fatal(err)
			}
		}
		return err
	}
	testutil.Eventually(t, 20*time.Second, "a sees b", func() bool { return errors.Is(try(), copies.ErrLearning) })
	// The period waits for b alone (the member a knows; a holds nothing),
	// and ends once b looked (its Reconcile), not when it runs out.
	got, err := rc.SMembers(t.Context(), p+"{csandbox}l").Result()
	if want := "[" + b.member.Status().Epoch + "]"; err != nil || fmt.Sprint(got) != want {
		t.Fatalf("the learning period waits for %v %v, want b's epoch %s", got, err, want)
	}
	if _, err := b.eng.Reconcile(t.Context()); err != nil {
		t.Fatal(err)
	}
	if r, err := a.eng.Reserve(t.Context(), time.Now(), sa.ID, "sandbox", "acme", 1, 1); err != nil || r.Granted != 1 {
		t.Fatalf("reserve once b looked: %+v %v, want granted", r, err)
	}
	if err := a.eng.Release(t.Context(), time.Now(), sa.ID, "sandbox", "acme", 1, []string{"gold"}); err != nil {
		t.Fatal(err)
	}
	b.stop()
	<-b.done
	testutil.Eventually(t, 20*time.Second, "a sees b leave", func() bool {
		err := try()
		if err != nil && !errors.Is(err, copies.ErrLearning) {
			t.Fatalf("reserve: %v, want granted or learning", err)
		}
		return err == nil
	})
}
