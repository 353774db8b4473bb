package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-rl/sluice/client"
)

// newWorkloadCmd is a client process for tests and demonstrations: it asks
// its rate limiter for permits at a fixed rate and lets adaptive demand
// (or a fixed --wants) tell the server what it needs.
func newWorkloadCmd() *cobra.Command {
	var (
		rf        rpcFlags
		resource  string
		rate      float64
		duration  time.Duration
		adaptive  bool
		headroom  float64
		wants     float64
		clientID  string
		interval  time.Duration
		smoothing float64
	)
	cmd := &cobra.Command{
		Use:    "workload --server ADDR --resource R --rate N",
		Short:  "Run one client that asks its limiter for N permits per second (adaptive demand optional)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if duration > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, duration)
				defer cancel()
			}
			opts := []client.Option{}
			if clientID != "" {
				opts = append(opts, client.WithID(clientID))
			}
			cfg, err := rf.tlsConfig()
			if err != nil {
				return err
			}
			if cfg != nil {
				opts = append(opts, client.WithTLS(cfg))
			}
			c, err := client.New(rf.server, opts...)
			if err != nil {
				return err
			}
			defer c.Close()
			res, err := c.Resource(resource, wants)
			if err != nil {
				return err
			}
			lim := client.NewRateLimiter(res, 1)
			if adaptive {
				lim.Adapt(ctx, client.AdaptiveOptions{Interval: interval, Smoothing: smoothing, Headroom: headroom})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "workload %s: %v permits/s on %s\n", c.ID(), rate, resource)
			tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
			defer tick.Stop()
			granted, asked := 0, 0
			for {
				select {
				case <-ctx.Done():
					fmt.Fprintf(cmd.OutOrStdout(), "asked %d, granted %d, wants %v, capacity %v\n", asked, granted, res.Wants(), res.Capacity())
					return nil
				case <-tick.C:
					asked++
					if lim.Allow() {
						granted++
					}
				}
			}
		},
	}
	rf.add(cmd)
	f := cmd.Flags()
	f.StringVar(&resource, "resource", "workload", "resource id")
	f.Float64Var(&rate, "rate", 10, "permits asked per second")
	f.DurationVar(&duration, "duration", 0, "stop after this long (0: until SIGTERM)")
	f.BoolVar(&adaptive, "adaptive", true, "learn wants from use")
	f.Float64Var(&headroom, "headroom", 0.2, "adaptive: fraction added to the measured demand")
	f.DurationVar(&interval, "interval", time.Second, "adaptive: measurement interval")
	f.Float64Var(&smoothing, "smoothing", 0.5, "adaptive: weight of the newest measurement")
	f.Float64Var(&wants, "wants", 1, "initial (or, without --adaptive, fixed) wants")
	f.StringVar(&clientID, "client", "", "client id (default host:pid:n)")
	return cmd
}
