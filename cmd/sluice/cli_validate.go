package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/sluice-rl/sluice/limits/limitsyaml"
	"github.com/sluice-rl/sluice/limits/rls"
	"github.com/sluice-rl/sluice/resources"
)

func newConfigCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "config", Short: "Work with resource repository files"}
	var quota, envoy bool
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
With --envoy-ratelimit they are envoyproxy/ratelimit's configuration, files
or directories of them (their *.yaml and *.yml files), read as one: a domain
defined twice is an error naming both files.
The exit code is 1 if any file is invalid.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, files []string) error {
			if envoy {
				return validateEnvoy(cmd, files)
			}
			bad := 0
			for _, f := range files {
				parse := resources.Parse
				if quota {
					parse = resources.ParseQuotaService
				}
				data, err := os.ReadFile(f)
				var r *resources.Repository
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
	validate.Flags().BoolVar(&envoy, "envoy-ratelimit", false, "the files (or directories) are envoyproxy/ratelimit's configuration")
	validate.MarkFlagsMutuallyExclusive("quotaservice", "envoy-ratelimit")
	cmd.AddCommand(validate, newConvertCmd())
	return cmd
}

// newConvertCmd is `sluice config convert`.
func newConvertCmd() *cobra.Command {
	var from string
	cmd := &cobra.Command{
		Use:   "convert --from quotaservice|envoy-ratelimit PATH",
		Short: "Print Sluice's configuration for a peer's: Square's quota service YAML, or envoyproxy/ratelimit's",
		Long: `convert reads a peer's configuration and prints Sluice's own (YAML on
standard output, for sluice server --config) with the same behaviour:

  --from quotaservice      PATH is Square's quota service YAML (what
                           --quotaservice-config reads); the output is a
                           limits section, every bucket with all its fields
                           and the quota service's defaults applied.
  --from envoy-ratelimit   PATH is envoyproxy/ratelimit's configuration, a
                           file or a directory of them (what
                           --envoy-ratelimit-config reads); the output is an
                           envoy_ratelimit section holding each domain as it
                           is.

Comments move with what they annotate. The output is checked as the server
would load it before it is printed; an invalid input prints every error,
naming its field, and exits 1.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			out, err := convertConfig(from, args[0])
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(out)
			return err
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "the input's format: quotaservice or envoy-ratelimit")
	_ = cmd.MarkFlagRequired("from")
	return cmd
}

// convertConfig returns Sluice's configuration for the peer's at path
// (from: quotaservice or envoy-ratelimit), checked by resources.Parse.
func convertConfig(from, path string) ([]byte, error) {
	var key string
	var section *yaml.Node
	var err error
	switch from {
	case "quotaservice":
		var data []byte
		if data, err = os.ReadFile(path); err == nil {
			key = "limits"
			section, err = limitsyaml.QuotaServiceSection(data)
		}
	case "envoy-ratelimit":
		key = "envoy_ratelimit"
		section, err = limitsyaml.EnvoySection(path)
	default:
		return nil, fmt.Errorf("--from %q: want quotaservice or envoy-ratelimit", from)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	doc := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Content: []*yaml.Node{
		{Kind: yaml.ScalarNode, Tag: "!!str", Value: key,
			HeadComment: fmt.Sprintf("# sluice config convert --from %s %s", from, filepath.Base(path))},
		section,
	}}
	out, err := limitsyaml.Encode(doc)
	if err != nil {
		return nil, err
	}
	if _, err := resources.Parse(out); err != nil {
		return nil, fmt.Errorf("the conversion of %s does not load (a bug in convert; please report it): %w", path, err)
	}
	return out, nil
}

// validateEnvoy checks envoyproxy/ratelimit's files and directories as
// one configuration: each path's domains, or every error found.
func validateEnvoy(cmd *cobra.Command, paths []string) error {
	out := cmd.OutOrStdout()
	var domains []*rls.Domain
	bad := 0
	for _, p := range paths {
		c, err := limitsyaml.LoadEnvoyRateLimit(p)
		if err != nil {
			bad++
			fmt.Fprintf(out, "%s: invalid:\n", p)
			for _, e := range flatten(err) {
				for line := range strings.SplitSeq(e.Error(), "\n") { // (a file's errors, one a line)
					fmt.Fprintf(out, "  %s\n", line)
				}
			}
			continue
		}
		names := c.Names()
		rules := 0
		for _, n := range names {
			d := c.Domain(n)
			domains = append(domains, d)
			rules += d.Rules()
		}
		fmt.Fprintf(out, "%s: ok (%s: %s; %s)\n", p, plural(len(names), "domain"), strings.Join(names, ", "), plural(rules, "rule"))
	}
	if bad > 0 {
		return fmt.Errorf("%d of %d paths invalid", bad, len(paths))
	}
	if _, err := rls.NewConfig(domains...); err != nil {
		fmt.Fprintf(out, "together: invalid: %v\n", err)
		return err
	}
	return nil
}

// plural returns "1 rule", "2 rules".
func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
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
