package main

import (
	"encoding/json"
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

// simulation is one run of `sluice simulate`: its flags.
type simulation struct {
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
	rlqs       sim.RLQSScenario // --scenario rlqs's knobs
}

func newSimulateCmd() *cobra.Command {
	s := &simulation{}
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

--scenario rlqs runs Envoy proxies streaming to the RLQS service instead (the
real stream state machine of server/rlqs over a real capacity service, the
proxies' token buckets simulated; see docs/rlqs.md): it prints the utilization,
the overshoot of the rates assigned and of the requests admitted, the share of
the capacity assigned elsewhere than its max-min fair shares, and the time the
shares take to follow a shift of demand. --rlqs-report-interval, --rlqs-smoothing
and --rlqs-burst change its knobs.

--refresh-decay sets the direction in which the refresh interval changes from
level to level of the tree: sluice (each level further from the root refreshes
1/decay_factor times as long as its parent: root 2 s, regions 4 s, leaves 8 s)
or design (decay_factor times as long: clients refresh most often).
--refresh-interval replaces the scenarios' interval at the root. Requesters
never refresh more often than every 5 s (Doorman's rule), so shorter intervals
act as 5 s.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return s.run(cmd) },
	}
	f := cmd.Flags()
	f.StringVar(&s.scenario, "scenario", "all", "built-in scenario (one … eight), all, or a scenario YAML file")
	f.Int64Var(&s.seed, "seed", 1, "random seed (demand, mishaps, jitter)")
	f.DurationVar(&s.duration, "duration", 0, "virtual time to simulate (default: the scenario's)")
	f.StringVar(&s.out, "out", "", "directory for CSV, JSON, PNG and SVG outputs per scenario")
	f.BoolVar(&s.asJSON, "json", false, "print the summary as JSON")
	f.StringVar(&s.allocation, "allocation", "sluice", "allocation across the tree: sluice, or doorman for comparison")
	f.StringVar(&s.decay, "refresh-decay", sim.DecaySluice, "refresh interval across the tree: sluice (longer toward the clients) or design (shorter toward the clients)")
	f.DurationVar(&s.refresh, "refresh-interval", 0, "refresh interval at the root (default: the scenario's)")
	f.BoolVar(&s.push, "push", true, "push leases to their holders when capacity becomes free (false: poll only, as Doorman)")
	f.Float64Var(&s.rlqs.ReportInterval, "rlqs-report-interval", 0, "--scenario rlqs: the Envoys' reporting interval in seconds (0: the scenario's, 5)")
	f.Float64Var(&s.rlqs.Smoothing, "rlqs-smoothing", 0, "--scenario rlqs: the demand's smoothing, in (0, 1] (0: the server's default, 0.5)")
	f.Float64Var(&s.rlqs.Burst, "rlqs-burst", 0, "--scenario rlqs: max_tokens in seconds of the rate (0: 1)")
	f.BoolVar(&s.horizon, "lease-horizon", true, "a root's new master learns only until its predecessor's leases end, by the lease horizon the election keeps (false: a full learning period, as Doorman)")
	return cmd
}

// scenarios are the scenarios --scenario names: all the built-ins, one
// built-in, or one read from a YAML file.
func (s *simulation) scenarios() ([]sim.Scenario, error) {
	switch {
	case s.scenario == "all":
		return sim.Builtin(), nil
	case strings.HasSuffix(s.scenario, ".yaml") || strings.HasSuffix(s.scenario, ".yml"):
		sc, err := sim.LoadScenario(s.scenario)
		if err != nil {
			return nil, err
		}
		return []sim.Scenario{sc}, nil
	default:
		sc, err := sim.Lookup(s.scenario)
		if err != nil {
			return nil, err
		}
		return []sim.Scenario{sc}, nil
	}
}

// validate checks --allocation, --refresh-decay and --refresh-interval.
func (s *simulation) validate() error {
	if s.allocation != "sluice" && s.allocation != "doorman" {
		return fmt.Errorf("--allocation: %q, want sluice or doorman", s.allocation)
	}
	if s.decay != sim.DecaySluice && s.decay != sim.DecayDesign {
		return fmt.Errorf("--refresh-decay: %q, want %s or %s", s.decay, sim.DecaySluice, sim.DecayDesign)
	}
	if s.refresh != 0 && (s.refresh < time.Second || s.refresh%time.Second != 0) {
		return fmt.Errorf("--refresh-interval: %v, want whole seconds ≥ 1s", s.refresh)
	}
	return nil
}

// run simulates each scenario, writes its outputs with --out, reports
// invariant violations on stderr, and prints the summaries; it fails when
// an invariant was violated, after printing them.
func (s *simulation) run(cmd *cobra.Command) error {
	if s.scenario == "rlqs" {
		return s.runRLQS(cmd)
	}
	scs, err := s.scenarios()
	if err != nil {
		return err
	}
	if err := s.validate(); err != nil {
		return err
	}
	if s.out != "" {
		if err := os.MkdirAll(s.out, 0o755); err != nil {
			return err
		}
	}
	var sums []sim.Summary
	var verr error
	for _, sc := range scs {
		opts := sim.Options{Seed: s.seed, Duration: s.duration.Seconds(), DoormanAllocation: s.allocation == "doorman",
			RefreshDecay: s.decay, RefreshInterval: s.refresh.Seconds(), NoPush: !s.push, NoLeaseHorizon: !s.horizon}
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
		if s.out != "" {
			if err := writeOutputs(s.out, res, sum); err != nil {
				return err
			}
		}
		if len(res.Violations) > 0 {
			verr = errors.Join(verr, fmt.Errorf("scenario %s: %d invariant violations", sc.Name, len(res.Violations)))
		}
	}
	if s.asJSON {
		err = sim.WriteJSON(cmd.OutOrStdout(), sums)
	} else {
		err = sim.WriteTable(cmd.OutOrStdout(), sums)
	}
	return errors.Join(err, verr)
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

// runRLQS runs the RLQS scenario with the --rlqs-* knobs, --seed and
// --duration, and prints its result (as JSON with --json).
func (s *simulation) runRLQS(cmd *cobra.Command) error {
	sc := sim.RLQSBuiltin()
	if s.rlqs.ReportInterval > 0 {
		sc.ReportInterval = s.rlqs.ReportInterval
	}
	sc.Smoothing, sc.Burst = s.rlqs.Smoothing, s.rlqs.Burst
	if s.duration > 0 {
		sc.Duration = s.duration.Seconds()
	}
	res, err := sim.RunRLQS(sc, s.seed)
	if err != nil {
		return err
	}
	if s.asJSON {
		enc := json.NewEncoder(cmd.OutOrStdout())
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s (seed %d): %s\n", sc.Name, s.seed, sc.Description)
	fmt.Fprintf(cmd.OutOrStdout(), "  utilization %.2f %%, assigned overshoot %.2f %%, admitted overshoot (worst second) %.1f %%, misassigned %.2f %% of the capacity, reaction to a shift %.0f s median, %.0f s worst, %d reports\n",
		100*res.Utilization, 100*res.AssignedOvershoot, 100*res.AdmittedOvershoot, 100*res.Unfairness, res.ReactionMedian, res.ReactionMax, res.Reports)
	return nil
}
