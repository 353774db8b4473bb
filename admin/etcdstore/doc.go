// Package etcdstore keeps Sluice's resource repository in an etcd key
// (`sluice server --config etcd:/KEY`): its reader and its writer. The
// servers load the key's value (the same YAML as a file, parsed by
// resources.Parse) and follow its changes with an etcd watch (Watcher); the
// admin API writes it (Store, an admin.Store), so that every server
// watching it applies a change. It is apart from packages resources and
// admin so that what reads repositories, or uses the admin API over
// HTTP (admin/adminclient), does not link the etcd client.
//
// # Layout
//
//	KEY                        the document (YAML), as the servers read it
//	KEY/history/<N>            version N: a JSON admin.Entry (its audit record and "document")
//
// N is written with 20 digits (00000000000000000042), so that the
// history's keys sort by version and the oldest are dropped with one
// range delete.
//
// # Versions
//
// The version is etcd's per-key version counter of KEY (mvccpb.KeyValue
// Version: 1 when the key is created, +1 on every put; 0 while it does
// not exist). A write is one transaction comparing it with the version the
// change was made against: if the key changed meanwhile (through the
// admin API of any server, or etcdctl put), the transaction fails and
// Write returns an *admin.ConflictError carrying the current version.
// Otherwise it puts the document and its history entry, and deletes the
// entries past the newest Keep, atomically.
//
// A value put by another tool bumps the version without a history entry:
// Entry of the current version reads it from KEY, and the next write
// through the admin API records it (admin.OpImport) in the same
// transaction, so that it can be rolled back to. Deleting KEY restarts
// its version at 1 when it is created again: the history entries of the
// new versions then replace the old ones of the same numbers.
package etcdstore
