package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sluice-rl/sluice/internal/tlsutil"
	"github.com/sluice-rl/sluice/limits"
	redisstore "github.com/sluice-rl/sluice/limits/redis"
	"github.com/sluice-rl/sluice/limits/rls"
	"github.com/sluice-rl/sluice/server"
	"github.com/sluice-rl/sluice/server/envoyrls"
)

func newServerCmd() *cobra.Command {
	var sf serverFlags
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run a capacity server (a root, or with --parent an intermediate)",
		Long: `server runs a Sluice capacity server: the Doorman service doorman.Capacity over
gRPC, gRPC-Web and JSON over HTTP (POST /doorman.Capacity/<Method>) on one port,
plus Prometheus metrics at /metrics. On the same port it serves server-side
limits (token buckets per resource and domain): sluice.v1.Limits/Allow and,
wire-compatible with Square's quota service, quotaservice.QuotaService/Allow.
Their buckets come from the limits section of --config, or from
--quotaservice-config FILE in the quota service's own YAML format. The limits
section also holds Charon's resources (examples/charon.yaml): rate-limited ones
with burst tiers (Allow), and copy-limited ones held in sessions
(OpenSession, KeepAlive, Reserve, Release, Transfer, Seize, CloseSession),
at most --max-sessions of them open at once. Also on the port: Envoy's rate
limit service (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit)
over envoyproxy/ratelimit's configuration as it is (--envoy-ratelimit-config
FILE|DIR; docs/envoy.md), for Envoy, Istio, Envoy Gateway and Contour; gRPC
health (grpc.health.v1, following /readyz) and server reflection.

The configuration file is reloaded when it changes and on SIGHUP; a bad new file
is logged and counted (sluice_server_config_reloads_total{result="failed"}) and
the last good configuration keeps serving. --config etcd:/KEY reads it from an
etcd key instead (needs --etcd-endpoints) and follows its changes the same way.

Each node of the tree may run several tasks (server processes) that elect one
master with --election etcd; the others redirect every capacity RPC to it. The
default, standalone, makes this process the master.

SIGTERM or SIGINT stop the server gracefully: /readyz turns 503, the election is
resigned so that another task takes over at once (every RPC is answered with a
redirect to it), then the listener closes and in-flight RPCs finish, all within
--grace.

HTTP on the same port: /debug/status (status pages, also as JSON), /metrics
(Prometheus), /healthz, /readyz, and with --pprof /debug/pprof/.

The admin API at /admin/v1/ (JSON) reads and changes the configuration of
--config object by object (templates, limits resources, buckets, namespaces),
each change validated by the loader, versioned (If-Match; a stale change gets
409), kept in a history (--admin-history) and audited. It writes the file
(atomically; FILE.history/ beside it) or the etcd key (KEY/history/), and the
servers apply the change as any other through their watch. Writes need
--admin-token-file, --tls-client-ca (the certificate's CN is the user),
--admin-trust-forwarded-user or --admin-insecure; reads are open unless
--admin-auth-reads.

Every flag can also be set in the environment as SLUICE_<FLAG>, upper case with
dashes as underscores (SLUICE_LISTEN, SLUICE_ETCD_ENDPOINTS, …); a flag on the
command line wins.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return sf.run(cmd) },
	}
	sf.register(cmd.Flags())
	return cmd
}

// serverFlags are sluice server's flags.
type serverFlags struct {
	cfgPath, quotaPath              string
	redisURL                        string
	redisCluster                    []string
	redisTimeout                    time.Duration
	listen                          string
	advertise                       string
	id                              string
	grace                           time.Duration
	logLevel                        string
	logFormat                       string
	parents                         []string
	pprofOn                         bool
	push                            bool
	tlsCert, tlsKey, tlsClientCA    string
	parentCA, parentCert, parentKey string
	etcdCA, etcdCert, etcdKey       string
	electKind                       string
	endpoints                       []string
	electKey                        string
	electTTL                        time.Duration
	fleetPrefix                     string
	fleetTTL                        time.Duration
	maxSessions                     int
	adminF                          adminFlags
	envoy                           envoyFlags
}

// register defines the flags on f.
func (sf *serverFlags) register(f *pflag.FlagSet) {
	f.StringVar(&sf.cfgPath, "config", "", "resource configuration: a YAML file, or etcd:/KEY for an etcd key's value; empty: no templates")
	f.StringVar(&sf.redisURL, "redis", "", "keep the limits' token buckets in this Redis (a go-redis URL, redis://127.0.0.1:6379/0), shared by every server using it")
	f.StringSliceVar(&sf.redisCluster, "redis-cluster", nil, "keep the limits' token buckets in this Redis Cluster (HOST:PORT,... of some of its nodes)")
	f.DurationVar(&sf.redisTimeout, "redis-timeout", redisstore.DefaultTimeout, fmt.Sprintf("bound on each round trip to --redis or --redis-cluster: a Redis stall longer than this counts as a failure (%d in a row open a node's circuit breaker: decisions then fail at once, fail-open resources granted and flagged degraded, until a probe every %v finds Redis again); during an outage, answers wait at most this long, for the first %d round trips", redisstore.DefaultBreakerFailures, redisstore.DefaultBreakerProbe, redisstore.DefaultBreakerFailures))
	sf.envoy.register(f)
	f.StringVar(&sf.quotaPath, "quotaservice-config", "", "limits in Square's quota service configuration format (a YAML file, reloaded like --config), instead of --config's limits section")
	f.StringVar(&sf.listen, "listen", "127.0.0.1:15000", "address to listen on (host:port; port 0 picks a free one)")
	f.StringVar(&sf.advertise, "advertise", "", "address clients should use to reach this server (default: the listen address)")
	f.StringVar(&sf.id, "id", "", "server id: the requester id toward the parent, and in logs (default: the --election-key with --election etcd, so that all tasks of a node are one requester; else host:pid)")
	f.DurationVar(&sf.grace, "grace", 10*time.Second, "how long SIGTERM waits for in-flight RPCs")
	f.StringVar(&sf.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	f.StringVar(&sf.logFormat, "log-format", "text", "log format: text or json")
	f.StringSliceVar(&sf.parents, "parent", nil, "parent node addresses (host:port, comma-separated): run as an intermediate server that gets its capacity from them")
	f.BoolVar(&sf.pprofOn, "pprof", false, "serve Go's profiler at /debug/pprof/")
	f.BoolVar(&sf.push, "push-leases", true, "push leases to watching holders when capacity becomes free (sluice.v1.Leases/Watch); false: they wait for their next requests, as with Doorman")
	f.StringVar(&sf.tlsCert, "tls-cert", "", "serve TLS with this certificate (PEM); empty: plaintext (h2c)")
	f.StringVar(&sf.tlsKey, "tls-key", "", "the private key of --tls-cert (PEM)")
	f.StringVar(&sf.tlsClientCA, "tls-client-ca", "", "require client certificates signed by these CAs (PEM): mTLS")
	f.StringVar(&sf.parentCA, "parent-tls-ca", "", "speak TLS to the parent, verifying it with these CAs (PEM)")
	f.StringVar(&sf.parentCert, "parent-tls-cert", "", "client certificate (PEM) to present to the parent (mTLS)")
	f.StringVar(&sf.parentKey, "parent-tls-key", "", "the private key of --parent-tls-cert (PEM)")
	f.StringVar(&sf.etcdCA, "etcd-tls-ca", "", "speak TLS to etcd, verifying it with these CAs (PEM); use https:// endpoints")
	f.StringVar(&sf.etcdCert, "etcd-tls-cert", "", "client certificate (PEM) to present to etcd (mTLS)")
	f.StringVar(&sf.etcdKey, "etcd-tls-key", "", "the private key of --etcd-tls-cert (PEM)")
	f.StringVar(&sf.electKind, "election", "standalone", "master election: standalone (always master) or etcd")
	f.StringSliceVar(&sf.endpoints, "etcd-endpoints", nil, "etcd endpoints (comma-separated URLs) for --election etcd, --config etcd:/KEY, and the fleet sharing copy-limited resources on --redis")
	f.StringVar(&sf.electKey, "election-key", "", "etcd key prefix the tasks of this node campaign on, e.g. /sluice/root")
	f.DurationVar(&sf.electTTL, "election-ttl", 10*time.Second, "etcd session TTL (whole seconds): how long a master that cannot reach etcd stays master")
	f.StringVar(&sf.fleetPrefix, "fleet-prefix", "/sluice/fleet", "etcd key prefix of the fleet of servers sharing copy-limited resources on --redis or --redis-cluster (with --etcd-endpoints)")
	sf.adminF.register(f)
	f.IntVar(&sf.maxSessions, "max-sessions", server.DefaultMaxSessions, "most sessions of copy-limited resources this server holds open at once (each costs memory until it ends): at the cap, OpenSession answers ResourceExhausted (counted in sluice_copies_sessions_refused_total) until a session is closed, its keep-alive stream breaks or its ttl passes; a fleet's sessions count on the server that opened them; 0: the default; negative: no cap")
	f.DurationVar(&sf.fleetTTL, "fleet-ttl", 10*time.Second, "etcd session TTL (whole seconds) of this server's fleet membership: a crashed server's copies come back this long after its last keep-alive")
}

// config parses the flags into a server configuration: the TLS
// configurations read from their files, and the Redis store opened.
func (sf *serverFlags) config(ctx context.Context, log *slog.Logger) (server.Config, error) {
	var err error
	cfg := server.Config{ID: sf.id, Listen: sf.listen, Advertise: sf.advertise, Logger: log, Grace: sf.grace, Pprof: sf.pprofOn,
		ConfigPath: sf.cfgPath, QuotaServiceConfigPath: sf.quotaPath, Parents: sf.parents,
		Election:    server.Election{Kind: sf.electKind, Key: sf.electKey, TTL: sf.electTTL},
		Etcd:        server.Etcd{Endpoints: sf.endpoints},
		MaxSessions: sf.maxSessions, FleetPrefix: sf.fleetPrefix, FleetTTL: sf.fleetTTL, Admin: sf.adminF.Admin,
		EnvoyRateLimitPath: sf.envoy.path, NoLeasePush: !sf.push}
	if cfg.EnvoyRateLimit, err = sf.envoy.options(); err != nil {
		return server.Config{}, err
	}
	if sf.tlsCert != "" || sf.tlsKey != "" || sf.tlsClientCA != "" {
		if cfg.TLS, err = tlsutil.Server(sf.tlsCert, sf.tlsKey, sf.tlsClientCA); err != nil {
			return server.Config{}, err
		}
	}
	if sf.parentCA != "" || sf.parentCert != "" || sf.parentKey != "" {
		if cfg.ParentTLS, err = tlsutil.Client(sf.parentCA, sf.parentCert, sf.parentKey); err != nil {
			return server.Config{}, err
		}
	}
	if sf.etcdCA != "" || sf.etcdCert != "" || sf.etcdKey != "" {
		if cfg.Etcd.TLS, err = tlsutil.Client(sf.etcdCA, sf.etcdCert, sf.etcdKey); err != nil {
			return server.Config{}, fmt.Errorf("etcd TLS: %w", err)
		}
	}
	if cfg.Shared, err = redisShared(ctx, sf.redisURL, sf.redisCluster, sf.redisTimeout, log); err != nil {
		return server.Config{}, err
	}
	if cfg.Shared != nil && len(sf.endpoints) == 0 {
		// Copy-limited resources share Redis only with a fleet on
		// etcd, whose leader cleans up after a crashed server.
		cfg.Shared.Copies = nil
		log.Info("copy-limited resources stay in this server's memory: give --etcd-endpoints with --redis or --redis-cluster to share them (the servers' fleet needs etcd to clean up after a crashed server)")
	}
	return cfg, nil
}

// run is sluice server: the flags (and SLUICE_* variables) parsed into a
// server.Config, the server assembled from it and run until SIGTERM or
// SIGINT, then drained.
func (sf *serverFlags) run(cmd *cobra.Command) error {
	if err := flagsFromEnv(cmd); err != nil {
		return err
	}
	log, err := newLogger(cmd.ErrOrStderr(), sf.logFormat, sf.logLevel)
	if err != nil {
		return err
	}
	cfg, err := sf.config(cmd.Context(), log)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv, err := server.New(ctx, cfg)
	if err != nil {
		return err
	}
	reloadOnHUP(ctx, log, srv)
	fmt.Fprintf(cmd.OutOrStdout(), "listening on %s\n", srv.Addr())
	go func() {
		<-ctx.Done()
		// Drain (Server.Run): whatever etcd, the parent or the
		// clients do, the process exits by --grace + drainSlack; a
		// second signal exits at once.
		stop()
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
		time.AfterFunc(sf.grace+drainSlack, func() {
			log.Error("drain did not finish within --grace; exiting", "grace", sf.grace)
			os.Exit(1)
		})
		<-sig
		log.Warn("second signal: exiting at once")
		os.Exit(1)
	}()
	return srv.Run(ctx)
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

// redisShared returns the shared store of --redis or --redis-cluster (nil
// for neither: each server's own memory): the limits store
// (redisstore.Open: it batches concurrent requests into pipelines, bounds
// each round trip by timeout, --redis-timeout, and has a circuit breaker
// per node), its copy log, and its health, shown on the status page and as
// sluice_redis_* metrics.
func redisShared(ctx context.Context, url string, cluster []string, timeout time.Duration, log *slog.Logger) (*server.Shared, error) {
	switch {
	case url == "" && len(cluster) == 0:
		return nil, nil
	case timeout <= 0: // an explicit 0 is a mistake: the flag defaults to DefaultTimeout
		return nil, fmt.Errorf("--redis-timeout: %v, want a positive duration", timeout)
	}
	st, err := redisstore.Open(ctx, redisstore.Dial{URL: url, Cluster: cluster, Timeout: timeout, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("--redis, --redis-cluster: %w", err)
	}
	return &server.Shared{Limits: st, Copies: redisstore.NewCopyLog(st), RLS: redisstore.NewRLS(st), Metrics: st.Collector(), Health: st.Health, Close: st.Close}, nil
}

// envoyFlags are the flags of Envoy's rate limit service.
type envoyFlags struct {
	path         string
	algorithm    string
	shadow       bool
	headers      bool
	xHeaders     bool
	onStoreError string
	nearLimit    float64
}

func (ef *envoyFlags) register(f *pflag.FlagSet) {
	f.StringVar(&ef.path, "envoy-ratelimit-config", "", "envoyproxy/ratelimit's configuration for Envoy's rate limit service (ShouldRateLimit): a YAML file or a directory of them, one domain per document, reloaded on change and SIGHUP")
	f.StringVar(&ef.algorithm, "envoy-algorithm", "token_bucket", "how Envoy rate limits count where the configuration names no algorithm: token_bucket (refilled continuously) or fixed_window (epoch-aligned windows, as envoyproxy/ratelimit counts)")
	f.BoolVar(&ef.shadow, "envoy-shadow-mode", false, "answer every ShouldRateLimit OK, deciding and counting as usual (would-be rejections counted as shadow_mode); envoyproxy/ratelimit's SHADOW_MODE")
	f.BoolVar(&ef.headers, "envoy-ratelimit-headers", true, "add the IETF draft's RateLimit-Policy and RateLimit headers, and Retry-After on OVER_LIMIT, to Envoy's response")
	f.BoolVar(&ef.xHeaders, "envoy-x-ratelimit-headers", false, "also add X-RateLimit-Limit, -Remaining and -Reset (envoyproxy/ratelimit's LIMIT_RESPONSE_HEADERS_ENABLED)")
	f.StringVar(&ef.onStoreError, "envoy-on-store-error", "closed", "ShouldRateLimit's answer when the store (Redis) fails: closed (an Unavailable error: Envoy's failure_mode_deny decides) or open (OK)")
	f.Float64Var(&ef.nearLimit, "envoy-near-limit-ratio", 0.8, "the fraction of a limit above which granted hits count as near_limit (envoyproxy/ratelimit's NEAR_LIMIT_RATIO)")
}

// options returns the service's options the flags give.
func (ef *envoyFlags) options() (envoyrls.Options, error) {
	o := envoyrls.Options{ShadowMode: ef.shadow, Headers: envoyrls.Headers{Draft: ef.headers, XRateLimit: ef.xHeaders},
		NearLimitRatio: ef.nearLimit}
	var err error
	if o.Algorithm, err = rls.ParseAlgorithm(ef.algorithm); err != nil {
		return o, fmt.Errorf("--envoy-algorithm: %w", err)
	}
	if o.OnStoreError, err = limits.ParseOnStoreError(ef.onStoreError); err != nil {
		return o, fmt.Errorf("--envoy-on-store-error: %w", err)
	}
	if ef.nearLimit <= 0 || ef.nearLimit > 1 {
		return o, fmt.Errorf("--envoy-near-limit-ratio: %v, want a fraction in (0, 1]", ef.nearLimit)
	}
	return o, nil
}
