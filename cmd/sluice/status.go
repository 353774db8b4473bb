package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluice-rl/sluice/internal/discovery"
	"github.com/sluice-rl/sluice/server/status"
)

func newStatusCmd() *cobra.Command {
	var (
		rf                    rpcFlags
		prefix, regex, sortBy string
		desc, asJSON          bool
	)
	cmd := &cobra.Command{
		Use:   "status --server ADDR",
		Short: "Show a server's status: identity, mastership, parent, resources",
		Long: `status reads a server's /debug/status page as JSON and prints it as tables: the
server (id, version, uptime, mastership, election, readiness, parent link) and its
resources (capacity, Σ has, Σ wants, clients, learning mode, safe capacity),
filtered by --prefix/--regex and sorted by --sort (a column: id, template,
algorithm, capacity, sum_has, sum_wants, clients, learning, safe_capacity).
--json prints the JSON as the server sent it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			addr := rf.server
			cfg, err := rf.tlsConfig()
			if err != nil {
				return err
			}
			hc := &http.Client{Timeout: 10 * time.Second, Transport: discovery.Transport(cfg, true)}
			q := url.Values{"format": {"json"}}
			for k, v := range map[string]string{"prefix": prefix, "regex": regex, "sort": sortBy} {
				if v != "" {
					q.Set(k, v)
				}
			}
			if desc {
				q.Set("desc", "1")
			}
			u := addr
			if !strings.Contains(u, "://") {
				u = discovery.Scheme(cfg) + "://" + u
			}
			req, err := http.NewRequestWithContext(context.Background(), "GET", u+"/debug/status?"+q.Encode(), nil)
			if err != nil {
				return err
			}
			resp, err := hc.Do(req)
			if err != nil {
				return fmt.Errorf("status of %s: %w", addr, err)
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
			if err != nil {
				return err
			}
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("status of %s: %s: %s", addr, resp.Status, strings.TrimSpace(string(body)))
			}
			if asJSON {
				_, err := cmd.OutOrStdout().Write(body)
				return err
			}
			var st status.ServerStatus
			if err := json.Unmarshal(body, &st); err != nil {
				return fmt.Errorf("status of %s: %w", addr, err)
			}
			return printStatus(cmd.OutOrStdout(), &st)
		},
	}
	rf.add(cmd)
	f := cmd.Flags()
	f.StringVar(&prefix, "prefix", "", "only resources whose id starts with this")
	f.StringVar(&regex, "regex", "", "only resources whose id matches this regular expression")
	f.StringVar(&sortBy, "sort", "id", "sort resources by this column")
	f.BoolVar(&desc, "desc", false, "sort descending")
	f.BoolVar(&asJSON, "json", false, "print the server's JSON")
	return cmd
}

func printStatus(w io.Writer, st *status.ServerStatus) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	master := "master"
	if !st.IsMaster {
		master = "not master; master " + st.Master
		if st.Master == "" {
			master = "not master; master unknown"
		}
	}
	ready := "yes"
	if !st.Ready {
		ready = "no"
	}
	if st.Draining {
		ready += " (draining)"
	}
	fmt.Fprintf(tw, "server\t%s at %s, version %s, up %v\n", st.ID, st.Address, st.Version, time.Duration(st.UptimeSeconds*float64(time.Second)).Round(time.Second))
	fmt.Fprintf(tw, "mastership\t%s (%s)\n", master, st.Election)
	fmt.Fprintf(tw, "ready\t%s\n", ready)
	if p := st.Parent; p != nil {
		last := "never"
		if !p.LastOK.IsZero() {
			last = time.Since(p.LastOK).Round(time.Second).String() + " ago"
		}
		fmt.Fprintf(tw, "parent\t%s of %s, last answer %s %s\n", p.Current, strings.Join(p.Addresses, ","), last, p.LastError)
	}
	if c := st.Config; c != nil {
		fmt.Fprintf(tw, "config\t%d templates, sha256 %s\n", len(c.Templates), c.Hash)
	}
	fmt.Fprintf(tw, "resources\t%d of %d\n\n", len(st.Resources), st.Total)
	fmt.Fprintln(tw, "ID\tTEMPLATE\tALGORITHM\tCAPACITY\tΣ HAS\tΣ WANTS\tCLIENTS\tLEARNING\tSAFE")
	for _, r := range st.Resources {
		learning := "no"
		if r.Learning {
			learning = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", r.ID, r.Template, r.Algorithm, num(r.Capacity), num(&r.SumHas), num(&r.SumWants), r.Clients, learning, num(r.SafeCapacity))
	}
	return tw.Flush()
}

func num(p *float64) string {
	if p == nil {
		return "∞"
	}
	return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.3f", *p), "0"), ".")
}
