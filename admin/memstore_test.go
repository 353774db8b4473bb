package admin

import (
	"context"
	"fmt"
	"sync"
)

// memStore is a Store in memory, for the Service's tests and fuzz
// targets: the file store (admin/filestore) and the etcd store
// (admin/etcdstore) have tests of their own, under a Service.
type memStore struct {
	mu      sync.Mutex
	entries []Entry // version i+1 at i
	doc     []byte
}

func newMemService(doc string) (*Service, *memStore) {
	m := &memStore{doc: []byte(doc), entries: []Entry{{Audit: Audit{Version: 1, Op: OpImport}, Document: []byte(doc)}}}
	return New(m, Options{}), m
}

// stored returns the stored document (as a file store's file holds it).
func (m *memStore) stored() ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.doc, nil
}

func (m *memStore) Read(context.Context) (Snapshot, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return Snapshot{Version: int64(len(m.entries)), Document: m.doc}, nil
}

func (m *memStore) Write(_ context.Context, expected int64, doc []byte, a Audit) (Audit, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if expected != int64(len(m.entries)) {
		return Audit{}, &ConflictError{Current: int64(len(m.entries))}
	}
	a.Version, a.Hash = expected+1, Hash(doc)
	m.entries = append(m.entries, Entry{Audit: a, Document: doc})
	m.doc = doc
	return a, nil
}

func (m *memStore) History(context.Context) ([]Audit, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Audit
	for i := len(m.entries) - 1; i >= 0; i-- {
		out = append(out, m.entries[i].Audit)
	}
	return out, nil
}

func (m *memStore) Entry(_ context.Context, n int64) (Entry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if n < 1 || n > int64(len(m.entries)) {
		return Entry{}, fmt.Errorf("version %d: %w", n, ErrNotFound)
	}
	return m.entries[n-1], nil
}

func (m *memStore) String() string { return "memory" }
