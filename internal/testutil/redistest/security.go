package redistest

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Security is how a server (StartSecure), a cluster (StartClusterSecure)
// or a sentinel group (StartSentinel) is secured, as managed services
// secure Redis: a password, ACL users, TLS. The zero Security is none:
// plain TCP and no password, as Start.
//
// The helper itself (its readiness waits, redis-cli --cluster create,
// the clients Server.Client, Cluster.Client and Sentinel.Client return),
// replicas towards their master (masteruser, masterauth) and sentinels
// towards the servers they watch (auth-user, auth-pass) all connect as
// User with UserPassword, or as the default user with Password when User
// is "", over TLS with ClientCert when TLS is on.
type Security struct {
	// Password is the default user's password (requirepass); "" for none.
	// DisableDefault, or a line of Users for the default user (which
	// resets it), makes it moot.
	Password string
	// Users are ACL users, one a string as a "user" line of an ACL file
	// without the word "user": a name and its rules, split at white
	// space (so no rule may hold a space), e.g. "alice on >s3cret ~* &*
	// +@all". Each becomes a --user argument of redis-server. The user
	// replicas and sentinels connect as needs every command and channel
	// (+@all ~* &*: sentinels publish on __sentinel__:hello, and Redis 7
	// users have no channel by default).
	Users []string
	// DisableDefault turns the default user off ("user default off",
	// after Users): every client must then log in as one of Users, and
	// User must name one.
	DisableDefault bool
	// User is the ACL user (one of Users) the helper, replicas and
	// sentinels log in as, with UserPassword, which must then be set;
	// "" for the default user with Password.
	User, UserPassword string

	// TLSCert and TLSKey are the PEM files of the servers' certificate and
	// key, TLSCA that of the CA certificate the servers verify clients
	// and peers with and the helper's clients verify the servers with:
	// all three or none. With them every server and sentinel listens on
	// TLS only (--port 0 --tls-port P), replicates over TLS
	// (tls-replication) and, in a cluster, talks TLS on the cluster bus
	// (tls-cluster). Redis presents TLSCert as its client certificate too
	// (cluster bus, replication, sentinels' links), so with
	// TLSAuthClients it must allow client authentication as well as
	// server authentication (testutil.Certs.RedisCert does). Relative
	// paths are made absolute (a cluster node runs in its own directory).
	TLSCert, TLSKey, TLSCA string
	// TLSAuthClients makes the servers require a client certificate signed
	// by TLSCA (tls-auth-clients yes); otherwise clients need none
	// (tls-auth-clients no).
	TLSAuthClients bool
	// ClientCert and ClientKey are the PEM files of the certificate and
	// key the helper's own connections present (both or neither); ""
	// for TLSCert and TLSKey.
	ClientCert, ClientKey string
}

// TLS reports whether s turns TLS on.
func (s Security) TLS() bool { return s.TLSCert != "" }

// check validates s and returns it with absolute file paths.
func (s Security) check() (Security, error) {
	tlsSet := s.TLSCert != "" || s.TLSKey != "" || s.TLSCA != ""
	switch {
	case tlsSet && (s.TLSCert == "" || s.TLSKey == "" || s.TLSCA == ""):
		return s, errors.New("redistest: Security needs all of TLSCert, TLSKey and TLSCA, or none")
	case (s.ClientCert == "") != (s.ClientKey == ""):
		return s, errors.New("redistest: Security needs both ClientCert and ClientKey, or neither")
	case !tlsSet && (s.ClientCert != "" || s.TLSAuthClients):
		return s, errors.New("redistest: Security's ClientCert and TLSAuthClients need TLSCert, TLSKey and TLSCA")
	case s.DisableDefault && s.User == "":
		return s, errors.New("redistest: Security with DisableDefault needs a User to log in as")
	case s.User != "" && s.UserPassword == "":
		return s, errors.New("redistest: Security's User needs a UserPassword")
	}
	for _, u := range s.Users {
		if len(strings.Fields(u)) == 0 {
			return s, errors.New("redistest: Security has an empty user in Users")
		}
	}
	for _, p := range []*string{&s.TLSCert, &s.TLSKey, &s.TLSCA, &s.ClientCert, &s.ClientKey} {
		if *p == "" {
			continue
		}
		abs, err := filepath.Abs(*p)
		if err != nil {
			return s, err
		}
		*p = abs
	}
	s.Users = append([]string(nil), s.Users...)
	return s, nil
}

// TLSConfig returns the TLS configuration of the helper's connections:
// the client certificate ClientCert (or TLSCert) and, as roots, TLSCA;
// the server name comes from the address dialled (127.0.0.1). It is nil
// without TLS, and an error when a file cannot be read or parsed.
func (s Security) TLSConfig() (*tls.Config, error) {
	if !s.TLS() {
		return nil, nil
	}
	certFile, keyFile := s.ClientCert, s.ClientKey
	if certFile == "" {
		certFile, keyFile = s.TLSCert, s.TLSKey
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("redistest: client certificate: %w", err)
	}
	pem, err := os.ReadFile(s.TLSCA)
	if err != nil {
		return nil, fmt.Errorf("redistest: CA: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("redistest: no certificate in %s", s.TLSCA)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: roots, MinVersion: tls.VersionTLS12}, nil
}

// Options returns the options of a client of the server at addr as the
// helper connects to it: User and UserPassword (or Password), and
// TLSConfig. It returns TLSConfig's error.
func (s Security) Options(addr string) (*redis.Options, error) {
	tc, err := s.TLSConfig()
	if err != nil {
		return nil, err
	}
	user, pass := s.login()
	return &redis.Options{Addr: addr, Username: user, Password: pass, TLSConfig: tc}, nil
}

// login returns the user ("" for the default one) and password the
// helper, replicas and sentinels log in with ("" for none).
func (s Security) login() (user, pass string) {
	if s.User != "" {
		return s.User, s.UserPassword
	}
	return "", s.Password
}

// serverArgs returns redis-server's arguments for a server listening on
// port: the port (plain or TLS), TLS, users and replication credentials.
func (s Security) serverArgs(port int) []string {
	p := strconv.Itoa(port)
	var args []string
	if s.TLS() {
		args = append(args, "--port", "0", "--tls-port", p,
			"--tls-cert-file", s.TLSCert, "--tls-key-file", s.TLSKey, "--tls-ca-cert-file", s.TLSCA,
			"--tls-auth-clients", yesNo(s.TLSAuthClients), "--tls-replication", "yes")
	} else {
		args = append(args, "--port", p)
	}
	if s.Password != "" && !s.DisableDefault {
		args = append(args, "--requirepass", s.Password)
	}
	for _, u := range s.Users {
		args = append(append(args, "--user"), strings.Fields(u)...)
	}
	if s.DisableDefault {
		args = append(args, "--user", "default", "off")
	}
	user, pass := s.login()
	if user != "" {
		args = append(args, "--masteruser", user)
	}
	if pass != "" {
		args = append(args, "--masterauth", pass)
	}
	return args
}

// cliArgs returns redis-cli's TLS arguments (none without TLS) and its
// --user, and env its environment (REDISCLI_AUTH holding the password,
// which keeps it off the command line and redis-cli quiet about it).
func (s Security) cliArgs() (args, env []string) {
	if s.TLS() {
		certFile, keyFile := s.ClientCert, s.ClientKey
		if certFile == "" {
			certFile, keyFile = s.TLSCert, s.TLSKey
		}
		args = append(args, "--tls", "--cacert", s.TLSCA, "--cert", certFile, "--key", keyFile)
	}
	user, pass := s.login()
	if user != "" {
		args = append(args, "--user", user)
	}
	env = os.Environ()
	if pass != "" {
		env = append(env, "REDISCLI_AUTH="+pass)
	}
	return args, env
}

// configTLS returns the lines of a config file (a sentinel's) for a
// server listening on port: the port (plain or TLS) and TLS.
func (s Security) configTLS(port int) string {
	p := strconv.Itoa(port)
	if !s.TLS() {
		return "port " + p + "\n"
	}
	return "port 0\ntls-port " + p + "\n" +
		"tls-cert-file " + quote(s.TLSCert) + "\n" +
		"tls-key-file " + quote(s.TLSKey) + "\n" +
		"tls-ca-cert-file " + quote(s.TLSCA) + "\n" +
		"tls-auth-clients " + yesNo(s.TLSAuthClients) + "\n" +
		"tls-replication yes\n"
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// quote quotes v for a Redis config file: a double-quoted string with
// \" and \\ escaped, and any byte but printable ASCII as \xHH, which is
// how redis-server splits config lines (sdssplitargs).
func quote(v string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := range len(v) {
		switch c := v[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c >= ' ' && c <= '~':
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "\\x%02x", c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// freePorts returns n distinct free loopback ports, which the kernel
// picks: it holds every listener until it has them all.
func freePorts(n int) ([]int, error) {
	var ports []int
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
