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
	cmd.SetUsageFunc(groupedUsage)
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

// register defines the flags on f, each in its group (flagGroups), in
// the groups' order. The help lines are short; docs/running.md's flag
// table explains each flag in full.
func (sf *serverFlags) register(f *pflag.FlagSet) {
	in(f, groupListen, func() {
		f.StringVar(&sf.listen, "listen", "127.0.0.1:15000", "address to listen on (host:port; port 0: a free one)")
		f.StringVar(&sf.advertise, "advertise", "", "address clients should use (default: the listen address)")
		f.StringVar(&sf.tlsCert, "tls-cert", "", "serve TLS with this certificate (PEM); empty: plaintext (h2c)")
		f.StringVar(&sf.tlsKey, "tls-key", "", "the private key of --tls-cert (PEM)")
		f.StringVar(&sf.tlsClientCA, "tls-client-ca", "", "require client certificates signed by these CAs (PEM): mTLS")
		f.DurationVar(&sf.grace, "grace", 10*time.Second, "how long SIGTERM waits for in-flight RPCs")
	})
	in(f, groupConfig, func() {
		f.StringVar(&sf.cfgPath, "config", "", "resource configuration: a YAML file or etcd:/KEY; empty: none")
		f.StringVar(&sf.quotaPath, "quotaservice-config", "", "limits in Square's quota service format (a YAML file)")
		f.StringVar(&sf.envoy.path, "envoy-ratelimit-config", "", "envoyproxy/ratelimit's rules: a YAML file or a directory")
	})
	in(f, groupLeases, func() {
		f.StringVar(&sf.id, "id", "", "server id: the requester id toward the parent, and in logs")
		f.StringSliceVar(&sf.parents, "parent", nil, "parent addresses (host:port,...): run as an intermediate server")
		f.StringVar(&sf.parentCA, "parent-tls-ca", "", "speak TLS to the parent, verifying it with these CAs (PEM)")
		f.StringVar(&sf.parentCert, "parent-tls-cert", "", "client certificate (PEM) to present to the parent (mTLS)")
		f.StringVar(&sf.parentKey, "parent-tls-key", "", "the private key of --parent-tls-cert (PEM)")
		f.BoolVar(&sf.push, "push-leases", true, "push leases to watching holders when capacity frees up")
	})
	in(f, groupEtcd, func() {
		f.StringSliceVar(&sf.endpoints, "etcd-endpoints", nil, "etcd endpoints (URLs, comma-separated)")
		f.StringVar(&sf.etcdCA, "etcd-tls-ca", "", "speak TLS to etcd, verifying it with these CAs (PEM)")
		f.StringVar(&sf.etcdCert, "etcd-tls-cert", "", "client certificate (PEM) to present to etcd (mTLS)")
		f.StringVar(&sf.etcdKey, "etcd-tls-key", "", "the private key of --etcd-tls-cert (PEM)")
		f.StringVar(&sf.electKind, "election", "standalone", "master election: standalone (always master) or etcd")
		f.StringVar(&sf.electKey, "election-key", "", "etcd key prefix this node's tasks campaign on")
		f.DurationVar(&sf.electTTL, "election-ttl", 10*time.Second, "etcd session TTL: how long a cut-off master stays master")
	})
	in(f, groupStore, func() {
		f.StringVar(&sf.redisURL, "redis", "", "keep the limits' state in this Redis (redis://host:port/db)")
		f.StringSliceVar(&sf.redisCluster, "redis-cluster", nil, "keep the limits' state in this Redis Cluster (host:port,...)")
		f.DurationVar(&sf.redisTimeout, "redis-timeout", redisstore.DefaultTimeout, "bound on each round trip to Redis")
	})
	in(f, groupSessions, func() {
		f.StringVar(&sf.fleetPrefix, "fleet-prefix", "/sluice/fleet", "etcd key prefix of the fleet sharing copy-limited resources")
		f.DurationVar(&sf.fleetTTL, "fleet-ttl", 10*time.Second, "etcd session TTL of this server's fleet membership")
		f.IntVar(&sf.maxSessions, "max-sessions", server.DefaultMaxSessions, "most open sessions (0: the default; negative: no cap)")
	})
	in(f, groupEnvoy, func() { sf.envoy.register(f) })
	in(f, groupAdmin, func() { sf.adminF.register(f) })
	in(f, groupLogs, func() {
		f.StringVar(&sf.logLevel, "log-level", "info", "log level: debug, info, warn, error")
		f.StringVar(&sf.logFormat, "log-format", "text", "log format: text or json")
		f.BoolVar(&sf.pprofOn, "pprof", false, "serve Go's profiler at /debug/pprof/")
	})
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
	f.StringVar(&ef.algorithm, "envoy-algorithm", "token_bucket", "where a rule names none: token_bucket or fixed_window")
	f.BoolVar(&ef.shadow, "envoy-shadow-mode", false, "answer every ShouldRateLimit OK, deciding and counting as usual")
	f.BoolVar(&ef.headers, "envoy-ratelimit-headers", true, "add the IETF draft's RateLimit headers (and Retry-After)")
	f.BoolVar(&ef.xHeaders, "envoy-x-ratelimit-headers", false, "also add X-RateLimit-Limit, -Remaining and -Reset")
	f.StringVar(&ef.onStoreError, "envoy-on-store-error", "closed", "the answer when Redis fails: closed (Unavailable) or open (OK)")
	f.Float64Var(&ef.nearLimit, "envoy-near-limit-ratio", 0.8, "the fraction of a limit above which hits count as near_limit")
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
