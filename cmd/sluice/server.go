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
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-rl/sluice/config"
	"github.com/sluice-rl/sluice/server"
)

func newServerCmd() *cobra.Command {
	var (
		cfgPath   string
		listen    string
		advertise string
		id        string
		grace     time.Duration
		logLevel  string
		logFormat string
		parents   []string
	)
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run a capacity server (a root, or with --parent an intermediate)",
		Long: `server runs a Sluice capacity server: the Doorman service doorman.Capacity over
gRPC, gRPC-Web and JSON over HTTP (POST /doorman.Capacity/<Method>) on one port,
plus Prometheus metrics at /metrics.

The configuration file is reloaded when it changes and on SIGHUP; a bad new file
is logged and counted (sluice_server_config_reloads_total{result="failed"}) and
the last good configuration keeps serving. SIGTERM or SIGINT stop the server
gracefully: the listener closes and in-flight RPCs finish (up to --grace).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
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
			if id == "" {
				host, _ := os.Hostname()
				id = fmt.Sprintf("%s:%d", host, os.Getpid())
			}
			srv := server.New(server.Options{ID: id, Address: addr, Logger: log, Parent: parents})

			switch {
			case len(parents) > 0:
				if cfgPath != "" {
					log.Warn("--config is ignored with --parent: the parent pushes the configuration down")
				}
				log.Info("intermediate server", "parent", parents)
			case cfgPath != "":
				w, err := config.NewWatcher(cfgPath, func(r *config.Repository) {
					srv.SetConfig(r)
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
				srv.SetConfig(w.Current())
				go func() { _ = w.Run(ctx) }()
				hup := make(chan os.Signal, 1)
				signal.Notify(hup, syscall.SIGHUP)
				defer signal.Stop(hup)
				go func() {
					for {
						select {
						case <-ctx.Done():
							return
						case <-hup:
							log.Info("SIGHUP: reloading configuration", "path", cfgPath)
							_ = w.Reload()
						}
					}
				}()
			default:
				log.Warn("no --config: every resource is granted what it asks (NO_ALGORITHM)")
			}

			hs := &http.Server{Handler: srv.Handler(), Protocols: h2c(), ReadHeaderTimeout: 10 * time.Second}
			go func() { _ = srv.Run(ctx, time.Second) }()
			errc := make(chan error, 1)
			go func() { errc <- hs.Serve(lis) }()
			log.Info("sluice server listening", "addr", lis.Addr().String(), "id", id)
			fmt.Fprintf(cmd.OutOrStdout(), "listening on %s\n", lis.Addr())

			select {
			case err := <-errc:
				return err
			case <-ctx.Done():
			}
			log.Info("shutting down: closing the listener, finishing in-flight RPCs", "grace", grace)
			sctx, cancel := context.WithTimeout(context.Background(), grace)
			defer cancel()
			if err := hs.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("graceful shutdown: %w", err)
			}
			log.Info("stopped")
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfgPath, "config", "", "resource configuration file (YAML); empty: no templates")
	f.StringVar(&listen, "listen", "127.0.0.1:15000", "address to listen on (host:port; port 0 picks a free one)")
	f.StringVar(&advertise, "advertise", "", "address clients should use to reach this server (default: the listen address)")
	f.StringVar(&id, "id", "", "server id (default host:pid)")
	f.DurationVar(&grace, "grace", 10*time.Second, "how long SIGTERM waits for in-flight RPCs")
	f.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn, error")
	f.StringVar(&logFormat, "log-format", "text", "log format: text or json")
	f.StringSliceVar(&parents, "parent", nil, "parent node addresses (host:port, comma-separated): run as an intermediate server that gets its capacity from them")
	return cmd
}

func h2c() *http.Protocols {
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	return p
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
