// Package adminhttp serves the admin API of Sluice's configuration
// document as JSON under /admin/v1/ on the server's port (Handler, over
// an admin.Service), and decides who may use it (Auth).
//
// Source: doorman-design.md (servers watch a central configuration);
// quotaservice-wire.md, "Admin REST API" (the version and its 409).
//
// # Routes
//
// See Handler for its routes: If-Match carries the version the change was
// made against, ?dry_run=true asks for a dry run, and errors answer an
// ErrorBody (409 with the current version for a stale change, 400 with
// every error, each naming its field, for an invalid one).
//
// # Authentication
//
// Auth decides who writes: a bearer token from a token file (reread when
// it changes), the CN of an mTLS client certificate, X-Forwarded-User
// from a trusted proxy, or any loopback client with AuthOptions.Insecure;
// with none configured, writes answer 403 (Auth.DisabledMessage). With
// AuthOptions.AuthReads, reads need the same. The quota service's REST
// API (admin/quotaapi) authenticates with the same Auth.
//
// Clients speak this API through admin/adminclient, whose errors are the
// admin.Service's.
package adminhttp
