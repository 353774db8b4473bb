package redisstore

import (
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/names"
	tu "github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/internal/testutil/redistest"
	"github.com/sluice-rl/sluice/internal/tlsutil"
)

// requirePass sets srv's default user's password (CONFIG SET
// requirepass, through admin, a client already authenticated or
// before any password) and drops every other client's connection, so
// that the store's next connections authenticate anew.
func requirePass(t *testing.T, admin *redis.Client, password string) {
	t.Helper()
	if err := admin.ConfigSet(t.Context(), "requirepass", password).Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(t.Context(), "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes").Err(); err != nil {
		t.Fatal(err)
	}
}

// writeFile writes s to path (a mounted secret rotated in place).
func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestOpenRefused: a Redis that answers but refuses the credentials is a
// configuration error at Open, naming the Dial field at fault and Redis's
// refusal; the right password, from the URL or a file, opens.
func TestOpenRefused(t *testing.T) {
	t.Parallel() // its own Redis and processes, mostly waiting
	srv := redistest.StartT(t)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer admin.Close()
	requirePass(t, admin, "s3cret")
	pw := filepath.Join(t.TempDir(), "password")
	for _, tc := range []struct {
		name, url, file, field, want string
	}{
		{"no password", "redis://" + srv.Addr, "", "URL", "NOAUTH"},
		{"wrong password", "redis://:nope@" + srv.Addr, "", "URL", "WRONGPASS"},
		{"wrong password file", "redis://:s3cret@" + srv.Addr, "nope", "PasswordFile", "WRONGPASS"},
		{"password", "redis://:s3cret@" + srv.Addr, "", "", ""},
		{"password file over the URL's", "redis://:nope@" + srv.Addr, "s3cret", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Dial{URL: tc.url, Logger: tu.Logger()}
			if tc.file != "" {
				writeFile(t, pw, tc.file)
				d.PasswordFile = pw
			}
			st, err := Open(t.Context(), d)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				defer st.Close()
				if err := takeCtx(t.Context(), st, prefix(t)); err != nil {
					t.Fatal(err)
				}
				return
			}
			var fe *names.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field || !strings.Contains(err.Error(), tc.want) || !Refusal(err) || st != nil {
				t.Fatalf("Open: %v, %v; want a refusal of %s naming %s", st, err, tc.want, tc.field)
			}
		})
	}
}

// TestPasswordRotation: a password file is read again for every new
// connection. Rotated on both sides, the store goes on without a
// restart; rotated on Redis first, the refusal is counted, shown in
// Health and on the collector, and logged once, however many calls fail,
// until the file has the new password too.
func TestPasswordRotation(t *testing.T) {
	t.Parallel() // its own Redis and processes, mostly waiting
	srv := redistest.StartT(t)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer admin.Close()
	requirePass(t, admin, "one")
	pw := filepath.Join(t.TempDir(), "password")
	writeFile(t, pw, "one")
	var logs tu.LogBuffer
	st, err := Open(t.Context(), Dial{URL: "redis://" + srv.Addr, PasswordFile: pw, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := takeCtx(t.Context(), st, prefix(t)); err != nil {
		t.Fatal(err)
	}

	// Both sides rotated: the next connections use the new password.
	requirePass(t, admin, "two")
	writeFile(t, pw, "two")
	tu.Eventually(t, 15*time.Second, "a Take with the rotated password", func() bool { return takeCtx(t.Context(), st, prefix(t)) == nil })
	if h := st.Health(); h.Refusal != "" || h.Refusals != 0 {
		t.Fatalf("health after a rotation on both sides: refusal %q, %d refusals", h.Refusal, h.Refusals)
	}

	// Redis first: refused, counted, logged once.
	requirePass(t, admin, "three")
	for range 20 {
		_ = takeCtx(t.Context(), st, prefix(t))
	}
	tu.Eventually(t, 15*time.Second, "the refusal in Health", func() bool {
		return strings.Contains(st.Health().Refusal, "WRONGPASS")
	})
	if err := takeCtx(t.Context(), st, prefix(t)); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Take while refused: %v, want ErrUnavailable", err)
	}
	// The breaker's probe meets the refusal too (once a second).
	tu.Eventually(t, 15*time.Second, "a probe refused", func() bool { return st.Health().Refusals >= 2 })
	reg := prometheus.NewRegistry()
	reg.MustRegister(st.Collector())
	if n, ok := tu.MetricValue(t, reg, "sluice_redis_auth_failures_total"); !ok || n < 2 {
		t.Fatalf("sluice_redis_auth_failures_total %v (%v), want the refusals", n, ok)
	}
	if n := strings.Count(logs.String(), "Redis refuses"); n != 1 {
		t.Fatalf("the refusal logged %d times, want once:\n%s", n, logs.String())
	}

	// The file catches up: the probe's new connection is accepted.
	writeFile(t, pw, "three")
	tu.Eventually(t, 15*time.Second, "a Take once the file has the new password", func() bool { return takeCtx(t.Context(), st, prefix(t)) == nil })
	if h := st.Health(); h.Refusal != "" {
		t.Fatalf("refusal %q after the file caught up", h.Refusal)
	}
	if !strings.Contains(logs.String(), "Redis accepts this server's credentials again") {
		t.Fatalf("no log of the recovery:\n%s", logs.String())
	}
}

// TestOpenAway: a Redis that does not answer at Open is not an error:
// the store says Unanswered until Redis answers (its reach loop pings it
// without any request), Reconfigure does not fail meanwhile, and the
// store then decides.
func TestOpenAway(t *testing.T) {
	t.Parallel() // its own Redis and processes, mostly waiting
	srv := redistest.StartT(t)
	srv.Stop()
	st, err := Open(t.Context(), Dial{URL: "redis://" + srv.Addr, Logger: tu.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if h := st.Health(); !h.Unanswered || h.LastError == "" {
		t.Fatalf("health with Redis away: unanswered %v, last error %q", h.Unanswered, h.LastError)
	}
	if err := st.Reconfigure(t.Context(), time.Now().UnixNano(), bigLimit.Gen, nil, nil); err != nil {
		t.Fatalf("Reconfigure with Redis away: %v", err)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	tu.Eventually(t, 15*time.Second, "the store reaching Redis", func() bool { return !st.Health().Unanswered })
	if err := takeCtx(t.Context(), st, prefix(t)); err != nil {
		t.Fatal(err)
	}
}

// TestRefusalKinds: what Refusal calls a refusal (credentials, TLS) and
// what it does not (a Redis away, a script's error).
func TestRefusalKinds(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{redis.ErrClosed, false},
		{&net.OpError{Op: "dial", Err: errors.New("connection refused")}, false},
		{errors.New("ERR Error running script"), false},
		{errors.New("WRONGPASS invalid username-password pair or user is disabled."), true},
		{errors.New("NOAUTH Authentication required."), true},
		{&net.OpError{Op: "remote error", Err: errors.New("tls: certificate required")}, true},
		{errors.New("tls: failed to verify certificate: x509: certificate signed by unknown authority"), false},
		{nil, false},
	} {
		if got := Refusal(tc.err); got != tc.want {
			t.Errorf("Refusal(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// TestOpenTLS: an ACL user with a password, the default user off, over
// TLS with a private CA and client certificates, as Dial's TLS and a
// rediss:// URL say; a missing client certificate, an unknown CA and a
// disabled default user are refusals at Open naming the field.
func TestOpenTLS(t *testing.T) {
	t.Parallel() // its own Redis and processes, mostly waiting
	certs := tu.MakeCerts(t)
	srv := redistest.StartSecureT(t, redistest.Security{
		Users: []string{"sluice on >s3cret ~* &* +@all"}, DisableDefault: true, User: "sluice", UserPassword: "s3cret",
		TLSCert: certs.RedisCert, TLSKey: certs.RedisKey, TLSCA: certs.CA, TLSAuthClients: true,
		ClientCert: certs.ClientCert, ClientKey: certs.ClientKey})
	clientTLS := func(t *testing.T, ca, cert, key string) *tls.Config {
		t.Helper()
		c, err := tlsutil.Client(ca, cert, key)
		if err != nil {
			t.Fatal(err)
		}
		c.NextProtos = nil
		return c
	}
	url := "rediss://sluice:s3cret@" + srv.Addr + "/0"
	t.Run("ACL user over mTLS", func(t *testing.T) {
		st, err := Open(t.Context(), Dial{URL: url, TLS: clientTLS(t, certs.CA, certs.ClientCert, certs.ClientKey), Logger: tu.Logger()})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		if err := takeCtx(t.Context(), st, prefix(t)); err != nil {
			t.Fatal(err)
		}
	})
	for _, tc := range []struct {
		name, url, field, want string
		tls                    *tls.Config
	}{
		{"no client certificate", url, "TLS", "tls: ", clientTLS(t, certs.CA, "", "")},
		{"an unknown CA", url, "TLS", "x509: certificate signed by unknown authority", clientTLS(t, certs.OtherCA, certs.ClientCert, certs.ClientKey)},
		{"the default user", "rediss://" + srv.Addr + "/0", "URL", "NOAUTH", clientTLS(t, certs.CA, certs.ClientCert, certs.ClientKey)},
		{"a wrong password", "rediss://sluice:nope@" + srv.Addr + "/0", "URL", "WRONGPASS", clientTLS(t, certs.CA, certs.ClientCert, certs.ClientKey)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := Open(t.Context(), Dial{URL: tc.url, TLS: tc.tls, Logger: tu.Logger()})
			var fe *names.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field || !strings.Contains(err.Error(), tc.want) || st != nil {
				t.Fatalf("Open: %v, %v; want a refusal with %q naming %s", st, err, tc.want, tc.field)
			}
		})
	}
}

// TestOpenSentinel: a Redis watched by Sentinel, its master's password in
// the failover URL or a file: the store decides on the master the
// sentinels name; a refused master password names the field holding it.
func TestOpenSentinel(t *testing.T) {
	t.Parallel() // its own Redis and processes, mostly waiting
	sent := redistest.StartSentinelT(t, redistest.Security{Password: "s3cret"})
	addrs := sent.SentinelAddrs()
	url := func(password string) string {
		return "redis://" + addrs[0] + "/0?master_name=" + sent.Name() + "&addr=" + addrs[1] + "&addr=" + addrs[2] + "&password=" + password
	}
	st, err := Open(t.Context(), Dial{Sentinel: url("s3cret"), Logger: tu.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := takeCtx(t.Context(), st, prefix(t)); err != nil {
		t.Fatal(err)
	}
	pw := filepath.Join(t.TempDir(), "password")
	writeFile(t, pw, "nope")
	for _, tc := range []struct {
		name  string
		d     Dial
		field string
	}{
		{"wrong password in the URL", Dial{Sentinel: url("nope")}, "Sentinel"},
		{"wrong password file", Dial{Sentinel: url("s3cret"), PasswordFile: pw}, "PasswordFile"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.d.Logger = tu.Logger()
			st, err := Open(t.Context(), tc.d)
			var fe *names.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field || !strings.Contains(err.Error(), "WRONGPASS") || st != nil {
				t.Fatalf("Open: %v, %v; want a refusal naming %s", st, err, tc.field)
			}
		})
	}
}
