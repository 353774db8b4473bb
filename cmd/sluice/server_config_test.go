package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/sluice-rl/sluice/server"
)

// TestFlagOf: every Config field that server.New's messages name maps to
// flags that exist, so a message never speaks of a field the user
// cannot see.
func TestFlagOf(t *testing.T) {
	var sf serverFlags
	f := pflag.NewFlagSet("server", pflag.ContinueOnError)
	sf.register(f)
	for _, field := range server.FieldNames {
		flags, ok := flagOf[field]
		if !ok {
			t.Errorf("Config field %s has no flag in flagOf", field)
			continue
		}
		for fl := range strings.SplitSeq(flags, ", ") {
			name, _, _ := strings.Cut(strings.TrimPrefix(fl, "--"), "=")
			if f.Lookup(name) == nil {
				t.Errorf("flagOf[%s]: no flag --%s", field, name)
			}
		}
	}
}

// TestServerFlagErrors: sluice server refuses a bad flag before it
// serves, exiting non-zero with a message that names the flags at fault,
// not server.Config's fields.
func TestServerFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--election", "etcd", "--election-key", "/k"}, "--etcd-endpoints: required with --election etcd"},
		{[]string{"--election", "etcd", "--etcd-endpoints", "http://127.0.0.1:1"}, "--election-key: required with --election etcd"},
		{[]string{"--config", "etcd:/sluice/config"}, "--etcd-endpoints: required with --config etcd:/KEY"},
		{[]string{"--election", "zookeeper"}, `--election: "zookeeper", want standalone or etcd`},
		{[]string{"--redis", "redis://127.0.0.1:1/0", "--redis-timeout", "-1s"}, "--redis-timeout: -1s, want a positive duration"},
		{[]string{"--redis", "redis://127.0.0.1:1/0", "--redis-cluster", "127.0.0.1:2"}, "--redis-cluster: set with --redis"},
		{[]string{"--tls-cert", "/nonexistent/c.pem", "--tls-key", "/nonexistent/k.pem"}, "--tls-cert, --tls-key, --tls-client-ca: tls: loading /nonexistent/c.pem"},
		{[]string{"--parent", "127.0.0.1:1", "--parent-tls-cert", "c.pem"}, "--parent-tls-ca, --parent-tls-cert, --parent-tls-key: tls: a client certificate needs both"},
		{[]string{"--envoy-near-limit-ratio", "2"}, "--envoy-near-limit-ratio: 2, want a fraction in (0, 1]"},
		{[]string{"--envoy-algorithm", "leaky"}, "--envoy-algorithm: "},
		{[]string{"--rlqs-unconfigured", "allow_all"}, `--rlqs-unconfigured: "allow_all", want ALLOW_ALL or DENY_ALL`},
		{[]string{"--grace", "-1s"}, "--grace: -1s, want a positive duration"},
		{[]string{"--client-identity", "cert"}, "--client-identity: cert needs client certificates: set --tls-client-ca (mTLS)"},
		{[]string{"--client-identity", "spiffe"}, `--client-identity: "spiffe", want cert`},
		{[]string{"--client-policy", "policy.yaml"}, "--client-policy: set without --client-identity"},
		{[]string{"--admin-token-file", "/nonexistent/tokens"}, "--admin-token-file: token file: stat /nonexistent/tokens"},
		{[]string{"--admin-trust-forwarded-user", "not-an-address"}, "--admin-trust-forwarded-user: "},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out, err := exec.Command(binary, append([]string{"server", "--listen", "127.0.0.1:0"}, tc.args...)...).CombinedOutput()
			if err == nil {
				t.Fatalf("sluice server %v: exit 0; output:\n%s", tc.args, out)
			}
			if !strings.Contains(string(out), tc.want) {
				t.Errorf("sluice server %v:\n%s\nwant it to say %q", tc.args, out, tc.want)
			}
			if strings.Contains(string(out), "Store.") || strings.Contains(string(out), "Etcd.") || strings.Contains(string(out), "Listen.") {
				t.Errorf("sluice server %v speaks of Config fields:\n%s", tc.args, out)
			}
		})
	}
}
