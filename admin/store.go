package admin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"
)

// Store keeps the resource repository's document (a Document's bytes),
// its version and its history. The servers read the same document (the
// file, or the etcd key) through their watcher and apply it: a Store only
// stores.
//
// Versions are positive and increase by one with every write; version 0
// is a document that does not exist yet (an absent etcd key). Write is a
// compare-and-swap on the version. Implementations: filestore.Store (a
// file and its FILE.history directory), etcdstore.Store (an etcd key and
// KEY/history/) and quotaapi.File (Square's quota service file). They are
// safe for concurrent use.
type Store interface {
	// Read returns the current document and its version.
	Read(ctx context.Context) (Snapshot, error)
	// Write stores doc as the next version if the current version is
	// expected, with a history entry holding doc and a (whose Version and
	// Hash Write sets), and drops the entries past the store's limit. It
	// returns the stored audit record, or a *ConflictError (ErrConflict)
	// carrying the current version when that is not expected.
	Write(ctx context.Context, expected int64, doc []byte, a Audit) (Audit, error)
	// History returns the audit records of the kept versions, newest
	// first.
	History(ctx context.Context) ([]Audit, error)
	// Entry returns one kept version: its document, byte for byte, and
	// its audit record. Errors wrap ErrNotFound for a version not kept.
	Entry(ctx context.Context, version int64) (Entry, error)
	// String describes the store: "file /etc/sluice/config.yaml", "etcd
	// key /sluice/config".
	String() string
}

// Snapshot is a version of the document.
type Snapshot struct {
	Version  int64
	Document []byte
}

// DefaultKeep is how many versions a store keeps by default.
const DefaultKeep = 100

// Op names what a change did.
type Op string

// The operations.
const (
	OpCreate  Op = "create"  // a new object
	OpUpdate  Op = "update"  // an object replaced
	OpDelete  Op = "delete"  // an object removed
	OpReplace Op = "replace" // the whole document replaced
	// OpRollback: the document of an earlier version (Audit.From),
	// restored byte for byte as a new version.
	OpRollback Op = "rollback"
	// OpImport: a document the store found without a history entry (the
	// file as it was before the first change, or an etcd value written
	// by another tool), recorded as a version of its own.
	OpImport Op = "import"
)

// Audit is the record of one change: who made it, when, what it changed.
type Audit struct {
	// Version is the version the change made.
	Version int64 `json:"version"`
	// Time is when the change was accepted (the Service's clock), UTC.
	Time time.Time `json:"time"`
	// User is who made it (see Auth); "" for an import.
	User string `json:"user"`
	// Auth says how User was established: "token", "mtls", "forwarded",
	// "insecure" (loopback, --admin-insecure), or "" (a Go caller).
	Auth string `json:"auth,omitempty"`
	// Op is what the change did; Object the object it did it to (the
	// whole document: "config").
	Op     Op     `json:"op"`
	Object string `json:"object"`
	// From is, for a rollback, the version restored.
	From int64 `json:"from,omitempty"`
	// Diff is the change as a unified diff of the document.
	Diff string `json:"diff"`
	// Hash is the hex SHA-256 of the document the change made: the hash a
	// server shows on /debug/status once it applies it.
	Hash string `json:"hash"`
}

// Entry is a kept version: its audit record and its document.
type Entry struct {
	Audit
	Document []byte `json:"-"`
}

// entryJSON is Entry's JSON form: the document as a string (as base64
// when it is not UTF-8, which no loadable document is).
type entryJSON struct {
	Audit
	Document       *string `json:"document,omitempty"`
	DocumentBase64 []byte  `json:"document_base64,omitempty"`
}

// MarshalJSON writes the audit record's fields and "document".
func (e Entry) MarshalJSON() ([]byte, error) {
	j := entryJSON{Audit: e.Audit}
	if utf8.Valid(e.Document) {
		s := string(e.Document)
		j.Document = &s
	} else {
		j.DocumentBase64 = e.Document
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (e *Entry) UnmarshalJSON(b []byte) error {
	var j entryJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	e.Audit = j.Audit
	switch {
	case j.Document != nil:
		e.Document = []byte(*j.Document)
	default:
		e.Document = j.DocumentBase64
	}
	return nil
}

// ErrConflict is wrapped by a *ConflictError.
var ErrConflict = errors.New("configuration changed since you read it")

// ConflictError refuses a change made against a version that is not the
// current one. The HTTP API answers it with 409.
type ConflictError struct {
	// Current is the current version.
	Current int64
}

// Error returns "configuration changed since you read it: version N now".
func (e *ConflictError) Error() string {
	return fmt.Sprintf("%v: version %d now", ErrConflict, e.Current)
}

// Unwrap returns ErrConflict.
func (e *ConflictError) Unwrap() error { return ErrConflict }

// Hash returns the hex SHA-256 of doc, as resources.Repository.Hash.
func Hash(doc []byte) string {
	s := sha256.Sum256(doc)
	return hex.EncodeToString(s[:])
}
