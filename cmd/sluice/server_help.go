package main

import (
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// The titles of sluice server's flag groups, in the order --help lists
// them: the order of the concerns of server.Config.
const (
	groupListen     = "Listening and TLS"
	groupRepository = "Resource repository: templates, limits, copies, Envoy's rules"
	groupLeases     = "Leases: the server's id, its parent, pushed leases"
	groupEtcd       = "etcd and the election"
	groupStore      = "Shared store (Redis)"
	groupSessions   = "Copy-limited sessions and their fleet"
	groupEnvoy      = "Envoy's rate limit service"
	groupRLQS       = "Envoy's Rate Limit Quota Service (RLQS)"
	groupAdmin      = "Admin API (/admin/v1/)"
	groupLogs       = "Logs and debugging"
	groupOther      = "Other flags"
)

// flagGroups is every group, in order.
var flagGroups = []string{groupListen, groupRepository, groupLeases, groupEtcd, groupStore, groupSessions, groupEnvoy, groupRLQS, groupAdmin, groupLogs, groupOther}

// helpWidth is the widest line of a flag group's help: longer
// explanations wrap.
const helpWidth = 100

// groupKey is the flag annotation that holds a flag's group.
const groupKey = "sluice_group"

// in runs define, which defines flags on f, and puts the flags it
// defined in group.
func in(f *pflag.FlagSet, group string, define func()) {
	before := map[string]bool{}
	f.VisitAll(func(fl *pflag.Flag) { before[fl.Name] = true })
	define()
	f.VisitAll(func(fl *pflag.Flag) {
		if !before[fl.Name] {
			_ = f.SetAnnotation(fl.Name, groupKey, []string{group})
		}
	})
}

// groupOf returns fl's group (groupOther for a flag of none, such as
// cobra's --help).
func groupOf(fl *pflag.Flag) string {
	if g := fl.Annotations[groupKey]; len(g) == 1 {
		return g[0]
	}
	return groupOther
}

// groupedUsage prints cmd's usage with its flags under the titles of
// their groups, in flagGroups' order and in each group in the order they
// were defined, wrapped at helpWidth.
func groupedUsage(cmd *cobra.Command) error {
	w := cmd.OutOrStderr()
	fmt.Fprintf(w, "Usage:\n  %s\n", cmd.UseLine())
	cmd.Flags().SortFlags = false
	for _, g := range flagGroups {
		fs := pflag.NewFlagSet(g, pflag.ContinueOnError)
		fs.SortFlags = false
		cmd.Flags().VisitAll(func(fl *pflag.Flag) {
			if groupOf(fl) == g {
				fs.AddFlag(fl)
			}
		})
		if fs.HasFlags() {
			fmt.Fprintf(w, "\n%s:\n%s", g, fs.FlagUsagesWrapped(helpWidth))
		}
	}
	fmt.Fprintln(w, "\nEvery flag is explained in full in docs/running.md, \"Flags, environment and logs\".")
	return nil
}
