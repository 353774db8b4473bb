package demo

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/client/quota"
	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/server"
)

//go:embed quota.yaml
var quotaYAML []byte

// QuotaOptions configures a run of the quota demo.
type QuotaOptions struct {
	// Duration of the run (default 15 s).
	Duration time.Duration
	// Users is the number of users logging in (default 20), each trying
	// LoginsPerUser times a second.
	Users int
	// LoginsPerUser is each user's login attempts per second (default 3,
	// against a bucket of 1 a second).
	LoginsPerUser float64
	// Out receives the per-second lines; nil discards them.
	Out io.Writer
	// Logger for the server and clients (default: discard).
	Logger *slog.Logger
}

// QuotaBucket is one bucket's outcome: what the target saw granted,
// against its configured rate.
type QuotaBucket struct {
	Name     string  `json:"name"`   // "target/naive", "target/smart", "logins/* (per user)"
	Client   string  `json:"client"` // naive, smart
	Size     int64   `json:"size"`
	FillRate float64 `json:"fill_rate"` // tokens per second
	Demand   float64 `json:"demand"`    // calls attempted per second
	MeanRate float64 `json:"mean_rate"` // granted calls per second that reached the target
	Granted  int64   `json:"granted"`   // calls that reached the target over the run (logins: the busiest user's)
	Rejected int64   `json:"rejected"`  // calls refused
	// MaxAllowed is the most the bucket can grant over the run: full at
	// the start, its fill rate over the run, and the fill a grant's wait
	// (at most the bucket's wait timeout) takes from after its end.
	MaxAllowed float64 `json:"max_allowed"`
	// Fallback is the calls the client's fallback limiter let through
	// when the service did not answer in time (quotaservice-design.md,
	// "Naïve clients": a loaded machine's slow answers): calls the bucket
	// never saw (for logins/<user>, every user's together).
	Fallback int64 `json:"fallback"`
	// PerSecond is the calls that reached the target each second.
	PerSecond []int64 `json:"per_second"`
}

// QuotaSummary is the outcome of a quota demo run.
type QuotaSummary struct {
	DurationSeconds int           `json:"duration_seconds"`
	Buckets         []QuotaBucket `json:"buckets"`
	// LoginRates is each user's successful logins per second over the
	// run, sorted.
	LoginRates []float64 `json:"login_rates"`
	// DynamicBuckets is how many per-user buckets the server made.
	DynamicBuckets int `json:"dynamic_buckets"`
}

// caller is one calling service: its quota client, how it calls, and what
// it got.
type caller struct {
	name, domain string
	c            *quota.Client
	reg          *prometheus.Registry // c's metrics
	http         *http.Client
	demand       float64 // calls per second attempted
	granted      atomic.Int64
	rejected     atomic.Int64
	perSecond    []atomic.Int64
}

// RunQuota runs the quota demo: a Sluice server with the embedded limits
// (demo/quota.yaml), an HTTP target, a service calling the target through
// the naive client (one Allow before each call), a service calling it
// through the smart client (a local bucket topped up in batches), and
// users logging in through per-user buckets made on the fly. It prints a
// line per second and returns the summary, until opts.Duration has passed
// or ctx is done.
//
// Source: quotaservice-design.md, scenarios 1, 3 and 5, example 3.
func RunQuota(ctx context.Context, opts QuotaOptions) (*QuotaSummary, error) {
	if opts.Duration <= 0 {
		opts.Duration = 15 * time.Second
	}
	if opts.Users <= 0 {
		opts.Users = 20
	}
	if opts.LoginsPerUser <= 0 {
		opts.LoginsPerUser = 3
	}
	repo, err := prepare(&opts.Out, &opts.Logger, quotaYAML)
	if err != nil {
		return nil, err
	}
	cfg := repo.Limits()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	// The Sluice server, on its production endpoint.
	srv, addr, stopServer, err := startServer(ctx, server.Config{ID: "quota-demo", Runtime: server.Runtime{Logger: opts.Logger}, Document: server.Document{Fixed: repo}})
	if err != nil {
		return nil, err
	}
	defer stopServer()

	seconds := int(math.Ceil(opts.Duration.Seconds()))
	start := time.Now()
	second := func() int { return int(time.Since(start) / time.Second) }

	// The two services: the same workload, a different client mode.
	callers := map[string]*caller{}
	for _, spec := range []struct {
		name   string
		demand float64
		opts   []quota.Option
	}{
		{"naive", 150, nil},
		{"smart", 300, []quota.Option{quota.WithSmart(quota.Smart{Batch: 20, LowWater: 10, TTL: time.Second})}},
	} {
		reg := prometheus.NewRegistry()
		c, err := quota.New(addr, append([]quota.Option{quota.WithLogger(opts.Logger), quota.WithRegisterer(reg)}, spec.opts...)...)
		if err != nil {
			return nil, err
		}
		defer c.Close()
		cl := &caller{name: spec.name, domain: spec.name, c: c, reg: reg, demand: spec.demand, perSecond: make([]atomic.Int64, seconds+2)}
		cl.http = &http.Client{Transport: c.RoundTripper(http.DefaultTransport, func(*http.Request) quota.Target {
			return quota.Target{Resource: "target", Domain: cl.domain}
		})}
		callers[spec.name] = cl
	}
	// The target: counts calls per second, by service and by user.
	var (
		usersMu sync.Mutex
		logins  = map[string]int64{}
	)
	taddr, stopTarget, err := startTarget(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u := r.URL.Query().Get("user"); u != "" {
			usersMu.Lock()
			logins[u]++
			usersMu.Unlock()
		} else if c := callers[r.Header.Get("X-Service")]; c != nil {
			if s := second(); s < len(c.perSecond) {
				c.perSecond[s].Add(1)
			}
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	if err != nil {
		return nil, err
	}
	defer stopTarget()
	targetURL := "http://" + taddr

	loginsReg := prometheus.NewRegistry()
	logins1, err := quota.New(addr, quota.WithLogger(opts.Logger), quota.WithRegisterer(loginsReg))
	if err != nil {
		return nil, err
	}
	defer logins1.Close()

	var wg sync.WaitGroup
	for _, cl := range callers {
		wg.Add(1)
		go func() { defer wg.Done(); cl.run(ctx, targetURL) }()
	}
	for u := range opts.Users {
		wg.Add(1)
		go func() {
			defer wg.Done()
			loginLoop(ctx, logins1, fmt.Sprintf("user-%03d", u), targetURL, opts.LoginsPerUser)
		}()
	}

	fmt.Fprintf(opts.Out, "sluice demo quota: server %s, target %s, %d users logging in %.0f times a second, %v\n",
		addr, taddr, opts.Users, opts.LoginsPerUser, opts.Duration)
	fmt.Fprintf(opts.Out, "%4s %18s %18s %14s %8s\n", "sec", "naive (100/s)", "smart (200/s)", "logins/s/user", "buckets")
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var lastLogins int64
	for s := 0; s < seconds; s++ {
		select {
		case <-ctx.Done():
			cancel()
			wg.Wait()
			return nil, ctx.Err()
		case <-tick.C:
		}
		usersMu.Lock()
		var total int64
		for _, n := range logins {
			total += n
		}
		usersMu.Unlock()
		fmt.Fprintf(opts.Out, "%4d %18d %18d %14.2f %8d\n", s, callers["naive"].perSecond[s].Load(), callers["smart"].perSecond[s].Load(),
			float64(total-lastLogins)/float64(opts.Users), buckets(ctx, srv))
		lastLogins = total
	}
	cancel()
	wg.Wait()

	sum := &QuotaSummary{DurationSeconds: seconds}
	for _, name := range []string{"naive", "smart"} {
		cl := callers[name]
		b := cfg.Resources["target"].Buckets[name]
		qb := QuotaBucket{Name: "target/" + name, Client: name, Size: b.Size, FillRate: b.FillRate, Demand: cl.demand,
			Granted: cl.granted.Load(), Rejected: cl.rejected.Load(), Fallback: fallbackAllowed(cl.reg)}
		var n int64
		for s := range seconds {
			v := cl.perSecond[s].Load()
			qb.PerSecond = append(qb.PerSecond, v)
			n += v
		}
		qb.MeanRate = float64(n) / float64(seconds)
		qb.MaxAllowed = float64(b.Size) + b.FillRate*(opts.Duration+b.WaitTimeout).Seconds()
		sum.Buckets = append(sum.Buckets, qb)
	}
	tmpl := cfg.Resources["logins"].Template
	// One row for every user's bucket: the mean rate, and the busiest
	// user's logins against what one bucket allows.
	lb := QuotaBucket{Name: "logins/<user>", Client: "naive", Size: tmpl.Size, FillRate: tmpl.FillRate, Demand: opts.LoginsPerUser,
		MaxAllowed: float64(tmpl.Size) + tmpl.FillRate*(opts.Duration+tmpl.WaitTimeout).Seconds(), Fallback: fallbackAllowed(loginsReg)}
	usersMu.Lock()
	for _, n := range logins {
		sum.LoginRates = append(sum.LoginRates, float64(n)/float64(seconds))
		lb.Granted = max(lb.Granted, n)
		lb.MeanRate += float64(n) / float64(seconds) / float64(opts.Users)
	}
	usersMu.Unlock()
	sort.Float64s(sum.LoginRates)
	sum.Buckets = append(sum.Buckets, lb)
	// (ctx is cancelled by now, to stop the callers: the walk is the run's
	// last step, on the demo's memory store.)
	srv.Limits().Engine().Walk(context.WithoutCancel(ctx), time.Now(), func(b limits.BucketInfo) bool {
		if b.Resource == "logins" {
			sum.DynamicBuckets++
		}
		return true
	})
	return sum, nil
}

// run calls the target at the caller's demand through its quota client
// (in its RoundTripper), until ctx is done.
func (cl *caller) run(ctx context.Context, url string) {
	const workers = 4
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			every := time.Duration(float64(time.Second) * workers / cl.demand)
			next := time.Now().Add(every * time.Duration(w) / workers)
			for {
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Until(next)):
				}
				next = next.Add(every)
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/work", nil)
				req.Header.Set("X-Service", cl.name)
				resp, err := cl.http.Do(req)
				if err != nil {
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusTooManyRequests {
					cl.rejected.Add(1)
				} else {
					cl.granted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
}

// loginLoop is one user trying to log in rate times a second: each attempt
// asks the user's login bucket (made on the fly from the template) and, if
// granted, logs in at the target.
func loginLoop(ctx context.Context, c *quota.Client, user, url string, rate float64) {
	t := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := c.Acquire(ctx, "logins", user, 1); err != nil {
			var rej *quota.RejectedError
			if !errors.As(err, &rej) && ctx.Err() == nil {
				slog.Debug("demo: login", "user", user, "err", err)
			}
			continue
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/login?user="+user, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
}

// PrintQuotaSummary writes the summary as a table.
func PrintQuotaSummary(w io.Writer, s *QuotaSummary) {
	fmt.Fprintf(w, "\nsummary over %d s:\n", s.DurationSeconds)
	fmt.Fprintf(w, "  %-16s %-6s %10s %10s %12s %10s %12s\n", "bucket", "client", "demand/s", "rate/s", "granted/s", "granted", "max allowed")
	for _, b := range s.Buckets {
		fmt.Fprintf(w, "  %-16s %-6s %10.1f %10.1f %12.1f %10d %12.0f\n", b.Name, b.Client, b.Demand, b.FillRate, b.MeanRate, b.Granted, b.MaxAllowed)
	}
	if n := len(s.LoginRates); n > 0 {
		fmt.Fprintf(w, "  (logins/<user>: the mean of the users; granted and max allowed are per user, the busiest one)\n")
		fmt.Fprintf(w, "  logins per user per second: min %.2f, median %.2f, max %.2f; %d per-user buckets made on the fly\n",
			s.LoginRates[0], s.LoginRates[n/2], s.LoginRates[n-1], s.DynamicBuckets)
	}
}

// buckets returns the number of buckets of srv's limits engine (its
// store's estimate: exact in memory).
func buckets(ctx context.Context, srv *server.Server) int {
	n, _ := srv.Limits().Engine().EstimateLen(ctx)
	return n
}

// fallbackAllowed returns the calls a quota client's fallback limiter
// allowed, from its metrics in reg (sluice_quota_client_decisions_total,
// outcome fallback_allowed).
func fallbackAllowed(reg *prometheus.Registry) int64 {
	mfs, _ := reg.Gather()
	var n float64
	for _, mf := range mfs {
		if mf.GetName() != "sluice_quota_client_decisions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" && l.GetValue() == "fallback_allowed" {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return int64(n)
}
