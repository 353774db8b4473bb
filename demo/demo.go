// Package demo is `sluice demo`: Sluice's main job on an embedded default.
// It starts on loopback a capacity server with an embedded configuration,
// a real HTTP target that counts the requests it receives each second, and
// several clients, each with its own Sluice client and its own connection,
// each sending real HTTP requests to the target at its demand through
// client.NewRateLimiter bound to its lease (so at min(demand, lease)), with
// demand that changes during the run. It reports, per second,
// the capacity, the sum of the leases and the requests the target saw, and
// at the end the utilization, the worst overshoot and each client's share
// next to its max-min fair share.
package demo

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-rl/sluice/algorithm"
	"github.com/sluice-rl/sluice/client"
	"github.com/sluice-rl/sluice/ratelimit"
	"github.com/sluice-rl/sluice/resources"
	"github.com/sluice-rl/sluice/server"
)

//go:embed config.yaml
var configYAML []byte

// ResourceID is the resource the demo's clients share.
const ResourceID = "demo/api"

// Options configures a demo run.
type Options struct {
	// Duration of the run (default 30 s).
	Duration time.Duration
	// Clients is the number of clients (default 6, at least 1).
	Clients int
	// Out receives the per-second lines and the summary table; nil
	// discards them.
	Out io.Writer
	// Logger for the server and clients (default: discard).
	Logger *slog.Logger
	// NoPush runs a server that pushes no leases and clients that only
	// poll, as Doorman's (server.Config.Leases.DisablePush, client.WithoutPush).
	NoPush bool
}

// Second is one second of the run as the target saw it.
type Second struct {
	Second      int     `json:"second"`
	Capacity    float64 `json:"capacity"`
	SumLeases   float64 `json:"sum_leases"`
	Demand      float64 `json:"demand"`
	Requests    int64   `json:"requests"`
	Counted     bool    `json:"counted"`
	Overshoot   float64 `json:"overshoot_percent"`
	Utilization float64 `json:"utilization"`
}

// ClientSummary is one client's outcome.
type ClientSummary struct {
	Name        string  `json:"name"`
	ID          string  `json:"id"`
	Profile     string  `json:"profile"`
	MeanRPS     float64 `json:"mean_rps"`
	MeanFairRPS float64 `json:"mean_fair_share_rps"`
	Requests    int64   `json:"requests"`
}

// Summary is the outcome of a run. UtilizationMean is the mean, over the
// seconds after the first lease round, of target requests ÷ min(capacity,
// total demand); OvershootMaxPercent is the worst one-second excess of the
// target's requests over capacity, in percent of capacity (0 if never
// over).
type Summary struct {
	Capacity            float64         `json:"capacity"`
	DurationSeconds     int             `json:"duration_seconds"`
	UtilizationMean     float64         `json:"utilization_mean"`
	OvershootMaxPercent float64         `json:"overshoot_max_percent"`
	SecondsOver102      int             `json:"seconds_over_102_percent"`
	Clients             []ClientSummary `json:"clients"`
	Seconds             []Second        `json:"seconds"`
}

// profile is a client's demand over the run: wants (requests per second)
// at elapsed fraction f of the run and second s; leave reports when it
// releases its lease and stops.
type profile struct {
	name  string
	wants func(f float64, s int) float64
	leave float64 // fraction of the run at which it leaves; 0 = never
}

var profiles = []profile{
	{name: "steady 300", wants: func(float64, int) float64 { return 300 }},
	{name: "greedy 900", wants: func(float64, int) float64 { return 900 }},
	{name: "idle, then bursts to 600", wants: func(f float64, _ int) float64 {
		if f < 0.3 {
			return 0
		}
		return 600
	}},
	{name: "250, leaves early", wants: func(float64, int) float64 { return 250 }, leave: 0.65},
	{name: "small 60", wants: func(float64, int) float64 { return 60 }},
	{name: "wave 150/450", wants: func(_ float64, s int) float64 {
		if (s/10)%2 == 0 {
			return 150
		}
		return 450
	}},
}

// workersPerClient is how many goroutines of one client send requests
// concurrently (sharing the client's limiter).
const workersPerClient = 4

// warmup is how many seconds at the start are not counted: the first lease
// round (one refresh interval of the embedded configuration, 5 s: Doorman's
// minimum between two requests of a client).
const warmup = 5

// Run runs the demo until opts.Duration has passed or ctx is done, and
// returns the summary.
func Run(ctx context.Context, opts Options) (*Summary, error) {
	if opts.Duration <= 0 {
		opts.Duration = 30 * time.Second
	}
	if opts.Clients <= 0 {
		opts.Clients = 6
	}
	repo, err := prepare(&opts.Out, &opts.Logger, configYAML)
	if err != nil {
		return nil, err
	}
	tmpl, _ := repo.Find(ResourceID)
	capacity := tmpl.Capacity

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	// The capacity server.
	_, addr, stopServer, err := startServer(ctx, server.Config{Repository: server.Repository{Fixed: repo}, Runtime: server.Runtime{Logger: opts.Logger}, Leases: server.Leases{DisablePush: opts.NoPush}})
	if err != nil {
		return nil, err
	}
	defer stopServer()

	// The target: counts requests per second since start.
	start := time.Now()
	seconds := int(math.Ceil(opts.Duration.Seconds()))
	counts := make([]atomic.Int64, seconds+2)
	taddr, stopTarget, err := startTarget(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if s := int(time.Since(start) / time.Second); s >= 0 && s < len(counts) {
			counts[s].Add(1)
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	if err != nil {
		return nil, err
	}
	defer stopTarget()

	// The clients.
	runs, wg, err := startClients(ctx, start, addr, "http://"+taddr+"/", opts)
	if err != nil {
		return nil, err
	}

	sum := &Summary{Capacity: capacity, DurationSeconds: seconds}
	fairTotals := make([]float64, len(runs))
	fmt.Fprintf(opts.Out, "sluice demo: server %s, target %s, %d clients, capacity %.0f req/s on %q, %v\n",
		addr, taddr, len(runs), capacity, ResourceID, opts.Duration)
	fmt.Fprintf(opts.Out, "%4s %9s %10s %9s %9s %7s\n", "sec", "capacity", "Σ leases", "demand", "target", "util")
	err = eachSecond(ctx, seconds, func(s int) {
		// Second s is complete (requests arriving a little late still
		// land in their own second's counter).
		sec, fair := measureSecond(s, capacity, counts[s].Load(), runs)
		if sec.Counted {
			for i := range fair {
				fairTotals[i] += fair[i]
			}
		}
		sum.Seconds = append(sum.Seconds, sec)
		fmt.Fprintf(opts.Out, "%4d %9.0f %10.1f %9.0f %9d %6.1f%%\n", s, capacity, sec.SumLeases, sec.Demand, sec.Requests, sec.Utilization*100)
	})
	cancel()
	wg.Wait()
	if err != nil {
		return nil, err
	}
	for _, cr := range runs {
		cr.close()
	}
	summarize(sum, runs, fairTotals)
	return sum, nil
}

// startClients starts opts.Clients clients, each on its profile, sending
// requests to url until ctx is done or the run ends; the WaitGroup waits
// for them.
func startClients(ctx context.Context, start time.Time, serverAddr, url string, opts Options) ([]*clientRun, *sync.WaitGroup, error) {
	runs := make([]*clientRun, opts.Clients)
	wg := new(sync.WaitGroup)
	for i := range runs {
		p := profiles[i%len(profiles)]
		cr, err := startClient(ctx, i, p, serverAddr, url, opts)
		if err != nil {
			return nil, nil, err
		}
		runs[i] = cr
		wg.Add(1)
		go func() { defer wg.Done(); cr.run(ctx, start, opts.Duration) }()
	}
	return runs, wg, nil
}

// measureSecond returns second s of the run, in which the target saw
// requests: the clients' demand and leases against capacity, and each
// client's max-min fair share of capacity at that demand.
func measureSecond(s int, capacity float64, requests int64, runs []*clientRun) (Second, []float64) {
	sec := Second{Second: s, Capacity: capacity, Requests: requests, Counted: s >= warmup}
	reqs := make([]algorithm.Requester, len(runs))
	for i, cr := range runs {
		w := cr.wantsAt(s)
		sec.Demand += w
		reqs[i] = algorithm.Requester{Wants: w, Subclients: 1}
		sec.SumLeases += cr.leased()
	}
	fair := algorithm.Allocate(algorithm.FairShare, capacity, reqs)
	if want := math.Min(capacity, sec.Demand); want > 0 {
		sec.Utilization = float64(sec.Requests) / want
	} else {
		sec.Utilization = 1
	}
	sec.Overshoot = math.Max(0, (float64(sec.Requests)-capacity)/capacity*100)
	return sec, fair
}

// summarize fills sum's figures over its counted seconds and a row per
// client; fairTotals is each client's fair share summed over those seconds.
func summarize(sum *Summary, runs []*clientRun, fairTotals []float64) {
	counted := 0
	for _, sec := range sum.Seconds {
		if !sec.Counted {
			continue
		}
		counted++
		sum.UtilizationMean += sec.Utilization
		sum.OvershootMaxPercent = math.Max(sum.OvershootMaxPercent, sec.Overshoot)
		if float64(sec.Requests) > 1.02*sum.Capacity {
			sum.SecondsOver102++
		}
	}
	if counted > 0 {
		sum.UtilizationMean /= float64(counted)
	}
	for i, cr := range runs {
		cs := ClientSummary{Name: fmt.Sprintf("client-%d", i+1), ID: cr.c.ID(), Profile: cr.p.name}
		var n int64
		for s := warmup; s < sum.DurationSeconds && s < len(cr.sent); s++ {
			n += cr.sent[s].Load()
		}
		cs.Requests = cr.total.Load()
		if counted > 0 {
			cs.MeanRPS = float64(n) / float64(counted)
			cs.MeanFairRPS = fairTotals[i] / float64(counted)
		}
		sum.Clients = append(sum.Clients, cs)
	}
}

// PrintSummary writes the summary as a table.
func PrintSummary(w io.Writer, s *Summary) {
	fmt.Fprintf(w, "\nsummary over seconds %d..%d (after the first lease round):\n", warmup, s.DurationSeconds-1)
	fmt.Fprintf(w, "  mean utilization      %.1f%%  (target requests/s ÷ min(capacity, demand))\n", s.UtilizationMean*100)
	fmt.Fprintf(w, "  worst overshoot       %.2f%% of capacity %.0f  (%d seconds above 102%%)\n", s.OvershootMaxPercent, s.Capacity, s.SecondsOver102)
	fmt.Fprintf(w, "  %-10s %-26s %10s %16s\n", "client", "demand", "mean req/s", "max-min fair req/s")
	for _, c := range s.Clients {
		fmt.Fprintf(w, "  %-10s %-26s %10.1f %16.1f\n", c.Name, c.Profile, c.MeanRPS, c.MeanFairRPS)
	}
}

// PrintJSON writes the summary as one JSON object (without the
// per-second series when brief is set).
func PrintJSON(w io.Writer, s *Summary, brief bool) error {
	out := *s
	if brief {
		out.Seconds = nil
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// clientRun is one demo client: its Sluice client, resource and the
// limiter bound to its lease (client.NewRateLimiter, as a service would use
// it), its workload (a limiter at its demand: the calls it would make if
// nothing limited it) and its HTTP client.
type clientRun struct {
	i        int
	p        profile
	c        *client.Client
	res      *client.Resource
	lim      *client.RateLimiter
	workload *ratelimit.Limiter
	http     *http.Client
	url      string
	mu       sync.Mutex
	wants    float64
	left     atomic.Bool
	sent     []atomic.Int64
	total    atomic.Int64
	seconds  int
}

func startClient(_ context.Context, i int, p profile, serverAddr, url string, opts Options) (*clientRun, error) {
	copts := []client.Option{client.WithLogger(opts.Logger)}
	if opts.NoPush {
		copts = append(copts, client.WithoutPush())
	}
	c, err := client.New(serverAddr, copts...)
	if err != nil {
		return nil, err
	}
	seconds := int(math.Ceil(opts.Duration.Seconds()))
	cr := &clientRun{
		i: i, p: p, c: c, url: url, seconds: seconds,
		sent:  make([]atomic.Int64, seconds+2),
		http:  &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: workersPerClient}},
		wants: p.wants(0, 0),
	}
	cr.workload = ratelimit.NewLimiter(cr.wants, 0.02)
	res, err := c.Resource(ResourceID, cr.wants)
	if err != nil {
		return nil, err
	}
	cr.res = res
	// Almost no stored permits: the demo measures each second against
	// capacity, and a client holding a second of permits could spend them
	// in a burst.
	cr.lim = client.NewRateLimiter(res, 0.02)
	return cr, nil
}

// wantsAt returns the client's demand during second s (0 once it left).
func (cr *clientRun) wantsAt(s int) float64 {
	if cr.gone(s) {
		return 0
	}
	return cr.p.wants(float64(s)/float64(cr.seconds), s)
}

// gone reports whether the client has left by second s (it leaves at a
// whole second, so each second has one demand).
func (cr *clientRun) gone(s int) bool {
	return cr.p.leave > 0 && s >= int(cr.p.leave*float64(cr.seconds))
}

func (cr *clientRun) leased() float64 {
	if cr.left.Load() {
		return 0
	}
	c, _, _, ok := cr.res.Lease()
	if !ok {
		return 0
	}
	return c
}

func (cr *clientRun) run(ctx context.Context, start time.Time, d time.Duration) {
	var wg sync.WaitGroup
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	for range workersPerClient {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				// A call the workload makes, let through when the lease
				// allows: the client sends min(demand, lease).
				if err := cr.workload.Wait(wctx); err != nil {
					return
				}
				if err := cr.lim.Wait(wctx); err != nil {
					return
				}
				req, _ := http.NewRequestWithContext(wctx, http.MethodGet, cr.url, nil)
				resp, err := cr.http.Do(req)
				if err != nil {
					if wctx.Err() != nil {
						return
					}
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if s := int(time.Since(start) / time.Second); s < len(cr.sent) {
					cr.sent[s].Add(1)
				}
				cr.total.Add(1)
			}
		}()
	}
	// Follow the demand profile.
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			stop()
			wg.Wait()
			return
		case <-t.C:
		}
		elapsed := time.Since(start)
		s := int(elapsed / time.Second)
		f := elapsed.Seconds() / d.Seconds()
		if cr.gone(s) {
			if !cr.left.Swap(true) {
				stop()
				rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				err := cr.res.Release(rctx)
				cancel()
				if err != nil && !errors.Is(err, context.Canceled) {
					slog.Debug("demo: release", "err", err)
				}
				cr.workload.SetRate(0)
			}
			continue
		}
		w := cr.p.wants(f, s)
		cr.mu.Lock()
		changed := w != cr.wants
		cr.wants = w
		cr.mu.Unlock()
		if changed {
			_ = cr.res.Ask(w)
			cr.workload.SetRate(w)
		}
	}
}

func (cr *clientRun) close() {
	_ = cr.c.Close()
	cr.http.CloseIdleConnections()
}

// prepare fills a demo's zero Out (io.Discard) and Logger (discarding),
// and parses its embedded configuration.
func prepare(out *io.Writer, logger **slog.Logger, yaml []byte) (*resources.Repository, error) {
	if *out == nil {
		*out = io.Discard
	}
	if *logger == nil {
		*logger = slog.New(slog.DiscardHandler)
	}
	repo, err := resources.Parse(yaml)
	if err != nil {
		return nil, fmt.Errorf("demo: embedded configuration: %w", err)
	}
	return repo, nil
}

// eachSecond calls row(s) as each second s of a run of seconds seconds
// ends, and returns ctx's error if ctx is done first.
func eachSecond(ctx context.Context, seconds int, row func(s int)) error {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for s := 0; s < seconds; s++ {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		row(s)
	}
	return nil
}
