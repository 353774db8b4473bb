package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/pprof"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kelseyhightower/envconfig"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sluice-rl/sluice/internal/tlsutil"
	"github.com/sluice-rl/sluice/server"
	"github.com/sluice-rl/sluice/server/envoyrls/upstreamhttp"
	"github.com/sluice-rl/sluice/server/envoyrls/upstreamstats"
)

// upstreamName is the name of envoyproxy/ratelimit's binary: a sluice
// binary run under it (the image's /bin/ratelimit) is `sluice
// envoy-ratelimit`.
const upstreamName = "ratelimit"

func newEnvoyRatelimitCmd() *cobra.Command {
	sf := &serverFlags{}
	cmd := &cobra.Command{
		Use:   "envoy-ratelimit",
		Short: "Run as envoyproxy/ratelimit does: configured by its environment variables, on its ports",
		Long: `envoy-ratelimit runs Sluice's Envoy rate limit service as a drop-in for
envoyproxy/ratelimit: configured by that service's environment variables, by
their names and with their defaults (its src/settings/settings.go), and serving
its ports: gRPC (ShouldRateLimit, gRPC health) on GRPC_HOST:GRPC_PORT (8081),
HTTP on HOST:PORT (8080: GET /healthcheck, POST /json), and on
DEBUG_HOST:DEBUG_PORT (6070) /rlconfig, /debug/pprof/, Sluice's status pages
and /metrics; with USE_PROMETHEUS, upstream's statistics at PROMETHEUS_PATH
on PROMETHEUS_ADDR (:9090). A binary named ` + upstreamName + ` (the image's /bin/ratelimit) runs
this command, so a Deployment whose command is /bin/ratelimit runs unchanged.

Sluice's own answers stay: token buckets unless a rule or --envoy-algorithm
(SLUICE_ENVOY_ALGORITHM=fixed_window) says fixed windows; a request's
descriptors decided together. Every flag of sluice server works here too, as a
flag or SLUICE_<FLAG>, and wins over envoyproxy/ratelimit's variable.

A variable Sluice does not honour is named once in the log at start, with why;
a value it cannot honour (BACKEND_TYPE=memcache, a second Redis for per-second
limits, GRPC_UDS) refuses to start, naming the variable. docs/envoy.md has the
table of every variable.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return sf.runEnvoyRatelimit(cmd) },
	}
	sf.register(cmd.Flags())
	cmd.SetUsageFunc(groupedUsage)
	return cmd
}

// upstreamEnv is envoyproxy/ratelimit's environment, the variables
// envoy-ratelimit reads, by their names and with their defaults.
//
// Source: envoyproxy/ratelimit, src/settings/settings.go.
type upstreamEnv struct {
	Host      string `envconfig:"HOST" default:"0.0.0.0"`
	Port      int    `envconfig:"PORT" default:"8080"`
	DebugHost string `envconfig:"DEBUG_HOST" default:"0.0.0.0"`
	DebugPort int    `envconfig:"DEBUG_PORT" default:"6070"`
	GrpcUds   string `envconfig:"GRPC_UDS"`
	GrpcHost  string `envconfig:"GRPC_HOST" default:"0.0.0.0"`
	GrpcPort  int    `envconfig:"GRPC_PORT" default:"8081"`

	GrpcServerUseTLS bool   `envconfig:"GRPC_SERVER_USE_TLS"`
	GrpcServerTLSCrt string `envconfig:"GRPC_SERVER_TLS_CERT"`
	GrpcServerTLSKey string `envconfig:"GRPC_SERVER_TLS_KEY"`
	GrpcClientTLSCA  string `envconfig:"GRPC_CLIENT_TLS_CACERT"`
	GrpcServerTLSCA  string `envconfig:"GRPC_SERVER_TLS_CA_CERT"` // Envoy Gateway's name for it
	GrpcClientTLSSAN string `envconfig:"GRPC_CLIENT_TLS_SAN"`

	LogLevel  string `envconfig:"LOG_LEVEL" default:"WARN"`
	LogFormat string `envconfig:"LOG_FORMAT" default:"text"`

	ConfigType            string `envconfig:"CONFIG_TYPE" default:"FILE"`
	ForceStart            bool   `envconfig:"FORCE_START_WITHOUT_INITIAL_CONFIG"`
	RuntimeRoot           string `envconfig:"RUNTIME_ROOT" default:"/srv/runtime_data/current"`
	RuntimeSubdirectory   string `envconfig:"RUNTIME_SUBDIRECTORY"`
	RuntimeAppDirectory   string `envconfig:"RUNTIME_APPDIRECTORY" default:"config"`
	RuntimeIgnoreDotFiles bool   `envconfig:"RUNTIME_IGNOREDOTFILES"`
	RuntimeWatchRoot      bool   `envconfig:"RUNTIME_WATCH_ROOT" default:"true"`
	MergeDomainConfig     bool   `envconfig:"MERGE_DOMAIN_CONFIG"`

	XdsNodeID       string            `envconfig:"CONFIG_GRPC_XDS_NODE_ID" default:"default"`
	XdsNodeMetadata string            `envconfig:"CONFIG_GRPC_XDS_NODE_METADATA"`
	XdsServerURL    string            `envconfig:"CONFIG_GRPC_XDS_SERVER_URL" default:"localhost:18000"`
	XdsRetry        time.Duration     `envconfig:"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL" default:"3s"`
	XdsHeaders      map[string]string `envconfig:"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS"`
	XdsUseTLS       bool              `envconfig:"CONFIG_GRPC_XDS_SERVER_USE_TLS"`
	XdsClientCert   string            `envconfig:"CONFIG_GRPC_XDS_CLIENT_TLS_CERT"`
	XdsClientKey    string            `envconfig:"CONFIG_GRPC_XDS_CLIENT_TLS_KEY"`
	XdsServerCA     string            `envconfig:"CONFIG_GRPC_XDS_SERVER_TLS_CACERT"`
	XdsServerSAN    string            `envconfig:"CONFIG_GRPC_XDS_SERVER_TLS_SAN"`

	NearLimitRatio  float64 `envconfig:"NEAR_LIMIT_RATIO" default:"0.8"`
	CacheKeyPrefix  string  `envconfig:"CACHE_KEY_PREFIX"`
	BackendType     string  `envconfig:"BACKEND_TYPE" default:"redis"`
	ShadowMode      bool    `envconfig:"SHADOW_MODE"`
	HeadersEnabled  bool    `envconfig:"LIMIT_RESPONSE_HEADERS_ENABLED"`
	HeaderLimit     string  `envconfig:"LIMIT_LIMIT_HEADER" default:"RateLimit-Limit"`
	HeaderRemaining string  `envconfig:"LIMIT_REMAINING_HEADER" default:"RateLimit-Remaining"`
	HeaderReset     string  `envconfig:"LIMIT_RESET_HEADER" default:"RateLimit-Reset"`
	CalendarMonth   bool    `envconfig:"USE_CALENDAR_MONTH_RATE_LIMIT"`
	RedisSocketType string  `envconfig:"REDIS_SOCKET_TYPE" default:"unix"`
	RedisType       string  `envconfig:"REDIS_TYPE" default:"SINGLE"`
	RedisURL        string  `envconfig:"REDIS_URL" default:"/var/run/nutcracker/ratelimit.sock"`
	RedisPoolSize   int     `envconfig:"REDIS_POOL_SIZE" default:"10"`
	RedisAuth       string  `envconfig:"REDIS_AUTH"`
	RedisSentinel   string  `envconfig:"REDIS_SENTINEL_AUTH"`
	RedisTLS        bool    `envconfig:"REDIS_TLS"`
	RedisTLSCert    string  `envconfig:"REDIS_TLS_CLIENT_CERT"`
	RedisTLSKey     string  `envconfig:"REDIS_TLS_CLIENT_KEY"`
	RedisTLSCA      string  `envconfig:"REDIS_TLS_CACERT"`
	RedisTLSSkipSAN bool    `envconfig:"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION"`
	RedisPerSecond  bool    `envconfig:"REDIS_PERSECOND"`

	UseStatsd     bool              `envconfig:"USE_STATSD" default:"true"`
	DisableStats  bool              `envconfig:"DISABLE_STATS"`
	StatsdHost    string            `envconfig:"STATSD_HOST" default:"localhost"`
	StatsdPort    int               `envconfig:"STATSD_PORT" default:"8125"`
	StatsdProto   string            `envconfig:"STATSD_PROTOCOL" default:"tcp"`
	StatsFlush    time.Duration     `envconfig:"STATS_FLUSH_INTERVAL" default:"10s"`
	GostatsFlush  int               `envconfig:"GOSTATS_FLUSH_INTERVAL_SECONDS"`
	ExtraTags     map[string]string `envconfig:"EXTRA_TAGS"`
	UseDogStatsd  bool              `envconfig:"USE_DOG_STATSD"`
	UsePrometheus bool              `envconfig:"USE_PROMETHEUS"`
	PromAddr      string            `envconfig:"PROMETHEUS_ADDR" default:":9090"`
	PromPath      string            `envconfig:"PROMETHEUS_PATH" default:"/metrics"`
	PromMapper    string            `envconfig:"PROMETHEUS_MAPPER_YAML"`

	TracingEnabled  bool    `envconfig:"TRACING_ENABLED"`
	TracingName     string  `envconfig:"TRACING_SERVICE_NAME" default:"RateLimit"`
	TracingProtocol string  `envconfig:"TRACING_EXPORTER_PROTOCOL" default:"http"`
	TracingRate     float64 `envconfig:"TRACING_SAMPLING_RATE" default:"1"`
}

// ignored are envoyproxy/ratelimit's variables envoy-ratelimit reads but
// does not honour, each with why; logged once at start when set.
var ignored = map[string]string{
	"PROTO":                                   "Sluice listens on TCP",
	"GRPC_MAX_CONNECTION_AGE":                 "Sluice does not close gRPC connections by age",
	"GRPC_MAX_CONNECTION_AGE_GRACE":           "Sluice does not close gRPC connections by age",
	"REDIS_PIPELINE_WINDOW":                   "Sluice batches the scripts of concurrent requests into one round trip by itself",
	"REDIS_PIPELINE_LIMIT":                    "Sluice batches up to --redis-max-batch scripts a round trip by itself",
	"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION":    "readiness waits for Redis's first answer at start; after that, on_store_error decides",
	"EXPIRATION_JITTER_MAX_SECONDS":           "token buckets expire when full again; fixed windows at their end",
	"LOCAL_CACHE_SIZE_IN_BYTES":               "Sluice keeps no local cache of over-limit keys: a refused request charges nothing",
	"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "Sluice never charges a refused request (all or nothing), as if true",
	"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED": "/healthcheck fails until the first rules arrive unless FORCE_START_WITHOUT_INITIAL_CONFIG",
	"TRACING_SERVICE_NAMESPACE":               "set OTEL_RESOURCE_ATTRIBUTES=service.namespace=…",
	"TRACING_SERVICE_INSTANCE_ID":             "set OTEL_RESOURCE_ATTRIBUTES=service.instance.id=…",
	"USE_DOG_STATSD_MOGRIFIERS":               "not supported",
	"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL":     "the control plane is dialled again every CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
	"XDS_CLIENT_BACKOFF_MAX_INTERVAL":         "the control plane is dialled again every CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
	"XDS_CLIENT_BACKOFF_RANDOM_FACTOR":        "the control plane is dialled again every CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
	"XDS_CLIENT_BACKOFF_JITTER":               "the control plane is dialled again every CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
	"REDIS_PERSECOND_SOCKET_TYPE":             "no second Redis (REDIS_PERSECOND)",
	"REDIS_PERSECOND_TYPE":                    "no second Redis (REDIS_PERSECOND)",
	"REDIS_PERSECOND_URL":                     "no second Redis (REDIS_PERSECOND)",
	"REDIS_PERSECOND_POOL_SIZE":               "no second Redis (REDIS_PERSECOND)",
	"REDIS_PERSECOND_AUTH":                    "no second Redis (REDIS_PERSECOND)",
	"REDIS_PERSECOND_TLS":                     "no second Redis (REDIS_PERSECOND)",
}

// setting is one flag envoy-ratelimit sets from the environment: the
// flag, its value, and the variable it came from (for errors).
type setting struct{ flag, value, from string }

// ratelimitConfig is what the environment says beyond sluice server's
// flags: the HTTP, debug and Prometheus listeners, and TLS configurations
// flags cannot carry (a client certificate's SAN, Redis without hostname
// checks).
type ratelimitConfig struct {
	httpAddr, debugAddr string
	clientSAN           string // GRPC_CLIENT_TLS_SAN
	redisSkipSAN        bool   // REDIS_TLS_SKIP_HOSTNAME_VERIFICATION
	// headerNames name the X-RateLimit headers (LIMIT_*_HEADER) when
	// LIMIT_RESPONSE_HEADERS_ENABLED, unless --envoy-x-ratelimit-headers
	// was given.
	headerNames [3]string
	// promAddr and promPath are where upstream's statistics are served
	// on Prometheus (USE_PROMETHEUS: PROMETHEUS_ADDR, PROMETHEUS_PATH;
	// promAddr "": off), named by the statsd_exporter mapping of the
	// file promMapper (PROMETHEUS_MAPPER_YAML; "": upstream's default).
	promAddr, promPath, promMapper string
}

// readUpstreamEnv parses envoyproxy/ratelimit's environment with
// envconfig, as upstream does. Its errors name the variable.
func readUpstreamEnv() (upstreamEnv, error) {
	var e upstreamEnv
	err := envconfig.Process("", &e)
	return e, err
}

// settings turns e into sluice server's flags and the rest
// (ratelimitConfig), and the notes to log (the variables set that Sluice
// does not honour). A value it cannot honour is an error naming the
// variable. isSet reports whether a variable is in the environment.
func (e upstreamEnv) settings(isSet func(string) bool) ([]setting, ratelimitConfig, []string, error) {
	var s []setting
	add := func(flag, value, from string) { s = append(s, setting{flag, value, from}) }
	rc := ratelimitConfig{httpAddr: net.JoinHostPort(e.Host, strconv.Itoa(e.Port)), debugAddr: net.JoinHostPort(e.DebugHost, strconv.Itoa(e.DebugPort))}
	notes := ignoredNotes(isSet)
	if err := e.unsupported(); err != nil {
		return nil, rc, nil, err
	}
	add("listen", net.JoinHostPort(e.GrpcHost, strconv.Itoa(e.GrpcPort)), "GRPC_HOST, GRPC_PORT")
	if err := e.logging(add); err != nil {
		return nil, rc, nil, err
	}
	if err := e.grpcTLS(add, &rc); err != nil {
		return nil, rc, nil, err
	}
	if err := e.rules(add); err != nil {
		return nil, rc, nil, err
	}
	notes = append(notes, e.rulesNotes(isSet)...)
	if err := e.redis(add, &rc); err != nil {
		return nil, rc, nil, err
	}
	e.answers(add, &rc)
	if err := e.stats(add, &rc, isSet); err != nil {
		return nil, rc, nil, err
	}
	if err := e.tracing(add); err != nil {
		return nil, rc, nil, err
	}
	return s, rc, notes, nil
}

// ignoredNotes are the notes of the ignored variables set, by name.
func ignoredNotes(isSet func(string) bool) []string {
	var notes []string
	for _, name := range slices.Sorted(maps.Keys(ignored)) {
		if isSet(name) {
			notes = append(notes, name+": not honoured: "+ignored[name])
		}
	}
	return notes
}

// unsupported refuses the variables whose values Sluice cannot honour at
// all (GRPC_UDS, REDIS_PERSECOND).
func (e upstreamEnv) unsupported() error {
	switch {
	case e.GrpcUds != "":
		return errors.New("GRPC_UDS: a Unix socket for gRPC is not supported: use GRPC_HOST and GRPC_PORT")
	case e.RedisPerSecond:
		return errors.New("REDIS_PERSECOND: a second Redis for per-second limits is not supported: Sluice keeps every limit in one Redis (or Redis Cluster)")
	}
	return nil
}

// logging adds the log flags (LOG_LEVEL, LOG_FORMAT).
func (e upstreamEnv) logging(add func(flag, value, from string)) error {
	add("log-level", upstreamLevel(e.LogLevel), "LOG_LEVEL")
	switch f := strings.ToLower(e.LogFormat); f {
	case "text", "json":
		add("log-format", f, "LOG_FORMAT")
		return nil
	default:
		return fmt.Errorf("LOG_FORMAT: %q, want text or json", e.LogFormat)
	}
}

// grpcTLS adds the gRPC listener's TLS flags (GRPC_SERVER_USE_TLS) and
// puts the client certificate's SAN to check into rc.
func (e upstreamEnv) grpcTLS(add func(flag, value, from string), rc *ratelimitConfig) error {
	if !e.GrpcServerUseTLS {
		return nil
	}
	ca := e.GrpcClientTLSCA
	if ca == "" {
		ca = e.GrpcServerTLSCA
	}
	add("tls-cert", e.GrpcServerTLSCrt, "GRPC_SERVER_TLS_CERT")
	add("tls-key", e.GrpcServerTLSKey, "GRPC_SERVER_TLS_KEY")
	if ca != "" {
		add("tls-client-ca", ca, "GRPC_CLIENT_TLS_CACERT, GRPC_SERVER_TLS_CA_CERT")
	}
	if e.GrpcClientTLSSAN != "" {
		if ca == "" {
			return errors.New("GRPC_CLIENT_TLS_SAN: set without a client CA (GRPC_CLIENT_TLS_CACERT or GRPC_SERVER_TLS_CA_CERT): no client certificate to check")
		}
		rc.clientSAN = e.GrpcClientTLSSAN
	}
	return nil
}

// rules adds the flags of where the rules come from (CONFIG_TYPE): a
// directory or xDS.
func (e upstreamEnv) rules(add func(flag, value, from string)) error {
	switch t := strings.ToUpper(e.ConfigType); t {
	case "FILE":
		dir := filepath.Join(e.RuntimeRoot, e.RuntimeSubdirectory, e.RuntimeAppDirectory)
		add("envoy-ratelimit-config", dir, "RUNTIME_ROOT, RUNTIME_SUBDIRECTORY, RUNTIME_APPDIRECTORY")
		return nil
	case "GRPC_XDS_SOTW":
		return e.xds(add)
	default:
		return fmt.Errorf("CONFIG_TYPE: %q, want FILE or GRPC_XDS_SOTW", e.ConfigType)
	}
}

// rulesNotes are the notes of the rules' variables set to what Sluice
// does not honour.
func (e upstreamEnv) rulesNotes(isSet func(string) bool) []string {
	var notes []string
	// Sluice reads the directory's *.yaml and *.yml files, never a dot
	// file (Kubernetes' ..data), and watches that directory (a file
	// changed, added or removed, or a symlink swapped over it).
	if isSet("RUNTIME_IGNOREDOTFILES") && !e.RuntimeIgnoreDotFiles {
		notes = append(notes, "RUNTIME_IGNOREDOTFILES: false not honoured: dot files in the rules' directory are never read")
	}
	if isSet("RUNTIME_WATCH_ROOT") && e.RuntimeWatchRoot {
		notes = append(notes, "RUNTIME_WATCH_ROOT: not honoured: Sluice watches the rules' directory (RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY), not the root")
	}
	if e.MergeDomainConfig && strings.EqualFold(e.ConfigType, "FILE") {
		notes = append(notes, "MERGE_DOMAIN_CONFIG: not honoured for files: two files naming the same domain are refused, not merged")
	}
	return notes
}

// answers adds the flags of what the answers carry: the near-limit
// ratio, shadow mode, calendar months and the response headers.
func (e upstreamEnv) answers(add func(flag, value, from string), rc *ratelimitConfig) {
	add("envoy-near-limit-ratio", strconv.FormatFloat(e.NearLimitRatio, 'g', -1, 64), "NEAR_LIMIT_RATIO")
	add("envoy-shadow-mode", strconv.FormatBool(e.ShadowMode), "SHADOW_MODE")
	add("envoy-calendar-months", strconv.FormatBool(e.CalendarMonth), "USE_CALENDAR_MONTH_RATE_LIMIT")
	// Upstream adds no header unless asked; then RateLimit-Limit,
	// -Remaining and -Reset of the descriptor with the least remaining.
	add("envoy-ratelimit-headers", "false", "LIMIT_RESPONSE_HEADERS_ENABLED")
	add("envoy-x-ratelimit-headers", strconv.FormatBool(e.HeadersEnabled), "LIMIT_RESPONSE_HEADERS_ENABLED")
	if e.HeadersEnabled {
		rc.headerNames = [3]string{e.HeaderLimit, e.HeaderRemaining, e.HeaderReset}
	}
}

// stats adds the flags of upstream's statistics sink, statsd, or puts
// Prometheus's address into rc.
func (e upstreamEnv) stats(add func(flag, value, from string), rc *ratelimitConfig, isSet func(string) bool) error {
	// Upstream takes one sink, and refuses two (DISABLE_STATS wins).
	if e.UsePrometheus && !e.DisableStats {
		switch {
		case e.UseStatsd:
			return errors.New("USE_PROMETHEUS: set with USE_STATSD (true unless set false): one stats sink at a time, as envoyproxy/ratelimit; set USE_STATSD=false")
		case e.UseDogStatsd:
			return errors.New("USE_PROMETHEUS: set with USE_DOG_STATSD: one stats sink at a time, as envoyproxy/ratelimit")
		case !strings.HasPrefix(e.PromPath, "/") || strings.ContainsAny(e.PromPath, "{} \t\r\n"):
			return fmt.Errorf("PROMETHEUS_PATH: %q, want a path starting with /", e.PromPath)
		}
		e.flushAndTags(add, isSet)
		rc.promAddr, rc.promPath, rc.promMapper = e.PromAddr, e.PromPath, e.PromMapper
	}
	if e.UseStatsd && !e.DisableStats {
		add("envoy-statsd", net.JoinHostPort(e.StatsdHost, strconv.Itoa(e.StatsdPort)), "STATSD_HOST, STATSD_PORT")
		add("envoy-statsd-protocol", strings.ToLower(e.StatsdProto), "STATSD_PROTOCOL")
		e.flushAndTags(add, isSet)
		add("envoy-statsd-dogstatsd", strconv.FormatBool(e.UseDogStatsd), "USE_DOG_STATSD")
	}
	return nil
}

// flushAndTags adds the flush interval and tags of either sink, statsd or
// Prometheus.
func (e upstreamEnv) flushAndTags(add func(flag, value, from string), isSet func(string) bool) {
	flush := e.StatsFlush
	if isSet("GOSTATS_FLUSH_INTERVAL_SECONDS") && !isSet("STATS_FLUSH_INTERVAL") {
		flush = time.Duration(e.GostatsFlush) * time.Second
	}
	add("envoy-statsd-flush", flush.String(), "STATS_FLUSH_INTERVAL, GOSTATS_FLUSH_INTERVAL_SECONDS")
	if len(e.ExtraTags) > 0 {
		add("envoy-statsd-tags", flagPairs(e.ExtraTags), "EXTRA_TAGS")
	}
}

// tracing adds the OpenTelemetry flags of TRACING_* that stand for
// variables no OpenTelemetry package reads (the exporter and its
// protocol), and checks the sampling rate, which otelVars passes on.
func (e upstreamEnv) tracing(add func(flag, value, from string)) error {
	if !e.TracingEnabled {
		return nil
	}
	add("otel-traces-exporter", "otlp", "TRACING_ENABLED")
	switch p := strings.ToLower(e.TracingProtocol); p {
	case "http":
		add("otel-exporter-otlp-protocol", "http/protobuf", "TRACING_EXPORTER_PROTOCOL")
	case "grpc":
		add("otel-exporter-otlp-protocol", "grpc", "TRACING_EXPORTER_PROTOCOL")
	default:
		return fmt.Errorf("TRACING_EXPORTER_PROTOCOL: %q, want http or grpc", e.TracingProtocol)
	}
	if !(e.TracingRate >= 0) {
		return fmt.Errorf("TRACING_SAMPLING_RATE: %v, want a ratio from 0 to 1", e.TracingRate)
	}
	return nil
}

// otelVars are the standard OpenTelemetry variables TRACING_* stand for
// that the SDK reads itself (its service name and sampler), each set
// only where the environment does not set it: --otel-traces-sampler
// (or SLUICE_OTEL_TRACES_SAMPLER), then OTEL_*, win over TRACING_*.
func (e upstreamEnv) otelVars() map[string]string {
	if !e.TracingEnabled {
		return nil
	}
	v := map[string]string{"OTEL_SERVICE_NAME": e.TracingName}
	if e.TracingRate < 1 {
		v["OTEL_TRACES_SAMPLER"] = "parentbased_traceidratio"
		v["OTEL_TRACES_SAMPLER_ARG"] = strconv.FormatFloat(e.TracingRate, 'g', -1, 64)
	}
	return v
}

// xds adds the flags of the rules over xDS (CONFIG_TYPE=GRPC_XDS_SOTW).
func (e upstreamEnv) xds(add func(flag, value, from string)) error {
	add("envoy-ratelimit-xds", e.XdsServerURL, "CONFIG_GRPC_XDS_SERVER_URL")
	add("envoy-ratelimit-xds-node-id", e.XdsNodeID, "CONFIG_GRPC_XDS_NODE_ID")
	if e.XdsNodeMetadata != "" {
		md, err := upstreamPairs(e.XdsNodeMetadata)
		if err != nil {
			return fmt.Errorf("CONFIG_GRPC_XDS_NODE_METADATA: %w", err)
		}
		add("envoy-ratelimit-xds-node-metadata", md, "CONFIG_GRPC_XDS_NODE_METADATA")
	}
	if len(e.XdsHeaders) > 0 {
		add("envoy-ratelimit-xds-header", flagPairs(e.XdsHeaders), "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS")
	}
	add("envoy-ratelimit-xds-retry", e.XdsRetry.String(), "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL")
	add("envoy-ratelimit-xds-merge", strconv.FormatBool(e.MergeDomainConfig), "MERGE_DOMAIN_CONFIG")
	add("envoy-ratelimit-xds-force-start", strconv.FormatBool(e.ForceStart), "FORCE_START_WITHOUT_INITIAL_CONFIG")
	add("envoy-ratelimit-config", "", "CONFIG_TYPE")
	if !e.XdsUseTLS {
		return nil
	}
	if e.XdsServerCA != "" {
		add("envoy-ratelimit-xds-tls-ca", e.XdsServerCA, "CONFIG_GRPC_XDS_SERVER_TLS_CACERT")
	}
	if e.XdsClientCert != "" || e.XdsClientKey != "" {
		add("envoy-ratelimit-xds-tls-cert", e.XdsClientCert, "CONFIG_GRPC_XDS_CLIENT_TLS_CERT")
		add("envoy-ratelimit-xds-tls-key", e.XdsClientKey, "CONFIG_GRPC_XDS_CLIENT_TLS_KEY")
	}
	if e.XdsServerSAN != "" {
		add("envoy-ratelimit-xds-server-name", e.XdsServerSAN, "CONFIG_GRPC_XDS_SERVER_TLS_SAN")
	}
	if e.XdsServerCA == "" && e.XdsClientCert == "" && e.XdsServerSAN == "" {
		return errors.New("CONFIG_GRPC_XDS_SERVER_USE_TLS: true, but no CONFIG_GRPC_XDS_SERVER_TLS_CACERT, CONFIG_GRPC_XDS_CLIENT_TLS_CERT or CONFIG_GRPC_XDS_SERVER_TLS_SAN: TLS with the system's roots is not supported yet")
	}
	return nil
}

// upstreamPairs turns envoyproxy/ratelimit's "k1:v1,k2=v2" (either
// separator) into a StringToString flag's "k1=v1,k2=v2".
func upstreamPairs(s string) (string, error) {
	var kv []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		i := strings.IndexAny(p, ":=")
		if i <= 0 {
			return "", fmt.Errorf("%q is not key:value", p)
		}
		kv = append(kv, p[:i]+"="+p[i+1:])
	}
	return strings.Join(kv, ","), nil
}

// redis adds the Redis flags of e's REDIS_* variables.
func (e upstreamEnv) redis(add func(flag, value, from string), rc *ratelimitConfig) error {
	switch b := strings.ToLower(e.BackendType); b {
	case "memory":
		return nil // Sluice's: the counters in this process
	case "redis":
	case "memcache":
		return errors.New("BACKEND_TYPE: memcache is not supported: use redis (or memory, Sluice's, for one server)")
	default:
		return fmt.Errorf("BACKEND_TYPE: %q, want redis (or memory)", e.BackendType)
	}
	scheme := "redis"
	if e.RedisTLS {
		scheme = "rediss"
	}
	user := upstreamAuth(e.RedisAuth)
	q := url.Values{}
	if e.RedisPoolSize > 0 {
		q.Set("pool_size", strconv.Itoa(e.RedisPoolSize))
	}
	addrs := strings.Split(e.RedisURL, ",")
	for i := range addrs {
		addrs[i] = strings.TrimSpace(addrs[i])
	}
	switch t := strings.ToUpper(e.RedisType); t {
	case "SINGLE":
		u := url.URL{Scheme: scheme, User: user, Host: e.RedisURL, Path: "/0"}
		switch st := strings.ToLower(e.RedisSocketType); st {
		case "unix":
			if e.RedisTLS {
				return errors.New("REDIS_TLS: set with REDIS_SOCKET_TYPE unix: TLS is for tcp")
			}
			q.Set("db", "0")
			u = url.URL{Scheme: "unix", User: user, Path: e.RedisURL}
		case "tcp":
		default:
			return fmt.Errorf("REDIS_SOCKET_TYPE: %q, want tcp or unix", e.RedisSocketType)
		}
		u.RawQuery = q.Encode()
		add("redis", u.String(), "REDIS_URL")
	case "CLUSTER":
		for _, a := range addrs[1:] {
			q.Add("addr", a)
		}
		u := url.URL{Scheme: scheme, User: user, Host: addrs[0], RawQuery: q.Encode()}
		add("redis-cluster", u.String(), "REDIS_URL")
	case "SENTINEL":
		if len(addrs) < 2 {
			return fmt.Errorf("REDIS_URL: %q, want MASTER_NAME,SENTINEL_HOST:PORT,... with REDIS_TYPE sentinel", e.RedisURL)
		}
		q.Set("master_name", addrs[0])
		for _, a := range addrs[2:] {
			q.Add("addr", a)
		}
		if user != nil {
			if n := user.Username(); n != "" {
				q.Set("username", n)
			}
			p, _ := user.Password()
			q.Set("password", p)
		}
		u := url.URL{Scheme: scheme, User: upstreamAuth(e.RedisSentinel), Host: addrs[1], Path: "/0", RawQuery: q.Encode()}
		add("redis-sentinel", u.String(), "REDIS_URL")
	default:
		return fmt.Errorf("REDIS_TYPE: %q, want single, cluster or sentinel", e.RedisType)
	}
	if e.RedisTLS {
		if e.RedisTLSCA != "" {
			add("redis-tls-ca", e.RedisTLSCA, "REDIS_TLS_CACERT")
		}
		if e.RedisTLSCert != "" || e.RedisTLSKey != "" {
			add("redis-tls-cert", e.RedisTLSCert, "REDIS_TLS_CLIENT_CERT")
			add("redis-tls-key", e.RedisTLSKey, "REDIS_TLS_CLIENT_KEY")
		}
		rc.redisSkipSAN = e.RedisTLSSkipSAN
	}
	if e.CacheKeyPrefix != "" {
		add("redis-key-prefix", e.CacheKeyPrefix, "CACHE_KEY_PREFIX")
	}
	return nil
}

// upstreamAuth is the user information of envoyproxy/ratelimit's
// REDIS_AUTH (or REDIS_SENTINEL_AUTH): "PASSWORD" or "USER:PASSWORD"; nil
// for "".
func upstreamAuth(auth string) *url.Userinfo {
	if auth == "" {
		return nil
	}
	if u, p, ok := strings.Cut(auth, ":"); ok {
		return url.UserPassword(u, p)
	}
	return url.UserPassword("", auth)
}

// flagPairs is m as a StringToString flag's value, "k1=v1,k2=v2", keys in
// order.
func flagPairs(m map[string]string) string {
	var kv []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		kv = append(kv, k+"="+m[k])
	}
	return strings.Join(kv, ",")
}

// upstreamLevel maps envoyproxy/ratelimit's LOG_LEVEL (logrus's levels,
// any case) to --log-level's.
func upstreamLevel(l string) string {
	switch l = strings.ToLower(l); l {
	case "trace":
		return "debug"
	case "warning":
		return "warn"
	case "fatal", "panic":
		return "error"
	}
	return l
}

// runEnvoyRatelimit is sluice envoy-ratelimit, on sluice server's flags:
// flags, then SLUICE_*, then
// envoyproxy/ratelimit's variables, into a server.Config; the server run
// as sluice server runs, with the HTTP and debug listeners beside it.
func (sf *serverFlags) runEnvoyRatelimit(cmd *cobra.Command) error {
	if err := flagsFromEnv(cmd); err != nil {
		return err
	}
	if err := otelFromEnv(cmd); err != nil {
		return err
	}
	env, err := readUpstreamEnv()
	if err != nil {
		return err
	}
	isSet := func(name string) bool { _, ok := os.LookupEnv(name); return ok }
	set, rc, notes, err := env.settings(isSet)
	if err != nil {
		return err
	}
	if err := applySettings(cmd.Flags(), set); err != nil {
		return err
	}
	for name, v := range env.otelVars() {
		if !isSet(name) {
			_ = os.Setenv(name, v)
		}
	}
	log, err := newLogger(cmd.ErrOrStderr(), sf.logFormat, sf.logLevel)
	if err != nil {
		return err
	}
	log = slog.New(flagWords{log.Handler()})
	for _, n := range notes {
		log.Warn(n)
	}
	cfg, err := sf.config(log)
	if err != nil {
		return err
	}
	if err := rc.adjust(&cfg); err != nil {
		return err
	}
	return serve(cmd, log, cfg, func(srv *server.Server) ([]listener, error) {
		return rc.listeners(srv)
	})
}

// applySettings sets each flag of set not already given (on the command
// line or as SLUICE_*); an error names the variable.
func applySettings(fs *pflag.FlagSet, set []setting) error {
	for _, s := range set {
		f := fs.Lookup(s.flag)
		if f == nil || f.Changed {
			continue
		}
		if err := fs.Set(s.flag, s.value); err != nil {
			return fmt.Errorf("%s: %w", s.from, err)
		}
	}
	return nil
}

// adjust puts into cfg what flags cannot carry: upstream's names of the
// X-RateLimit headers, the listener's check of a client certificate's
// SAN, Redis's certificate checked without its name, and the statistics
// on Prometheus (its mapping file read, and refused here, naming the
// variable, if statsd_exporter refuses it).
func (rc ratelimitConfig) adjust(cfg *server.Config) error {
	cfg.Envoy.Headers.XRateLimitNames = rc.headerNames
	if rc.promAddr != "" {
		st := &cfg.Runtime.Statsd
		if st.Address != "" {
			return fmt.Errorf("USE_PROMETHEUS: set with --envoy-statsd %s: one stats sink at a time, as envoyproxy/ratelimit", st.Address)
		}
		if rc.promMapper != "" {
			if err := upstreamstats.CheckMapper(rc.promMapper); err != nil {
				return fmt.Errorf("PROMETHEUS_MAPPER_YAML: %w", err)
			}
		}
		st.Prometheus, st.PrometheusMapper = true, rc.promMapper
	}
	if rc.clientSAN != "" {
		l := &cfg.Listen.TLS
		c, err := tlsutil.Server(l.CertFile, l.KeyFile, l.CAFile)
		if err != nil {
			return fmt.Errorf("GRPC_SERVER_TLS_CERT, GRPC_SERVER_TLS_KEY, GRPC_CLIENT_TLS_CACERT: %w", err)
		}
		san := rc.clientSAN
		c.VerifyPeerCertificate = func(_ [][]byte, chains [][]*x509.Certificate) error {
			if len(chains) > 0 && hasSAN(chains[0][0], san) {
				return nil
			}
			return fmt.Errorf("the client certificate does not name %q (GRPC_CLIENT_TLS_SAN)", san)
		}
		*l = server.TLS{Config: c}
	}
	if rc.redisSkipSAN {
		st := &cfg.Store
		c, err := tlsutil.Client(st.TLS.CAFile, st.TLS.CertFile, st.TLS.KeyFile)
		if err != nil {
			return fmt.Errorf("REDIS_TLS_CACERT, REDIS_TLS_CLIENT_CERT, REDIS_TLS_CLIENT_KEY: %w", err)
		}
		c.NextProtos = nil
		roots := c.RootCAs
		// The chain is verified, the name is not (upstream's
		// REDIS_TLS_SKIP_HOSTNAME_VERIFICATION).
		c.InsecureSkipVerify = true
		c.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("tls: Redis presented no certificate")
			}
			inter := x509.NewCertPool()
			for _, ic := range cs.PeerCertificates[1:] {
				inter.AddCert(ic)
			}
			_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter})
			return err
		}
		st.TLS = server.TLS{Config: c}
	}
	return nil
}

// hasSAN reports whether cert names san among its DNS names, URIs, IP
// addresses or e-mail addresses.
func hasSAN(cert *x509.Certificate, san string) bool {
	for _, n := range cert.DNSNames {
		if n == san {
			return true
		}
	}
	for _, u := range cert.URIs {
		if u.String() == san {
			return true
		}
	}
	for _, ip := range cert.IPAddresses {
		if ip.String() == san {
			return true
		}
	}
	return slices.Contains(cert.EmailAddresses, san)
}

// listeners are envoyproxy/ratelimit's HTTP port (/healthcheck, /json),
// debug port (/rlconfig, /stats, /debug/pprof/, and Sluice's own pages
// and /metrics) and, with USE_PROMETHEUS, Prometheus port (upstream's
// statistics at PROMETHEUS_PATH, as statsd_exporter's mapping names
// them) for srv, in that order.
func (rc ratelimitConfig) listeners(srv *server.Server) ([]listener, error) {
	api := http.NewServeMux()
	api.Handle("GET /healthcheck", upstreamhttp.Healthcheck(srv.Ready))
	api.Handle("/json", upstreamhttp.JSON(srv.Envoy()))
	debug := http.NewServeMux()
	debug.Handle("GET /rlconfig", upstreamhttp.RLConfig(srv.Envoy().Config))
	if h := srv.EnvoyStats(); h != nil {
		debug.Handle("GET /stats", h)
	}
	debug.HandleFunc("/debug/pprof/", pprof.Index)
	debug.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	debug.HandleFunc("/debug/pprof/profile", pprof.Profile)
	debug.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	debug.HandleFunc("/debug/pprof/trace", pprof.Trace)
	debug.Handle("/", srv.Handler())
	type port struct {
		addr, what string
		h          http.Handler
	}
	ports := []port{{rc.httpAddr, "HOST, PORT", api}, {rc.debugAddr, "DEBUG_HOST, DEBUG_PORT", debug}}
	if h := srv.EnvoyPrometheus(); rc.promAddr != "" && h != nil {
		prom := http.NewServeMux()
		prom.Handle(rc.promPath, h)
		ports = append(ports, port{rc.promAddr, "PROMETHEUS_ADDR", prom})
	}
	var ls []listener
	for _, l := range ports {
		ln, err := net.Listen("tcp", l.addr)
		if err != nil {
			for _, o := range ls {
				_ = o.ln.Close()
			}
			return nil, fmt.Errorf("%s: %w", l.what, err)
		}
		ls = append(ls, listener{ln: ln, srv: &http.Server{Handler: l.h, ReadHeaderTimeout: 10 * time.Second}})
	}
	return ls, nil
}
