// Package admin changes Sluice's resource repository at runtime: its
// document, the YAML that `sluice server --config FILE` or `--config
// etcd:/KEY` serves (server.Config.Repository.Path), edited object by
// object through a Service, every change validated and normalized by the
// servers' own loader (resources.Parse, which reads the document into a
// resources.Repository) before it is stored, versioned with
// compare-and-swap, kept in a history, and audited.
//
// Source: charon-paper.md §4.1 (a
// configuration API that normalizes what it stores); quotaservice-wire.md,
// "Admin REST API" (the version and its 409); doorman-design.md (servers
// watch a central store).
//
// # The document and its objects
//
// The document is kept as a YAML node tree (go.yaml.in/yaml/v3), so an
// edit changes only the object it touches: comments, key order and flow
// style ({size: 1, fill_rate: 1}) elsewhere survive, and a changed
// object keeps the comments of the fields it keeps. Objects (Object, with
// their paths in the HTTP API):
//
//	templates/{identifier_glob}                   a Doorman resource template (an item of resources:)
//	limits/resources/{name}                       a limits resource: token buckets, burst tiers or copies
//	limits/resources/{name}/domains/{domain}      one domain: a bucket, a tier configuration, or a copies limit
//	limits/resources/{name}/default               a token-bucket resource's default bucket
//	limits/resources/{name}/template              its dynamic bucket template
//	limits/namespaces/{prefix}                    a namespace's flags
//	limits/global_default                         the global default bucket
//	envoy_ratelimit/{domain}                      an Envoy rate limit domain (an item of envoy_ratelimit:)
//	config                                        the whole document
//
// Names are path-escaped in paths ("templates/db%2F*"). Each object can
// be listed (its collection), read (ObjectView: as written, as YAML with
// its comments, and as the loader sees it, defaults applied and
// normalized, in the shapes of package admin/effective), created (fails with ErrExists if it exists), updated
// (ErrNotFound if it does not; Change.Upsert creates it) and deleted.
//
// # Changes
//
// Service.Apply builds the whole new document, parses it with
// resources.Parse and refuses it with every error, each naming its field
// (*InvalidError), if it does not load. Change.IfVersion is the version
// the change was made against: when another is current the change fails
// with a *ConflictError ("configuration changed since you read it:
// version N now"). DryRun returns the Result (the normalized object,
// resources.Repository.Notes, a unified diff, the new document) storing
// nothing. Service.Rollback stores a kept version's document byte for
// byte as a new version.
//
// # Stores
//
// A Store keeps the document, its version and its history: filestore.Store
// (the file, written atomically, with FILE.history/ beside it; one process
// writes it) and etcdstore.Store (the etcd key, with a transaction on its
// version, and KEY/history/; any number of servers). A Store only stores:
// the servers apply a change the one way they apply any change to their
// configuration, through their watcher of the file or key.
//
// # Around it
//
// This package is the document, its objects, its Service and the Store
// they are kept in. Each store, each way in, and the shapes of what the
// loader sees are packages of their own:
//
//	admin/filestore     the document in a file: the admin's Store
//	admin/etcdstore     the document in an etcd key: the servers' Watcher and the admin's Store
//	admin/effective     the objects as the loader sees them (ObjectView.Effective)
//	admin/adminhttp     the HTTP API /admin/v1/ over a Service, and its authentication (Auth)
//	admin/adminclient   the client of that API: `sluice admin`, and tests
//	admin/quotaapi      Square's quota service REST API /api over a Service, and its file as a Store
//
// Every accepted change is logged (slog, "configuration changed": user,
// time, version, object, diff) and kept in its history entry (Audit).
package admin
