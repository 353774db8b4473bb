// Command sluice is Sluice's one binary. Its subcommands:
//
//	sluice server [--config FILE|etcd:/KEY] [--listen ADDR] [--parent ADDRS] [--election etcd ...]
//	    the server: leases (a root, or with --parent an intermediate), limits, Charon's sessions,
//	    Envoy's rate limit service and RLQS, on one port
//	sluice demo [--duration D] [--clients N] [--json]
//	    the main job end to end on loopback, on an embedded configuration
//	sluice demo quota|tiers [--duration D] [--json]
//	    server-side limits (naive and smart limits clients), Charon's burst tiers and semaphores
//	sluice simulate [--scenario NAME|all|FILE] [--seed N] [--out DIR] [--json]
//	    the tree on virtual time, the design's scenarios
//	sluice envoy-ratelimit
//	    envoyproxy/ratelimit's drop-in: its environment, its ports (also as a binary named ratelimit)
//	sluice status --server ADDR [--json]
//	    a server's status page as tables
//	sluice health --server ADDR [--live]
//	    exit 0 if a server is ready (/readyz; with --live, /healthz), 1 if not
//	sluice config validate FILE...
//	    check configuration files, every error named
//	sluice config convert --from quotaservice|envoy-ratelimit PATH
//	    print Sluice's configuration for Square's quota service's or envoyproxy/ratelimit's
//	sluice get --server ADDR --resource R --wants W
//	    one GetCapacity, as a client would send it
//	sluice bench --server ADDR --clients N --resources M --duration D
//	    load a server with GetCapacity requests and report rate and latency
//	sluice bench watch --server ADDR --holders N
//	    the cost of pushed leases: memory per Watch stream, pushes per shift, CPU per push
//	sluice shell --server ADDR
//	    an interactive client: get, release, show, master
//	sluice admin get|set|delete|history|diff|rollback [--server URL]
//	    read and change a server's configuration at runtime (the admin API)
//
// (sluice workload, hidden, is a load-generating client process for the
// tests.) Every subcommand has --help.
package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	_ "time/tzdata" // the zones of calendar limits, in images without /usr/share/zoneinfo
)

func main() {
	root := newRoot()
	if filepath.Base(os.Args[0]) == upstreamName {
		// Run as envoyproxy/ratelimit's /bin/ratelimit: its arguments
		// are envoy-ratelimit's.
		root.SetArgs(append([]string{"envoy-ratelimit"}, os.Args[1:]...))
	}
	if err := root.Execute(); err != nil {
		if !errors.As(err, new(quietError)) { // else already printed
			fmt.Fprintln(os.Stderr, "sluice:", err)
		}
		os.Exit(1)
	}
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "sluice",
		Short:         "Sluice: global distributed client-side rate limiting (Doorman-compatible)",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newServerCmd(), newDemoCmd(), newSimulateCmd(), newStatusCmd(),
		newConfigCmd(), newGetCmd(), newBenchCmd(), newShellCmd(), newAdminCmd(), newWorkloadCmd(), newHealthCmd(), newEnvoyRatelimitCmd())
	return root
}
