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
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-rl/sluice/client/limits"
	"github.com/sluice-rl/sluice/server"
)

//go:embed tiers.yaml
var tiersYAML []byte

// TiersOptions configures a run of the burst-tier demo.
type TiersOptions struct {
	// Duration of the run (default 30 s).
	Duration time.Duration
	// Out receives the per-second lines; nil discards them.
	Out io.Writer
	// Logger for the server and clients (default: discard).
	Logger *slog.Logger
}

// Tenant is one tenant's outcome, second by second.
type Tenant struct {
	Name    string `json:"name"`
	Pattern string `json:"pattern"`
	// Granted is the calls that reached the target each second; Tier the
	// tenant's current burst tier at the end of each second (0: the fake
	// tier); Holds the sandboxes it held (copy-limited tenants).
	Granted []int64 `json:"granted"`
	Tier    []int32 `json:"tier"`
	Holds   []int64 `json:"holds,omitempty"`
	// Rejected counts the calls refused.
	Rejected int64 `json:"rejected"`
}

// TiersSummary is the outcome of a burst-tier demo run.
type TiersSummary struct {
	DurationSeconds int      `json:"duration_seconds"`
	Tenants         []Tenant `json:"tenants"`
}

// tenantRun is one tenant while the demo runs.
type tenantRun struct {
	name, pattern string
	rate          func(s int) float64 // calls per second wanted in second s
	holds         bool                // holds sandboxes instead of calling
	granted       []atomic.Int64
	held          []atomic.Int64
	tier          atomic.Int32
	tiers         []atomic.Int32
	rejected      atomic.Int64
	heldNow       atomic.Int64
}

// RunTiers runs the burst-tier demo: a Sluice server with Charon's burst
// tiers and a copy-limited resource (demo/tiers.yaml), an HTTP target,
// and tenants calling the target through the Go client: alice
// well-behaved, bob bursting and falling into cooldown, mallory held in a
// prison tier (paper 2.3, Punishment), and carol and dave holding
// sandboxes. It prints a line per second and returns the summary.
//
// Source: charon-paper.md, sections 2.1, 2.3, 3.2.
func RunTiers(ctx context.Context, opts TiersOptions) (*TiersSummary, error) {
	if opts.Duration <= 0 {
		opts.Duration = 30 * time.Second
	}
	repo, err := prepare(&opts.Out, &opts.Logger, tiersYAML)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	_, addr, stopServer, err := startServer(ctx, server.Config{ID: "tiers-demo", Runtime: server.Runtime{Logger: opts.Logger}, Repository: server.Repository{Fixed: repo}})
	if err != nil {
		return nil, err
	}
	defer stopServer()

	seconds := int(math.Ceil(opts.Duration.Seconds()))
	start := time.Now()
	second := func() int { return int(time.Since(start) / time.Second) }
	tenants := newTenants(seconds)

	// The target counts calls per tenant per second.
	taddr, stopTarget, err := startTarget(tiersTarget(tenants, second))
	if err != nil {
		return nil, err
	}
	defer stopTarget()
	targetURL := "http://" + taddr + "/?tenant="

	c, err := limits.New(addr, limits.WithLogger(opts.Logger), limits.WithCallTimeout(10*time.Second))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var wg sync.WaitGroup
	for _, t := range tenants {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if t.holds {
				t.holdLoop(ctx, c, second)
			} else {
				t.callLoop(ctx, c, targetURL, second)
			}
		}()
	}

	fmt.Fprintf(opts.Out, "sluice demo tiers: server %s, target %s, %v\n", addr, taddr, opts.Duration)
	printTiersHeader(opts.Out, tenants)
	err = eachSecond(ctx, seconds, func(s int) { recordTiersSecond(opts.Out, s, tenants) })
	cancel()
	wg.Wait()
	if err != nil {
		return nil, err
	}
	return tiersSummary(tenants, seconds), nil
}

// newTenants returns the demo's tenants, each counting over seconds
// seconds.
func newTenants(seconds int) []*tenantRun {
	tenants := []*tenantRun{
		{name: "alice", pattern: "steady 15/s", rate: func(int) float64 { return 15 }},
		{name: "bob", pattern: "10/s, bursts of 60/s for 5 s every 10 s", rate: func(s int) float64 {
			if s%10 >= 5 {
				return 60
			}
			return 10
		}},
		{name: "mallory", pattern: "40/s (abusive)", rate: func(int) float64 { return 40 }},
		{name: "carol", pattern: "holds 2 sandboxes for 2 s, again and again", holds: true},
		{name: "dave", pattern: "holds 2 sandboxes for 2 s, again and again", holds: true},
	}
	for _, t := range tenants {
		t.granted, t.held, t.tiers = make([]atomic.Int64, seconds+2), make([]atomic.Int64, seconds+2), make([]atomic.Int32, seconds+2)
	}
	return tenants
}

// tiersTarget is the tiers demo's target: it counts each tenant's calls
// per second (second returns the current one).
func tiersTarget(tenants []*tenantRun, second func() int) http.Handler {
	byName := map[string]*tenantRun{}
	for _, t := range tenants {
		byName[t.name] = t
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if t := byName[r.URL.Query().Get("tenant")]; t != nil {
			if s := second(); s < len(t.granted) {
				t.granted[s].Add(1)
			}
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

// printTiersHeader writes the per-second table's header: a column per
// tenant.
func printTiersHeader(w io.Writer, tenants []*tenantRun) {
	fmt.Fprintf(w, "%4s", "sec")
	for _, t := range tenants {
		if t.holds {
			fmt.Fprintf(w, " %14s", t.name+" holds")
		} else {
			fmt.Fprintf(w, " %14s", t.name+" (tier)")
		}
	}
	fmt.Fprintln(w)
}

// recordTiersSecond records each tenant's tier and holds at the end of
// second s and writes the second's line.
func recordTiersSecond(w io.Writer, s int, tenants []*tenantRun) {
	fmt.Fprintf(w, "%4d", s)
	for _, t := range tenants {
		t.tiers[s].Store(t.tier.Load())
		t.held[s].Store(t.heldNow.Load())
		if t.holds {
			fmt.Fprintf(w, " %14d", t.held[s].Load())
		} else {
			fmt.Fprintf(w, " %9d (%d) ", t.granted[s].Load(), t.tiers[s].Load())
		}
	}
	fmt.Fprintln(w)
}

// tiersSummary returns each tenant's outcome over seconds seconds.
func tiersSummary(tenants []*tenantRun, seconds int) *TiersSummary {
	sum := &TiersSummary{DurationSeconds: seconds}
	for _, t := range tenants {
		out := Tenant{Name: t.name, Pattern: t.pattern, Rejected: t.rejected.Load()}
		for s := range seconds {
			if t.holds {
				out.Holds = append(out.Holds, t.held[s].Load())
			} else {
				out.Granted = append(out.Granted, t.granted[s].Load())
				out.Tier = append(out.Tier, t.tiers[s].Load())
			}
		}
		sum.Tenants = append(sum.Tenants, out)
	}
	return sum
}

// callLoop calls the target at the tenant's rate, each call asking the
// api resource for a hit first (no retry: a refused call is dropped).
func (t *tenantRun) callLoop(ctx context.Context, c *limits.Client, url string, second func() int) {
	next := time.Now()
	for ctx.Err() == nil {
		next = next.Add(time.Duration(float64(time.Second) / t.rate(second())))
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(next)):
		}
		g, err := c.Request(ctx, "api", t.name, 1, 1, 0)
		var rej *limits.RejectedError
		switch {
		case errors.As(err, &rej):
			t.rejected.Add(1)
			t.tier.Store(rej.Tier.Index)
			continue
		case err != nil:
			continue
		}
		t.tier.Store(g.Tier.Index)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+t.name, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
}

// holdLoop holds up to 2 sandboxes (at least 1) for 2 s at a time,
// releasing them after, and tries again half a second later.
func (t *tenantRun) holdLoop(ctx context.Context, c *limits.Client, second func() int) {
	for ctx.Err() == nil {
		h, err := c.ReserveCopies(ctx, "sandboxes", t.name, 2, 1, 0)
		if err != nil {
			t.rejected.Add(1)
		} else {
			_ = h.Do(ctx, func(ctx context.Context) error {
				t.heldNow.Store(h.Copies())
				select {
				case <-ctx.Done():
				case <-time.After(2 * time.Second):
				}
				t.heldNow.Store(0)
				return nil
			})
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// PrintTiersSummary writes the summary as a table: each calling tenant's
// mean granted rate and the tiers it went through, each holder's holds.
func PrintTiersSummary(w io.Writer, s *TiersSummary) {
	fmt.Fprintf(w, "\nsummary over %d s:\n", s.DurationSeconds)
	for _, t := range s.Tenants {
		if len(t.Holds) > 0 {
			var most int64
			var sum float64
			for _, h := range t.Holds {
				most = max(most, h)
				sum += float64(h)
			}
			fmt.Fprintf(w, "  %-8s %-44s mean %.1f sandboxes held, at most %d; %d reserves refused\n", t.Name, t.pattern(), sum/float64(len(t.Holds)), most, t.Rejected)
			continue
		}
		var n int64
		tiers := map[int32]int{}
		for i, g := range t.Granted {
			n += g
			tiers[t.Tier[i]]++
		}
		fmt.Fprintf(w, "  %-8s %-44s %6.1f calls/s granted; %d refused; seconds per tier %v\n", t.Name, t.pattern(), float64(n)/float64(len(t.Granted)), t.Rejected, tiers)
	}
}

func (t Tenant) pattern() string { return t.Pattern }
