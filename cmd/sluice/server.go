package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sluice-rl/sluice/admin"
	"github.com/sluice-rl/sluice/internal/demand"
	"github.com/sluice-rl/sluice/internal/hooks"
	"github.com/sluice-rl/sluice/limits"
	redisstore "github.com/sluice-rl/sluice/limits/redis"
	"github.com/sluice-rl/sluice/limits/rls"
	"github.com/sluice-rl/sluice/server"
	"github.com/sluice-rl/sluice/server/rlqs"
)

func newServerCmd() *cobra.Command {
	var sf serverFlags
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run a server: leases, limits, Charon's sessions, Envoy's rate limit service and RLQS",
		Long: `server runs a Sluice server: every API below on one port, over gRPC, gRPC-Web
and JSON over HTTP (POST /<service>/<Method>); each has its group of flags.

The resource repository (--config: a YAML file, or an etcd key) configures the
resources of every API below: Doorman's templates, the limits, Charon's
copy-limited resources and Envoy's rules; it is reloaded when it changes.

Leases: Doorman's capacity service doorman.Capacity leases the resources that
--config's templates describe, and sluice.v1.Leases/Watch pushes leases to their
holders when capacity frees up (--push-leases). With --parent this is an
intermediate server, leasing from its parent. The tasks of a node elect one
master with --election etcd; the others redirect every capacity RPC to it. The
default, standalone, makes this process the master.

Limits: server-side token buckets per resource and domain, sluice.v1.Limits/Allow
and, wire-compatible with Square's quota service, quotaservice.QuotaService/Allow.
Their buckets come from the limits section of --config, or from
--quotaservice-config FILE in the quota service's own YAML format; they live in
this process, or in Redis shared by every server using it (--redis,
--redis-cluster, --redis-sentinel).

Charon's sessions: the limits section also holds Charon's resources
(examples/charon.yaml): rate-limited ones with burst tiers (Allow), and
copy-limited ones held in sessions (OpenSession, KeepAlive, Reserve, Release,
Transfer, Seize, CloseSession), at most --max-sessions of them open at once,
shared by a fleet of servers through Redis and etcd.

Envoy's rate limit service: envoy.service.ratelimit.v3.RateLimitService/
ShouldRateLimit over envoyproxy/ratelimit's configuration as it is
(--envoy-ratelimit-config FILE|DIR, or --envoy-ratelimit-xds from an xDS control
plane; docs/envoy.md), for Envoy, Istio, Envoy Gateway and Contour; upstream's
statistics by upstream's names on statsd (--envoy-statsd).

RLQS: Envoy's Rate Limit Quota Service
(envoy.service.rate_limit_quota.v3.RateLimitQuotaService): each bucket a resource
leased by --config's templates like any other, its token-bucket assignment pushed
to the proxies (--rlqs-*; docs/rlqs.md).

Client identities: with mTLS, --client-identity cert binds each client's ids and
sessions to the identity its certificate names, and --client-policy says which
resources each identity may use, for every RPC of every API (docs/identity.md).

Tracing: --otel-traces-exporter otlp sends a span of every RPC, with its calls to
Redis and etcd, to an OpenTelemetry collector (docs/tracing.md).

The admin API at /admin/v1/ (JSON) reads and changes the resource repository of
--config object by object (templates, limits resources, buckets, namespaces),
each change validated by the loader, versioned (If-Match; a stale change gets
409), kept in a history (--admin-history) and audited. It writes the file
(atomically; FILE.history/ beside it) or the etcd key (KEY/history/), and the
servers apply the change as any other through their watch. Writes need
--admin-token-file, --tls-client-ca (the certificate's CN is the user),
--admin-trust-forwarded-user or --admin-insecure; reads are open unless
--admin-auth-reads. With --quotaservice-config, Square's REST API is at /api.

Also on the port: the status site /debug/status (its pages also as JSON),
Prometheus metrics at /metrics, /healthz, /readyz, gRPC health (grpc.health.v1,
following /readyz), server reflection, and with --pprof /debug/pprof/.

The configuration file is reloaded when it changes and on SIGHUP; a bad new file
is logged and counted (sluice_server_config_reloads_total{result="failed"}) and
the last good configuration keeps serving. --config etcd:/KEY reads it from an
etcd key instead (needs --etcd-endpoints) and follows its changes the same way.

SIGTERM or SIGINT stop the server gracefully: /readyz turns 503, the election is
resigned so that another task takes over at once (every RPC is answered with a
redirect to it), then the listener closes and in-flight RPCs finish, all within
--grace.

Every flag can also be set in the environment as SLUICE_<FLAG>, upper case with
dashes as underscores (SLUICE_LISTEN, SLUICE_ETCD_ENDPOINTS, …); a flag on the
command line wins.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return sf.run(cmd) },
	}
	sf.register(cmd.Flags())
	cmd.SetUsageFunc(groupedUsage)
	return cmd
}

// serverFlags are sluice server's flags: most bound straight to the
// fields of the server.Config they parse into; the rest (the logger's,
// and Envoy's three enumerations) parsed by config.
type serverFlags struct {
	cfg                 server.Config
	logLevel, logFormat string
	envoyAlgorithm      string
	envoyOnStoreError   string
	rlqsUnconfigured    string
	leasePush           bool
}

// register defines the flags on f, each in its group (flagGroups), in
// the groups' order. The help lines are short; docs/running.md's flag
// table explains each flag in full.
func (sf *serverFlags) register(f *pflag.FlagSet) {
	c := &sf.cfg
	in(f, groupListen, func() {
		f.StringVar(&c.Listen.Address, "listen", "127.0.0.1:15000", "address to listen on (host:port; port 0: a free one)")
		f.StringVar(&c.Listen.Advertise, "advertise", "", "address clients should use (default: the listen address)")
		f.StringVar(&c.Listen.TLS.CertFile, "tls-cert", "", "serve TLS with this certificate (PEM); empty: plaintext (h2c)")
		f.StringVar(&c.Listen.TLS.KeyFile, "tls-key", "", "the private key of --tls-cert (PEM)")
		f.StringVar(&c.Listen.TLS.CAFile, "tls-client-ca", "", "require client certificates signed by these CAs (PEM): mTLS")
		f.StringVar(&c.Listen.Identity.Source, "client-identity", "", "cert: bind each client's ids and sessions to its certificate's identity (mTLS)")
		f.StringVar(&c.Listen.Identity.PolicyPath, "client-policy", "", "identity policy file (YAML): the resources each identity may use")
		f.DurationVar(&c.Listen.Grace, "grace", 10*time.Second, "how long SIGTERM waits for in-flight RPCs")
	})
	in(f, groupRepository, func() {
		f.StringVar(&c.Repository.Path, "config", "", "the resource repository: a YAML file or etcd:/KEY; empty: none")
		f.StringVar(&c.Repository.QuotaServicePath, "quotaservice-config", "", "limits in Square's quota service format (a YAML file)")
		f.StringVar(&c.Repository.EnvoyRateLimitPath, "envoy-ratelimit-config", "", "envoyproxy/ratelimit's rules: a YAML file or a directory")
		x := &c.Repository.EnvoyRateLimitXDS
		f.StringVar(&x.ServerURL, "envoy-ratelimit-xds", "", "... or from this xDS control plane (host:port; RateLimitConfig resources)")
		f.StringVar(&x.NodeID, "envoy-ratelimit-xds-node-id", "", "the node id asked of it (default: default)")
		f.StringToStringVar(&x.NodeMetadata, "envoy-ratelimit-xds-node-metadata", nil, "the node's metadata (key=value,...)")
		f.StringToStringVar(&x.Headers, "envoy-ratelimit-xds-header", nil, "gRPC metadata sent with the subscription (key=value,...)")
		f.StringVar(&x.TLS.CAFile, "envoy-ratelimit-xds-tls-ca", "", "speak TLS to it, verifying it with these CAs (PEM)")
		f.StringVar(&x.TLS.CertFile, "envoy-ratelimit-xds-tls-cert", "", "client certificate (PEM) to present to it (mTLS)")
		f.StringVar(&x.TLS.KeyFile, "envoy-ratelimit-xds-tls-key", "", "the private key of that certificate (PEM)")
		f.StringVar(&x.ServerName, "envoy-ratelimit-xds-server-name", "", "the name its certificate must carry (default: its host)")
		f.DurationVar(&x.RetryInterval, "envoy-ratelimit-xds-retry", 0, "wait between attempts to reach it (0: 3s)")
		f.BoolVar(&x.MergeDomains, "envoy-ratelimit-xds-merge", false, "merge its resources naming one domain instead of refusing them")
		f.BoolVar(&x.ForceStart, "envoy-ratelimit-xds-force-start", false, "ready before its first rules arrive (answering OK)")
	})
	in(f, groupLeases, func() {
		f.StringVar(&c.ID, "id", "", "server id: the requester id toward the parent, and in logs")
		f.StringSliceVar(&c.Parent.Addresses, "parent", nil, "parent addresses (host:port,...): run as an intermediate server")
		f.StringVar(&c.Parent.TLS.CAFile, "parent-tls-ca", "", "speak TLS to the parent, verifying it with these CAs (PEM)")
		f.StringVar(&c.Parent.TLS.CertFile, "parent-tls-cert", "", "client certificate (PEM) to present to the parent (mTLS)")
		f.StringVar(&c.Parent.TLS.KeyFile, "parent-tls-key", "", "the private key of --parent-tls-cert (PEM)")
		f.BoolVar(&sf.leasePush, "push-leases", true, "push leases to watching holders when capacity frees up")
	})
	in(f, groupEtcd, func() {
		f.StringSliceVar(&c.Etcd.Endpoints, "etcd-endpoints", nil, "etcd endpoints (URLs, comma-separated)")
		f.StringVar(&c.Etcd.TLS.CAFile, "etcd-tls-ca", "", "speak TLS to etcd, verifying it with these CAs (PEM)")
		f.StringVar(&c.Etcd.TLS.CertFile, "etcd-tls-cert", "", "client certificate (PEM) to present to etcd (mTLS)")
		f.StringVar(&c.Etcd.TLS.KeyFile, "etcd-tls-key", "", "the private key of --etcd-tls-cert (PEM)")
		f.StringVar(&c.Election.Kind, "election", "standalone", "master election: standalone (always master) or etcd")
		f.StringVar(&c.Election.Key, "election-key", "", "etcd key prefix this node's tasks campaign on")
		f.DurationVar(&c.Election.TTL, "election-ttl", 10*time.Second, "etcd session TTL: how long a cut-off master stays master")
	})
	in(f, groupStore, func() {
		f.StringVar(&c.Store.Redis, "redis", "", "keep the limits' state in this Redis (redis[s]://[user:pass@]host:port/db)")
		f.StringSliceVar(&c.Store.Cluster, "redis-cluster", nil, "... in this Redis Cluster (host:port,... or redis[s]://host:port?addr=host:port&...)")
		f.StringVar(&c.Store.Sentinel, "redis-sentinel", "", "... in the Redis Sentinel watches (redis[s]://host:port?master_name=M&addr=...)")
		f.StringVar(&c.Store.TLS.CAFile, "redis-tls-ca", "", "verify Redis's certificate (rediss://) with these CAs (PEM)")
		f.StringVar(&c.Store.TLS.CertFile, "redis-tls-cert", "", "client certificate (PEM) to present to Redis")
		f.StringVar(&c.Store.TLS.KeyFile, "redis-tls-key", "", "the private key of --redis-tls-cert (PEM)")
		f.StringVar(&c.Store.TLSServerName, "redis-tls-server-name", "", "the name Redis's certificate must carry (default: its host)")
		f.StringVar(&c.Store.PasswordFile, "redis-password-file", "", "Redis's password (a file, reread; overrides the URL's)")
		f.StringVar(&c.Store.KeyPrefix, "redis-key-prefix", "", "start every key in Redis with this (default: "+redisstore.DefaultPrefix+")")
		f.DurationVar(&c.Store.Timeout, "redis-timeout", redisstore.DefaultTimeout, "bound on each round trip to Redis")
	})
	in(f, groupSessions, func() {
		f.StringVar(&c.Sessions.Fleet.Prefix, "fleet-prefix", "/sluice/fleet", "etcd key prefix of the fleet sharing copy-limited resources")
		f.DurationVar(&c.Sessions.Fleet.TTL, "fleet-ttl", 10*time.Second, "etcd session TTL of this server's fleet membership")
		f.IntVar(&c.Sessions.Max, "max-sessions", server.DefaultMaxSessions, "most open sessions (0: the default; negative: no cap)")
	})
	in(f, groupEnvoy, func() {
		f.StringVar(&sf.envoyAlgorithm, "envoy-algorithm", "token_bucket", "where a rule names none: token_bucket or fixed_window")
		f.BoolVar(&c.Envoy.ShadowMode, "envoy-shadow-mode", false, "answer every ShouldRateLimit OK, deciding and counting as usual")
		f.BoolVar(&c.Envoy.CalendarMonths, "envoy-calendar-months", false, "count unit month as calendar months in UTC, not 30 days")
		f.BoolVar(&c.Envoy.Headers.Draft, "envoy-ratelimit-headers", true, "add the IETF draft's RateLimit headers (and Retry-After)")
		f.BoolVar(&c.Envoy.Headers.XRateLimit, "envoy-x-ratelimit-headers", false, "also add X-RateLimit-Limit, -Remaining and -Reset")
		f.StringVar(&sf.envoyOnStoreError, "envoy-on-store-error", "closed", "the answer when Redis fails: closed (Unavailable) or open (OK)")
		f.Float64Var(&c.Envoy.NearLimitRatio, "envoy-near-limit-ratio", 0.8, "the fraction of a limit above which hits count as near_limit")
		st := &c.Runtime.Statsd
		f.StringVar(&st.Address, "envoy-statsd", "", "send statistics to this statsd (host:port) under envoyproxy/ratelimit's names")
		f.StringVar(&st.Protocol, "envoy-statsd-protocol", "tcp", "statsd's protocol: tcp or udp")
		f.DurationVar(&st.FlushInterval, "envoy-statsd-flush", 10*time.Second, "how often the counters are sent to statsd")
		f.StringToStringVar(&st.ExtraTags, "envoy-statsd-tags", nil, "tags added to every statistic (key=value,...)")
		f.BoolVar(&st.DogStatsd, "envoy-statsd-dogstatsd", false, "send DogStatsD lines (tags after |#; udp)")
	})
	in(f, groupRLQS, func() {
		f.StringVar(&sf.rlqsUnconfigured, "rlqs-unconfigured", typev3.RateLimitStrategy_ALLOW_ALL.String(), "RLQS answer to a bucket no template matches: ALLOW_ALL or DENY_ALL")
		f.DurationVar(&c.RLQS.UnconfiguredTTL, "rlqs-unconfigured-ttl", rlqs.DefaultUnconfiguredTTL, "time to live of that answer (renewed at half of it)")
		f.Float64Var(&c.RLQS.Smoothing, "rlqs-smoothing", demand.DefaultSmoothing, "weight of a report's demand in an RLQS bucket's smoothed demand, in (0, 1]")
		f.DurationVar(&c.RLQS.Burst, "rlqs-burst", rlqs.DefaultBurst, "RLQS token buckets' max_tokens, as this long's worth of their rate")
	})
	in(f, groupAdmin, func() {
		a := &c.Admin
		f.StringVar(&a.TokenFile, "admin-token-file", "", "bearer tokens for writes: \"USER TOKEN\" lines (reread on change)")
		f.StringSliceVar(&a.TrustForwarded, "admin-trust-forwarded-user", nil, "take the user from X-Forwarded-User from these CIDRs or IPs")
		f.BoolVar(&a.Insecure, "admin-insecure", false, "allow writes without credentials from loopback (development only)")
		f.BoolVar(&a.AuthReads, "admin-auth-reads", false, "reads need the same authentication as writes")
		f.IntVar(&a.Keep, "admin-history", admin.DefaultKeep, "how many versions of the configuration to keep")
	})
	in(f, groupLogs, func() {
		f.StringVar(&sf.logLevel, "log-level", "info", "log level: debug, info, warn, error")
		f.StringVar(&sf.logFormat, "log-format", "text", "log format: text or json")
		f.BoolVar(&c.Listen.Pprof, "pprof", false, "serve Go's profiler at /debug/pprof/")
		t := &c.Runtime.Tracing
		f.StringVar(&t.Exporter, "otel-traces-exporter", "none", "OpenTelemetry traces: otlp or none (OTEL_TRACES_EXPORTER)")
		f.StringVar(&t.Endpoint, "otel-exporter-otlp-endpoint", "", "the OTLP collector's URL (default: OTEL_EXPORTER_OTLP_ENDPOINT, else localhost)")
		f.StringVar(&t.Protocol, "otel-exporter-otlp-protocol", "grpc", "OTLP protocol: grpc or http/protobuf (OTEL_EXPORTER_OTLP_PROTOCOL)")
		f.StringVar(&t.Sampler, "otel-traces-sampler", "", "trace sampler (default: OTEL_TRACES_SAMPLER, else parentbased_always_on)")
		f.StringVar(&t.SamplerArg, "otel-traces-sampler-arg", "", "the ratio of --otel-traces-sampler *traceidratio, 0 to 1 (default 1)")
	})
}

// config returns the server.Config the flags parsed into, with what
// needs parsing beyond a flag's type: the logger and Envoy's three
// enumerations.
func (sf *serverFlags) config(log *slog.Logger) (server.Config, error) {
	cfg := sf.cfg
	cfg.Runtime.Logger = log
	cfg.Runtime.Setting = func(path string) string { return flagOf[path] }
	if now, file := hooks.SkewedClock(); now != nil { // the fault harness's clock-skew faults
		cfg.Runtime.Now = now
		log.Warn("this server's clock is skewed by a test hook", "env", hooks.ClockSkewEnv, "file", file)
	}
	cfg.Leases.DisablePush = !sf.leasePush
	var err error
	if cfg.Envoy.Algorithm, err = rls.ParseAlgorithm(sf.envoyAlgorithm); err != nil {
		return cfg, fmt.Errorf("--envoy-algorithm: %w", err)
	}
	if cfg.Envoy.OnStoreError, err = limits.ParseOnStoreError(sf.envoyOnStoreError); err != nil {
		return cfg, fmt.Errorf("--envoy-on-store-error: %w", err)
	}
	if sf.rlqsUnconfigured != "" { // empty: the default, ALLOW_ALL
		rule, ok := typev3.RateLimitStrategy_BlanketRule_value[sf.rlqsUnconfigured]
		if !ok {
			return cfg, fmt.Errorf("--rlqs-unconfigured: %q, want ALLOW_ALL or DENY_ALL", sf.rlqsUnconfigured)
		}
		cfg.RLQS.Unconfigured = typev3.RateLimitStrategy_BlanketRule(rule)
	}
	return cfg, nil
}

// flagOf maps the Config fields that server.New's errors and logs name
// (server.FieldNames) to the flags that set them: the one place the CLI
// speaks of its flags for the server's messages.
var flagOf = map[string]string{
	"Listen.TLS": "--tls-cert, --tls-key, --tls-client-ca", "Listen.Grace": "--grace",
	"Repository.Path": "--config", "Repository.QuotaServicePath": "--quotaservice-config",
	"Repository.EnvoyRateLimitPath": "--envoy-ratelimit-config", "Repository.Fixed": "--config",
	"Repository.EnvoyRateLimitXDS.ServerURL": "--envoy-ratelimit-xds", "Repository.EnvoyRateLimitXDS": "--envoy-ratelimit-xds",
	"Repository.EnvoyRateLimitXDS.TLS":           "--envoy-ratelimit-xds-tls-ca, --envoy-ratelimit-xds-tls-cert, --envoy-ratelimit-xds-tls-key",
	"Repository.EnvoyRateLimitXDS.ServerName":    "--envoy-ratelimit-xds-server-name",
	"Repository.EnvoyRateLimitXDS.Headers":       "--envoy-ratelimit-xds-header",
	"Repository.EnvoyRateLimitXDS.RetryInterval": "--envoy-ratelimit-xds-retry", "Repository.EnvoyRateLimitXDS.ForceStart": "--envoy-ratelimit-xds-force-start",
	"Parent.Addresses": "--parent", "Parent.TLS": "--parent-tls-ca, --parent-tls-cert, --parent-tls-key",
	"Leases.DisablePush": "--push-leases=false", "Election.Kind": "--election", "Election.Key": "--election-key",
	"Etcd.Endpoints": "--etcd-endpoints", "Etcd.TLS": "--etcd-tls-ca, --etcd-tls-cert, --etcd-tls-key",
	"Store.Redis": "--redis", "Store.Cluster": "--redis-cluster", "Store.Timeout": "--redis-timeout",
	"Store.Sentinel": "--redis-sentinel", "Store.TLS": "--redis-tls-ca, --redis-tls-cert, --redis-tls-key",
	"Store.TLSServerName": "--redis-tls-server-name", "Store.PasswordFile": "--redis-password-file",
	"Store.KeyPrefix": "--redis-key-prefix",
	"Store.Shared":    "--redis", "Sessions.Max": "--max-sessions", "Envoy.NearLimitRatio": "--envoy-near-limit-ratio",
	"Admin.TrustForwarded": "--admin-trust-forwarded-user", "Admin.TokenFile": "--admin-token-file",
	"Admin.Insecure": "--admin-insecure", "Admin.AuthReads": "--admin-auth-reads", "Listen.TLS.CAFile": "--tls-client-ca",
	"Runtime.Tracing.Exporter": "--otel-traces-exporter",
	"Runtime.Tracing.Protocol": "--otel-exporter-otlp-protocol", "Runtime.Tracing.Endpoint": "--otel-exporter-otlp-endpoint",
	"Runtime.Tracing.Sampler": "--otel-traces-sampler", "Runtime.Tracing.SamplerArg": "--otel-traces-sampler-arg",
	"Listen.Identity.Source": "--client-identity", "Listen.Identity.PolicyPath": "--client-policy",
	"RLQS.Unconfigured": "--rlqs-unconfigured", "RLQS.UnconfiguredTTL": "--rlqs-unconfigured-ttl",
	"RLQS.Smoothing": "--rlqs-smoothing", "RLQS.Burst": "--rlqs-burst",
	"Runtime.Statsd": "--envoy-statsd, --envoy-statsd-protocol, --envoy-statsd-flush, --envoy-statsd-tags",
}

// flagNames rewrites the Config field names in a server error's text as
// the flags that set them.
var flagNames = func() *strings.Replacer {
	var pairs []string
	for _, f := range server.FieldNames {
		pairs = append(pairs, f, flagOf[f])
	}
	return strings.NewReplacer(pairs...)
}()

// flagWords is a slog.Handler that speaks of the Config fields a
// record's message names (server.FieldNames) as the flags that set them,
// as asFlags does for errors: sluice server's logs name its flags.
type flagWords struct{ slog.Handler }

func (h flagWords) Handle(ctx context.Context, r slog.Record) error {
	r.Message = flagNames.Replace(r.Message)
	return h.Handler.Handle(ctx, r)
}

func (h flagWords) WithAttrs(as []slog.Attr) slog.Handler { return flagWords{h.Handler.WithAttrs(as)} }

func (h flagWords) WithGroup(name string) slog.Handler { return flagWords{h.Handler.WithGroup(name)} }

// asFlags returns err with the Config fields it names spoken as flags.
func asFlags(err error) error {
	if err == nil {
		return nil
	}
	return errors.New(flagNames.Replace(err.Error()))
}

// run is sluice server: the flags (and SLUICE_* variables) parsed into a
// server.Config, the server assembled from it and run until SIGTERM or
// SIGINT, then drained.
func (sf *serverFlags) run(cmd *cobra.Command) error {
	if err := flagsFromEnv(cmd); err != nil {
		return err
	}
	if err := otelFromEnv(cmd); err != nil {
		return err
	}
	log, err := newLogger(cmd.ErrOrStderr(), sf.logFormat, sf.logLevel)
	if err != nil {
		return err
	}
	log = slog.New(flagWords{log.Handler()})
	cfg, err := sf.config(log)
	if err != nil {
		return err
	}
	return serve(cmd, log, cfg, nil)
}

// listener is one more HTTP listener beside the server's own, and its
// http.Server.
type listener struct {
	ln  net.Listener
	srv *http.Server
}

// serve assembles the server of cfg and runs it until SIGTERM or SIGINT,
// then drains it (Server.Run). extra, when set, returns more listeners
// for the server (envoy-ratelimit's HTTP and debug ports): they serve
// from before the server runs until its drain has ended, so that
// probes see it not ready while it drains.
func serve(cmd *cobra.Command, log *slog.Logger, cfg server.Config, extra func(*server.Server) ([]listener, error)) error {
	redis.SetLogger(redisLog{log.With("component", "go-redis")})
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv, err := server.New(ctx, cfg)
	if err != nil {
		return asFlags(err)
	}
	var more []listener
	if extra != nil {
		if more, err = extra(srv); err != nil {
			return err
		}
	}
	for _, l := range more {
		go func() { _ = l.srv.Serve(l.ln) }()
		defer l.srv.Close()
	}
	reloadOnHUP(ctx, log, srv)
	fmt.Fprintf(cmd.OutOrStdout(), "listening on %s\n", srv.Addr())
	for _, l := range more {
		fmt.Fprintf(cmd.OutOrStdout(), "listening on %s\n", l.ln.Addr())
	}
	go func() {
		<-ctx.Done()
		// Drain (Server.Run): whatever etcd, the parent or the
		// clients do, the process exits by --grace + drainSlack; a
		// second signal exits at once.
		stop()
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
		time.AfterFunc(cfg.Listen.Grace+drainSlack, func() {
			log.Error("drain did not finish within --grace; exiting", "grace", cfg.Listen.Grace)
			os.Exit(1)
		})
		<-sig
		log.Warn("second signal: exiting at once")
		os.Exit(1)
	}()
	return srv.Run(ctx)
}

// redisLog is go-redis's logger (redis.SetLogger, process-wide, so set
// here at the edge) on the server's: its lines become records, a
// Sentinel's report of a new master at info, the rest (every failed dial,
// which the store already reports once per change and counts) at debug.
type redisLog struct{ log *slog.Logger }

func (l redisLog) Printf(ctx context.Context, format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	level := slog.LevelDebug
	if strings.HasPrefix(msg, "sentinel: new master") {
		level = slog.LevelInfo
	}
	l.log.Log(ctx, level, msg)
}

// drainSlack is how long after --grace the process exits at the latest.
const drainSlack = 500 * time.Millisecond

// flagsFromEnv sets every flag of cmd not given on the command line from
// SLUICE_<FLAG> (upper case, dashes as underscores), if set.
func flagsFromEnv(cmd *cobra.Command) error {
	var errs []error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Changed {
			return
		}
		name := "SLUICE_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(name); ok {
			if err := cmd.Flags().Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
			}
		}
	})
	return errors.Join(errs...)
}

// otelEnv are the standard OpenTelemetry variables of the --otel-* flags
// that no OpenTelemetry package reads, the signal's own first: which
// exporter, and which of the OTLP exporters (the HTTP one reads the
// protocol too, but only as its payload's encoding). The others are the
// SDK's to read when their flags are not given, as it does: the
// exporter, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT and
// OTEL_EXPORTER_OTLP_ENDPOINT (and its headers, timeout, certificates,
// compression); NewTracerProvider, OTEL_TRACES_SAMPLER and
// OTEL_TRACES_SAMPLER_ARG; the resource, OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES.
var otelEnv = map[string][]string{
	"otel-traces-exporter":        {"OTEL_TRACES_EXPORTER"},
	"otel-exporter-otlp-protocol": {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"},
}

// otelFromEnv sets the --otel-* flags of otelEnv given neither on the
// command line nor as SLUICE_OTEL_* from their standard OpenTelemetry
// variables, and turns traces off when OTEL_SDK_DISABLED is true (the Go
// SDK does not read it): a flag wins over SLUICE_OTEL_*, which wins over
// OTEL_*.
func otelFromEnv(cmd *cobra.Command) error {
	fs := cmd.Flags()
	exporterGiven := fs.Changed("otel-traces-exporter")
	var errs []error
	for flag, vars := range otelEnv {
		if f := fs.Lookup(flag); f == nil || f.Changed {
			continue
		}
		for _, name := range vars {
			if v, ok := os.LookupEnv(name); ok && v != "" {
				if err := fs.Set(flag, strings.TrimSpace(v)); err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", name, err))
				}
				break
			}
		}
	}
	if v := os.Getenv("OTEL_SDK_DISABLED"); strings.EqualFold(strings.TrimSpace(v), "true") && !exporterGiven {
		_ = fs.Set("otel-traces-exporter", "none")
	}
	return errors.Join(errs...)
}

func newLogger(w interface{ Write([]byte) (int, error) }, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	o := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, o)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, o)), nil
	}
	return nil, fmt.Errorf("--log-format: %q, want text or json", format)
}

// reloadOnHUP reloads srv's configuration files on every SIGHUP until ctx
// is done.
func reloadOnHUP(ctx context.Context, log *slog.Logger, srv *server.Server) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				log.Info("SIGHUP: reloading configuration")
				srv.Reload()
			}
		}
	}()
}
