package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/sluice-rl/sluice/config"
)

func newConfigCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "config", Short: "Work with resource configuration files"}
	var quota bool
	validate := &cobra.Command{
		Use:   "validate FILE...",
		Short: "Check configuration files; print every error, naming template and field",
		Long: `validate parses each file as the server would (strict YAML, every field
checked) and prints "FILE: ok (N templates, M limits resources, sha256 H)" or
every error found, each naming the template (index and identifier_glob) or the
limits field by its path, and the field; then what loading normalized (Charon's
rules: tiers with no active time removed, windows shortened to the active time,
active times trimmed to whole windows, copy limits above the global limit
lowered to it), a line each. With --quotaservice the files are in
Square's quota service format (what sluice server --quotaservice-config reads).
The exit code is 1 if any file is invalid.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, files []string) error {
			bad := 0
			for _, f := range files {
				parse := config.Parse
				if quota {
					parse = config.ParseQuotaService
				}
				data, err := os.ReadFile(f)
				var r *config.Repository
				if err == nil {
					r, err = parse(data)
				}
				if err != nil {
					bad++
					fmt.Fprintf(cmd.OutOrStdout(), "%s: invalid:\n", f)
					for _, e := range flatten(err) {
						fmt.Fprintf(cmd.OutOrStdout(), "  %v\n", e)
					}
					continue
				}
				n := 0
				if r.Limits() != nil {
					n = len(r.Limits().Resources)
				}
				if r.Copies() != nil {
					n += len(r.Copies().Resources)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s: ok (%d templates, %d limits resources, sha256 %s)\n", f, r.Len(), n, r.Hash())
				for _, note := range r.Notes() {
					fmt.Fprintf(cmd.OutOrStdout(), "  normalized: %s\n", note)
				}
			}
			if bad > 0 {
				return fmt.Errorf("%d of %d files invalid", bad, len(files))
			}
			return nil
		},
	}
	validate.Flags().BoolVar(&quota, "quotaservice", false, "the files are in Square's quota service format")
	cmd.AddCommand(validate)
	return cmd
}

// flatten returns the errors joined in err, one per problem.
func flatten(err error) []error {
	var out []error
	var walk func(error)
	walk = func(e error) {
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, x := range j.Unwrap() {
				walk(x)
			}
			return
		}
		out = append(out, e)
	}
	walk(err)
	if len(out) == 0 {
		out = append(out, errors.Unwrap(err))
	}
	return out
}
