// Package rlsxds takes the rules of Envoy's rate limit service from an
// xDS control plane instead of files, as envoyproxy/ratelimit does with
// CONFIG_TYPE=GRPC_XDS_SOTW: a state-of-the-world subscription to the
// resources of type ratelimit.config.ratelimit.v3.RateLimitConfig (TypeURL)
// over the aggregated discovery service. Envoy Gateway serves them so, from
// its control plane (envoy-gateway:18001, over mTLS), to the rate limit
// deployment it runs.
//
// Convert turns the resources of one version into the engine's rules, an
// *rls.Config: each resource is one domain, read by limits/limitsyaml as
// the document of envoyproxy/ratelimit's configuration it stands for, so
// the checks and the errors are the files' (ConvertMerged merges the
// resources of one domain, as MERGE_DOMAIN_CONFIG does).
//
// A Source follows a control plane: New takes the control plane's address,
// the node id and metadata, TLS, headers, a retry interval and the
// function that installs the rules (Options.Apply); Run subscribes
// through go-control-plane's SotW client (pkg/client/sotw/v3),
// acknowledges (ACK) each version it has converted and applied, whole,
// and rejects (NACK, with the error's text) one it cannot read, convert
// or apply — the rules in force then keep serving. A dial or a stream
// that fails is retried every Options.RetryInterval, so a control plane's
// restart is survived; Ready reports a first version applied, Version the
// version in force, Err the last failure.
//
// envoyproxy/ratelimit's settings map onto Options one to one:
//
//	CONFIG_GRPC_XDS_SERVER_URL                      ServerURL
//	CONFIG_GRPC_XDS_NODE_ID                         NodeID ("default")
//	CONFIG_GRPC_XDS_NODE_METADATA                   NodeMetadata
//	CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS       Headers
//	CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL   RetryInterval (3 s)
//	CONFIG_GRPC_XDS_SERVER_USE_TLS, …_TLS_CERT/KEY, TLS (nil: plaintext)
//	…_SERVER_TLS_CACERT, …_SERVER_TLS_SAN
//	MERGE_DOMAIN_CONFIG                             MergeDomains
//
// Units: SECOND, MINUTE, HOUR and DAY, and the calendar units WEEK, MONTH
// and YEAR of the newer protos, read by their numbers (7, 5, 6) with the
// v0.1.0 protos this module builds with, which name only the first four.
//
// Source: envoyproxy/ratelimit, src/provider/xds_grpc_sotw_provider.go
// (the subscription, ACK and NACK, the retry) and src/settings (the
// settings and their defaults); the xDS protocol's "ACK/NACK and
// resource type instance version".
package rlsxds
