// Package filestore keeps Sluice's resource repository in a file
// (`sluice server --config FILE`) for the admin API: Store is the
// admin.Store of the file, with its versions and audit records in the
// sibling directory FILE.history/. The servers read the same file through
// their watcher (resources.NewWatcher) and apply each change the one way
// they apply any change to their configuration; a Store only stores. The
// same store under the quota service's file is quotaapi.File; the
// repository in an etcd key is admin/etcdstore's.
//
// # Layout
//
//	FILE                   the document (YAML), as the servers read it
//	FILE.history/N.yaml    version N's document, byte for byte
//	FILE.history/N.json    version N's audit record (an admin.Audit)
//
// Every file is replaced atomically (a temporary file, synced, renamed
// over it, the directory synced), so that a server reloading FILE reads
// the old document or the new one, never a part.
//
// # Versions
//
// The version is the newest N kept (0: no file yet; the first write
// creates it). A write is a compare-and-swap on it under a mutex of this
// process: one process writes a file (share a repository between servers
// through etcd instead). A file edited by hand is recorded, when the
// store next reads it, as a version of its own (admin.OpImport), so that
// it can be rolled back to and a change made against the version before
// it is refused (*admin.ConflictError). The history keeps the newest
// Options.Keep versions (admin.DefaultKeep).
//
// Source: quotaservice-wire.md, "Admin REST API" (versions and their
// 409); doorman-design.md (servers watch the configuration they load).
package filestore
