package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/sluice-rl/sluice/admin"
	"github.com/sluice-rl/sluice/admin/adminclient"
	"github.com/sluice-rl/sluice/admin/adminhttp"
	"github.com/sluice-rl/sluice/internal/discovery"
)

// quietError is an error whose message the command has already printed
// (a 409's line, the errors of an invalid change one per line): main
// exits with status 1 without printing it again.
type quietError struct{ error }

// adminCLIFlags are the connection flags of `sluice admin`.
type adminCLIFlags struct {
	server, token, tokenFile, user string
	caFile, certFile, keyFile      string
	dryRun, asJSON                 bool
	timeout                        time.Duration
}

// client returns the admin API client the flags describe.
func (f *adminCLIFlags) client() (*adminclient.Client, error) {
	cfg, err := (&rpcFlags{caFile: f.caFile, certFile: f.certFile, keyFile: f.keyFile}).tlsConfig()
	if err != nil {
		return nil, err
	}
	base := f.server
	if !strings.Contains(base, "://") {
		base = discovery.Scheme(cfg) + "://" + base
	}
	if _, err := url.Parse(base); err != nil {
		return nil, fmt.Errorf("--server: %w", err)
	}
	opts := []adminclient.Option{adminclient.WithHTTPClient(&http.Client{Timeout: f.timeout, Transport: discovery.Transport(cfg, true)})}
	tok := f.token
	if tok == "" && f.tokenFile != "" {
		if tok, err = readTokenFile(f.tokenFile); err != nil {
			return nil, err
		}
	}
	if tok == "" {
		tok = os.Getenv("SLUICE_ADMIN_TOKEN")
	}
	if tok != "" {
		opts = append(opts, adminclient.WithToken(tok))
	}
	if f.user != "" {
		opts = append(opts, adminclient.WithForwardedUser(f.user))
	}
	return adminclient.New(base, opts...), nil
}

// readTokenFile reads a bearer token from a file: the file's one word, or
// the TOKEN of its first "USER TOKEN" line ('#' comments and blank lines
// skipped), so that a line of the server's --admin-token-file works.
func readTokenFile(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("--token-file: %w", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if i := strings.Index(line, "#"); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		switch len(f) {
		case 0:
			continue
		case 1, 2:
			return f[len(f)-1], nil
		}
		return "", fmt.Errorf("--token-file %s: want TOKEN or USER TOKEN, got %d fields", path, len(f))
	}
	return "", fmt.Errorf("--token-file %s: no token in it", path)
}

func newAdminCmd() *cobra.Command {
	f := &adminCLIFlags{}
	cmd := &cobra.Command{
		Use:   "admin",
		Short: "Read and change a server's configuration at runtime (the admin API)",
		Long: `admin reads and changes the configuration of a running server through its admin
API (/admin/v1 on the server's port): its resource repository (--config) whole,
or one object of it:

  config                                   the whole document
  templates/GLOB                           a Doorman resource template (templates/db/*)
  limits/resources/NAME                    a resource of the limits section
  limits/resources/NAME/domains/DOMAIN     one of its domains (a bucket, a tier domain, a count)
  limits/resources/NAME/default            a token-bucket resource's default bucket
  limits/resources/NAME/template           its template (dynamic buckets)
  limits/namespaces/PREFIX                 a namespace prefix (limits/namespaces/open/)
  limits/global_default                    the global default bucket
  templates, limits/resources, limits/resources/NAME/domains, limits/namespaces: lists

Names are written as they are (a domain may hold '/': the first /domains/ splits
it from its resource); a path holding '%' is read path-escaped, as the API writes
it (limits/resources/a%2Fdomains).

Every change reads the current version first and is sent against it: when
someone else changed the configuration meanwhile, it is refused with
"configuration changed since you read it: version N now" (read again and
retry). An invalid change prints every error, one per line, each naming its
field. --dry-run validates and shows the normalized result and the diff,
storing nothing.

admin reset restores one counter to full, outside the document: an Envoy rule's
(--envoy-domain, --descriptor key=value,...), a limits bucket or burst-tier
domain (--resource, --domain), a quota service bucket (--namespace, --bucket);
audited like a change, with no version.

Writes need credentials: --token (or --token-file, or $SLUICE_ADMIN_TOKEN) for a
server with --admin-token-file, a client certificate (--tls-cert, --tls-key)
for one with --tls-client-ca, or a loopback connection to one with
--admin-insecure. --user sets X-Forwarded-User (the user recorded by an
--admin-insecure server, or by one that trusts this address as a proxy).`,
	}
	pf := cmd.PersistentFlags()
	server := os.Getenv("SLUICE_ADMIN_URL")
	if server == "" {
		server = "http://127.0.0.1:15000"
	}
	pf.StringVar(&f.server, "server", server, "the server's URL, or HOST:PORT (default $SLUICE_ADMIN_URL)")
	pf.StringVar(&f.token, "token", "", "bearer token (a token of the server's --admin-token-file; default $SLUICE_ADMIN_TOKEN)")
	pf.StringVar(&f.tokenFile, "token-file", "", "read the bearer token from this file (TOKEN, or a USER TOKEN line)")
	pf.StringVar(&f.user, "user", "", "send X-Forwarded-User: USER")
	pf.StringVar(&f.caFile, "tls-ca", "", "speak TLS, verifying the server with these CAs (PEM)")
	pf.StringVar(&f.certFile, "tls-cert", "", "client certificate (PEM) for mTLS: its subject CN is the user")
	pf.StringVar(&f.keyFile, "tls-key", "", "the private key of --tls-cert (PEM)")
	pf.BoolVar(&f.dryRun, "dry-run", false, "validate and show the normalized result and the diff; store nothing")
	pf.BoolVar(&f.asJSON, "json", false, "print the API's JSON answers")
	pf.DurationVar(&f.timeout, "timeout", 30*time.Second, "give up on a request after this long")
	cmd.AddCommand(adminGetCmd(f), adminSetCmd(f), adminDeleteCmd(f), adminHistoryCmd(f), adminDiffCmd(f), adminRollbackCmd(f), adminResetCmd(f))
	return cmd
}

// parseAdminObject reads an object path as the CLI takes it (see
// newAdminCmd); "" is the whole document.
func parseAdminObject(p string) (admin.Object, error) {
	p = strings.TrimPrefix(p, "/")
	p = strings.TrimPrefix(p, "admin/v1/")
	if p == "" || p == "config" {
		return admin.Object{}, nil
	}
	if strings.Contains(p, "%") {
		return admin.ParseObject(p)
	}
	bad := func() (admin.Object, error) { return admin.ParseObject(p) } // its error lists the paths
	switch {
	case p == "templates" || p == "templates/":
		return admin.Object{Kind: admin.KindTemplate}, nil
	case strings.HasPrefix(p, "templates/"):
		return admin.Template(strings.TrimPrefix(p, "templates/")), nil
	case p == "limits/global_default":
		return admin.GlobalDefault(), nil
	case p == "limits/namespaces" || p == "limits/namespaces/":
		return admin.Object{Kind: admin.KindNamespace}, nil
	case strings.HasPrefix(p, "limits/namespaces/"):
		return admin.Namespace(strings.TrimPrefix(p, "limits/namespaces/")), nil
	case p == "limits/resources" || p == "limits/resources/":
		return admin.Object{Kind: admin.KindResource}, nil
	case !strings.HasPrefix(p, "limits/resources/"):
		return bad()
	}
	rest := strings.TrimPrefix(p, "limits/resources/")
	if strings.HasPrefix(rest, "/") {
		return bad()
	}
	if name, domain, ok := strings.Cut(rest, "/domains/"); ok && name != "" {
		if domain == "" {
			return admin.Object{Kind: admin.KindDomain, Name: name}, nil
		}
		return admin.Domain(name, domain), nil
	}
	for suffix, kind := range map[string]admin.Kind{"/domains": admin.KindDomain, "/default": admin.KindDefault, "/template": admin.KindBucketTemplate} {
		if name, ok := strings.CutSuffix(rest, suffix); ok && name != "" {
			return admin.Object{Kind: kind, Name: name}, nil
		}
	}
	if rest = strings.TrimSuffix(rest, "/"); rest == "" {
		return bad()
	}
	return admin.Resource(rest), nil
}

// objectName is how the CLI writes an object (names unescaped).
func objectName(o admin.Object) string {
	s, err := url.PathUnescape(o.String())
	if err != nil {
		return o.String()
	}
	return s
}

// explain prints err as the CLI reports an admin API error, and returns
// the error for main: a 409 is the one line "configuration changed since
// you read it: version N now"; an invalid change, every error, one per
// line.
func explain(cmd *cobra.Command, err error) error {
	var (
		ce *admin.ConflictError
		ie *admin.InvalidError
	)
	switch {
	case errors.As(err, &ce):
		fmt.Fprintln(cmd.ErrOrStderr(), ce.Error())
		return quietError{err}
	case errors.As(err, &ie):
		for _, e := range ie.Errors {
			fmt.Fprintln(cmd.ErrOrStderr(), e)
		}
		return quietError{err}
	}
	return err
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// yamlOf writes a JSON value (an effective view) as YAML.
func yamlOf(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	var x any
	if err := json.Unmarshal(b, &x); err != nil {
		return string(b)
	}
	out, err := yaml.Marshal(x)
	if err != nil {
		return string(b)
	}
	return string(out)
}

func adminGetCmd(f *adminCLIFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "get [OBJECT]",
		Short: "Print the resource repository, one object (as written), or a list",
		Long: `get prints the whole resource repository (no OBJECT, or config), one object as
written in it (comments included), or the objects of a list (templates,
limits/resources, limits/resources/NAME/domains, limits/namespaces), one path a
line. The version read goes to standard error. --json prints the API's answer
(with each object's effective value: defaults applied and normalized).`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			var o admin.Object
			if len(args) == 1 {
				if o, err = parseAdminObject(args[0]); err != nil {
					return err
				}
			}
			ctx := cmd.Context()
			out := cmd.OutOrStdout()
			switch {
			case o.Kind == admin.KindDocument:
				cur, err := c.Config(ctx)
				if err != nil {
					return explain(cmd, err)
				}
				if f.asJSON {
					return printJSON(out, cur)
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "version %d (%s)\n", cur.Version, cur.Store)
				for _, e := range cur.Errors {
					fmt.Fprintln(cmd.ErrOrStderr(), "does not load:", e)
				}
				_, err = io.WriteString(out, cur.Document)
				return err
			case o.IsCollection():
				l, err := c.List(ctx, o)
				if err != nil {
					return explain(cmd, err)
				}
				if f.asJSON {
					return printJSON(out, l)
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "version %d\n", l.Version)
				for _, v := range l.Objects {
					fmt.Fprintln(out, objectName(v.Object))
				}
				return nil
			}
			v, ver, err := c.Get(ctx, o)
			if err != nil {
				return explain(cmd, err)
			}
			if f.asJSON {
				return printJSON(out, v)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "version %d\n", ver)
			_, err = io.WriteString(out, v.YAML)
			return err
		},
	}
}

// setValue sets the field at the dotted key path in mapping n (made when
// absent) to the YAML value text; an empty key replaces n's value.
func setValue(n *yaml.Node, key, text string) (*yaml.Node, error) {
	var v yaml.Node
	if err := yaml.Unmarshal([]byte(text), &v); err != nil {
		return nil, fmt.Errorf("--set %s=%s: %v", key, text, err)
	}
	val := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"}
	if len(v.Content) > 0 {
		val = v.Content[0]
	}
	if key == "" {
		return val, nil
	}
	if n == nil || n.Kind != yaml.MappingNode {
		n = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	}
	m := n
	parts := strings.Split(key, ".")
	for i, k := range parts {
		if k == "" {
			return nil, fmt.Errorf("--set %s: an empty field name", key)
		}
		j := -1
		for x := 0; x+1 < len(m.Content); x += 2 {
			if m.Content[x].Value == k {
				j = x
				break
			}
		}
		if i == len(parts)-1 {
			if j < 0 {
				m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: k}, val)
			} else {
				val.LineComment = m.Content[j+1].LineComment
				m.Content[j+1] = val
			}
			break
		}
		if j < 0 || m.Content[j+1].Kind != yaml.MappingNode {
			sub := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
			if j < 0 {
				m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: k}, sub)
			} else {
				m.Content[j+1] = sub
			}
			m = sub
			continue
		}
		m = m.Content[j+1]
	}
	return n, nil
}

// printResult prints what a change did, or for a dry run would do.
func printResult(cmd *cobra.Command, f *adminCLIFlags, res admin.Result) error {
	out := cmd.OutOrStdout()
	if f.asJSON {
		return printJSON(out, res)
	}
	what := string(res.Op) + " " + objectName(res.Object)
	if res.Op == admin.OpRollback {
		what = fmt.Sprintf("rollback to version %d", res.From)
	}
	switch {
	case res.Unchanged:
		fmt.Fprintf(out, "unchanged: %s leaves version %d as it is\n", what, res.Version)
	case res.DryRun:
		fmt.Fprintf(out, "dry run, nothing stored: %s against version %d\n", what, res.PreviousVersion)
	default:
		fmt.Fprintf(out, "version %d: %s (was version %d)\n", res.Version, what, res.PreviousVersion)
	}
	if res.DryRun && res.View != nil && res.View.Effective != nil {
		fmt.Fprintln(out, "normalized:")
		for _, line := range strings.Split(strings.TrimRight(yamlOf(res.View.Effective), "\n"), "\n") {
			fmt.Fprintln(out, "  "+line)
		}
	}
	for _, n := range res.Notes {
		fmt.Fprintln(out, "note:", n)
	}
	if res.Reformatted {
		fmt.Fprintln(out, "note: the stored document was written differently; it is rewritten in the admin API's YAML layout (form only)")
	}
	if res.Diff != "" {
		_, err := io.WriteString(out, res.Diff)
		return err
	}
	return nil
}

func adminSetCmd(f *adminCLIFlags) *cobra.Command {
	var (
		file string
		sets []string
	)
	cmd := &cobra.Command{
		Use:   "set OBJECT (-f FILE.yaml|FILE.json | --set KEY=VALUE ...)",
		Short: "Create or update one object (or, with config, replace the document)",
		Long: `set creates OBJECT or replaces its value: with the YAML or JSON of -f FILE (- for
standard input; .json files are sent as JSON), or with the current value changed
by --set KEY=VALUE (repeatable; KEY a dotted field path, e.g. fill_rate or
tiers; VALUE read as YAML: 10, 0.5, 1s, never, true, "[{limit: 5, window: 1s,
active: 1m}]"; an empty KEY, "--set =3", replaces the whole value: a
copy-limited domain's count). set config -f FILE replaces the whole document
with FILE, stored byte for byte.

The change is sent against the version read: see sluice admin --help.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if (file == "") == (len(sets) == 0) {
				return errors.New("want -f FILE or --set KEY=VALUE (one of them)")
			}
			o, err := parseAdminObject(args[0])
			if err != nil {
				return err
			}
			if o.IsCollection() && o.Kind != admin.KindTemplate {
				return fmt.Errorf("%s is a list; name one object", objectName(o))
			}
			c, err := f.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			var body []byte
			json := false
			if file != "" {
				if file == "-" {
					body, err = io.ReadAll(cmd.InOrStdin())
				} else {
					body, err = os.ReadFile(file)
					json = strings.EqualFold(filepath.Ext(file), ".json")
				}
				if err != nil {
					return err
				}
			}
			// The version the change is made against, and the value --set
			// starts from.
			var (
				version int64
				current *yaml.Node
			)
			if o.Kind == admin.KindDocument || o.IsCollection() {
				if len(sets) > 0 {
					return errors.New("--set changes one object; give the whole document with -f FILE")
				}
				cur, err := c.Config(ctx)
				if err != nil {
					return explain(cmd, err)
				}
				version = cur.Version
			} else {
				v, ver, err := c.Get(ctx, o)
				switch {
				case errors.Is(err, admin.ErrNotFound):
					cur, err := c.Config(ctx)
					if err != nil {
						return explain(cmd, err)
					}
					version = cur.Version
				case err != nil:
					return explain(cmd, err)
				default:
					version = ver
					var doc yaml.Node
					if err := yaml.Unmarshal([]byte(v.YAML), &doc); err == nil && len(doc.Content) > 0 {
						current = doc.Content[0]
					}
				}
			}
			for _, s := range sets {
				k, val, ok := strings.Cut(s, "=")
				if !ok {
					return fmt.Errorf("--set %s: want KEY=VALUE", s)
				}
				if current, err = setValue(current, strings.TrimSpace(k), val); err != nil {
					return err
				}
			}
			if len(sets) > 0 {
				if body, err = yaml.Marshal(current); err != nil {
					return err
				}
			}
			w := adminclient.WriteOptions{IfVersion: version, DryRun: f.dryRun}
			var res admin.Result
			switch {
			case o.Kind == admin.KindDocument:
				res, err = c.Replace(ctx, body, w)
			case o.IsCollection(): // templates: named by the body's identifier_glob
				res, err = c.Create(ctx, o, adminBody(body, json), w)
			default:
				w.Upsert = true
				res, err = c.Update(ctx, o, adminBody(body, json), w)
			}
			if err != nil {
				return explain(cmd, err)
			}
			return printResult(cmd, f, res)
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "the object's value (or, for config, the document): a YAML or .json file, - for standard input")
	cmd.Flags().StringArrayVar(&sets, "set", nil, "KEY=VALUE: set one field of the current value (repeatable)")
	return cmd
}

// adminBody is a request body for adminclient.Client: JSON as JSON, YAML
// (also for JSON written in a .yaml file) as YAML.
func adminBody(body []byte, asJSON bool) any {
	if asJSON {
		return json.RawMessage(body)
	}
	return body
}

func adminDeleteCmd(f *adminCLIFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "delete OBJECT",
		Short: "Delete one object",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o, err := parseAdminObject(args[0])
			if err != nil {
				return err
			}
			if o.Kind == admin.KindDocument || o.IsCollection() {
				return fmt.Errorf("%s: delete one object at a time", objectName(o))
			}
			c, err := f.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			_, version, err := c.Get(ctx, o)
			if err != nil {
				return explain(cmd, err)
			}
			res, err := c.Delete(ctx, o, adminclient.WriteOptions{IfVersion: version, DryRun: f.dryRun})
			if err != nil {
				return explain(cmd, err)
			}
			return printResult(cmd, f, res)
		},
	}
}

func adminHistoryCmd(f *adminCLIFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "history",
		Short: "List the kept versions: who changed what, when",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			es, err := c.History(cmd.Context())
			if err != nil {
				return explain(cmd, err)
			}
			if f.asJSON {
				return printJSON(cmd.OutOrStdout(), es)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "VERSION\tTIME\tUSER\tAUTH\tOP\tOBJECT")
			for _, a := range es {
				obj := a.Object
				if u, err := url.PathUnescape(obj); err == nil {
					obj = u
				}
				if a.Op == admin.OpRollback {
					obj += " (version " + strconv.FormatInt(a.From, 10) + ")"
				}
				when := ""
				if !a.Time.IsZero() {
					when = a.Time.UTC().Format(time.RFC3339)
				}
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", a.Version, when, dash(a.User), dash(a.Auth), a.Op, obj)
			}
			return tw.Flush()
		},
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// versionArg parses a version number argument.
func versionArg(s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%q: want a version number (see sluice admin history)", s)
	}
	return n, nil
}

func adminDiffCmd(f *adminCLIFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "diff N [M]",
		Short: "Show the unified diff from version N to version M (default: the current one)",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			from, err := versionArg(args[0])
			if err != nil {
				return err
			}
			var to int64
			if len(args) == 2 {
				if to, err = versionArg(args[1]); err != nil {
					return err
				}
			}
			c, err := f.client()
			if err != nil {
				return err
			}
			d, err := c.Diff(cmd.Context(), from, to)
			if err != nil {
				return explain(cmd, err)
			}
			if f.asJSON {
				return printJSON(cmd.OutOrStdout(), adminhttp.DiffBody{From: from, To: to, Diff: d})
			}
			_, err = io.WriteString(cmd.OutOrStdout(), d)
			return err
		},
	}
}

func adminRollbackCmd(f *adminCLIFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "rollback N",
		Short: "Store version N's document, byte for byte, as a new version",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := versionArg(args[0])
			if err != nil {
				return err
			}
			c, err := f.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			cur, err := c.Config(ctx)
			if err != nil {
				return explain(cmd, err)
			}
			res, err := c.Rollback(ctx, n, adminclient.WriteOptions{IfVersion: cur.Version, DryRun: f.dryRun})
			if err != nil {
				return explain(cmd, err)
			}
			return printResult(cmd, f, res)
		},
	}
}

// resetFlags are `sluice admin reset`'s: one group names what to reset.
type resetFlags struct {
	envoyDomain       string
	descriptors       []string
	resource, domain  string
	namespace, bucket string
}

// request returns the reset the flags name, or an error naming the
// flags: exactly one group (--envoy-domain with --descriptor, --resource
// with --domain, --namespace with --bucket), each complete.
func (r *resetFlags) request() (adminhttp.ResetRequest, error) {
	var req adminhttp.ResetRequest
	groups := 0
	if r.envoyDomain != "" || len(r.descriptors) > 0 {
		groups++
		if r.envoyDomain == "" || len(r.descriptors) == 0 {
			return req, errors.New("--envoy-domain and --descriptor go together")
		}
		e := &adminhttp.EnvoyReset{Domain: r.envoyDomain}
		for _, d := range r.descriptors {
			for _, pair := range strings.Split(d, ",") {
				k, v, ok := strings.Cut(pair, "=")
				if !ok || k == "" {
					return req, fmt.Errorf("--descriptor %s: %q: want KEY=VALUE[,KEY=VALUE...]", d, pair)
				}
				e.Descriptor = append(e.Descriptor, adminhttp.EnvoyEntry{Key: k, Value: v})
			}
		}
		req.Envoy = e
	}
	if r.resource != "" || r.domain != "" {
		groups++
		if r.resource == "" || r.domain == "" {
			return req, errors.New("--resource and --domain go together")
		}
		req.Limits = &adminhttp.LimitsReset{Resource: r.resource, Domain: r.domain}
	}
	if r.namespace != "" || r.bucket != "" {
		groups++
		if r.namespace == "" || r.bucket == "" {
			return req, errors.New("--namespace and --bucket go together")
		}
		req.Quota = &adminhttp.QuotaReset{Namespace: r.namespace, Bucket: r.bucket}
	}
	if groups != 1 {
		return req, errors.New("name one thing to reset: --envoy-domain D --descriptor KEY=VALUE[,KEY=VALUE...], --resource R --domain D, or --namespace N --bucket B")
	}
	return req, nil
}

func adminResetCmd(f *adminCLIFlags) *cobra.Command {
	r := &resetFlags{}
	cmd := &cobra.Command{
		Use:   "reset (--envoy-domain D --descriptor KEY=VALUE[,...] | --resource R --domain D | --namespace N --bucket B)",
		Short: "Restore one bucket to full: an Envoy rule's counters, a limits bucket or burst-tier domain, a quota service bucket",
		Long: `reset restores one bucket to full, at once (after a good login, from a support
desk): the next request finds it as a new one would. It names the bucket the way
a request does:

  --envoy-domain D --descriptor KEY=VALUE[,KEY=VALUE...]
      the counters of the Envoy rate limit rule this descriptor matches, as
      ShouldRateLimit matches it (each of the rule's limits; a burst_tiers rule's
      tier domain); --descriptor may be repeated, its entries joined in order
  --resource R --domain D
      the bucket of the limits engine a request for R and D draws from: the
      domain's own (named, below a prefix, from the template) or the resource's
      shared default; a burst-tier domain is made fresh (the resource's global
      limit keeps counting the hits it had)
  --namespace N --bucket B
      a bucket of the quota service (the same engine: namespace N is resource N)

It prints how many counters the server held and forgot: 0 is no error (the bucket
was full already). An unknown resource or a descriptor matching no rule with a
limit fails, naming it. A reset is a write: it needs the same credentials as
set, and the server audits it (user, authentication, what was reset), but it
changes no configuration: no version, no history, no --dry-run.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.dryRun {
				return errors.New("--dry-run: a reset changes no configuration and has no dry run")
			}
			req, err := r.request()
			if err != nil {
				return err
			}
			c, err := f.client()
			if err != nil {
				return err
			}
			n, err := c.Reset(cmd.Context(), req)
			if err != nil {
				return explain(cmd, err)
			}
			if f.asJSON {
				return printJSON(cmd.OutOrStdout(), adminhttp.ResetBody{Reset: n})
			}
			note := ""
			switch {
			case n == 0:
				note = "s (full already)"
			case n > 1:
				note = "s"
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "reset %s: %d counter%s\n", req.String(), n, note)
			return err
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&r.envoyDomain, "envoy-domain", "", "the Envoy rate limit domain of --descriptor")
	fl.StringArrayVar(&r.descriptors, "descriptor", nil, "a request descriptor's entries, KEY=VALUE[,KEY=VALUE...] in order (repeatable: appended)")
	fl.StringVar(&r.resource, "resource", "", "the limits resource (with --domain)")
	fl.StringVar(&r.domain, "domain", "", "the limits domain (with --resource)")
	fl.StringVar(&r.namespace, "namespace", "", "the quota service namespace (with --bucket)")
	fl.StringVar(&r.bucket, "bucket", "", "the quota service bucket name (with --namespace)")
	return cmd
}
