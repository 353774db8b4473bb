package server

import (
	"crypto/tls"
	"log/slog"
	"net"
	"strings"
	"time"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-rl/sluice/fleet"
	"github.com/sluice-rl/sluice/internal/identity"
	"github.com/sluice-rl/sluice/internal/names"
	"github.com/sluice-rl/sluice/internal/tlsutil"
	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/limits/copies"
	"github.com/sluice-rl/sluice/limits/rls"
	"github.com/sluice-rl/sluice/resources"
	"github.com/sluice-rl/sluice/server/envoyrls"
	"github.com/sluice-rl/sluice/server/envoyrls/upstreamstats"
	"github.com/sluice-rl/sluice/server/rlqs"
)

// Config is everything New needs to assemble a server, grouped by
// concern; `sluice server` parses its flags (and SLUICE_* variables) into
// one and does nothing else. The zero value (with a Listen.Address or
// Listen.Listener) is a standalone server with no configuration, its
// buckets in memory. New validates it: every error names the field at
// fault (e.g. "Election.Key: required with Election.Kind etcd"), and
// FieldNames lists the names it uses.
type Config struct {
	// ID identifies this server (as a client of its parent, and in logs).
	// Empty: the election key with Election.Kind "etcd", so that all
	// tasks of a node are one requester to its parent; else host:pid.
	ID string
	// Listen is where and how the one port listens.
	Listen Listen
	// Runtime is the logger, the metrics registry and the clock.
	Runtime Runtime
	// Repository is where the resource repository comes from: Doorman's
	// templates, the limits, the copy-limited resources and Envoy's rules
	// (resources.Repository).
	Repository Repository
	// Parent, when it names addresses, makes this an intermediate server.
	Parent Parent
	// Leases configures the leases this server hands out.
	Leases Leases
	// Election is how the tasks of this node elect their master.
	Election Election
	// Etcd is the etcd cluster of the election, of a repository in an
	// etcd:/KEY and of the fleet (no endpoints: none).
	Etcd Etcd
	// Sessions configures Charon's copy-limited sessions and the fleet
	// of servers sharing them.
	Sessions Sessions
	// Store is where the limits' buckets, Envoy's counters and the
	// fleet's copy log live: this process's memory, a Redis, a Redis
	// Cluster or a Redis watched by Sentinel, and how to reach it
	// (credentials, TLS, the keys' prefix).
	Store Store
	// Envoy configures Envoy's rate limit service (ShouldRateLimit): its
	// algorithm, shadow mode, headers, answer on store errors and
	// near-limit ratio. Its rules come from Repository, its counters from
	// Store, its statistics' sinks from Runtime.
	Envoy EnvoyRateLimit
	// RLQS configures Envoy's Rate Limit Quota Service, whose buckets are
	// resources leased like any other (Repository's templates, Leases,
	// Parent): the answer to a bucket no template matches, its time to
	// live, the smoothing of the reported demand, the assignments' burst.
	RLQS RLQS
	// Admin configures the admin API at /admin/v1/ (and the quota
	// service's at /api).
	Admin Admin
}

// Listen is the one port: its address, TLS and drain.
type Listen struct {
	// Address is the address to listen on ("host:port"; port 0 picks a
	// free one), used when Listener is nil.
	Address string
	// Listener, when set, is served instead of listening on Address (New's
	// caller keeps no other use of it; Run closes it).
	Listener net.Listener
	// Advertise is the address clients should use to reach this server;
	// empty: the listener's address.
	Advertise string
	// TLS makes the endpoint serve TLS (mTLS with CAFile, the client
	// CAs); the zero value: plaintext (h2c and HTTP/1.1).
	TLS TLS
	// Grace bounds the drain after Run's context ends (0: 10 s; negative
	// is an error).
	Grace time.Duration
	// Pprof serves Go's profiler at /debug/pprof/.
	Pprof bool
	// Identity binds clients to the identities their certificates name
	// (with mTLS), and says what each may use; the zero value: client ids
	// are whatever clients say.
	Identity Identity
}

// Identity is where the clients' identities come from and what each may
// use (docs/identity.md; package internal/identity).
type Identity struct {
	// Source is "" (no identities) or "cert": each client's identity is
	// the one its certificate names (its SPIFFE URI SAN, else its subject
	// CN), which needs mTLS (Listen.TLS.CAFile, or a Listen.TLS.Config
	// that requires and verifies client certificates). Then a lease
	// client's client_id (server_id, holder_id) must be its identity or
	// the identity, "/" and a suffix, and a session belongs to the
	// identity that opened it; PermissionDenied otherwise.
	Source string
	// PolicyPath is a policy file (YAML: identity.Policy) granting each
	// identity the resources it may lease, Allow, reserve, and the Envoy
	// domains it may rate limit in; reloaded when it changes and by
	// Reload (a bad one is logged and counted; the last good one keeps
	// serving); one that cannot be loaded is New's error. Empty: every
	// identity may use every resource. Needs Source "cert".
	PolicyPath string
}

// Runtime is what the server logs, records and reads the time with.
type Runtime struct {
	// Logger receives structured logs (etcd's client's too); nil means
	// slog.Default().
	Logger *slog.Logger
	// Registry receives every metric; nil means a new registry that also
	// holds the process's and the Go runtime's collectors. One that
	// already holds Sluice's metrics is an error naming the metric.
	Registry *prometheus.Registry
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
	// Setting names a Config field (its path, one of FieldNames, e.g.
	// "Sessions.Max") in the messages that reach clients, in metric help
	// and in logs: sluice server answers with its flag ("--max-sessions").
	// nil, or "" for a path: the path itself. Called during New and on
	// requests, from any goroutine.
	Setting func(path string) string
	// Tracing configures OpenTelemetry traces (docs/tracing.md); the
	// zero value: off.
	Tracing Tracing
	// Statsd sends the statistics of Envoy's rate limit service to statsd
	// under envoyproxy/ratelimit's names (docs/envoy.md); the zero value:
	// off.
	Statsd Statsd
}

// Statsd is where Envoy's rate limit service's statistics go, under
// envoyproxy/ratelimit's own names, byte for byte
// (server/envoyrls/upstreamstats, on envoyproxy/ratelimit's statsd
// library, lyft/gostats), so that Envoy Gateway's statsd_exporter and
// dashboards read Sluice's unchanged. The fields are upstream's
// variables', and upstreamstats.Options' fields of the same names: this
// is that type without its Logger, which is the server's
// (Runtime.Logger); TestOptionsMirrored holds the two to the same
// fields.
type Statsd struct {
	// Address is statsd's host:port (STATSD_HOST, STATSD_PORT); "": off
	// (unless Prometheus).
	Address string
	// Protocol is "tcp" (empty: gostats' default, upstream's) or "udp"
	// (STATSD_PROTOCOL).
	Protocol string
	// FlushInterval is how often the counters are sent
	// (STATS_FLUSH_INTERVAL; 0: 10 s).
	FlushInterval time.Duration
	// ExtraTags are added to every statistic (EXTRA_TAGS).
	ExtraTags map[string]string
	// DogStatsd sends DogStatsD lines, the tags after "|#"
	// (USE_DOG_STATSD).
	DogStatsd bool
	// Prometheus exposes the statistics on Prometheus instead, named by
	// statsd_exporter's mapping (USE_PROMETHEUS; Address must be "");
	// Server.EnvoyPrometheus serves them.
	Prometheus bool
	// PrometheusMapper is a statsd_exporter mapping file
	// (PROMETHEUS_MAPPER_YAML; "": upstream's default mapping).
	PrometheusMapper string
}

// enabled reports whether s sends the statistics anywhere.
func (s Statsd) enabled() bool { return s.Address != "" || s.Prometheus }

// options returns s as upstreamstats.Options logging to log.
func (s Statsd) options(log *slog.Logger) upstreamstats.Options {
	return upstreamstats.Options{Address: s.Address, Protocol: s.Protocol, FlushInterval: s.FlushInterval, ExtraTags: s.ExtraTags,
		DogStatsd: s.DogStatsd, Prometheus: s.Prometheus, PrometheusMapper: s.PrometheusMapper, Logger: log}
}

// Tracing configures OpenTelemetry traces: a server span for every RPC on
// the port (gRPC and JSON alike, continuing the caller's W3C
// traceparent), with child spans for the round trips to Redis and the
// calls to etcd a request makes (docs/tracing.md). The zero value is
// off: no exporter, no instrumentation, nothing recorded.
//
// This is the one definition of the settings: sluice server's --otel-*
// flags set these fields, and server/internal/telemetry builds the SDK
// from them. Their values are the OpenTelemetry environment variables';
// a field set here overrides its variable, and one left empty is the
// SDK's (or the OTLP exporter's) to read from the environment itself, as
// the field says. Exporter and Protocol are the exceptions: New reads
// no variable for them, since the SDK does not choose an exporter
// (sluice server reads OTEL_TRACES_EXPORTER, OTEL_EXPORTER_OTLP_PROTOCOL
// and OTEL_SDK_DISABLED into its flags).
type Tracing struct {
	// Exporter is OTEL_TRACES_EXPORTER: "" or "none" (off) or "otlp".
	Exporter string
	// Protocol is OTEL_EXPORTER_OTLP_PROTOCOL: "grpc" (empty) or
	// "http/protobuf".
	Protocol string
	// Endpoint is OTEL_EXPORTER_OTLP_ENDPOINT: the collector's base URL
	// (http://host:port, https for TLS; with http/protobuf, /v1/traces is
	// appended to its path). Empty: the exporter's own variables
	// (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, then
	// OTEL_EXPORTER_OTLP_ENDPOINT), else localhost:4317 or :4318.
	Endpoint string
	// Sampler and SamplerArg are OTEL_TRACES_SAMPLER and
	// OTEL_TRACES_SAMPLER_ARG: always_on, always_off, traceidratio,
	// parentbased_always_on, parentbased_always_off or
	// parentbased_traceidratio, and the ratio of the two ratio samplers
	// (0 to 1; empty: 1). The two are one setting: a Sampler replaces
	// both variables, and a SamplerArg without a Sampler is an error.
	// Empty: the SDK's own variables, else parentbased_always_on.
	Sampler, SamplerArg string
	// Provider, when set, is used as is instead (a program embedding
	// Sluice, with its own SDK): New neither builds nor shuts one down.
	// Setting it with an Exporter other than none is an error.
	Provider trace.TracerProvider
}

// Repository is where the resource repository comes from: the one
// configuration of every API's resources (resources.Repository: Doorman's
// templates, the limits, the copy-limited resources, Envoy's rules). It is
// read from its document, YAML in a file or an etcd key (Path, `sluice
// server --config`, reloaded when it changes), or given whole in code
// (Fixed); two of its sections may come from sources of their own, in
// their own formats: the limits from Square's quota service file, Envoy's
// rules from envoyproxy/ratelimit's files or an xDS control plane. The
// zero value: no repository (every resource granted what it asks, no
// limits, no copies, no Envoy rules).
//
// Source: doorman-design.md, "Root server configuration" (the resource
// configuration is a ResourceRepository, the root's to load);
// doorman-wire.md, ResourceRepository.
type Repository struct {
	// Path is the repository's document: a YAML file, or etcd:/KEY for an
	// etcd key's value (needs Etcd.Endpoints); reloaded when it changes
	// (Reload reloads a file at once; a bad one is logged and counted, the
	// last good one keeps serving). Ignored by an intermediate server,
	// whose parent pushes the configuration down. Empty: none.
	Path string
	// QuotaServicePath is a file in Square's quota service format giving
	// the limits instead of the repository's limits section (both is an
	// error).
	QuotaServicePath string
	// EnvoyRateLimitPath is envoyproxy/ratelimit's configuration for
	// Envoy's rate limit service: one YAML file, or a directory of them
	// (limitsyaml.LoadEnvoyRateLimit), reloaded when one changes and by
	// Reload (a bad one is logged and counted; the last good one keeps
	// serving), instead of the repository's envoy_ratelimit section.
	EnvoyRateLimitPath string
	// EnvoyRateLimitXDS takes Envoy's rate limit rules from an xDS
	// control plane (envoyproxy/ratelimit's CONFIG_TYPE=GRPC_XDS_SOTW, as
	// Envoy Gateway serves them) instead of EnvoyRateLimitPath or the
	// repository's envoy_ratelimit section (either with it is an error);
	// the zero value (no ServerURL): off.
	EnvoyRateLimitXDS EnvoyRateLimitXDS
	// Fixed is the whole repository when Path is empty (resources.Compose
	// builds one in code, resources.Parse reads one): its templates,
	// limits, copy-limited resources and Envoy rules, each section
	// validated by the service that serves it; never reloaded. Nil with no
	// Path: no templates (every resource granted what it asks), no limits,
	// no copies. Setting both Path and Fixed is an error.
	Fixed *resources.Repository
}

// EnvoyRateLimitXDS is an xDS control plane serving Envoy's rate limit
// rules: the RateLimitConfig resources of envoyproxy/ratelimit's
// GRPC_XDS_SOTW configuration (package limits/rlsxds), each version
// installed whole once it converts (the control plane is told ACK), a
// bad one refused (NACK with the error: logged and counted in
// sluice_server_config_reloads_total, the last good rules keep serving).
// A lost control plane is dialled again every RetryInterval; the rules
// in force stay meanwhile. Every field but ServerURL needs ServerURL.
type EnvoyRateLimitXDS struct {
	// ServerURL is the control plane's address, host:port
	// (CONFIG_GRPC_XDS_SERVER_URL; Envoy Gateway's is envoy-gateway:18001
	// in its namespace); "": off.
	ServerURL string
	// NodeID is the node id the control plane keeps this server's rules
	// under (CONFIG_GRPC_XDS_NODE_ID); "": "default".
	NodeID string
	// NodeMetadata is the node's metadata (CONFIG_GRPC_XDS_NODE_METADATA);
	// nil: none.
	NodeMetadata map[string]string
	// TLS makes the connection TLS: CAFile verifies the control plane
	// (CONFIG_GRPC_XDS_SERVER_TLS_CACERT; empty: the system's roots),
	// CertFile and KeyFile are this server's client certificate for mTLS
	// (CONFIG_GRPC_XDS_CLIENT_TLS_CERT and _KEY); the zero value:
	// plaintext.
	TLS TLS
	// ServerName is the name the control plane's certificate must carry
	// (CONFIG_GRPC_XDS_SERVER_TLS_SAN); "": ServerURL's host. Needs TLS.
	ServerName string
	// Headers are sent with the subscription as gRPC metadata
	// (CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS); nil: none.
	Headers map[string]string
	// RetryInterval is the wait between attempts to reach the control
	// plane (CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL); 0: 3 s;
	// negative is an error.
	RetryInterval time.Duration
	// MergeDomains merges resources of one domain instead of refusing
	// them (MERGE_DOMAIN_CONFIG).
	MergeDomains bool
	// ForceStart makes the server ready before the first version of the
	// rules arrives (FORCE_START_WITHOUT_INITIAL_CONFIG); until then every
	// descriptor is answered OK. false: not ready (Ready, /readyz) until
	// then.
	ForceStart bool
}

// enabled reports whether x names a control plane.
func (x EnvoyRateLimitXDS) enabled() bool { return x.ServerURL != "" }

// Parent is the node an intermediate server leases its capacity (and
// gets its configuration) from.
type Parent struct {
	// Addresses are the parent node's tasks ("host:port"); empty: this is
	// a root server.
	Addresses []string
	// TLS makes the parent link (and the forwarding of sessions to their
	// home servers) speak TLS: CAFile verifies the parent (empty: the
	// system's roots), CertFile and KeyFile are this server's client
	// certificate (mTLS). The zero value: plaintext.
	TLS TLS
}

// Leases configures the leases the capacity service hands out.
type Leases struct {
	// DisablePush turns off pushed leases (sluice.v1.Leases/Watch):
	// capacity that becomes free waits for its takers' next requests, as
	// in Doorman (capacity.Options.NoPush). The zero value pushes.
	DisablePush bool
}

// EnvoyRateLimit configures Envoy's rate limit service
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit, package
// server/envoyrls): what a user chooses of it, each field
// envoyrls.Options' field of the same name. The rest of envoyrls.Options
// (its Store, clock, logger, registry, burst-tier engine and statistics'
// sink) is the server's: New sets it from Store, Runtime and the limits
// service. The zero value: token buckets, no shadow mode, months of 30
// days, no headers, store errors answered as errors (fail closed),
// near_limit above 0.8 of a limit.
type EnvoyRateLimit struct {
	// Algorithm counts the limits of domains and rules that name none
	// (rls.AlgorithmDefault, the zero value: token buckets).
	Algorithm rls.Algorithm
	// ShadowMode answers every request OK, deciding and counting as
	// usual (would-be rejections count as shadow_mode): upstream's
	// SHADOW_MODE.
	ShadowMode bool
	// CalendarMonths counts a limit of unit month in calendar months in
	// UTC (upstream's USE_CALENDAR_MONTH_RATE_LIMIT); false: 30 days.
	CalendarMonths bool
	// Headers are the response headers to add (the zero value: none).
	Headers envoyrls.Headers
	// OnStoreError is the answer when the store fails: limits.FailClosed
	// (the zero value: the error, Unavailable, and Envoy's
	// failure_mode_deny decides) or limits.FailOpen (OK).
	OnStoreError limits.OnStoreError
	// NearLimitRatio is the fraction of a limit above which a granted hit
	// counts as near_limit, in (0, 1] (0: 0.8, upstream's
	// NEAR_LIMIT_RATIO); New refuses another (FieldError
	// "Envoy.NearLimitRatio").
	NearLimitRatio float64
}

// options returns e as envoyrls.Options, without the server's part of
// them (newServices sets it).
func (e EnvoyRateLimit) options() envoyrls.Options {
	return envoyrls.Options{Algorithm: e.Algorithm, ShadowMode: e.ShadowMode, CalendarMonths: e.CalendarMonths, Headers: e.Headers,
		OnStoreError: e.OnStoreError, NearLimitRatio: e.NearLimitRatio}
}

// RLQS configures Envoy's Rate Limit Quota Service
// (envoy.service.rate_limit_quota.v3.RateLimitQuotaService, package
// server/rlqs; docs/rlqs.md): what a user chooses of it, each field
// rlqs.Options' field of the same name. The rest of rlqs.Options (its
// clock, logger, registry and the identities' authorizer) is the
// server's: New sets it from Runtime and Listen.Identity. The zero value
// is the default: ALLOW_ALL for DefaultUnconfiguredTTL, smoothing 0.5,
// a burst of one second.
type RLQS struct {
	// Unconfigured is the answer to a bucket no template matches, a
	// blanket rule of Envoy's (api/envoy/type/v3/ratelimit_strategy.proto):
	// typev3.RateLimitStrategy_ALLOW_ALL (the zero value, the default:
	// its proxies are not limited) or RateLimitStrategy_DENY_ALL, sent
	// with UnconfiguredTTL and renewed (and the template looked up again)
	// every half of it.
	Unconfigured typev3.RateLimitStrategy_BlanketRule
	// UnconfiguredTTL is the unconfigured answer's time to live (0:
	// rlqs.DefaultUnconfiguredTTL; else at least 2 s), and how long such
	// a bucket may count no request before it is abandoned.
	UnconfiguredTTL time.Duration
	// Smoothing is the weight of a report's demand in a bucket's smoothed
	// demand, in (0, 1] (0: 0.5, the Go client's adaptive demand's).
	Smoothing float64
	// Burst is an assignment's max_tokens as this long's worth of its
	// rate (at least one token), from 1 ms to a minute (0:
	// rlqs.DefaultBurst, one second).
	Burst time.Duration
}

// options returns r as rlqs.Options, without the server's part of them
// (newServices sets it).
func (r RLQS) options() rlqs.Options {
	return rlqs.Options{Unconfigured: r.Unconfigured, UnconfiguredTTL: r.UnconfiguredTTL, Smoothing: r.Smoothing, Burst: r.Burst}
}

// Election says how the tasks of a node elect their master.
type Election struct {
	// Kind is "standalone" (the default when empty: this process is
	// always the master) or "etcd".
	Kind string
	// Key is the etcd key prefix the tasks campaign on ("etcd" only,
	// where it is required).
	Key string
	// TTL is the etcd session TTL (whole seconds): how long a master that
	// cannot reach etcd stays master. 0: 10 s.
	TTL time.Duration
}

// Etcd is how to reach etcd.
type Etcd struct {
	// Endpoints are the etcd endpoints (URLs); empty: no etcd.
	Endpoints []string
	// TLS is the client's TLS (CAFile verifies etcd; CertFile and KeyFile
	// are the client certificate); the zero value: plaintext.
	TLS TLS
}

// Sessions configures Charon's copy-limited sessions.
type Sessions struct {
	// Max caps the open sessions (sessions.Options.MaxSessions; 0:
	// DefaultMaxSessions, negative: no cap).
	Max int
	// Fleet configures the fleet of servers sharing the copy-limited
	// resources through the Store (with Etcd; fleet.Options).
	Fleet Fleet
}

// Fleet is the etcd side of the servers sharing copy-limited resources.
type Fleet struct {
	// Prefix is the fleet's etcd key prefix (empty: fleet.Options'
	// default).
	Prefix string
	// TTL is this server's membership session TTL (0: fleet.Options'
	// default).
	TTL time.Duration
}

// Store is where the limits' buckets (and, with Etcd, the copy-limited
// resources' counts, and Envoy's counters) are kept when not in this
// process's memory: a Redis server, a Redis Cluster, a Redis watched by
// Sentinel, or a store opened by the caller. At most one of Redis,
// Cluster, Sentinel and Shared; the other fields need one of the first
// three. limits/redis.Dial documents each (New turns this group into
// one, and limits/redis.Open makes the client).
//
// At start, a Redis that refuses the credentials or the TLS handshake is
// a configuration error (New fails, naming the field and Redis's
// refusal); a Redis that does not answer is not: the server starts, is
// not ready (naming Redis) until Redis answers, and decides meanwhile by
// each resource's on_store_error.
type Store struct {
	// Redis is a Redis server's URL (redis://[user:password@]host:port/db,
	// rediss:// for TLS).
	Redis string
	// Cluster are seed addresses of a Redis Cluster ("host:port"), or one
	// go-redis cluster URL (redis[s]://[user:password@]host:port?addr=
	// host:port&addr=…), which can carry credentials and TLS.
	Cluster []string
	// Sentinel is go-redis's failover URL of a Redis watched by Sentinel:
	// redis[s]://[sentinel_user:sentinel_password@]host:port/db?
	// master_name=NAME&addr=host:port&…&username=U&password=P (the user
	// information the sentinels' credentials, username and password the
	// master's).
	Sentinel string
	// TLS is the TLS of a rediss:// URL (and of Cluster's list form):
	// CAFile the CAs that signed Redis's certificate (empty: the
	// system's), CertFile and KeyFile a client certificate (Redis's
	// tls-auth-clients). Set with a redis:// URL, it is an error.
	TLS TLS
	// TLSServerName is the name Redis's certificate must carry (empty:
	// the URL's host).
	TLSServerName string
	// PasswordFile is a file holding the Redis nodes' password (a mounted
	// secret): it overrides the URL's, and is read again for every new
	// connection, so a rotated password needs no restart.
	PasswordFile string
	// KeyPrefix starts every key Sluice writes in Redis (empty:
	// limits/redis.DefaultPrefix, "sluice:"), so that deployments can
	// share one Redis or Redis Cluster.
	KeyPrefix string
	// Timeout bounds each round trip to Redis (0: the store's default,
	// limits/redis.DefaultTimeout; negative is an error).
	Timeout time.Duration
	// Shared is a store the caller opened (tests, programs embedding
	// Sluice); New uses it as is, and Run's end closes it.
	Shared *Shared
}

// redis reports whether s names a Redis (Redis, Cluster or Sentinel).
func (s Store) redis() bool { return s.Redis != "" || len(s.Cluster) > 0 || s.Sentinel != "" }

// validate checks the store group: one place at most, and the Redis
// settings only with a Redis.
func (s Store) validate() error {
	var given []string
	for _, f := range []struct {
		name string
		set  bool
	}{{"Store.Redis", s.Redis != ""}, {"Store.Cluster", len(s.Cluster) > 0}, {"Store.Sentinel", s.Sentinel != ""}, {"Store.Shared", s.Shared != nil}} {
		if f.set {
			given = append(given, f.name)
		}
	}
	const none = "set without a Redis (Store.Redis, Store.Cluster or Store.Sentinel)"
	switch {
	case s.Timeout < 0:
		return fieldErr("Store.Timeout", "%v, want a positive duration (0: the default)", s.Timeout)
	case len(given) > 1:
		return fieldErr(given[1], "set with %s; give one or the other", given[0])
	case s.redis():
		return nil
	case !s.TLS.IsZero():
		return fieldErr("Store.TLS", none)
	case s.TLSServerName != "":
		return fieldErr("Store.TLSServerName", none)
	case s.PasswordFile != "":
		return fieldErr("Store.PasswordFile", none)
	case s.KeyPrefix != "":
		return fieldErr("Store.KeyPrefix", none)
	}
	return nil
}

// tlsConfig returns the TLS configuration of Store.TLS and
// Store.TLSServerName (nil: go-redis's, as the URL says).
func (s Store) tlsConfig() (*tls.Config, error) {
	c, err := s.TLS.client("Store.TLS")
	if err != nil || (c == nil && s.TLSServerName == "") {
		return nil, err
	}
	if c == nil {
		c = &tls.Config{MinVersion: tls.VersionTLS12}
	} else {
		c = c.Clone()
		c.NextProtos = nil // (Redis speaks no ALPN)
	}
	c.ServerName = s.TLSServerName
	return c, nil
}

// Shared is a store shared by the servers using it (limits/redis provides
// one): the buckets, the copy log and their health.
type Shared struct {
	// Limits holds the buckets.
	Limits limits.Store
	// RLS holds the counters of Envoy's rate limit service (nil: this
	// process's memory).
	RLS rls.Store
	// Copies is the copy log the fleet shares (nil: copies stay in this
	// server's memory). It is used only with Etcd: the fleet's leader
	// cleans up after a crashed server; without etcd, the copies stay in
	// this server's memory and New logs why.
	Copies SharedLog
	// Metrics exports the store's health (sluice_redis_*); may be nil.
	Metrics prometheus.Collector
	// Health is the store's health for the status page; may be nil.
	Health func() limits.StoreHealth
	// Close releases the store when the server stops; may be nil.
	Close func() error
}

// SharedLog is a copy log shared by a fleet (limits/redis.CopyLog): the
// copies engine's Log and the fleet's.
type SharedLog interface {
	copies.Log
	fleet.Log
}

// TLS is a TLS configuration: PEM files that New loads, or one built in
// code. Which CAs CAFile holds depends on the side: a listener's client
// CAs (mTLS), a client's roots.
type TLS struct {
	// CertFile and KeyFile are a certificate and its key (PEM): the
	// server's certificate, or a client's (mTLS).
	CertFile, KeyFile string
	// CAFile holds CAs (PEM).
	CAFile string
	// Config, when set, is used as is; the files must then be empty.
	Config *tls.Config
}

// IsZero reports whether t configures nothing (plaintext).
func (t TLS) IsZero() bool {
	return t.Config == nil && t.CertFile == "" && t.KeyFile == "" && t.CAFile == ""
}

// server returns t as a listener's TLS configuration (nil: plaintext).
func (t TLS) server(field string) (*tls.Config, error) {
	return t.load(field, func() (*tls.Config, error) { return tlsutil.Server(t.CertFile, t.KeyFile, t.CAFile) })
}

// client returns t as a client's TLS configuration (nil: plaintext).
func (t TLS) client(field string) (*tls.Config, error) {
	return t.load(field, func() (*tls.Config, error) { return tlsutil.Client(t.CAFile, t.CertFile, t.KeyFile) })
}

func (t TLS) load(field string, files func() (*tls.Config, error)) (*tls.Config, error) {
	switch {
	case t.IsZero():
		return nil, nil
	case t.Config != nil && (t.CertFile != "" || t.KeyFile != "" || t.CAFile != ""):
		return nil, fieldErr(field+".Config", "set with %s's files; give one or the other", field)
	case t.Config != nil:
		return t.Config, nil
	}
	c, err := files()
	if err != nil {
		return nil, &FieldError{Field: field, Err: err}
	}
	return c, nil
}

// FieldError is a Config that New refuses: the field at fault, by its Go
// path in Config ("Store.Timeout", "Listen.TLS"), and why.
type FieldError = names.FieldError

// fieldErr returns a FieldError for field with a formatted reason.
func fieldErr(field, format string, args ...any) error { return names.FieldErr(field, format, args...) }

// FieldNames are the Config fields New's errors and logs, and the
// messages its services send clients, name, by their Go path (longest
// first where one extends another): what a front end (sluice server's flags) maps to its own names.
var FieldNames = []string{
	"Listen.TLS.CAFile", "Listen.TLS", "Listen.Grace", "Listen.Identity.Source", "Listen.Identity.PolicyPath",
	"Repository.Path", "Repository.QuotaServicePath", "Repository.EnvoyRateLimitPath",
	"Repository.EnvoyRateLimitXDS.ServerURL", "Repository.EnvoyRateLimitXDS.TLS", "Repository.EnvoyRateLimitXDS.ServerName",
	"Repository.EnvoyRateLimitXDS.Headers", "Repository.EnvoyRateLimitXDS.RetryInterval", "Repository.EnvoyRateLimitXDS.ForceStart",
	"Repository.EnvoyRateLimitXDS",
	"Repository.Fixed", "Parent.Addresses", "Parent.TLS", "Leases.DisablePush", "Election.Kind", "Election.Key",
	"Etcd.Endpoints", "Etcd.TLS", "Store.Redis", "Store.Cluster", "Store.Sentinel", "Store.TLSServerName", "Store.TLS",
	"Store.PasswordFile", "Store.KeyPrefix", "Store.Timeout", "Store.Shared",
	"Sessions.Max", "Envoy.NearLimitRatio", "Admin.TrustForwarded", "Admin.TokenFile", "Admin.Insecure",
	"Admin.AuthReads",
	"Runtime.Tracing.Exporter", "Runtime.Tracing.Protocol", "Runtime.Tracing.Endpoint", "Runtime.Tracing.SamplerArg",
	"Runtime.Tracing.Sampler", "Runtime.Statsd",
	"RLQS.UnconfiguredTTL", "RLQS.Unconfigured", "RLQS.Smoothing", "RLQS.Burst",
}

// validate checks what needs no I/O, returning the first problem.
func (c *Config) validate() error {
	switch {
	case c.Listen.Grace < 0:
		return fieldErr("Listen.Grace", "%v, want a positive duration (0: 10 s)", c.Listen.Grace)
	case c.Repository.Path != "" && c.Repository.Fixed != nil:
		return fieldErr("Repository.Fixed", "set with Repository.Path; give one or the other")
	case c.Election.Kind != "" && c.Election.Kind != "standalone" && c.Election.Kind != "etcd":
		return fieldErr("Election.Kind", "%q, want standalone or etcd", c.Election.Kind)
	case c.Election.Kind == "etcd" && c.Election.Key == "":
		return fieldErr("Election.Key", "required with Election.Kind etcd")
	}
	if err := c.Store.validate(); err != nil {
		return err
	}
	if err := c.Listen.validateIdentity(); err != nil {
		return err
	}
	// The services' own rules, on the fields of the same names: one rule
	// each, their errors naming the Config path.
	if err := c.Envoy.options().Check(); err != nil {
		return err.Under("Envoy")
	}
	if err := c.RLQS.options().Check(); err != nil {
		return err.Under("RLQS")
	}
	if len(c.Etcd.Endpoints) == 0 {
		if c.Election.Kind == "etcd" {
			return fieldErr("Etcd.Endpoints", "required with Election.Kind etcd")
		}
		if strings.HasPrefix(c.Repository.Path, "etcd:") {
			return fieldErr("Etcd.Endpoints", "required with Repository.Path etcd:/KEY")
		}
	}
	return nil
}

// validateIdentity checks Listen.Identity: a known source, mTLS for
// "cert", a policy only with a source.
func (l Listen) validateIdentity() error {
	id := l.Identity
	switch {
	case id.Source != "" && id.Source != identity.SourceCert:
		return fieldErr("Listen.Identity.Source", "%q, want cert (or empty: none)", id.Source)
	case id.Source == identity.SourceCert && l.TLS.CAFile == "" && (l.TLS.Config == nil || l.TLS.Config.ClientAuth != tls.RequireAndVerifyClientCert):
		return fieldErr("Listen.Identity.Source", "cert needs client certificates: set Listen.TLS.CAFile (mTLS)")
	case id.PolicyPath != "" && id.Source == "":
		return fieldErr("Listen.Identity.PolicyPath", "set without Listen.Identity.Source: a policy needs identities (cert)")
	}
	return nil
}
