package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/credentials"

	"github.com/sluice-rl/sluice/config"
	"github.com/sluice-rl/sluice/config/etcdconfig"
	"github.com/sluice-rl/sluice/election"
	"github.com/sluice-rl/sluice/fleet"
	"github.com/sluice-rl/sluice/internal/tlsutil"
	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/limits/copies"
	redisstore "github.com/sluice-rl/sluice/limits/redis"
	"github.com/sluice-rl/sluice/server"
)

func newServerCmd() *cobra.Command {
	var (
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
	)
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
at most --max-sessions of them open at once.

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
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := flagsFromEnv(cmd); err != nil {
				return err
			}
			log, err := newLogger(cmd.ErrOrStderr(), logFormat, logLevel)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()

			lis, err := net.Listen("tcp", listen)
			if err != nil {
				return err
			}
			addr := advertise
			if addr == "" {
				addr = lis.Addr().String()
			}
			switch {
			case id != "":
			case electKind == "etcd" && electKey != "":
				// The tasks of one node are one requester to its parent, so
				// a new master takes over its predecessor's lease there.
				id = electKey
			default:
				host, _ := os.Hostname()
				id = fmt.Sprintf("%s:%d", host, os.Getpid())
			}
			var serverTLS, parentTLS *tls.Config
			if tlsCert != "" || tlsKey != "" || tlsClientCA != "" {
				if serverTLS, err = tlsutil.Server(tlsCert, tlsKey, tlsClientCA); err != nil {
					lis.Close()
					return err
				}
			}
			if parentCA != "" || parentCert != "" || parentKey != "" {
				if parentTLS, err = tlsutil.Client(parentCA, parentCert, parentKey); err != nil {
					lis.Close()
					return err
				}
			}
			rstore, err := redisStore(ctx, redisURL, redisCluster, redisTimeout, log)
			if err != nil {
				lis.Close()
				return err
			}
			var store limits.Store // (nil, not a nil *redisstore.Store: the server's memory)
			if rstore != nil {
				defer rstore.Close() // and its client
				store = rstore
			}
			// Copy-limited resources share Redis only with a fleet on etcd,
			// whose leader cleans up after a crashed server.
			var copyLog *redisstore.CopyLog
			var copiesLog copies.Log
			switch {
			case rstore != nil && len(endpoints) > 0:
				copyLog = redisstore.NewCopyLog(rstore)
				copiesLog = copyLog
			case rstore != nil:
				log.Info("copy-limited resources stay in this server's memory: give --etcd-endpoints with --redis or --redis-cluster to share them (the servers' fleet needs etcd to clean up after a crashed server)")
			}
			srv := server.New(server.Options{ID: id, Address: addr, Logger: log, Parent: parents, ParentTLS: parentTLS,
				RequireConfig: cfgPath != "" && len(parents) == 0, LimitsStore: store, CopiesLog: copiesLog, MaxSessions: maxSessions})

			var cli *clientv3.Client
			closeEtcd := func() {}
			if electKind == "etcd" || strings.HasPrefix(cfgPath, "etcd:") || copyLog != nil {
				if len(endpoints) == 0 {
					lis.Close()
					return errors.New("--etcd-endpoints is required with --election etcd or --config etcd:/KEY")
				}
				ecfg := clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: etcdLogger()}
				if etcdCA != "" || etcdCert != "" || etcdKey != "" {
					if ecfg.TLS, err = tlsutil.Client(etcdCA, etcdCert, etcdKey); err != nil {
						lis.Close()
						return fmt.Errorf("etcd TLS: %w", err)
					}
				}
				cli, err = clientv3.New(ecfg)
				if err != nil {
					lis.Close()
					return fmt.Errorf("etcd client: %w", err)
				}
				closeEtcd = sync.OnceFunc(func() { _ = cli.Close() })
				defer closeEtcd()
			}
			var el election.Election
			switch electKind {
			case "standalone":
				el = election.Standalone(addr)
				srv.SetElection("standalone")
			case "etcd":
				if electKey == "" {
					lis.Close()
					return errors.New("--election-key is required with --election etcd")
				}
				el, err = election.Etcd(cli, election.EtcdOptions{Key: electKey, Address: addr, TTL: electTTL, Logger: log})
				if err != nil {
					lis.Close()
					return err
				}
				srv.SetMastership(false, "") // until the election says otherwise
				srv.SetElection(fmt.Sprintf("etcd %s at %s (session TTL %v)", electKey, strings.Join(endpoints, ","), electTTL))
			default:
				lis.Close()
				return fmt.Errorf("--election: %q, want standalone or etcd", electKind)
			}

			// applyConfig installs a repository: its templates, and its
			// limits section unless --quotaservice-config gives the limits.
			applyConfig := func(r *config.Repository) {
				srv.SetConfig(r)
				if quotaPath == "" {
					if err := srv.SetLimits(r.Limits()); err != nil {
						log.Error("limits section refused", "err", err)
					}
				}
				if err := srv.SetCopies(r.Copies()); err != nil {
					log.Error("copy-limited resources refused", "err", err)
				}
				for _, note := range r.Notes() {
					log.Info("configuration normalized", "note", note)
				}
			}
			// checkLimitsOnce refuses limits from two sources.
			checkLimitsOnce := func(r *config.Repository) error {
				if quotaPath != "" && r.Limits() != nil {
					return fmt.Errorf("limits configured twice: in the limits section of --config %s and by --quotaservice-config %s; keep one", cfgPath, quotaPath)
				}
				return nil
			}
			switch {
			case len(parents) > 0:
				if cfgPath != "" {
					log.Warn("--config is ignored with --parent: the parent pushes the configuration down")
				}
				log.Info("intermediate server", "parent", parents)
			case strings.HasPrefix(cfgPath, "etcd:"):
				key := strings.TrimPrefix(cfgPath, "etcd:")
				gctx, gcancel := context.WithTimeout(ctx, 10*time.Second)
				w, err := etcdconfig.NewWatcher(gctx, cli, key, func(r *config.Repository) {
					applyConfig(r)
					srv.ConfigReloaded(nil)
					log.Info("configuration loaded", "etcd_key", key, "templates", r.Len(), "hash", r.Hash())
				}, func(err error) {
					srv.ConfigReloaded(err)
					log.Error("configuration reload failed; keeping the last good configuration", "etcd_key", key, "err", err)
				})
				gcancel()
				if err != nil {
					lis.Close()
					return err
				}
				if err := checkLimitsOnce(w.Current()); err != nil {
					lis.Close()
					return err
				}
				applyConfig(w.Current())
				go func() { _ = w.Run(ctx) }()
			case cfgPath != "":
				w, err := config.NewWatcher(cfgPath, func(r *config.Repository) {
					applyConfig(r)
					srv.ConfigReloaded(nil)
					log.Info("configuration loaded", "path", cfgPath, "templates", r.Len(), "hash", r.Hash())
				}, func(err error) {
					srv.ConfigReloaded(err)
					log.Error("configuration reload failed; keeping the last good configuration", "path", cfgPath, "err", err)
				})
				if err != nil {
					lis.Close()
					return fmt.Errorf("loading %s: %w", cfgPath, err)
				}
				if err := checkLimitsOnce(w.Current()); err != nil {
					lis.Close()
					return err
				}
				applyConfig(w.Current())
				go func() { _ = w.Run(ctx) }()
				reloadOnHUP(ctx, log, cfgPath, w)
			default:
				log.Warn("no --config: every resource is granted what it asks (NO_ALGORITHM)")
			}
			if quotaPath != "" {
				w, err := config.NewWatcherFunc(quotaPath, config.LoadQuotaService, func(r *config.Repository) {
					err := srv.SetLimits(r.Limits())
					srv.ConfigReloaded(err)
					log.Info("quota service configuration loaded", "path", quotaPath, "namespaces", len(r.Limits().Resources), "hash", r.Hash(), "err", err)
				}, func(err error) {
					srv.ConfigReloaded(err)
					log.Error("quota service configuration reload failed; keeping the last good configuration", "path", quotaPath, "err", err)
				})
				if err != nil {
					lis.Close()
					return fmt.Errorf("loading %s: %w", quotaPath, err)
				}
				if err := srv.SetLimits(w.Current().Limits()); err != nil {
					lis.Close()
					return fmt.Errorf("loading %s: %w", quotaPath, err)
				}
				go func() { _ = w.Run(ctx) }()
				reloadOnHUP(ctx, log, quotaPath, w)
			}

			adminCfg := cfgPath
			if len(parents) > 0 {
				adminCfg = "" // the parent's configuration: nothing to edit here
			}
			handler, err := adminHandler(srv.Handler(), adminF, adminCfg, quotaPath, cli, tlsClientCA != "", newQuotaServiceAPI(srv, quotaPath), log)
			if err != nil {
				lis.Close()
				return err
			}
			if pprofOn {
				mux := http.NewServeMux()
				mux.Handle("/", handler)
				mux.HandleFunc("/debug/pprof/", pprof.Index)
				mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
				mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
				mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
				mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
				handler = mux
			}
			go func() { _ = srv.Run(ctx, time.Second) }()
			fleetDone := make(chan struct{})
			if copyLog != nil {
				member, err := fleet.New(cli, copyLog, srv.Copies(), fleet.Options{Prefix: fleetPrefix, TTL: fleetTTL, Address: addr, Logger: log})
				if err != nil {
					lis.Close()
					return err
				}
				srv.SetFleet(func() server.FleetStatus { st := member.Status(); return server.FleetStatus(st) })
				// Requests for sessions homed on another server go there,
				// with the client certificate of the parent link if any.
				var creds credentials.TransportCredentials
				if parentTLS != nil {
					creds = credentials.NewTLS(parentTLS)
				}
				srv.SetSessionRouter(member, creds)
				go func() {
					defer close(fleetDone)
					_ = member.Run(ctx) // leaves the fleet when the signal comes
				}()
			} else {
				close(fleetDone)
			}
			// The election outlives the signal: it is resigned after the
			// in-flight RPCs have finished.
			ectx, ecancel := context.WithCancel(context.Background())
			defer ecancel()
			electionDone := make(chan struct{})
			go func() {
				defer close(electionDone)
				_ = el.Run(ectx, func(st election.Status) {
					srv.SetMastership(st.IsMaster, st.Master)
					log.Info("mastership", "is_master", st.IsMaster, "master", st.Master)
				})
			}()
			// gRPC on grpc-go's transport, the rest on net/http, one port.
			ep := srv.Serve(lis, handler, serverTLS)
			log.Info("sluice server listening", "addr", lis.Addr().String(), "id", id)
			fmt.Fprintf(cmd.OutOrStdout(), "listening on %s\n", lis.Addr())

			select {
			case err := <-ep.Err():
				return err
			case <-ctx.Done():
			}
			// Drain: stop being ready, hand mastership over at once, let the
			// clients hear of the successor (every RPC is now answered with
			// a redirect), then close the listener and finish in-flight
			// RPCs, all within --grace. Whatever etcd, the parent or the
			// clients do, the process exits by grace + drainSlack; a second
			// signal exits at once.
			stop()
			go func() {
				sig := make(chan os.Signal, 1)
				signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
				<-sig
				log.Warn("second signal: exiting at once")
				os.Exit(1)
			}()
			watchdog := time.AfterFunc(grace+drainSlack, func() {
				log.Error("drain did not finish within --grace; exiting", "grace", grace)
				os.Exit(1)
			})
			defer watchdog.Stop()
			log.Info("draining: not ready, resigning mastership, finishing in-flight RPCs", "grace", grace)
			srv.SetDraining(true)
			sctx, cancel := context.WithTimeout(context.Background(), grace)
			defer cancel()
			wasMaster, _ := srv.IsMaster()
			// An etcd that does not answer at once is gone: the session's
			// TTL ends the candidacy then.
			rctx, rcancel := context.WithTimeout(sctx, min(grace/4, resignTimeout))
			resignErr := el.Resign(rctx)
			if resignErr != nil {
				log.Warn("resigning the election failed; the etcd session's TTL will end the candidacy", "err", resignErr)
			}
			rcancel()
			// A successor is elected at once after a resignation etcd took;
			// without one, it takes the session's TTL: do not wait for it.
			if wasMaster && electKind == "etcd" && resignErr == nil {
				deadline := time.Now().Add(grace / 2)
				for time.Now().Before(deadline) {
					if is, m := srv.IsMaster(); !is && m != "" && m != addr {
						log.Info("successor elected", "master", m)
						// Linger a little: a client sent here by a candidate
						// that had not yet heard of the election must still
						// find us, and be redirected, not refused.
						time.Sleep(min(500*time.Millisecond, time.Until(deadline)))
						break
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
			log.Info("closing the listener, finishing in-flight RPCs")
			shutdownErr := ep.Shutdown(sctx)
			log.Info("listener closed", "err", shutdownErr)
			select { // the fleet membership revokes its session
			case <-fleetDone:
			case <-sctx.Done():
			}
			ecancel()
			select {
			case <-electionDone:
			case <-sctx.Done():
				// etcd's client can wait on its own context while etcd is
				// unreachable (a campaign's clean-up resigns with it):
				// closing the client ends that.
				log.Warn("the election did not stop within --grace; closing the etcd client")
				closeEtcd()
				<-electionDone
			}
			if shutdownErr != nil {
				return fmt.Errorf("graceful shutdown: %w", shutdownErr)
			}
			log.Info("stopped")
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfgPath, "config", "", "resource configuration: a YAML file, or etcd:/KEY for an etcd key's value; empty: no templates")
	f.StringVar(&redisURL, "redis", "", "keep the limits' token buckets in this Redis (a go-redis URL, redis://127.0.0.1:6379/0), shared by every server using it")
	f.StringSliceVar(&redisCluster, "redis-cluster", nil, "keep the limits' token buckets in this Redis Cluster (HOST:PORT,... of some of its nodes)")
	f.DurationVar(&redisTimeout, "redis-timeout", redisstore.DefaultTimeout, fmt.Sprintf("bound on each round trip to --redis or --redis-cluster: a Redis stall longer than this counts as a failure (%d in a row open a node's circuit breaker: decisions then fail at once, fail-open resources granted and flagged degraded, until a probe every %v finds Redis again); during an outage, answers wait at most this long, for the first %d round trips", redisstore.DefaultBreakerFailures, redisstore.DefaultBreakerProbe, redisstore.DefaultBreakerFailures))
	f.StringVar(&quotaPath, "quotaservice-config", "", "limits in Square's quota service configuration format (a YAML file, reloaded like --config), instead of --config's limits section")
	f.StringVar(&listen, "listen", "127.0.0.1:15000", "address to listen on (host:port; port 0 picks a free one)")
	f.StringVar(&advertise, "advertise", "", "address clients should use to reach this server (default: the listen address)")
	f.StringVar(&id, "id", "", "server id: the requester id toward the parent, and in logs (default: the --election-key with --election etcd, so that all tasks of a node are one requester; else host:pid)")
	f.DurationVar(&grace, "grace", 10*time.Second, "how long SIGTERM waits for in-flight RPCs")
	f.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn, error")
	f.StringVar(&logFormat, "log-format", "text", "log format: text or json")
	f.StringSliceVar(&parents, "parent", nil, "parent node addresses (host:port, comma-separated): run as an intermediate server that gets its capacity from them")
	f.BoolVar(&pprofOn, "pprof", false, "serve Go's profiler at /debug/pprof/")
	f.StringVar(&tlsCert, "tls-cert", "", "serve TLS with this certificate (PEM); empty: plaintext (h2c)")
	f.StringVar(&tlsKey, "tls-key", "", "the private key of --tls-cert (PEM)")
	f.StringVar(&tlsClientCA, "tls-client-ca", "", "require client certificates signed by these CAs (PEM): mTLS")
	f.StringVar(&parentCA, "parent-tls-ca", "", "speak TLS to the parent, verifying it with these CAs (PEM)")
	f.StringVar(&parentCert, "parent-tls-cert", "", "client certificate (PEM) to present to the parent (mTLS)")
	f.StringVar(&parentKey, "parent-tls-key", "", "the private key of --parent-tls-cert (PEM)")
	f.StringVar(&etcdCA, "etcd-tls-ca", "", "speak TLS to etcd, verifying it with these CAs (PEM); use https:// endpoints")
	f.StringVar(&etcdCert, "etcd-tls-cert", "", "client certificate (PEM) to present to etcd (mTLS)")
	f.StringVar(&etcdKey, "etcd-tls-key", "", "the private key of --etcd-tls-cert (PEM)")
	f.StringVar(&electKind, "election", "standalone", "master election: standalone (always master) or etcd")
	f.StringSliceVar(&endpoints, "etcd-endpoints", nil, "etcd endpoints (comma-separated URLs) for --election etcd, --config etcd:/KEY, and the fleet sharing copy-limited resources on --redis")
	f.StringVar(&electKey, "election-key", "", "etcd key prefix the tasks of this node campaign on, e.g. /sluice/root")
	f.DurationVar(&electTTL, "election-ttl", 10*time.Second, "etcd session TTL (whole seconds): how long a master that cannot reach etcd stays master")
	f.StringVar(&fleetPrefix, "fleet-prefix", "/sluice/fleet", "etcd key prefix of the fleet of servers sharing copy-limited resources on --redis or --redis-cluster (with --etcd-endpoints)")
	adminF.register(f)
	f.IntVar(&maxSessions, "max-sessions", server.DefaultMaxSessions, "most sessions of copy-limited resources this server holds open at once (each costs memory until it ends): at the cap, OpenSession answers ResourceExhausted (counted in sluice_copies_sessions_refused_total) until a session is closed, its keep-alive stream breaks or its ttl passes; a fleet's sessions count on the server that opened them; 0: the default; negative: no cap")
	f.DurationVar(&fleetTTL, "fleet-ttl", 10*time.Second, "etcd session TTL (whole seconds) of this server's fleet membership: a crashed server's copies come back this long after its last keep-alive")
	return cmd
}

// Drain timing: a resignation etcd does not answer within resignTimeout is
// given up (the session's TTL ends the candidacy); the process exits at the
// latest drainSlack after --grace.
const (
	resignTimeout = 2 * time.Second
	drainSlack    = 500 * time.Millisecond
)

// etcdLogger is the etcd client's zap logger: errors only, to stderr (the
// client logs every retried RPC at warn).
func etcdLogger() *zap.Logger {
	cfg := zap.NewProductionConfig()
	cfg.Level = zap.NewAtomicLevelAt(zap.ErrorLevel)
	lg, err := cfg.Build()
	if err != nil {
		return zap.NewNop()
	}
	return lg
}

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

// reloadOnHUP reloads w on every SIGHUP until ctx is done.
func reloadOnHUP(ctx context.Context, log *slog.Logger, path string, w *config.Watcher) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				log.Info("SIGHUP: reloading configuration", "path", path)
				_ = w.Reload()
			}
		}
	}()
}

// redisStore returns the limits store of --redis or --redis-cluster (nil
// for neither: each server's own memory), which owns its client (Close
// closes both): redisstore.Open, which batches concurrent requests into
// pipelines, bounds each round trip by timeout (--redis-timeout) and has
// a circuit breaker per node; the server shows its Health on the status
// page and its Collector's sluice_redis_* metrics.
func redisStore(ctx context.Context, url string, cluster []string, timeout time.Duration, log *slog.Logger) (*redisstore.Store, error) {
	switch {
	case url == "" && len(cluster) == 0:
		return nil, nil
	case timeout <= 0:
		return nil, fmt.Errorf("--redis-timeout: %v, want a positive duration", timeout)
	case url != "" && len(cluster) > 0:
		return nil, errors.New("--redis and --redis-cluster: give one")
	}
	st, err := redisstore.Open(ctx, redisstore.Dial{URL: url, Cluster: cluster, Timeout: timeout, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("--redis: %w", err)
	}
	return st, nil
}
