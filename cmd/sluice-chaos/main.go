// Command sluice-chaos runs Sluice's fault harness (internal/chaos): real
// `sluice server` processes over a real Redis, Redis Cluster, Redis
// Sentinel group and etcd on loopback, load through one API, one fault
// injected and healed, and the history of every request checked against
// the model.
//
//	go run ./cmd/sluice-chaos --list
//	go run ./cmd/sluice-chaos --mode bucket-redis --fault redis-stop
//	go run ./cmd/sluice-chaos --all --markdown     # every mode × fault: docs/accuracy.md's table
//	go run ./cmd/sluice-chaos --all --mode copies-redis --markdown   # one mode's rows
//	go run ./cmd/sluice-chaos --all --mode bucket-sentinel --markdown -v   # the rows, each run's figures on stderr
//
// It builds ./cmd/sluice unless --sluice names a binary, needs
// redis-server and redis-cli (Debian's redis-server package), stops
// everything it started, and exits 1 when a run violated the model.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-rl/sluice/internal/chaos"
)

func main() {
	chaos.MaybeRunHolder()
	if err := newRoot().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "sluice-chaos:", err)
		os.Exit(1)
	}
}

func newRoot() *cobra.Command {
	var (
		opts                      chaos.Options
		list, all, asJSON, md, vb bool
	)
	cmd := &cobra.Command{
		Use:   "sluice-chaos --mode MODE --fault FAULT",
		Short: "Run a mode of Sluice under a fault on real processes and check every answer against the model",
		Long: `sluice-chaos starts real sluice server processes over real stores on
127.0.0.1, sends load through one API for --warm, injects the fault for
--hold, heals it, goes on for --recover, and checks the history: a token
bucket never grants more than size + rate × T over any window T (answers
flagged fail-open apart), copies never exceed their limit, every hold is
given back exactly once, Σ leases never exceed the capacity. It prints what was admitted over the limit,
errors by code, answers flagged degraded and the time to recover.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := cmd.OutOrStdout()
			if list {
				printList(out)
				return nil
			}
			ctx, done, err := prepare(cmd, vb, &opts.Log, &opts.Sluice)
			if err != nil {
				return err
			}
			defer done()
			runs := [][2]string{{opts.Mode, opts.Fault}}
			if all {
				runs = nil
				for _, run := range chaos.Matrix() {
					if (opts.Mode == "" || run[0] == opts.Mode) && (opts.Fault == "" || run[1] == opts.Fault) {
						runs = append(runs, run)
					}
				}
			} else if opts.Mode == "" || opts.Fault == "" {
				return errors.New("--mode and --fault (or --all; --list names them)")
			}
			if md {
				fmt.Fprintln(out, chaos.TableHeader)
			}
			violated := false
			for _, run := range runs {
				o := opts
				o.Mode, o.Fault = run[0], run[1]
				rep, err := chaos.Run(ctx, o)
				if err != nil {
					return fmt.Errorf("%s under %s: %w", o.Mode, o.Fault, err)
				}
				violated = violated || rep.Violated()
				switch {
				case md:
					fmt.Fprintln(out, rep.TableRow())
					if vb { // the figures behind the row, with the run's progress
						rep.Print(cmd.ErrOrStderr())
					}
				case asJSON:
					if err := json.NewEncoder(out).Encode(rep); err != nil {
						return err
					}
				default:
					rep.Print(out)
				}
			}
			if violated {
				return errors.New("a run violated the model (see above)")
			}
			return nil
		},
	}
	cmd.AddCommand(newSoakCmd())
	f := cmd.Flags()
	f.StringVar(&opts.Mode, "mode", "", "the mode to run (--list names them)")
	f.StringVar(&opts.Fault, "fault", "", "the fault to inject (--list names them)")
	f.StringVar(&opts.Sluice, "sluice", "", "the sluice binary the servers run (default: go build ./cmd/sluice)")
	f.DurationVar(&opts.Warm, "warm", 3*time.Second, "load before the fault")
	f.DurationVar(&opts.Hold, "hold", 5*time.Second, "how long the fault lasts")
	f.DurationVar(&opts.Recover, "recover", 6*time.Second, "load after the fault heals")
	f.IntVar(&opts.Workers, "workers", 8, "clients sending load, one request every 5 ms each")
	f.BoolVar(&list, "list", false, "list the modes and faults, and which faults apply to which modes")
	f.BoolVar(&all, "all", false, "run every mode under every fault that applies to it (about 20 s each); with --mode or --fault, only that mode's or fault's runs")
	f.BoolVar(&asJSON, "json", false, "print each report as a JSON line")
	f.BoolVar(&md, "markdown", false, "print each report as a row of docs/accuracy.md's table (with -v, the full report on stderr too)")
	f.BoolVarP(&vb, "verbose", "v", false, "show the servers' warnings and the run's progress on stderr")
	return cmd
}

func newSoakCmd() *cobra.Command {
	var (
		opts chaos.SoakOptions
		vb   bool
	)
	cmd := &cobra.Command{
		Use:   "soak",
		Short: "Steady load on every API for --duration; sample RSS, goroutines, open files, Redis memory and keys; write CSV and a PNG",
		Long: `soak runs --servers sluice server processes on one Redis (their fleet on an
embedded etcd) under steady load on every API (GetCapacity, Allow on 10 000
users' buckets, the quota service's Allow, sessions holding copies, Envoy's
ShouldRateLimit on 10 000 users), samples every --every, and writes
soak-N.csv and soak-N.png into --out. Run by hand (30 minutes is the
soak of docs/accuracy.md), not in CI.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, done, err := prepare(cmd, vb, &opts.Log, &opts.Sluice)
			if err != nil {
				return err
			}
			defer done()
			samples, err := chaos.Soak(ctx, opts)
			if err != nil {
				return err
			}
			chaos.PrintSoak(cmd.OutOrStdout(), samples)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Sluice, "sluice", "", "the sluice binary the servers run (default: go build ./cmd/sluice)")
	f.IntVar(&opts.Servers, "servers", 1, "servers sharing one Redis")
	f.DurationVar(&opts.Duration, "duration", 30*time.Minute, "how long the load runs")
	f.DurationVar(&opts.Every, "every", 10*time.Second, "sampling period")
	f.StringVar(&opts.Out, "out", ".", "directory for soak-N.csv and soak-N.png")
	f.BoolVarP(&vb, "verbose", "v", false, "print every sample on stderr")
	return cmd
}

func printList(w io.Writer) {
	fmt.Fprintln(w, "modes:")
	for _, name := range slices.Sorted(maps.Keys(chaos.Modes)) {
		fmt.Fprintf(w, "  %-20s %s\n", name, chaos.Modes[name].Doc)
	}
	fmt.Fprintln(w, "faults:")
	for _, name := range slices.Sorted(maps.Keys(chaos.Faults)) {
		fmt.Fprintf(w, "  %-20s %s\n", name, chaos.Faults[name].Doc)
	}
	fmt.Fprintln(w, "runs (--all):")
	for _, run := range chaos.Matrix() {
		fmt.Fprintf(w, "  --mode %s --fault %s\n", run[0], run[1])
	}
}

// ensureBinary builds ./cmd/sluice into *bin when it is empty; cleanup
// removes what it built.
// prepare is what every command does first: with verbose, logs go to
// standard error (*log); the returned ctx ends on SIGINT or SIGTERM; *bin
// is built when empty. done undoes it all (a built binary is removed).
func prepare(cmd *cobra.Command, verbose bool, log *io.Writer, bin *string) (ctx context.Context, done func(), err error) {
	if verbose {
		*log = cmd.ErrOrStderr()
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	cleanup, err := ensureBinary(bin)
	if err != nil {
		stop()
		return nil, nil, err
	}
	return ctx, func() { cleanup(); stop() }, nil
}

func ensureBinary(bin *string) (cleanup func(), err error) {
	if *bin != "" {
		return func() {}, nil
	}
	b, cleanup, err := build()
	if err != nil {
		return nil, err
	}
	*bin = b
	return cleanup, nil
}

// build builds ./cmd/sluice (from the module holding this directory)
// into a temporary directory.
func build() (string, func(), error) {
	dir, err := os.MkdirTemp("", "sluice-chaos-bin-")
	if err != nil {
		return "", nil, err
	}
	bin := filepath.Join(dir, "sluice")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/sluice-rl/sluice/cmd/sluice").CombinedOutput()
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("go build ./cmd/sluice (or give --sluice): %v\n%s", err, strings.TrimSpace(string(out)))
	}
	return bin, func() { os.RemoveAll(dir) }, nil
}
