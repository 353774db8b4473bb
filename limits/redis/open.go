package redisstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"
)

// Dial says where Open connects and how: one of URL and Cluster, and the
// store's Timeout.
type Dial struct {
	// URL is a single Redis, as a go-redis URL
	// (redis://[user:password@]host:port/db, rediss:// for TLS; its query
	// may set the client's options, max_retries included).
	URL string
	// Cluster is the addresses (host:port) of some nodes of a Redis
	// Cluster: the client finds the others.
	Cluster []string
	// Timeout is the store's Options.Timeout (0: DefaultTimeout; negative
	// is an error).
	Timeout time.Duration
	// Logger receives the warning Open logs when Redis does not answer
	// yet (nil: slog.Default()).
	Logger *slog.Logger
	// TracerProvider is the store's Options.TracerProvider (nil: no
	// spans).
	TracerProvider trace.TracerProvider
}

// openPing bounds Open's first PING.
const openPing = 5 * time.Second

// Open makes a client of d's Redis, as sluice server's --redis and
// --redis-cluster do, and returns a store on it with d.Timeout (its other
// Options the defaults). The client honours context deadlines
// (ContextTimeoutEnabled), so that the store's Timeout and the callers'
// deadlines bound a round trip Redis does not answer, and does not retry
// (MaxRetries -1, DialerRetries 1; a max_retries in the URL still wins):
// the store's circuit breaker does, so that a pipeline of scripts never
// takes tokens twice, and a Redis that refuses connections fails calls in
// microseconds rather than after backoffs longer than the Timeout.
//
// Open PINGs Redis once, within ctx and 5 s: when Redis does not answer
// it logs a warning and returns the store anyway (decisions fail until
// Redis answers; the breaker's probe finds it). It returns an error only
// for a d it cannot use: neither or both of URL and Cluster, a URL go-redis
// cannot parse, a negative Timeout.
//
// The store owns the client: its Close closes the client too (after
// stopping the breakers' probes). A store made by New does not.
func Open(ctx context.Context, d Dial) (*Store, error) {
	var c redis.UniversalClient
	switch {
	case d.URL != "" && len(d.Cluster) > 0:
		return nil, errors.New("limits/redis: open: a URL and a cluster: give one")
	case d.Timeout < 0:
		return nil, fmt.Errorf("limits/redis: open: timeout %v, want a positive duration (0: the default)", d.Timeout)
	case d.URL != "":
		opts, err := redis.ParseURL(d.URL)
		if err != nil {
			return nil, fmt.Errorf("limits/redis: open: %w", err)
		}
		opts.ContextTimeoutEnabled = true
		if opts.MaxRetries == 0 {
			opts.MaxRetries = -1
		}
		if opts.DialerRetries == 0 {
			opts.DialerRetries = 1
		}
		c = redis.NewClient(opts)
	case len(d.Cluster) > 0:
		c = redis.NewClusterClient(&redis.ClusterOptions{Addrs: d.Cluster, ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1})
	default:
		return nil, errors.New("limits/redis: open: neither a URL nor a cluster")
	}
	log := d.Logger
	if log == nil {
		log = slog.Default()
	}
	pctx, cancel := context.WithTimeout(ctx, openPing)
	defer cancel()
	if err := c.Ping(pctx).Err(); err != nil {
		log.Warn("Redis does not answer yet; limits decisions fail until it does", "err", err)
	}
	st := New(c, Options{Timeout: d.Timeout, TracerProvider: d.TracerProvider})
	st.owned = c
	return st, nil
}
