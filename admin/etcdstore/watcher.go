package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluice-rl/sluice/internal/retry"
	"github.com/sluice-rl/sluice/resources"
)

// Watcher keeps a Repository loaded from the value of an etcd key (the
// same YAML as a file) and follows changes to it with an etcd watch. A bad
// new value, or the key's deletion, is reported to onError and the last good
// repository keeps serving. It is safe for concurrent use.
type Watcher struct {
	cli     *clientv3.Client
	key     string
	onLoad  func(*resources.Repository)
	onError func(error)

	applyMu sync.Mutex // serializes apply
	mu      sync.Mutex
	current *resources.Repository
	rev     int64 // etcd revision the current state was read at
}

// NewWatcher reads key through cli once and returns a watcher holding
// the repository it parses to. Errors: etcd unreachable within ctx, the key
// missing, or its value not a valid configuration (as Parse). onLoad is
// called after every later change that loads, onError after every one that
// does not; either may be nil. The caller owns cli.
func NewWatcher(ctx context.Context, cli *clientv3.Client, key string, onLoad func(*resources.Repository), onError func(error)) (*Watcher, error) {
	if onLoad == nil {
		onLoad = func(*resources.Repository) {}
	}
	if onError == nil {
		onError = func(error) {}
	}
	w := &Watcher{cli: cli, key: key, onLoad: onLoad, onError: onError}
	resp, err := cli.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("config: etcd get %s: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, fmt.Errorf("config: etcd key %s not found", key)
	}
	r, err := resources.Parse(resp.Kvs[0].Value)
	if err != nil {
		return nil, fmt.Errorf("etcd:%s: %w", key, err)
	}
	w.current, w.rev = r, resp.Header.Revision
	return w, nil
}

// Current returns the last good repository.
func (w *Watcher) Current() *resources.Repository {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.current
}

// apply handles one value of the key seen at revision rev: nil for a
// deletion. A value at or before the revision the current state was read
// at is old news (a watch event for a change Sync already applied) and is
// ignored.
func (w *Watcher) apply(value []byte, deleted bool, rev int64) {
	// One apply at a time, through onLoad: the watch and Sync must not
	// install an older value after a newer one.
	w.applyMu.Lock()
	defer w.applyMu.Unlock()
	w.mu.Lock()
	stale := rev <= w.rev
	w.mu.Unlock()
	if stale {
		return
	}
	if deleted {
		w.onError(fmt.Errorf("config: etcd key %s deleted; keeping the last good configuration", w.key))
		w.setRev(rev)
		return
	}
	r, err := resources.Parse(value)
	if err != nil {
		w.onError(fmt.Errorf("etcd:%s: %w", w.key, err))
		w.setRev(rev)
		return
	}
	w.mu.Lock()
	changed := r.Hash() != w.current.Hash()
	if changed {
		w.current = r
	}
	w.rev = max(w.rev, rev)
	w.mu.Unlock()
	if changed {
		w.onLoad(r)
	}
}

func (w *Watcher) setRev(rev int64) {
	w.mu.Lock()
	w.rev = max(w.rev, rev)
	w.mu.Unlock()
}

// Run follows the key until ctx is done, and returns nil then. When the
// watch breaks (etcd unreachable, history compacted) it reads the key again
// and watches from there, backing off up to 5 s between attempts.
func (w *Watcher) Run(ctx context.Context) error {
	failures := 0
	for ctx.Err() == nil {
		if err := w.watch(ctx); err != nil && ctx.Err() == nil {
			w.onError(fmt.Errorf("config: watching etcd key %s: %w", w.key, err))
			failures++
			select {
			case <-ctx.Done():
			case <-time.After(retry.Backoff(failures, 100*time.Millisecond, 5*time.Second, nil)):
			}
			w.resync(ctx)
			continue
		}
		failures = 0
	}
	return nil
}

// watch watches from the revision after the current state's until the
// watch ends.
func (w *Watcher) watch(ctx context.Context) error {
	w.mu.Lock()
	rev := w.rev
	w.mu.Unlock()
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for wr := range w.cli.Watch(wctx, w.key, clientv3.WithRev(rev+1)) {
		if err := wr.Err(); err != nil {
			return err
		}
		for _, ev := range wr.Events {
			w.apply(ev.Kv.Value, ev.Type == mvccpb.DELETE, ev.Kv.ModRevision)
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	return errors.New("watch closed")
}

// resync reads the key again after a broken watch, so that a change lost to
// compaction is not missed.
func (w *Watcher) resync(ctx context.Context) {
	gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_ = w.Sync(gctx) // on error, the next watch attempt reports it
}

// Sync reads the key now (a linearizable read: every write acknowledged
// before it is seen) and applies its value as a watch event would, before
// it returns: onLoad has run when the value changed. The admin API calls
// it after a write so that the server that accepted the write serves it
// (read-your-writes). Errors: etcd's, within ctx. Safe to call
// concurrently with Run; the watch's later event for the same change is
// ignored.
func (w *Watcher) Sync(ctx context.Context) error {
	resp, err := w.cli.Get(ctx, w.key)
	if err != nil {
		return fmt.Errorf("config: etcd get %s: %w", w.key, err)
	}
	if len(resp.Kvs) == 0 {
		w.apply(nil, true, resp.Header.Revision)
		return nil
	}
	w.apply(resp.Kvs[0].Value, false, resp.Header.Revision)
	return nil
}
