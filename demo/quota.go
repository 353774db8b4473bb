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
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/client/limits"
	limitsengine "github.com/sluice-rl/sluice/limits"
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

// caller is one calling service: its limits client, how it calls, and what
// it got.
type caller struct {
	name, domain string
	c            *limits.Client
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
	srv, addr, stopServer, err := startServer(ctx, server.Config{ID: "quota-demo", Runtime: server.Runtime{Logger: opts.Logger}, Repository: server.Repository{Fixed: repo}})
	if err != nil {
		return nil, err
	}
	defer stopServer()

	seconds := int(math.Ceil(opts.Duration.Seconds()))
	start := time.Now()
	second := func() int { return int(time.Since(start) / time.Second) }

	// The two services: the same workload, a different client mode.
	callers, closeCallers, err := newCallers(addr, opts.Logger, seconds)
	if err != nil {
		return nil, err
	}
	defer closeCallers()
	// The target: counts calls per second, by service and by user.
	logins := &loginCounts{n: map[string]int64{}}
	taddr, stopTarget, err := startTarget(quotaTarget(callers, logins, second))
	if err != nil {
		return nil, err
	}
	defer stopTarget()
	targetURL := "http://" + taddr

	loginsReg := prometheus.NewRegistry()
	loginsClient, err := limits.New(addr, limits.WithLogger(opts.Logger), limits.WithRegisterer(loginsReg))
	if err != nil {
		return nil, err
	}
	defer loginsClient.Close()
	wg := startQuotaCalls(ctx, callers, loginsClient, targetURL, opts)

	fmt.Fprintf(opts.Out, "sluice demo quota: server %s, target %s, %d users logging in %.0f times a second, %v\n",
		addr, taddr, opts.Users, opts.LoginsPerUser, opts.Duration)
	fmt.Fprintf(opts.Out, "%4s %18s %18s %14s %8s\n", "sec", "naive (100/s)", "smart (200/s)", "logins/s/user", "buckets")
	var lastLogins int64
	err = eachSecond(ctx, seconds, func(s int) {
		total := logins.total()
		fmt.Fprintf(opts.Out, "%4d %18d %18d %14.2f %8d\n", s, callers["naive"].perSecond[s].Load(), callers["smart"].perSecond[s].Load(),
			float64(total-lastLogins)/float64(opts.Users), buckets(ctx, srv))
		lastLogins = total
	})
	cancel()
	wg.Wait()
	if err != nil {
		return nil, err
	}

	sum := &QuotaSummary{DurationSeconds: seconds}
	for _, name := range []string{"naive", "smart"} {
		sum.Buckets = append(sum.Buckets, callers[name].bucket(cfg.Resources["target"].Buckets[name], opts.Duration, seconds))
	}
	logins.summarize(sum, *cfg.Resources["logins"].Template, opts, fallbackAllowed(loginsReg))
	// (ctx is cancelled by now, to stop the callers: the walk is the run's
	// last step, on the demo's memory store.)
	sum.DynamicBuckets = dynamicBuckets(context.WithoutCancel(ctx), srv, "logins")
	return sum, nil
}

// newCallers makes the two services' limits clients on the server at addr,
// each counting over seconds seconds; closeAll closes them, last made
// first.
func newCallers(addr string, logger *slog.Logger, seconds int) (callers map[string]*caller, closeAll func(), err error) {
	callers = map[string]*caller{}
	var made []*limits.Client
	closeAll = func() {
		for _, c := range slices.Backward(made) {
			_ = c.Close()
		}
	}
	for _, spec := range []struct {
		name   string
		demand float64
		opts   []limits.Option
	}{
		{"naive", 150, nil},
		{"smart", 300, []limits.Option{limits.WithSmart(limits.Smart{Batch: 20, LowWater: 10, TTL: time.Second})}},
	} {
		reg := prometheus.NewRegistry()
		c, err := limits.New(addr, append([]limits.Option{limits.WithLogger(logger), limits.WithRegisterer(reg)}, spec.opts...)...)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		made = append(made, c)
		cl := &caller{name: spec.name, domain: spec.name, c: c, reg: reg, demand: spec.demand, perSecond: make([]atomic.Int64, seconds+2)}
		cl.http = &http.Client{Transport: c.RoundTripper(http.DefaultTransport, func(*http.Request) limits.Target {
			return limits.Target{Resource: "target", Domain: cl.domain}
		})}
		callers[spec.name] = cl
	}
	return callers, closeAll, nil
}

// loginCounts is the logins the quota demo's target saw, by user.
type loginCounts struct {
	mu sync.Mutex
	n  map[string]int64
}

// add counts one login of user.
func (l *loginCounts) add(user string) {
	l.mu.Lock()
	l.n[user]++
	l.mu.Unlock()
}

// total returns every user's logins together.
func (l *loginCounts) total() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var total int64
	for _, n := range l.n {
		total += n
	}
	return total
}

// quotaTarget is the quota demo's target: it counts each service's calls
// per second (second returns the current one) and each user's logins.
func quotaTarget(callers map[string]*caller, logins *loginCounts, second func() int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u := r.URL.Query().Get("user"); u != "" {
			logins.add(u)
		} else if c := callers[r.Header.Get("X-Service")]; c != nil {
			if s := second(); s < len(c.perSecond) {
				c.perSecond[s].Add(1)
			}
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

// startQuotaCalls starts the services calling the target at url and the
// users logging in there through loginsClient, until ctx is done; the
// WaitGroup waits for them.
func startQuotaCalls(ctx context.Context, callers map[string]*caller, loginsClient *limits.Client, url string, opts QuotaOptions) *sync.WaitGroup {
	wg := new(sync.WaitGroup)
	for _, cl := range callers {
		wg.Add(1)
		go func() { defer wg.Done(); cl.run(ctx, url) }()
	}
	for u := range opts.Users {
		wg.Add(1)
		go func() {
			defer wg.Done()
			loginLoop(ctx, loginsClient, fmt.Sprintf("user-%03d", u), url, opts.LoginsPerUser)
		}()
	}
	return wg
}

// bucket returns the caller's row of the summary: what reached the target
// over seconds seconds against b, its bucket, over a run of d.
func (cl *caller) bucket(b limitsengine.Bucket, d time.Duration, seconds int) QuotaBucket {
	qb := QuotaBucket{Name: "target/" + cl.name, Client: cl.name, Size: b.Size, FillRate: b.FillRate, Demand: cl.demand,
		Granted: cl.granted.Load(), Rejected: cl.rejected.Load(), Fallback: fallbackAllowed(cl.reg)}
	var n int64
	for s := range seconds {
		v := cl.perSecond[s].Load()
		qb.PerSecond = append(qb.PerSecond, v)
		n += v
	}
	qb.MeanRate = float64(n) / float64(seconds)
	qb.MaxAllowed = maxAllowed(b, d)
	return qb
}

// summarize adds to sum each user's login rate and one row for every
// user's bucket (made from tmpl): the mean rate, and the busiest user's
// logins against what one bucket allows; fallback is the logins the
// client's fallback limiter let through.
func (l *loginCounts) summarize(sum *QuotaSummary, tmpl limitsengine.Bucket, opts QuotaOptions, fallback int64) {
	seconds := sum.DurationSeconds
	lb := QuotaBucket{Name: "logins/<user>", Client: "naive", Size: tmpl.Size, FillRate: tmpl.FillRate, Demand: opts.LoginsPerUser,
		MaxAllowed: maxAllowed(tmpl, opts.Duration), Fallback: fallback}
	l.mu.Lock()
	for _, n := range l.n {
		sum.LoginRates = append(sum.LoginRates, float64(n)/float64(seconds))
		lb.Granted = max(lb.Granted, n)
		lb.MeanRate += float64(n) / float64(seconds) / float64(opts.Users)
	}
	l.mu.Unlock()
	sort.Float64s(sum.LoginRates)
	sum.Buckets = append(sum.Buckets, lb)
}

// maxAllowed is the most bucket b can grant over a run of d: full at the
// start, its fill rate over the run, and the fill a grant's wait (at most
// its wait timeout) takes from after its end.
func maxAllowed(b limitsengine.Bucket, d time.Duration) float64 {
	return float64(b.Size) + b.FillRate*(d+b.WaitTimeout).Seconds()
}

// dynamicBuckets returns how many buckets of resource srv's limits
// engine holds.
func dynamicBuckets(ctx context.Context, srv *server.Server, resource string) int {
	n := 0
	srv.Limits().Engine().Walk(ctx, time.Now(), func(b limitsengine.BucketInfo) bool {
		if b.Resource == resource {
			n++
		}
		return true
	})
	return n
}

// run calls the target at the caller's demand through its limits client
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
func loginLoop(ctx context.Context, c *limits.Client, user, url string, rate float64) {
	t := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := c.Acquire(ctx, "logins", user, 1); err != nil {
			var rej *limits.RejectedError
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

// fallbackAllowed returns the calls a limits client's fallback limiter
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
