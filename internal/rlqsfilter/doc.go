// Package rlqsfilter is a model of Envoy's rate_limit_quota HTTP filter
// (envoy.filters.http.rate_limit_quota), the client of the RLQS service,
// without a transport: how it reads an assignment's token bucket (and so
// how a server must write one: Encode), how it applies assignments (a new
// token bucket starts full; one the filter takes for the same is kept,
// tokens and all; a time to live counts in whole seconds), how it admits
// requests from the token bucket on its clock, and what it does without
// an active assignment (its no_assignment_behavior and
// expired_assignment_behavior, as blanket rules).
//
// Time is passed in, so the same model runs on the wall clock (the tests'
// emulated Envoy, internal/testutil/rlqsproxy, over a real gRPC stream)
// and on virtual time (the simulator, package sim). It uses no Envoy
// messages: the simulator links none of go-control-plane but envoy/type/v3
// (internal/layout's sideways imports), so the wire's fields come in as
// plain values (TokenBucket, Strategy) and the callers convert the protos.
// A blanket rule is Envoy's own enum, typev3.RateLimitStrategy_BlanketRule
// (ALLOW_ALL, its zero value, or DENY_ALL), the one type Sluice uses for
// it.
//
// Bucket is one bucket's enforcement; Filter is one filter's buckets by
// bucket id, with the counts its usage reports carry. Neither is safe for
// concurrent use.
//
// Source: Envoy's source/extensions/filters/http/rate_limit_quota/
// global_client_impl.cc (createTokenBucketFromAction, protoTokenBucketsEq,
// onQuotaResponseImpl, startActionExpirationTimer, getUsageFromBucket),
// source/common/common/token_bucket_impl.cc (AtomicTokenBucketImpl, which
// starts full and fills continuously), api/envoy/type/v3/token_bucket.proto
// and ratelimit_strategy.proto;
// docs/rlqs.md, "What a stream is sent".
package rlqsfilter
