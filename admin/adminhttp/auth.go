package adminhttp

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/sluice-rl/sluice/internal/names"
	"github.com/sluice-rl/sluice/internal/tlsutil"
)

// DisabledMessage is the answer (403) to a write when no way of
// authenticating writers is configured: "the admin write path is
// disabled: start the server with Admin.TokenFile, Listen.TLS.CAFile,
// Admin.TrustForwarded or Admin.Insecure", each field as
// AuthOptions.Setting names it.
func (a *Auth) DisabledMessage() string {
	var fields []string
	for _, f := range []string{"Admin.TokenFile", "Listen.TLS.CAFile", "Admin.TrustForwarded", "Admin.Insecure"} {
		fields = append(fields, a.setting(f))
	}
	last := len(fields) - 1
	return "the admin write path is disabled: start the server with " + strings.Join(fields[:last], ", ") + " or " + fields[last]
}

// NothingToEdit is the answer (404) of a server with no resource
// repository to edit: it has no Repository.Path, or it has
// Parent.Addresses (each field as AuthOptions.Setting names it).
func (a *Auth) NothingToEdit() string {
	return "no configuration to edit: the server runs without " + a.setting("Repository.Path") +
		" (or with " + a.setting("Parent.Addresses") + ", whose configuration comes from the parent)"
}

// setting is what the operator calls the server.Config field at path (a
// nil Auth: the path).
func (a *Auth) setting(path string) string {
	if a == nil {
		return path
	}
	return names.Setting(a.o.Setting, path)
}

// AuthOptions says how the HTTP API establishes who makes a request.
//
// Source: docs/admin.md ("Who may write"): bearer tokens, client
// certificates or a trusted proxy's header, each change audited with its
// user, as quotaservice-wire.md's "Admin REST API" leaves to the caller.
type AuthOptions struct {
	// TokenFile is the file of bearer tokens (--admin-token-file): one
	// "USER TOKEN" pair per line, '#' starting a comment, blank lines
	// ignored; a user may have several tokens, a token one user; tokens
	// are at least MinTokenLen bytes. A request with "Authorization:
	// Bearer TOKEN" is made by its USER. The file is read again when it
	// changes (its size or modification time); a bad new file is logged
	// and the last good one kept.
	TokenFile string
	// ClientCerts, set when the server requires client certificates
	// (--tls-client-ca), makes the subject CN of a request's verified
	// client certificate its user.
	ClientCerts bool
	// TrustForwarded lists the addresses (--admin-trust-forwarded-user,
	// CIDRs or single IPs) of authenticating proxies: a request from one
	// of them is made by the user its X-Forwarded-User header names.
	// From any other address the header is ignored.
	TrustForwarded []netip.Prefix
	// Insecure (--admin-insecure) lets requests from loopback addresses
	// write without credentials; their user is X-Forwarded-User's, else
	// "anonymous", recorded with auth "insecure".
	Insecure bool
	// AuthReads (--admin-auth-reads) makes reads follow the same rules as
	// writes; without it anyone who reaches the port may read.
	AuthReads bool
	// Logger receives the token file's reload errors and the refused
	// requests (warn); nil: slog.Default().
	Logger *slog.Logger
	// Setting names server.Config fields in the answers' messages
	// (server.Config.Runtime.Setting; names.Setting): nil, the paths
	// themselves ("Admin.TokenFile").
	Setting func(path string) string
}

// MinTokenLen is the shortest bearer token accepted, in bytes.
const MinTokenLen = 16

// Auth establishes the user of an HTTP request (AuthOptions). It is safe
// for concurrent use.
type Auth struct {
	o      AuthOptions
	tokens *tokenFile
}

// NewAuth returns the Auth of o, reading its token file. Errors name the
// file and line.
func NewAuth(o AuthOptions) (*Auth, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	a := &Auth{o: o}
	if o.TokenFile != "" {
		t := &tokenFile{path: o.TokenFile, log: o.Logger}
		if err := t.load(); err != nil {
			return nil, err
		}
		a.tokens = t
	}
	return a, nil
}

// ParsePrefixes parses --admin-trust-forwarded-user's list: CIDRs
// ("10.0.0.0/8") or single addresses ("127.0.0.1").
func ParsePrefixes(list []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range list {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
			continue
		}
		ip, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("%q: want a CIDR (10.0.0.0/8) or an IP address", s)
		}
		out = append(out, netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()))
	}
	return out, nil
}

// WritesEnabled reports whether any way of authenticating writers is
// configured.
func (a *Auth) WritesEnabled() bool { return len(a.methods()) > 0 }

// Methods lists the configured ways of authenticating, for the start-up
// log: "token", "mtls", "forwarded", "insecure".
func (a *Auth) Methods() []string {
	var m []string
	for _, w := range a.methods() {
		m = append(m, w.name)
	}
	return m
}

// method is one configured way of authenticating: its name and how a
// client uses it.
type method struct{ name, how string }

// methods lists the configured ways of authenticating, in a fixed order.
func (a *Auth) methods() []method {
	var m []method
	if a.tokens != nil {
		m = append(m, method{"token", "Authorization: Bearer TOKEN (a token of " + a.setting("Admin.TokenFile") + ")"})
	}
	if a.o.ClientCerts {
		m = append(m, method{"mtls", "a client certificate (its subject CN is the user)"})
	}
	if len(a.o.TrustForwarded) > 0 {
		m = append(m, method{"forwarded", "X-Forwarded-User through a trusted proxy"})
	}
	if a.o.Insecure {
		m = append(m, method{"insecure", "a loopback address (" + a.setting("Admin.Insecure") + ")"})
	}
	return m
}

// Identity is who makes a request: User, established by Method ("token",
// "mtls", "forwarded", "insecure"; "" for an anonymous read).
type Identity struct {
	User   string
	Method string
}

// AuthError refuses a request: Status 401 (no or bad credentials) or 403
// (the path is disabled).
type AuthError struct {
	Status int
	Msg    string
}

func (e *AuthError) Error() string { return e.Msg }

// Identify returns who makes r, a write or (write false) a read, or an
// *AuthError. In order: a bearer token (Authorization: Bearer; a bad
// one is refused, not passed over), X-Forwarded-User from a trusted
// proxy, the client certificate's CN, an insecure loopback request.
func (a *Auth) Identify(r *http.Request, write bool) (Identity, error) {
	if !write && !a.o.AuthReads {
		return Identity{}, nil
	}
	if !a.WritesEnabled() {
		msg := a.DisabledMessage()
		if !write {
			msg = strings.Replace(msg, "write path", "read path ("+a.setting("Admin.AuthReads")+")", 1)
		}
		return Identity{}, &AuthError{Status: http.StatusForbidden, Msg: msg}
	}
	peer := remoteAddr(r)
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, tok, _ := strings.Cut(h, " ")
		switch {
		case !strings.EqualFold(scheme, "Bearer"):
			return Identity{}, &AuthError{Status: http.StatusUnauthorized, Msg: "Authorization: want Bearer TOKEN"}
		case a.tokens == nil:
			return Identity{}, &AuthError{Status: http.StatusUnauthorized, Msg: "bearer tokens are not accepted: the server has no " + a.setting("Admin.TokenFile")}
		}
		user, ok := a.tokens.lookup(strings.TrimSpace(tok))
		if !ok {
			return Identity{}, &AuthError{Status: http.StatusUnauthorized, Msg: "unknown bearer token"}
		}
		return Identity{User: user, Method: "token"}, nil
	}
	fwd := r.Header.Get("X-Forwarded-User")
	if fwd != "" && peer.IsValid() && a.trusted(peer) {
		if msg := checkUser(fwd); msg != "" {
			return Identity{}, &AuthError{Status: http.StatusUnauthorized, Msg: "X-Forwarded-User: " + msg}
		}
		return Identity{User: fwd, Method: "forwarded"}, nil
	}
	if a.o.ClientCerts {
		certs := tlsutil.PeerCertificates(r.Context())
		if len(certs) == 0 && r.TLS != nil {
			certs = r.TLS.PeerCertificates
		}
		if len(certs) > 0 {
			cn := certs[0].Subject.CommonName
			if cn == "" {
				return Identity{}, &AuthError{Status: http.StatusUnauthorized, Msg: "the client certificate has no subject CN to name its user"}
			}
			return Identity{User: cn, Method: "mtls"}, nil
		}
	}
	if a.o.Insecure && peer.IsValid() && peer.IsLoopback() {
		user := "anonymous"
		if fwd != "" && checkUser(fwd) == "" {
			user = fwd
		}
		return Identity{User: user, Method: "insecure"}, nil
	}
	return Identity{}, &AuthError{Status: http.StatusUnauthorized, Msg: "authentication required: " + a.howTo()}
}

// howTo says how a client may authenticate here.
func (a *Auth) howTo() string {
	var ways []string
	for _, w := range a.methods() {
		ways = append(ways, w.how)
	}
	return strings.Join(ways, ", or ")
}

func (a *Auth) trusted(ip netip.Addr) bool {
	for _, p := range a.o.TrustForwarded {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// remoteAddr returns r's peer address (invalid when unknown).
func remoteAddr(r *http.Request) netip.Addr {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}
	}
	return ip.Unmap()
}

// checkUser returns "" for an acceptable user name (1 to 256 printable
// characters, no spaces), else what is wrong.
func checkUser(u string) string {
	if u == "" || len(u) > 256 {
		return "want 1 to 256 characters"
	}
	for _, c := range u {
		if !unicode.IsPrint(c) || unicode.IsSpace(c) {
			return fmt.Sprintf("%q: want printable characters without spaces", u)
		}
	}
	return ""
}

// tokenFile is the bearer tokens of a file, read again when it changes.
type tokenFile struct {
	path string
	log  *slog.Logger

	mu     sync.Mutex
	mod    time.Time
	size   int64
	byHash map[[32]byte]string // SHA-256 of a token → its user
}

// lookup returns the user of token tok.
func (t *tokenFile) lookup(tok string) (string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if fi, err := os.Stat(t.path); err == nil && (!fi.ModTime().Equal(t.mod) || fi.Size() != t.size) {
		if err := t.loadLocked(); err != nil {
			t.log.Error("admin: token file reload failed; keeping the last good tokens", "path", t.path, "err", err)
		} else {
			t.log.Info("admin: token file reloaded", "path", t.path, "tokens", len(t.byHash))
		}
	}
	if tok == "" {
		return "", false
	}
	u, ok := t.byHash[sha256.Sum256([]byte(tok))]
	return u, ok
}

func (t *tokenFile) load() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.loadLocked()
}

func (t *tokenFile) loadLocked() error {
	fi, err := os.Stat(t.path)
	if err != nil {
		return fmt.Errorf("token file: %w", err)
	}
	data, err := os.ReadFile(t.path)
	if err != nil {
		return fmt.Errorf("token file: %w", err)
	}
	m, err := parseTokens(data)
	if err != nil {
		return fmt.Errorf("token file %s: %w", t.path, err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		t.log.Warn("admin: the token file is readable by others than its owner (chmod 600)", "path", t.path, "mode", fi.Mode().Perm().String())
	}
	t.byHash, t.mod, t.size = m, fi.ModTime(), fi.Size()
	return nil
}

// parseTokens parses a token file (see AuthOptions.TokenFile) into the
// SHA-256 of each token → its user. Every problem is returned, joined,
// each naming its line.
func parseTokens(data []byte) (map[[32]byte]string, error) {
	out := map[[32]byte]string{}
	line := map[[32]byte]int{}
	var errs []error
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for n := 1; sc.Scan(); n++ {
		f := strings.Fields(sc.Text())
		for i, w := range f {
			if strings.HasPrefix(w, "#") {
				f = f[:i]
				break
			}
		}
		switch {
		case len(f) == 0:
			continue
		case len(f) != 2:
			errs = append(errs, fmt.Errorf("line %d: want USER TOKEN, got %d fields", n, len(f)))
			continue
		case len(f[1]) < MinTokenLen:
			errs = append(errs, fmt.Errorf("line %d: user %s: the token has %d bytes; at least %d", n, f[0], len(f[1]), MinTokenLen))
			continue
		}
		if msg := checkUser(f[0]); msg != "" {
			errs = append(errs, fmt.Errorf("line %d: user: %s", n, msg))
			continue
		}
		h := sha256.Sum256([]byte(f[1]))
		if m, dup := line[h]; dup {
			errs = append(errs, fmt.Errorf("line %d: user %s: the same token as line %d; a token names one user", n, f[0], m))
			continue
		}
		out[h], line[h] = f[0], n
	}
	if err := sc.Err(); err != nil {
		errs = append(errs, err)
	}
	return out, errors.Join(errs...)
}
