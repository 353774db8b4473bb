package etcdstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/sluice-rl/sluice/admin"
)

// Store is the admin.Store of an etcd key. It is safe for concurrent use
// by any number of processes: etcd orders their writes.
type Store struct {
	cli     *clientv3.Client
	key     string
	keep    int64
	timeout time.Duration
	now     func() time.Time
}

// Options configures a Store.
type Options struct {
	// Keep is how many versions the history keeps; ≤ 0:
	// admin.DefaultKeep (100).
	Keep int
	// Timeout bounds each etcd request when the caller's context has no
	// sooner deadline; ≤ 0: 5 s.
	Timeout time.Duration
	// Now is the clock of import records; nil: time.Now.
	Now func() time.Time
}

// New returns the store of key through cli (which the caller owns and
// closes).
func New(cli *clientv3.Client, key string, o Options) *Store {
	if o.Keep <= 0 {
		o.Keep = admin.DefaultKeep
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Store{cli: cli, key: key, keep: int64(o.Keep), timeout: o.Timeout, now: o.Now}
}

// String returns "etcd key KEY".
func (s *Store) String() string { return "etcd key " + s.key }

// HistoryPrefix returns the prefix of the history's keys, KEY/history/.
func (s *Store) HistoryPrefix() string { return s.key + "/history/" }

func (s *Store) entryKey(n int64) string { return fmt.Sprintf("%s%020d", s.HistoryPrefix(), n) }

func (s *Store) ctx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.timeout)
}

// Read returns KEY's value and version (version 0, no document, when the
// key does not exist).
func (s *Store) Read(ctx context.Context) (admin.Snapshot, error) {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	resp, err := s.cli.Get(ctx, s.key)
	if err != nil {
		return admin.Snapshot{}, fmt.Errorf("etcd get %s: %w", s.key, err)
	}
	if len(resp.Kvs) == 0 {
		return admin.Snapshot{}, nil
	}
	kv := resp.Kvs[0]
	return admin.Snapshot{Version: kv.Version, Document: kv.Value}, nil
}

// Write puts doc in KEY as version expected+1, with its history entry,
// if KEY's version is expected (see the package doc).
func (s *Store) Write(ctx context.Context, expected int64, doc []byte, a admin.Audit) (admin.Audit, error) {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	n := expected + 1
	a.Version, a.Hash, a.Time = n, admin.Hash(doc), a.Time.UTC()
	entry, err := json.Marshal(admin.Entry{Audit: a, Document: doc})
	if err != nil {
		return admin.Audit{}, err
	}
	ops := []clientv3.Op{clientv3.OpPut(s.key, string(doc)), clientv3.OpPut(s.entryKey(n), string(entry))}
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.Version(s.key), "=", expected)}
	oldest := n - s.keep + 1 // the oldest version kept after this write
	// The version written against, if it has no entry (another tool
	// wrote it), is recorded too: so it can be rolled back to.
	if expected > 0 && expected >= oldest {
		prev, err := s.cli.Get(ctx, s.entryKey(expected), clientv3.WithKeysOnly())
		if err != nil {
			return admin.Audit{}, fmt.Errorf("etcd get %s: %w", s.entryKey(expected), err)
		}
		if len(prev.Kvs) == 0 {
			cur, err := s.cli.Get(ctx, s.key)
			if err != nil {
				return admin.Audit{}, fmt.Errorf("etcd get %s: %w", s.key, err)
			}
			if len(cur.Kvs) == 1 && cur.Kvs[0].Version == expected {
				imp := admin.Entry{Audit: admin.Audit{Version: expected, Time: s.now().UTC(), Op: admin.OpImport, Object: "config",
					Hash: admin.Hash(cur.Kvs[0].Value), Diff: "(written to the etcd key by another tool; no earlier version recorded to diff against)"},
					Document: cur.Kvs[0].Value}
				b, err := json.Marshal(imp)
				if err != nil {
					return admin.Audit{}, err
				}
				ops = append(ops, clientv3.OpPut(s.entryKey(expected), string(b)))
				// Only while KEY still holds that value.
				cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(s.key), "=", cur.Kvs[0].ModRevision))
			}
		}
	}
	if oldest > 1 {
		ops = append(ops, clientv3.OpDelete(s.entryKey(0), clientv3.WithRange(s.entryKey(oldest))))
	}
	resp, err := s.cli.Txn(ctx).If(cmps...).Then(ops...).Else(clientv3.OpGet(s.key)).Commit()
	if err != nil {
		return admin.Audit{}, fmt.Errorf("etcd txn on %s: %w", s.key, err)
	}
	if !resp.Succeeded {
		var cur int64
		if rr := resp.Responses; len(rr) > 0 && rr[0].GetResponseRange() != nil && len(rr[0].GetResponseRange().Kvs) > 0 {
			cur = rr[0].GetResponseRange().Kvs[0].Version
		}
		return admin.Audit{}, &admin.ConflictError{Current: cur}
	}
	return a, nil
}

// History returns the kept versions' audit records, newest first.
func (s *Store) History(ctx context.Context) ([]admin.Audit, error) {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	resp, err := s.cli.Get(ctx, s.HistoryPrefix(), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend))
	if err != nil {
		return nil, fmt.Errorf("etcd get %s: %w", s.HistoryPrefix(), err)
	}
	out := make([]admin.Audit, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		n, err := strconv.ParseInt(strings.TrimPrefix(string(kv.Key), s.HistoryPrefix()), 10, 64)
		if err != nil {
			continue // not an entry
		}
		var e admin.Entry
		if err := json.Unmarshal(kv.Value, &e); err != nil {
			out = append(out, admin.Audit{Version: n, Object: fmt.Sprintf("(the history entry is unreadable: %v)", err)})
			continue
		}
		e.Audit.Version = n
		out = append(out, e.Audit)
	}
	return out, nil
}

// Entry returns version n: its history entry, or, for the current version
// without one (written by another tool), KEY's value. Errors wrap
// admin.ErrNotFound.
func (s *Store) Entry(ctx context.Context, n int64) (admin.Entry, error) {
	ctx, cancel := s.ctx(ctx)
	defer cancel()
	resp, err := s.cli.Txn(ctx).Then(clientv3.OpGet(s.entryKey(n)), clientv3.OpGet(s.key)).Commit()
	if err != nil {
		return admin.Entry{}, fmt.Errorf("etcd get %s: %w", s.entryKey(n), err)
	}
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
		var e admin.Entry
		if err := json.Unmarshal(kvs[0].Value, &e); err != nil {
			return admin.Entry{}, fmt.Errorf("%s: %w", s.entryKey(n), err)
		}
		e.Audit.Version = n
		return e, nil
	}
	if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) > 0 && kvs[0].Version == n {
		doc := kvs[0].Value
		return admin.Entry{Audit: admin.Audit{Version: n, Op: admin.OpImport, Object: "config", Hash: admin.Hash(doc)}, Document: doc}, nil
	}
	return admin.Entry{}, fmt.Errorf("version %d: %w (kept: the last %d)", n, admin.ErrNotFound, s.keep)
}

var _ admin.Store = (*Store)(nil)
