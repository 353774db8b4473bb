package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-rl/sluice/sim"
)

func newSimulateCmd() *cobra.Command {
	var (
		scenario   string
		seed       int64
		duration   time.Duration
		out        string
		asJSON     bool
		allocation string
		decay      string
		refresh    time.Duration
		push       bool
		horizon    bool
	)
	cmd := &cobra.Command{
		Use:   "simulate",
		Short: "Simulate Doorman's scenarios (or your own) on Sluice's real code, on virtual time",
		Long: `simulate runs a discrete-event simulation on virtual time that drives Sluice's
real servers (lease store, algorithms, parent links, learning mode), real client
state machines, a server tree with three tasks per node and scripted elections, in
one process. A run is deterministic for a seed.

--scenario is a built-in (one … seven, the scenarios of doorman-design.md,
"Convergence and shortfall", and eight, Sluice's own), "all", or a YAML file with the same fields as
sim.Scenario. It prints a summary table (or JSON with --json): mean utilization
after the initial learning period, worst and mean overshoot of the clients' Σ
leases over the capacity, shortfall episodes (runs of seconds above capacity),
and reconvergence after each mishap. With --out it also writes, per scenario,
NAME.csv (per tree level: Σ wants, Σ has, capacity, leases, every second),
NAME.json, NAME.png and NAME.svg (a plot like the design's figures).

--allocation doorman runs the servers with Doorman's allocation across the tree
instead of Sluice's (see docs/departures.md), for comparison.

--push=false runs servers that push no leases and holders that only poll, as in
Doorman: capacity one requester gives back waits for the others' next requests
(by default it is pushed, on sluice.v1.Leases, at once; see docs/departures.md).

--refresh-decay sets the direction in which the refresh interval changes from
level to level of the tree: sluice (each level further from the root refreshes
1/decay_factor times as long as its parent: root 2 s, regions 4 s, leaves 8 s)
or design (decay_factor times as long: clients refresh most often).
--refresh-interval replaces the scenarios' interval at the root. Requesters
never refresh more often than every 5 s (Doorman's rule), so shorter intervals
act as 5 s.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var scs []sim.Scenario
			switch {
			case scenario == "all":
				scs = sim.Builtin()
			case strings.HasSuffix(scenario, ".yaml") || strings.HasSuffix(scenario, ".yml"):
				sc, err := sim.LoadScenario(scenario)
				if err != nil {
					return err
				}
				scs = []sim.Scenario{sc}
			default:
				sc, err := sim.Lookup(scenario)
				if err != nil {
					return err
				}
				scs = []sim.Scenario{sc}
			}
			if allocation != "sluice" && allocation != "doorman" {
				return fmt.Errorf("--allocation: %q, want sluice or doorman", allocation)
			}
			if decay != sim.DecaySluice && decay != sim.DecayDesign {
				return fmt.Errorf("--refresh-decay: %q, want %s or %s", decay, sim.DecaySluice, sim.DecayDesign)
			}
			if refresh != 0 && (refresh < time.Second || refresh%time.Second != 0) {
				return fmt.Errorf("--refresh-interval: %v, want whole seconds ≥ 1s", refresh)
			}
			if out != "" {
				if err := os.MkdirAll(out, 0o755); err != nil {
					return err
				}
			}
			var sums []sim.Summary
			var verr error
			for _, sc := range scs {
				opts := sim.Options{Seed: seed, Duration: duration.Seconds(), DoormanAllocation: allocation == "doorman",
					RefreshDecay: decay, RefreshInterval: refresh.Seconds(), NoPush: !push, NoLeaseHorizon: !horizon}
				opts.Progress = newProgress(cmd.ErrOrStderr(), "scenario "+sc.Name)
				began := time.Now()
				res, err := sim.Run(sc, opts)
				if err != nil {
					return err
				}
				sum := sim.Summarize(&res.Series)
				sum.RunSeconds = time.Since(began).Seconds()
				sums = append(sums, sum)
				for _, v := range res.Violations {
					fmt.Fprintf(cmd.ErrOrStderr(), "scenario %s: invariant violated: %s\n", sc.Name, v)
				}
				if out != "" {
					if err := writeOutputs(out, res, sum); err != nil {
						return err
					}
				}
				if len(res.Violations) > 0 {
					verr = errors.Join(verr, fmt.Errorf("scenario %s: %d invariant violations", sc.Name, len(res.Violations)))
				}
			}
			var err error
			if asJSON {
				err = sim.WriteJSON(cmd.OutOrStdout(), sums)
			} else {
				err = sim.WriteTable(cmd.OutOrStdout(), sums)
			}
			return errors.Join(err, verr)
		},
	}
	f := cmd.Flags()
	f.StringVar(&scenario, "scenario", "all", "built-in scenario (one … eight), all, or a scenario YAML file")
	f.Int64Var(&seed, "seed", 1, "random seed (demand, mishaps, jitter)")
	f.DurationVar(&duration, "duration", 0, "virtual time to simulate (default: the scenario's)")
	f.StringVar(&out, "out", "", "directory for CSV, JSON, PNG and SVG outputs per scenario")
	f.BoolVar(&asJSON, "json", false, "print the summary as JSON")
	f.StringVar(&allocation, "allocation", "sluice", "allocation across the tree: sluice, or doorman for comparison")
	f.StringVar(&decay, "refresh-decay", sim.DecaySluice, "refresh interval across the tree: sluice (longer toward the clients) or design (shorter toward the clients)")
	f.DurationVar(&refresh, "refresh-interval", 0, "refresh interval at the root (default: the scenario's)")
	f.BoolVar(&push, "push", true, "push leases to their holders when capacity becomes free (false: poll only, as Doorman)")
	f.BoolVar(&horizon, "lease-horizon", true, "a root's new master learns only until its predecessor's leases end, by the lease horizon the election keeps (false: a full learning period, as Doorman)")
	return cmd
}

// writeOutputs writes NAME.csv, NAME.json, NAME.png and NAME.svg into dir.
func writeOutputs(dir string, res *sim.Result, sum sim.Summary) error {
	base := filepath.Join(dir, res.Series.Scenario)
	write := func(path string, f func(io.Writer) error) error {
		fh, err := os.Create(path)
		if err != nil {
			return err
		}
		if err := f(fh); err != nil {
			fh.Close()
			return fmt.Errorf("%s: %w", path, err)
		}
		return fh.Close()
	}
	if err := write(base+".csv", func(w io.Writer) error { return sim.WriteCSV(w, &res.Series) }); err != nil {
		return err
	}
	if err := write(base+".json", func(w io.Writer) error { return sim.WriteJSON(w, []sim.Summary{sum}) }); err != nil {
		return err
	}
	return plotSeries(&res.Series, base+".png", base+".svg")
}
