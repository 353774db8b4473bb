package main

import (
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-rl/sluice/demo"
)

func newDemoCmd() *cobra.Command {
	var (
		duration time.Duration
		clients  int
		asJSON   bool
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run a capacity server, an HTTP target and several clients on loopback, and report how well the leases govern the traffic",
		Long: `demo starts, on 127.0.0.1, a Sluice capacity server with an embedded
configuration (resource "demo/api": 1000 requests per second, FAIR_SHARE), a real
HTTP target that counts the requests it receives each second, and several clients,
each with its own Sluice client and connection, each sending real HTTP requests to
the target as fast as its lease allows, with demand that changes during the run.

It prints one line per second (capacity, the sum of the clients' leases, total
demand, the requests the target saw) and a summary: mean utilization (target
requests per second ÷ min(capacity, demand)), the worst one-second overshoot and
each client's share next to its max-min fair share.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			opts := demo.Options{Duration: duration, Clients: clients, Out: cmd.OutOrStdout()}
			if asJSON {
				opts.Out = nil
			}
			sum, err := demo.Run(ctx, opts)
			if err != nil {
				return err
			}
			if asJSON {
				return demo.PrintJSON(cmd.OutOrStdout(), sum, false)
			}
			demo.PrintSummary(cmd.OutOrStdout(), sum)
			return nil
		},
	}
	cmd.Flags().DurationVar(&duration, "duration", 30*time.Second, "how long to run")
	cmd.Flags().IntVar(&clients, "clients", 6, "number of clients (each its own process-level client and connection)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print only the summary, as one JSON object")
	return cmd
}
