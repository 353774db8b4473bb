// Package quotaapi is Square's quota service's admin REST API under /api
// (quotaservice-wire.md, "Admin REST API") over Sluice's configuration
// document, so that quotaservice-cli and the quota service's admin UI work
// against Sluice: Handler serves it over an admin.Service, authenticated
// by the same adminhttp.Auth as /admin/v1, with /api/stats over a
// server's limits engine (EngineStats).
//
// The API's objects map onto the document's: a namespace is the
// token-bucket resource limits/resources/{name}, a bucket its domain
// limits/resources/{name}/domains/{bucket}, DefaultBucket and
// DynamicBucketTemplate are …/default and …/template, the global default
// bucket (GlobalNamespace) limits/global_default; the Version header is
// the version a change was made against (admin.Change.IfVersion), and
// X-Forwarded-User the user, as Auth trusts it.
//
// File keeps the document in the quota service's own file (Square's YAML,
// `sluice server --quotaservice-config FILE`), so that a deployment never
// converted is edited in its own format; Check is its admin.Service's
// Check.
//
// Source: quotaservice-wire.md, "Admin REST API" and "Configuration"
// (its routes and bodies, so its admin tools work unchanged, on its own
// file).
package quotaapi
