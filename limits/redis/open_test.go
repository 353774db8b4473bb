package redisstore

import (
	"bytes"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/limits/copies"
)

// TestOpenErrors: Open refuses a Dial it cannot use, naming what is wrong.
func TestOpenErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		d    Dial
		want string
	}{
		{"neither", Dial{}, "neither a URL, a cluster nor a sentinel"},
		{"both", Dial{URL: "redis://" + redisAddr, Cluster: cluster.Addrs()}, "give one"},
		{"three", Dial{URL: "redis://" + redisAddr, Sentinel: "redis://" + redisAddr + "?master_name=m"}, "give one"},
		{"bad URL", Dial{URL: "http://" + redisAddr}, "URL: redis: invalid URL scheme"},
		{"bad cluster URL", Dial{Cluster: []string{"http://" + redisAddr}}, "Cluster: redis: invalid URL scheme"},
		{"cluster URL option", Dial{Cluster: []string{"redis://" + redisAddr + "?nope=1"}}, "Cluster: redis: unexpected option: nope"},
		{"bad sentinel URL", Dial{Sentinel: "http://" + redisAddr}, "Sentinel: redis: invalid URL scheme"},
		{"sentinel without master", Dial{Sentinel: "redis://" + redisAddr}, "Sentinel: no master_name"},
		{"TLS on plaintext", Dial{URL: "redis://" + redisAddr, TLS: &tls.Config{}}, "TLS: set with a redis:// url: use rediss://"},
		{"TLS on plaintext sentinel", Dial{Sentinel: "redis://" + redisAddr + "?master_name=m", TLS: &tls.Config{}}, "TLS: set with a redis:// sentinel"},
		{"missing password file", Dial{URL: "redis://" + redisAddr, PasswordFile: "/nonexistent/pw"}, "PasswordFile: limits/redis: the password file: open /nonexistent/pw"},
		{"negative timeout", Dial{URL: "redis://" + redisAddr, Timeout: -time.Second}, "want a positive duration"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if st, err := Open(t.Context(), tc.d); err == nil || !strings.Contains(err.Error(), tc.want) || st != nil {
				t.Fatalf("Open(%+v): %v %v, want an error with %q", tc.d, st, err, tc.want)
			}
		})
	}
}

// TestOpen: Open makes the client sluice server uses (context deadlines
// honoured, no retries unless the URL asks; the Timeout given) on a
// single Redis and on a cluster; the store decides, a CopyLog shares it,
// and Close closes the client Open made (its calls then fail with
// ErrUnavailable), unlike a store made by New.
func TestOpen(t *testing.T) {
	t.Run("single", func(t *testing.T) {
		st, err := Open(t.Context(), Dial{URL: "redis://" + redisAddr + "/0", Timeout: 300 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		// (go-redis keeps MaxRetries -1, no retries, as 0.)
		o := st.c.(*redis.Client).Options()
		if !o.ContextTimeoutEnabled || o.MaxRetries != 0 || o.DialerRetries != 1 || st.Health().Timeout != 300*time.Millisecond {
			t.Fatalf("client: context deadlines %v, %d retries, %d dialer retries; store timeout %v",
				o.ContextTimeoutEnabled, o.MaxRetries, o.DialerRetries, st.Health().Timeout)
		}
		if err := takeCtx(t.Context(), st, prefix(t)); err != nil {
			t.Fatal(err)
		}
		l := NewCopyLog(st)
		l.SetEpoch("e" + strings.ReplaceAll(t.Name(), "/", ""))
		l.SetMembers([]string{})
		q := copies.LogReserve{Resource: prefix(t), Domain: "d", Copies: 1, Min: 1, DomainLimit: 1, GlobalLimit: copies.Unbounded}
		if got, err := l.Reserve(t.Context(), q); err != nil || got.Granted != 1 {
			t.Fatalf("CopyLog on an opened store: %+v %v", got, err)
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
		if err := st.c.Ping(t.Context()).Err(); !errors.Is(err, redis.ErrClosed) {
			t.Fatalf("the client after Close: %v, want closed", err)
		}
		if err := takeCtx(t.Context(), st, prefix(t)); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("Take after Close: %v, want ErrUnavailable", err)
		}
		if err := st.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
	})
	t.Run("retries from the URL", func(t *testing.T) {
		st, err := Open(t.Context(), Dial{URL: "redis://" + redisAddr + "?max_retries=2"})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		if o := st.c.(*redis.Client).Options(); o.MaxRetries != 2 || st.Health().Timeout != DefaultTimeout {
			t.Fatalf("max_retries=2: %d retries, timeout %v", o.MaxRetries, st.Health().Timeout)
		}
	})
	t.Run("cluster", func(t *testing.T) {
		st, err := Open(t.Context(), Dial{Cluster: cluster.Addrs()})
		if err != nil {
			t.Fatal(err)
		}
		o := st.c.(*redis.ClusterClient).Options()
		if !o.ContextTimeoutEnabled || o.MaxRetries != -1 || o.DialerRetries != 1 {
			t.Fatalf("cluster client: context deadlines %v, %d retries, %d dialer retries", o.ContextTimeoutEnabled, o.MaxRetries, o.DialerRetries)
		}
		if err := takeCtx(t.Context(), st, prefix(t)); err != nil {
			t.Fatal(err)
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
		if err := st.c.Ping(t.Context()).Err(); !errors.Is(err, redis.ErrClosed) {
			t.Fatalf("the cluster client after Close: %v, want closed", err)
		}
	})
	t.Run("New does not close", func(t *testing.T) {
		c := client(t)
		if err := New(c, Options{}).Close(); err != nil {
			t.Fatal(err)
		}
		if err := c.Ping(t.Context()).Err(); err != nil {
			t.Fatalf("the caller's client after Close: %v", err)
		}
	})
}

// TestOpenNoRedis: with nothing listening, Open still returns a store,
// after logging a warning; its calls fail with ErrUnavailable.
func TestOpenNoRedis(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	var buf bytes.Buffer
	st, err := Open(t.Context(), Dial{URL: "redis://" + addr, Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if !strings.Contains(buf.String(), "Redis does not answer yet") {
		t.Fatalf("log: %q, want a warning", buf.String())
	}
	if err := takeCtx(t.Context(), st, "d"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Take: %v, want ErrUnavailable", err)
	}
}

// FuzzDial: whatever a user writes in --redis, --redis-cluster or
// --redis-sentinel, making the client returns an error or a client, never
// panics, and an error names the field at fault.
func FuzzDial(f *testing.F) {
	for _, s := range []string{"redis://127.0.0.1:1/0", "rediss://u:p@h:1?addr=h:2&addr=h:3", "redis://h:1/0?master_name=m&addr=h:2&password=p",
		"redis://h:1/x", "redis://[::1", "http://h", "redis://h:1?dial_timeout=x", "h:1,h:2", ""} {
		f.Add(s, uint8(0))
		f.Add(s, uint8(1))
		f.Add(s, uint8(2))
	}
	f.Fuzz(func(t *testing.T, s string, shape uint8) {
		var d Dial
		switch shape % 3 {
		case 0:
			d.URL = s
		case 1:
			d.Cluster = []string{s}
		default:
			d.Sentinel = s
		}
		c, err := d.client()
		if err != nil {
			if s != "" && !strings.HasPrefix(err.Error(), d.field()+": ") {
				t.Fatalf("%+v: %v, want an error naming %s", d, err, d.field())
			}
			return
		}
		_ = c.Close()
	})
}
