package identity

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

func cert(cn string, uris ...string) *x509.Certificate {
	c := &x509.Certificate{Subject: pkix.Name{CommonName: cn}}
	for _, u := range uris {
		pu, _ := url.Parse(u)
		c.URIs = append(c.URIs, pu)
	}
	return c
}

func TestOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		cert *x509.Certificate
		want string
		err  string
	}{
		{"CN", cert("alice"), "alice", ""},
		{"SPIFFE before CN", cert("alice", "spiffe://example.org/ns/shop/sa/checkout"), "spiffe://example.org/ns/shop/sa/checkout", ""},
		{"other URIs ignored", cert("alice", "https://example.org/alice"), "alice", ""},
		{"SPIFFE scheme in capitals", cert("", "SPIFFE://example.org/a"), "spiffe://example.org/a", ""},
		{"two SPIFFE IDs", cert("alice", "spiffe://example.org/a", "spiffe://example.org/b"), "", "2 SPIFFE URI SANs"},
		{"nothing", cert(""), "", "neither a SPIFFE URI SAN nor a subject CN"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Of(tc.cert)
			if got != tc.want || (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Of = %q, %v; want %q, error with %q", got, err, tc.want, tc.err)
			}
		})
	}
}

func TestOwns(t *testing.T) {
	for _, tc := range []struct {
		identity, id string
		want         bool
	}{
		{"alice", "alice", true},
		{"alice", "alice/worker-1", true},
		{"alice", "alice/a/b", true},
		{"alice", "alice/", false},
		{"alice", "alicia", false},
		{"alice", "alice-2", false},
		{"alice", "bob", false},
		{"alice", "", false},
		{"spiffe://td/a", "spiffe://td/a/pod-1", true},
		{"spiffe://td/a", "spiffe://td/ab", false},
	} {
		if got := Owns(tc.identity, tc.id); got != tc.want {
			t.Errorf("Owns(%q, %q) = %v, want %v", tc.identity, tc.id, got, tc.want)
		}
	}
}

func TestMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, name string
		want          bool
	}{
		{"**", "anything/at/all", true},
		{"*", "fair", true},
		{"*", "fair/tls", false},
		{"fair/*", "fair/tls", true},
		{"fair/*", "fair/tls/x", false},
		{"fair/**", "fair", true},
		{"fair/**", "fair/tls/x", true},
		{"fair/**", "fairer/x", false},
		{"f*/**", "fa/b/c", true},
		{"checkout", "checkout", true},
		{"checkout", "checkout2", false},
		{"[", "[", false},
	} {
		if got := Match(tc.pattern, tc.name); got != tc.want {
			t.Errorf("Match(%q, %q) = %v, want %v", tc.pattern, tc.name, got, tc.want)
		}
	}
}

const policy = `# the identities and what they may use
identities:
  alice:
    lease: [fixed/*]
    allow: ["api/**"]
  spiffe://example.org/bob:
    reserve: [sandboxes]
    ratelimit: [edge]
  alice/batch:
    lease: ["**"]
  carol: # nothing
default:
  allow: [public/*]
fleet: [spiffe://example.org/sluice/*]
`

func TestPolicyAllows(t *testing.T) {
	p, err := ParsePolicy([]byte(policy))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		who      string
		api      API
		resource string
		want     bool
	}{
		{"alice", Lease, "fixed/a", true},
		{"alice", Lease, "other/a", false},
		{"alice", Allow, "api/x/y", true},
		{"alice", Allow, "public/a", false}, // named: the default is not hers
		{"alice", Reserve, "sandboxes", false},
		{"spiffe://example.org/bob", Reserve, "sandboxes", true},
		{"spiffe://example.org/bob", RateLimit, "edge", true},
		{"spiffe://example.org/bob", RateLimit, "core", false},
		{"carol", Allow, "public/a", false},
		{"dave", Allow, "public/a", true},
		{"dave", Lease, "public/a", false},
	} {
		if got := p.Allows(tc.who, tc.api, tc.resource); got != tc.want {
			t.Errorf("Allows(%q, %v, %q) = %v, want %v", tc.who, tc.api, tc.resource, got, tc.want)
		}
	}
	if !p.fleet("spiffe://example.org/sluice/s1") || p.fleet("spiffe://example.org/bob") {
		t.Error("fleet: want sluice/* in, bob out")
	}
	if got := p.longerOwner("alice", "alice/batch/7"); got != "alice/batch" {
		t.Errorf("longerOwner(alice, alice/batch/7) = %q, want alice/batch", got)
	}
	if got := p.longerOwner("alice", "alice/web"); got != "" {
		t.Errorf("longerOwner(alice, alice/web) = %q, want none", got)
	}
	empty, err := ParsePolicy([]byte("# nothing yet\n"))
	if err != nil || empty.Allows("alice", Allow, "x") {
		t.Errorf("an empty policy: %v, %v; want one that grants nothing", empty, err)
	}
}

func TestParsePolicyErrors(t *testing.T) {
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"unknown top key", "identity: {}\n", "identity (line 1): unknown key; want one of identities, default, fleet"},
		{"unknown API", "identities:\n  alice:\n    leases: [a]\n", "identities.alice.leases (line 3): unknown key; want one of lease, allow, reserve, ratelimit"},
		{"bad pattern", "identities:\n  alice:\n    lease: [ok, \"[\"]\n", `identities.alice.lease[1] (line 3): bad pattern "["`},
		{"not a list", "identities:\n  alice:\n    lease: fixed/*\n", "identities.alice.lease (line 3): want a list of patterns"},
		{"identity twice", "identities:\n  alice: {}\n  alice: {}\n", "identities.alice (line 3): given twice (first on line 2)"},
		{"empty pattern", "fleet: [\"\"]\n", "fleet[0] (line 1): an empty pattern matches nothing"},
		{"not a mapping", "- a\n", "the file (line 1): want a mapping"},
		{"YAML", "identities: [\n", "yaml:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParsePolicy([]byte(tc.yaml))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ParsePolicy: %v, want an error with %q", err, tc.want)
			}
		})
	}
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte("identities:\n  alice:\n    lease: [\"[\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadPolicy(path); err == nil || !strings.Contains(err.Error(), path+": identities.alice.lease[0] (line 3)") {
		t.Errorf("LoadPolicy: %v, want the file, the field and the line", err)
	}
}

// withPeer returns a context whose grpc-go peer presented c.
func withPeer(c *x509.Certificate) context.Context {
	st := tls.ConnectionState{HandshakeComplete: true}
	if c != nil {
		st.PeerCertificates = []*x509.Certificate{c}
	}
	return peer.NewContext(context.Background(), &peer.Peer{AuthInfo: credentials.TLSInfo{State: st}})
}

func TestAuthorizer(t *testing.T) {
	p, err := ParsePolicy([]byte(policy))
	if err != nil {
		t.Fatal(err)
	}
	a := New(Options{Policy: func() *Policy { return p }, Fleet: []string{"sluice-server"},
		Setting: func(path string) string {
			return map[string]string{"Listen.Identity.Source": "--client-identity"}[path]
		}})
	alice := withPeer(cert("alice"))
	// The codes the server's edge gives a *Refusal (server/internal/authz).
	code := func(err error) codes.Code {
		var r *Refusal
		switch {
		case err == nil:
			return codes.OK
		case !errors.As(err, &r):
			return codes.Unknown
		case r.Unauthenticated:
			return codes.Unauthenticated
		}
		return codes.PermissionDenied
	}

	if who, err := a.Client(alice, "client_id", "alice/worker-1"); who != "alice" || err != nil {
		t.Errorf("alice as alice/worker-1: %q, %v", who, err)
	}
	_, err = a.Client(alice, "client_id", "bob")
	if code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), `client_id "bob"`) || !strings.Contains(err.Error(), `identity "alice"`) ||
		!strings.Contains(err.Error(), "--client-identity cert") {
		t.Errorf("alice as bob: %v, want PermissionDenied naming both and the flag", err)
	}
	if _, err := a.Client(alice, "client_id", "alice/batch/3"); code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), `identity "alice/batch"`) {
		t.Errorf("alice as alice/batch/3: %v, want PermissionDenied: alice/batch's", err)
	}
	if err := a.Use(alice, Lease, "fixed/a"); err != nil {
		t.Errorf("alice leasing fixed/a: %v", err)
	}
	if err := a.Use(alice, Reserve, "sandboxes"); code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), `identity "alice" may not reserve copies of "sandboxes"`) {
		t.Errorf("alice reserving: %v, want PermissionDenied", err)
	}
	if err := a.UsesAny("alice", Lease); err != nil {
		t.Errorf("alice leasing anything: %v", err)
	}
	if err := a.UsesAny("alice", Reserve); code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), `identity "alice" may not reserve copies of anything`) {
		t.Errorf("alice reserving anything: %v, want PermissionDenied", err)
	}
	if _, err := a.Caller(withPeer(nil)); code(err) != codes.Unauthenticated {
		t.Errorf("no certificate: %v, want Unauthenticated", err)
	}
	if _, err := a.Caller(withPeer(cert(""))); code(err) != codes.PermissionDenied {
		t.Errorf("a certificate naming no one: %v, want PermissionDenied", err)
	}
	// Forwarded: believed from a fleet server only.
	for _, tc := range []struct {
		ctx     context.Context
		claimed string
		want    string
		code    codes.Code
	}{
		{alice, "", "alice", codes.OK},
		{alice, "bob", "", codes.PermissionDenied},
		{withPeer(cert("sluice-server")), "bob", "bob", codes.OK},
		{withPeer(cert("", "spiffe://example.org/sluice/s2")), "bob", "bob", codes.OK},
	} {
		if got, err := a.Forwarded(tc.ctx, tc.claimed); got != tc.want || code(err) != tc.code {
			t.Errorf("Forwarded(%q) = %q, %v; want %q, %v", tc.claimed, got, err, tc.want, tc.code)
		}
	}
	// Off: everything goes, at no cost.
	var off *Authorizer
	if who, err := off.Client(alice, "client_id", "bob"); who != "" || err != nil || off.Use(alice, Lease, "x") != nil || off.UseAs("x", Lease, "x") != nil {
		t.Error("a nil Authorizer refused something")
	}
	// No policy: identities are checked, resources are not.
	np := New(Options{})
	if err := np.Use(alice, Reserve, "anything"); err != nil {
		t.Errorf("no policy: %v", err)
	}
	if _, err := np.Client(alice, "client_id", "bob"); code(err) != codes.PermissionDenied {
		t.Errorf("no policy, alice as bob: %v", err)
	}
}

// The cost of identities on a request: the caller's identity from its
// certificate (a CN, a SPIFFE ID), the id check and one policy lookup;
// and with identities off (a nil Authorizer).
func BenchmarkAuthorize(b *testing.B) {
	p, err := ParsePolicy([]byte(policy))
	if err != nil {
		b.Fatal(err)
	}
	withPolicy := New(Options{Policy: func() *Policy { return p }})
	for _, bc := range []struct {
		name string
		a    *Authorizer
		cert *x509.Certificate
		id   string
		api  API
		res  string
	}{
		{"off", nil, cert("alice"), "alice/worker-1", Lease, "fixed/a"},
		{"CN", New(Options{}), cert("alice"), "alice/worker-1", Lease, "fixed/a"},
		{"SPIFFE", New(Options{}), cert("", "spiffe://example.org/bob"), "spiffe://example.org/bob/worker-1", Reserve, "sandboxes"},
		{"CN and policy", withPolicy, cert("alice"), "alice/worker-1", Lease, "fixed/a"},
		{"SPIFFE and policy", withPolicy, cert("", "spiffe://example.org/bob"), "spiffe://example.org/bob/worker-1", Reserve, "sandboxes"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			ctx := withPeer(bc.cert)
			b.ReportAllocs()
			for b.Loop() {
				who, err := bc.a.Client(ctx, "client_id", bc.id)
				if err == nil {
					err = bc.a.UseAs(who, bc.api, bc.res)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
