package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-rl/sluice/internal/discovery"
)

func newHealthCmd() *cobra.Command {
	var (
		rf      rpcFlags
		live    bool
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "health --server ADDR",
		Short: "Exit 0 if a server is ready (GET /readyz answers 200), 1 if not: for container health checks",
		Long: `health asks a server's /readyz (with --live, /healthz) and exits 0 when it
answers 200, else prints why and exits 1. It is the container image's health
check (an image without a shell or curl): HEALTHCHECK CMD ["sluice", "health"].
/readyz is 503 while the server drains, has no configuration, or does not know
its mastership; /healthz is 200 while the process serves at all.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := rf.tlsConfig()
			if err != nil {
				return err
			}
			u := rf.server
			if !strings.Contains(u, "://") {
				u = discovery.Scheme(cfg) + "://" + u
			}
			path := "/readyz"
			if live {
				path = "/healthz"
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, "GET", u+path, nil)
			if err != nil {
				return err
			}
			resp, err := (&http.Client{Transport: discovery.Transport(cfg, true)}).Do(req)
			if err != nil {
				return fmt.Errorf("%s%s: %w", rf.server, path, err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s%s: %s: %s", rf.server, path, resp.Status, strings.TrimSpace(string(body)))
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s%s: %s\n", rf.server, path, strings.TrimSpace(string(body)))
			return nil
		},
	}
	rf.add(cmd)
	cmd.Flags().BoolVar(&live, "live", false, "ask /healthz (liveness) rather than /readyz (readiness)")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Second, "how long to wait for the answer")
	return cmd
}
