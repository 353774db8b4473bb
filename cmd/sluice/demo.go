package main

import (
	"encoding/json"
	"fmt"
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
		push     bool
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
			opts := demo.Options{Duration: duration, Clients: clients, Out: cmd.OutOrStdout(), NoPush: !push}
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
	cmd.AddCommand(newDemoQuotaCmd(), newDemoTiersCmd())
	cmd.Flags().DurationVar(&duration, "duration", 30*time.Second, "how long to run")
	cmd.Flags().IntVar(&clients, "clients", 6, "number of clients (each its own process-level client and connection)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print only the summary, as one JSON object")
	cmd.Flags().BoolVar(&push, "push", true, "push leases to the clients when capacity becomes free (false: they only poll, as Doorman's)")
	return cmd
}

func newDemoQuotaCmd() *cobra.Command {
	var (
		duration time.Duration
		users    int
		asJSON   bool
		plotPath string
	)
	cmd := &cobra.Command{
		Use:   "quota",
		Short: "Run server-side limits on loopback: services calling a target through the naive and the smart limits client, users logging in through per-user buckets",
		Long: `demo quota starts, on 127.0.0.1, a Sluice server with embedded limits
(demo/quota.yaml), a real HTTP target, and:

  - a service calling the target 150 times a second through the naive limits
    client (one Allow before each call) against a bucket of 100 a second;
  - a service calling it 300 times a second through the smart client (a local
    bucket topped up by batched requests: no network wait per call) against a
    bucket of 200 a second;
  - users logging in 3 times a second each, through a bucket of 1 a second per
    user that the server makes on first use.

It prints a line per second (calls that reached the target, logins per user per
second, buckets held) and a summary of each bucket's granted rate against its
configured rate, and writes a PNG plot of the calls per second (--plot).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			opts := demo.QuotaOptions{Duration: duration, Users: users, Out: cmd.OutOrStdout()}
			if asJSON {
				opts.Out = nil
			}
			sum, err := demo.RunQuota(ctx, opts)
			if err != nil {
				return err
			}
			if plotPath != "" {
				if err := plotQuota(sum, plotPath); err != nil {
					return err
				}
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(sum)
			}
			demo.PrintQuotaSummary(cmd.OutOrStdout(), sum)
			if plotPath != "" {
				fmt.Fprintf(cmd.OutOrStdout(), "  plot: %s\n", plotPath)
			}
			return nil
		},
	}
	cmd.Flags().DurationVar(&duration, "duration", 15*time.Second, "how long to run")
	cmd.Flags().IntVar(&users, "users", 20, "users logging in")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print only the summary, as one JSON object")
	cmd.Flags().StringVar(&plotPath, "plot", "sluice-quota-demo.png", "write a PNG plot of the calls per second here (empty: none)")
	return cmd
}

func newDemoTiersCmd() *cobra.Command {
	var (
		duration time.Duration
		asJSON   bool
		plotPath string
	)
	cmd := &cobra.Command{
		Use:   "tiers",
		Short: "Run Charon's burst tiers and counting semaphores on loopback: tenants bursting, cooling down, held in a prison tier, holding sandboxes",
		Long: `demo tiers starts, on 127.0.0.1, a Sluice server with Charon's resources
embedded (demo/tiers.yaml), a real HTTP target, and tenants calling it through
the Go client (client/limits), each call asking for a hit first:

  - alice, well-behaved: 15 calls a second, within tier 1 (20 a second);
  - bob, 10 a second with bursts of 60 for 5 s every 10 s: he bursts into
    tier 2 (40 a second for 3 s), falls back, and his next burst finds tier 2
    cooling down (10 s), so it is held to tier 1; the one after bursts again;
  - mallory, abusive at 40 a second: past tier 1 and a small buffer tier she
    lands in a prison tier of one hit per 8 s (Punishment, paper 2.3);
  - carol and dave each hold 2 sandboxes for 2 s at a time, of 3 in all.

It prints a line per second (calls granted and tier per tenant, sandboxes held)
and a summary, and writes a PNG plot of each tenant's granted rate and tier
(--plot).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			opts := demo.TiersOptions{Duration: duration, Out: cmd.OutOrStdout()}
			if asJSON {
				opts.Out = nil
			}
			sum, err := demo.RunTiers(ctx, opts)
			if err != nil {
				return err
			}
			if plotPath != "" {
				if err := plotTiers(sum, plotPath); err != nil {
					return err
				}
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(sum)
			}
			demo.PrintTiersSummary(cmd.OutOrStdout(), sum)
			if plotPath != "" {
				fmt.Fprintf(cmd.OutOrStdout(), "  plot: %s\n", plotPath)
			}
			return nil
		},
	}
	cmd.Flags().DurationVar(&duration, "duration", 30*time.Second, "how long to run")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print only the summary, as one JSON object")
	cmd.Flags().StringVar(&plotPath, "plot", "sluice-tiers-demo.png", "write a PNG plot here (empty: none)")
	return cmd
}
