package redisstore

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-rl/sluice/internal/names"
	"github.com/sluice-rl/sluice/internal/retry"
)

// Dial says where Open connects and how: exactly one of URL, Cluster and
// Sentinel (the three shapes of Redis), how to authenticate and encrypt,
// the keys' prefix and the store's Timeout. Its fields are parsed by
// go-redis's own parsers (redis.ParseURL, redis.ParseClusterURL,
// redis.ParseFailoverURL), whose query parameters set the client's other
// options (max_retries, pool_size, dial_timeout, …).
//
// Source: go-redis's URL formats (its ParseURL, ParseClusterURL and
// ParseFailoverURL docs); the settings of envoyproxy/ratelimit's REDIS_*
// variables (docs/migrate/envoy-ratelimit.md).
type Dial struct {
	// URL is a single Redis: redis://[user:password@]host:port/db, or
	// rediss:// for TLS.
	URL string
	// Cluster is a Redis Cluster: the addresses (host:port) of some of
	// its nodes, the client finding the others; or one go-redis cluster
	// URL, redis[s]://[user:password@]host:port?addr=host:port&addr=…,
	// which can carry credentials and TLS (rediss://). The list form
	// speaks TLS when TLS is set.
	Cluster []string
	// Sentinel is a Redis watched by Sentinel, as go-redis's failover
	// URL: redis[s]://[sentinel_user:sentinel_password@]host:port/db?
	// master_name=NAME&addr=host:port&…&username=U&password=P. The URL's
	// user information is the sentinels' credentials; username and
	// password the master's (and its replicas'). The client asks the
	// sentinels for the master and follows its failovers.
	Sentinel string
	// TLS, when set, is the TLS configuration of a rediss:// URL (and of
	// Cluster's list form): a private CA (RootCAs), a client certificate,
	// a server name. Its ServerName empty: the URL's host (go-redis's
	// default). Set with a redis:// URL, it is an error (the URL says
	// plaintext). nil: go-redis's (the system's roots, the URL's host).
	TLS *tls.Config
	// PasswordFile, when set, is a file (a mounted secret) holding the
	// password of the Redis nodes (the master's with Sentinel, not the
	// sentinels'): it overrides the URL's password, and is read again for
	// every new connection, so a rotated password reaches new connections
	// without a restart. Surrounding white space is ignored. Its user is
	// the URL's (username for Sentinel), or the default user.
	PasswordFile string
	// Prefix starts every key the store, its copy log and Envoy's
	// counters write (Options.Prefix; "": DefaultPrefix), so that fleets
	// can share one Redis (a Redis Cluster has one database only).
	Prefix string
	// Timeout is the store's Options.Timeout (0: DefaultTimeout; negative
	// is an error).
	Timeout time.Duration
	// Logger receives the warning Open logs when Redis does not answer
	// yet, and the store's (Options.Logger) (nil: slog.Default()).
	Logger *slog.Logger
	// TracerProvider is the store's Options.TracerProvider (nil: no
	// spans).
	TracerProvider trace.TracerProvider
}

// openPing bounds Open's first PING, and its repeats (openPings in all
// at most) while Redis drops the connection it accepted (dropped).
const (
	openPing  = 5 * time.Second
	openPings = 4
)

// dropped reports whether err is a connection that the peer reset or
// closed after accepting it (ECONNRESET, an EOF), not one refused or
// timed out.
func dropped(err error) bool {
	return err != nil && (errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF))
}

// Open makes a client of d's Redis, as sluice server's --redis,
// --redis-cluster and --redis-sentinel do, and returns a store on it with
// d.Timeout and d.Prefix (its other Options the defaults). The client
// honours context deadlines (ContextTimeoutEnabled), so that the store's
// Timeout and the callers' deadlines bound a round trip Redis does not
// answer, and does not retry (MaxRetries -1, DialerRetries 1; a
// max_retries in the URL still wins): the store's circuit breaker does,
// so that a pipeline of scripts never takes tokens twice, and a Redis
// that refuses connections fails calls in microseconds rather than after
// backoffs longer than the Timeout.
//
// Open PINGs Redis, within ctx and 5 s (again, up to 4 PINGs in all,
// while Redis drops the connection it accepted: a TLS refusal of a
// missing client certificate may read as a reset), and tells a Redis
// that is wrongly configured from one that is away:
//
//   - Redis answers but refuses the credentials (WRONGPASS, NOAUTH) or
//     the TLS handshake (an unknown CA, a name the certificate lacks, a
//     missing client certificate): Open returns an error naming the Dial
//     field at fault (a *names.FieldError: "PasswordFile", "TLS", "URL",
//     "Cluster" or "Sentinel", the sentinels' own credentials being the
//     Sentinel URL's) and Redis's refusal; it is a configuration error,
//     which waiting will not mend. (A plaintext redis:// to a TLS port,
//     or rediss:// to a plaintext one, is not told from a Redis away:
//     the first reads an EOF, the second times out.)
//   - Redis does not answer (refused or timed-out connections, no master
//     known to the sentinels): Open logs a warning and returns the store
//     anyway: decisions fail until Redis answers (the breaker's probe
//     finds it), and the store pings Redis every BreakerProbe until it
//     does, so that Health().Unanswered turns false (a server is not
//     ready until then).
//
// It also returns an error for a d it cannot use: none or more than one of
// URL, Cluster and Sentinel, a URL go-redis cannot parse, TLS with a
// redis:// URL, an unreadable PasswordFile, a negative Timeout.
//
// The store owns the client: its Close closes the client too (after
// stopping the breakers' probes). A store made by New does not.
func Open(ctx context.Context, d Dial) (*Store, error) {
	c, err := d.client()
	if err != nil {
		return nil, err
	}
	log := d.Logger
	if log == nil {
		log = slog.Default()
	}
	st := New(c, Options{Prefix: d.Prefix, Timeout: d.Timeout, TracerProvider: d.TracerProvider, Logger: log})
	st.owned = c
	pctx, cancel := context.WithTimeout(ctx, openPing)
	defer cancel()
	err = c.Ping(pctx).Err()
	for n := 1; n < openPings && dropped(err); n++ {
		// Redis accepted the connection and dropped it: a TLS 1.3 server
		// refusing the client's certificate does so after the client's
		// handshake is done, and the client reads either its alert (a
		// Refusal) or, when the server closed first, a reset. Asked
		// again, it most often reads the alert.
		select {
		case <-time.After(retry.Backoff(n, 50*time.Millisecond, time.Second, nil)):
		case <-pctx.Done():
		}
		err = c.Ping(pctx).Err()
	}
	switch {
	case err == nil:
	case Refusal(err):
		field := d.refusedField(pctx, err)
		_ = st.Close()
		return nil, &names.FieldError{Field: field, Err: fmt.Errorf("limits/redis: Redis refused the connection: %w", err)}
	default:
		log.Warn("Redis does not answer yet; limits decisions fail until it does", "err", err)
		st.unanswered.Store(true)
		st.noteLastError(err)
		st.startReach()
	}
	return st, nil
}

// field returns the Dial field that says where Redis is.
func (d Dial) field() string {
	switch {
	case d.Sentinel != "":
		return "Sentinel"
	case len(d.Cluster) > 0:
		return "Cluster"
	}
	return "URL"
}

// refusedField returns the Dial field a refusal (Refusal) blames: TLS for
// a TLS refusal when TLS is set; with Sentinel, the URL when the sentinels
// themselves refuse its credentials (asked again, within ctx);
// PasswordFile for a refused password read from it; else the URL that
// carries the credentials.
func (d Dial) refusedField(ctx context.Context, err error) string {
	switch {
	case tlsRefusal(err) && d.TLS != nil:
		return "TLS"
	case tlsRefusal(err):
		return d.field()
	case d.Sentinel != "" && d.sentinelRefuses(ctx):
		return "Sentinel"
	case d.PasswordFile != "":
		return "PasswordFile"
	}
	return d.field()
}

// sentinelRefuses reports whether the first sentinel of d.Sentinel
// refuses the URL's credentials (the sentinels', not the master's).
func (d Dial) sentinelRefuses(ctx context.Context) bool {
	o, err := redis.ParseFailoverURL(d.Sentinel)
	if err != nil {
		return false
	}
	tc, err := d.tls(o.TLSConfig, "Sentinel")
	if err != nil {
		return false
	}
	sc := redis.NewSentinelClient(&redis.Options{Addr: o.SentinelAddrs[0], Username: o.SentinelUsername, Password: o.SentinelPassword,
		TLSConfig: tc, MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true})
	defer sc.Close()
	return Refusal(sc.Ping(ctx).Err())
}

// client returns the go-redis client of d (see Open).
func (d Dial) client() (redis.UniversalClient, error) {
	given := 0
	for _, set := range []bool{d.URL != "", len(d.Cluster) > 0, d.Sentinel != ""} {
		if set {
			given++
		}
	}
	switch {
	case given == 0:
		return nil, errors.New("limits/redis: open: neither a URL, a cluster nor a sentinel: give one")
	case given > 1:
		return nil, errors.New("limits/redis: open: more than one of a URL, a cluster and a sentinel: give one")
	case d.Timeout < 0:
		return nil, names.FieldErr("Timeout", "%v, want a positive duration (0: the default)", d.Timeout)
	}
	creds, err := d.credentials()
	if err != nil {
		return nil, err
	}
	field := d.field()
	switch field {
	case "URL":
		o, err := redis.ParseURL(d.URL)
		if err != nil {
			return nil, &names.FieldError{Field: field, Err: err}
		}
		if err := d.settle(field, shared{&o.TLSConfig, &o.ContextTimeoutEnabled, &o.MaxRetries, &o.DialerRetries, o.Username, &o.CredentialsProviderContext}, creds); err != nil {
			return nil, err
		}
		return redis.NewClient(o), nil
	case "Cluster":
		o := &redis.ClusterOptions{Addrs: d.Cluster}
		if len(d.Cluster) == 1 && strings.Contains(d.Cluster[0], "://") {
			if o, err = redis.ParseClusterURL(d.Cluster[0]); err != nil {
				return nil, &names.FieldError{Field: field, Err: err}
			}
		} else if d.TLS != nil {
			o.TLSConfig = &tls.Config{}
		}
		if err := d.settle(field, shared{&o.TLSConfig, &o.ContextTimeoutEnabled, &o.MaxRetries, &o.DialerRetries, o.Username, &o.CredentialsProviderContext}, creds); err != nil {
			return nil, err
		}
		return redis.NewClusterClient(o), nil
	}
	o, err := redis.ParseFailoverURL(d.Sentinel)
	if err != nil {
		return nil, &names.FieldError{Field: field, Err: err}
	}
	if o.MasterName == "" {
		return nil, names.FieldErr(field, "no master_name in the URL: name the master the sentinels watch (?master_name=NAME)")
	}
	if err := d.settle(field, shared{&o.TLSConfig, &o.ContextTimeoutEnabled, &o.MaxRetries, &o.DialerRetries, o.Username, &o.CredentialsProviderContext}, creds); err != nil {
		return nil, err
	}
	return redis.NewFailoverClient(o), nil
}

// shared points at the fields of a shape's go-redis options that Open
// sets alike (redis.Options, ClusterOptions, FailoverOptions), and holds
// the user its URL names.
type shared struct {
	tls                       **tls.Config
	contextTimeout            *bool
	maxRetries, dialerRetries *int
	user                      string
	creds                     *func(context.Context) (string, string, error)
}

// settle sets o's shared fields as Open does: d's TLS (see tls), context
// deadlines honoured, no retries unless the URL asked, and the password
// read from d.PasswordFile for each new connection (creds, nil without
// one).
func (d Dial) settle(field string, o shared, creds func(user string) (string, string, error)) error {
	tc, err := d.tls(*o.tls, field)
	if err != nil {
		return err
	}
	*o.tls, *o.contextTimeout = tc, true
	*o.maxRetries, *o.dialerRetries = noRetries(*o.maxRetries, *o.dialerRetries)
	if creds != nil {
		user := o.user
		*o.creds = func(context.Context) (string, string, error) { return creds(user) }
	}
	return nil
}

// noRetries returns the client's retries as Open sets them (see there):
// none, unless the URL asked.
func noRetries(maxRetries, dialerRetries int) (int, int) {
	if maxRetries == 0 {
		maxRetries = -1
	}
	if dialerRetries == 0 {
		dialerRetries = 1
	}
	return maxRetries, dialerRetries
}

// tls returns the TLS configuration of a client whose URL gave parsed
// (nil: plaintext): d.TLS, with the URL's server name unless d.TLS names
// one; an error if d.TLS is set and the URL says plaintext.
func (d Dial) tls(parsed *tls.Config, field string) (*tls.Config, error) {
	switch {
	case d.TLS == nil:
		return parsed, nil
	case parsed == nil:
		return nil, names.FieldErr("TLS", "set with a redis:// %s: use rediss:// for TLS", strings.ToLower(field))
	}
	c := d.TLS.Clone()
	if c.ServerName == "" {
		c.ServerName = parsed.ServerName
	}
	if c.MinVersion == 0 {
		c.MinVersion = tls.VersionTLS12
	}
	return c, nil
}

// credentials returns the credentials of new connections read from
// d.PasswordFile (nil without one): the user given, the file's password.
// The file is read once now, so that a missing one is an error at Open.
func (d Dial) credentials() (func(user string) (string, string, error), error) {
	if d.PasswordFile == "" {
		return nil, nil
	}
	read := func(user string) (string, string, error) {
		b, err := os.ReadFile(d.PasswordFile)
		if err != nil {
			return "", "", fmt.Errorf("limits/redis: the password file: %w", err)
		}
		return user, strings.TrimSpace(string(b)), nil
	}
	if _, _, err := read(""); err != nil {
		return nil, &names.FieldError{Field: "PasswordFile", Err: err}
	}
	return read, nil
}
