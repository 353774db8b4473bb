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
	cmd.AddCommand(&cobra.Command{
		Use:   "validate FILE...",
		Short: "Check configuration files; print every error, naming template and field",
		Long: `validate parses each file as the server would (strict YAML, every field
checked) and prints "FILE: ok (N templates, sha256 H)" or every error found, each
naming the template (index and identifier_glob) and the field. The exit code is 1
if any file is invalid.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, files []string) error {
			bad := 0
			for _, f := range files {
				data, err := os.ReadFile(f)
				var r *config.Repository
				if err == nil {
					r, err = config.Parse(data)
				}
				if err != nil {
					bad++
					fmt.Fprintf(cmd.OutOrStdout(), "%s: invalid:\n", f)
					for _, e := range flatten(err) {
						fmt.Fprintf(cmd.OutOrStdout(), "  %v\n", e)
					}
					continue
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s: ok (%d templates, sha256 %s)\n", f, r.Len(), r.Hash())
			}
			if bad > 0 {
				return fmt.Errorf("%d of %d files invalid", bad, len(files))
			}
			return nil
		},
	})
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
