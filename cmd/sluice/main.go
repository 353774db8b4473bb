// Command sluice is Sluice's one binary: the capacity server and the demo.
//
//	sluice server --config FILE --listen ADDR
//	sluice demo [--duration D] [--clients N] [--json]
//	sluice simulate [--scenario NAME|all|FILE] [--seed N] [--out DIR] [--json]
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func main() {
	if err := newRoot().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "sluice:", err)
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
		newConfigCmd(), newGetCmd(), newBenchCmd(), newShellCmd(), newWorkloadCmd())
	return root
}
