// Package identity binds the clients of a server with mTLS to the
// identities their certificates name (`sluice server --client-identity
// cert`): the identity of a certificate (Of: its SPIFFE URI SAN, else its
// subject CN), the check that a client uses its own identity as its
// client id (an Authorizer's Client), and the policy file that says which
// resources each identity may lease, Allow, reserve or rate limit through
// Envoy (Policy, LoadPolicy).
//
// The services under server/ take an *Authorizer in their options and ask
// it on every request; a nil *Authorizer (identities off) answers every
// question with nil at the cost of a nil check.
//
// The server asks it in one place, its authorization interceptors
// (package server/internal/authz), from one table of the RPCs; the
// refusals are this package's *Refusal, which the transport's edge turns
// into gRPC or Connect codes. Example:
//
//	who, err := a.Caller(ctx)
//	if err == nil {
//		err = a.CheckClient(who, "client_id", req.GetClientId()) // claimed id not the caller's
//	}
//	if err == nil {
//		err = a.UseAs(who, identity.Lease, resource) // the policy file refuses it
//	}
//
// Source: docs/identity.md (client identities bound to certificates);
// docs/identity.md (configuration, the policy file, the threat model).
package identity

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"

	"github.com/sluice-rl/sluice/internal/names"
	"github.com/sluice-rl/sluice/internal/tlsutil"
)

// SourceCert is the one source of identities (server.Config's
// Listen.Identity.Source): the client's certificate.
const SourceCert = "cert"

// Of returns the identity a client certificate names: its SPIFFE ID (the
// URI SAN of scheme spiffe, as the SPIFFE X.509-SVID standard puts it),
// else its subject CN. Errors: more than one SPIFFE URI SAN (an SVID has
// exactly one), or neither a SPIFFE URI SAN nor a CN.
//
// Source: SPIFFE's X.509-SVID specification, section 2 ("An X.509 SVID
// MUST contain exactly one URI SAN").
func Of(cert *x509.Certificate) (string, error) {
	var spiffe []string
	for _, u := range cert.URIs {
		if strings.EqualFold(u.Scheme, "spiffe") {
			spiffe = append(spiffe, u.String())
		}
	}
	switch {
	case len(spiffe) == 1:
		return spiffe[0], nil
	case len(spiffe) > 1:
		return "", fmt.Errorf("the client certificate has %d SPIFFE URI SANs (%s); an SVID has exactly one", len(spiffe), strings.Join(spiffe, ", "))
	case cert.Subject.CommonName != "":
		return cert.Subject.CommonName, nil
	}
	return "", errors.New("the client certificate names no identity: it has neither a SPIFFE URI SAN nor a subject CN")
}

// OfConfig returns the identity of the first certificate cfg presents as
// a client (tls.Config.Certificates), "" when it presents none or it
// names no identity: a server's own identity when it forwards requests
// to another server of its fleet.
func OfConfig(cfg *tls.Config) string {
	if cfg == nil || len(cfg.Certificates) == 0 {
		return ""
	}
	c := cfg.Certificates[0]
	leaf := c.Leaf
	if leaf == nil && len(c.Certificate) > 0 {
		leaf, _ = x509.ParseCertificate(c.Certificate[0])
	}
	if leaf == nil {
		return ""
	}
	id, _ := Of(leaf)
	return id
}

// API is what a client does with a resource, as the policy file names it.
type API int

// The APIs a policy grants resources for.
const (
	// Lease is leasing capacity: doorman.Capacity's GetCapacity and
	// GetServerCapacity, the resource ids.
	Lease API = iota
	// Allow is sluice.v1.Limits/Allow (the resource) and
	// quotaservice.QuotaService/Allow (the namespace).
	Allow
	// Reserve is holding copies: sluice.v1.Limits/Reserve, the resource.
	Reserve
	// RateLimit is Envoy's rate limit service: ShouldRateLimit, the
	// domain.
	RateLimit
	numAPIs
)

// apiNames are the policy file's keys of the APIs, by API.
var apiNames = [numAPIs]string{"lease", "allow", "reserve", "ratelimit"}

// String returns the policy file's key of a: "lease", "allow", "reserve"
// or "ratelimit".
func (a API) String() string {
	if a < 0 || a >= numAPIs {
		return fmt.Sprintf("API(%d)", int(a))
	}
	return apiNames[a]
}

// verbs say what a client does with an API's resource, for messages.
var verbs = [numAPIs]string{"lease", "Allow on", "reserve copies of", "rate limit through Envoy in the domain"}

// Options configures an Authorizer.
type Options struct {
	// Policy returns the policy in force, called on every request (a
	// filewatch.Watcher's Current, say); nil, or a nil answer: no policy,
	// every identity may use every resource.
	Policy func() *Policy
	// Fleet are identities trusted to forward a client's request for a
	// session homed on this server, with the client's identity (Forwarded),
	// besides the policy's fleet: this server's own, as a client of the
	// others (OfConfig of its forwarding TLS configuration). Empty strings
	// are ignored.
	Fleet []string
	// Setting names server.Config fields in messages to clients
	// (server.Config.Runtime.Setting; names.Setting):
	// "Listen.Identity.Source" and "Listen.Identity.PolicyPath". nil: the
	// paths themselves.
	Setting func(path string) string
}

// Refusal is the error of a request the Authorizer refuses: the client
// presented no certificate (Unauthenticated), or its identity may not do
// what it asked. Msg names the identity, what it asked and the setting or
// file that decides it. The server's edge maps it to a status code
// (gRPC's and Connect's Unauthenticated or PermissionDenied).
type Refusal struct {
	// Unauthenticated: no client certificate; else the identity is known
	// and refused (permission denied).
	Unauthenticated bool
	// Msg is the message for the client.
	Msg string
}

func (r *Refusal) Error() string { return r.Msg }

// denied returns a *Refusal of a known identity with the formatted message.
func denied(format string, args ...any) error {
	return &Refusal{Msg: fmt.Sprintf(format, args...)}
}

// Authorizer answers, for each request, who the client is (the identity
// its certificate names), whether the ids it claims are its own, and
// whether the policy lets it use a resource. A nil *Authorizer
// (identities off) allows everything. Its methods are safe for concurrent
// use; every refusal is a *Refusal.
type Authorizer struct {
	o Options
}

// New returns an Authorizer with o.
func New(o Options) *Authorizer { return &Authorizer{o: o} }

// policy returns the policy in force, nil for none.
func (a *Authorizer) policy() *Policy {
	if a.o.Policy == nil {
		return nil
	}
	return a.o.Policy()
}

// Caller returns the identity of the client of ctx's request (the leaf
// certificate its TLS connection presented: tlsutil.PeerCertificates, on
// either transport). A nil a returns "" and nil. Errors (*Refusal):
// Unauthenticated when the connection presented no certificate, denied
// when the certificate names no identity (Of's error).
func (a *Authorizer) Caller(ctx context.Context) (string, error) {
	if a == nil {
		return "", nil
	}
	certs := tlsutil.PeerCertificates(ctx)
	if len(certs) == 0 {
		return "", &Refusal{Unauthenticated: true, Msg: fmt.Sprintf("no client certificate: this server takes each client's identity from its certificate (%s cert)", a.setting("Listen.Identity.Source"))}
	}
	id, err := Of(certs[0])
	if err != nil {
		return "", &Refusal{Msg: err.Error()}
	}
	return id, nil
}

// Client checks that id, the client id a request claims in field, is the
// caller's (CheckClient). It returns the caller's identity. A nil a
// returns "" and nil. Errors: Caller's, CheckClient's.
func (a *Authorizer) Client(ctx context.Context, field, id string) (string, error) {
	if a == nil {
		return "", nil
	}
	who, err := a.Caller(ctx)
	if err != nil {
		return "", err
	}
	return who, a.CheckClient(who, field, id)
}

// CheckClient checks that id, the client id a request claims in field
// ("client_id", "server_id", "holder_id"), is identity who's: who itself
// or who, "/" and a suffix (processes sharing a certificate); with a
// policy, not an id under a longer identity the policy names (that
// identity's own). A nil a returns nil. Errors: a *Refusal naming both
// the claimed id and the identity.
func (a *Authorizer) CheckClient(who, field, id string) error {
	if a == nil {
		return nil
	}
	if !Owns(who, id) {
		return denied("%s %q is not this client's: its certificate names identity %q (%s cert); use %q, or %q and a suffix",
			field, id, who, a.setting("Listen.Identity.Source"), who, who+"/")
	}
	if p := a.policy(); p != nil {
		if other := p.longerOwner(who, id); other != "" {
			return denied("%s %q belongs to identity %q, which the policy file names, not to this client's identity %q",
				field, id, other, who)
		}
	}
	return nil
}

// Owns reports whether identity may use id as its client id: id is
// identity, or identity, "/" and a non-empty suffix.
func Owns(identity, id string) bool {
	rest, ok := strings.CutPrefix(id, identity)
	return ok && (rest == "" || len(rest) > 1 && rest[0] == '/')
}

// Use checks that the policy in force lets the caller use resource
// through api (a nil a, or no policy: it does). Errors: Caller's; a
// *Refusal naming the identity, what it asked and the policy file.
func (a *Authorizer) Use(ctx context.Context, api API, resource string) error {
	if a == nil {
		return nil
	}
	p := a.policy()
	if p == nil {
		return nil
	}
	who, err := a.Caller(ctx)
	if err != nil {
		return err
	}
	return a.allowed(p, who, api, resource)
}

// UseAs is Use for a caller whose identity is known already (Client's or
// Forwarded's answer).
func (a *Authorizer) UseAs(who string, api API, resource string) error {
	if a == nil {
		return nil
	}
	p := a.policy()
	if p == nil {
		return nil
	}
	return a.allowed(p, who, api, resource)
}

func (a *Authorizer) allowed(p *Policy, who string, api API, resource string) error {
	if p.Allows(who, api, resource) {
		return nil
	}
	return denied("identity %q may not %s %q: the policy file %s (%s) grants it no %s pattern matching it",
		who, verbs[api], resource, p.Path(), a.setting("Listen.Identity.PolicyPath"), api)
}

// UsesAny checks that the policy in force grants identity who at least one
// pattern for api (a nil a, or no policy: it does): the check of an RPC
// that names no resource of its own but serves only clients of api (a
// session's RPCs: reserve; a lease stream: lease). Errors: a *Refusal
// naming the identity, the API and the policy file.
func (a *Authorizer) UsesAny(who string, api API) error {
	if a == nil {
		return nil
	}
	p := a.policy()
	if p == nil || p.GrantsAny(who, api) {
		return nil
	}
	return denied("identity %q may not %s anything: the policy file %s (%s) grants it no %s pattern",
		who, verbs[api], p.Path(), a.setting("Listen.Identity.PolicyPath"), api)
}

// Forwarded returns the identity a session request acts for: claimed,
// the identity a fleet server forwarding the request says its client has,
// when the caller is a fleet server (Options.Fleet or the policy's
// fleet); the caller's own identity when claimed is "" (a request not
// forwarded). A nil a returns "" and nil. Errors: Caller's; a *Refusal
// when a caller that is no fleet server claims to act for another
// identity.
func (a *Authorizer) Forwarded(ctx context.Context, claimed string) (string, error) {
	if a == nil {
		return "", nil
	}
	who, err := a.Caller(ctx)
	if err != nil || claimed == "" {
		return who, err
	}
	if !a.isFleet(who) {
		return "", denied("identity %q forwarded a request for identity %q, but is not a server of this fleet (the policy file's fleet, or this server's own certificate)", who, claimed)
	}
	return claimed, nil
}

// isFleet reports whether who is a server of the fleet.
func (a *Authorizer) isFleet(who string) bool {
	for _, f := range a.o.Fleet {
		if f != "" && f == who {
			return true
		}
	}
	p := a.policy()
	return p != nil && p.fleet(who)
}

func (a *Authorizer) setting(path string) string { return names.Setting(a.o.Setting, path) }
