package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/proto"

	pb "github.com/sluice-rl/sluice/api/doorman"
	"github.com/sluice-rl/sluice/api/doorman/doormanconnect"
	v1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/internal/discovery"
	"github.com/sluice-rl/sluice/internal/watch"
)

// WatchBenchResult is what `sluice bench watch` measured.
type WatchBenchResult struct {
	Server  string `json:"server"`
	Holders int    `json:"holders"`
	// RSSBefore, RSSWatching and RSSLeased are the server's resident memory
	// (MB, process_resident_memory_bytes) before, with every stream open,
	// and with every holder holding a lease too.
	RSSBefore   float64 `json:"rss_before_mb"`
	RSSWatching float64 `json:"rss_watching_mb"`
	RSSLeased   float64 `json:"rss_leased_mb"`
	// BytesPerStream is (RSSWatching − RSSBefore) ÷ holders.
	BytesPerStream float64 `json:"bytes_per_stream"`
	// Shifts is the number of demand shifts: each, Movers holders ask for
	// nothing at once, and what they give back is pushed to the others.
	Shifts int `json:"shifts"`
	Movers int `json:"movers"`
	// Pushes is the leases the holders received on their streams during
	// the shifts; PushesPerShift their mean per shift.
	Pushes         int64   `json:"pushes"`
	PushesPerShift float64 `json:"pushes_per_shift"`
	// ServerCPUPerPush is the server's CPU time during the shifts (the
	// movers' requests included) per pushed lease, in microseconds.
	ServerCPUPerPush float64 `json:"server_cpu_us_per_push"`
}

// watchBench is one run of `sluice bench watch`: its flags and, once
// dialled, the server's metrics page, the connections the holders share and
// the count of leases pushed to them.
type watchBench struct {
	rf       rpcFlags
	holders  int
	conns    int
	shifts   int
	movers   int
	resource string
	asJSON   bool

	scheme   string                          // http or https
	base     string                          // scheme://server, for /metrics
	metrics  *http.Client                    // reads the server's /metrics
	hcs      []*http.Client                  // one per connection
	capStubs []doormanconnect.CapacityClient // GetCapacity, one per connection
	pushes   atomic.Int64                    // leases received on the streams
}

func newBenchWatchCmd() *cobra.Command {
	b := &watchBench{}
	cmd := &cobra.Command{
		Use:   "watch --server ADDR --holders N",
		Short: "Measure the cost of pushed leases: memory per open Watch stream, pushes per demand shift, server CPU per push",
		Long: `watch opens N sluice.v1.Leases Watch streams (holders bench-watch-0 … N-1)
over --conns HTTP/2 connections and reads the server's resident memory
(process_resident_memory_bytes on its /metrics) before and after; then every
holder asks once for RESOURCE wanting 4 (give RESOURCE a capacity of 2 × N:
every holder wants twice its share, and waits for capacity); then, --shifts times, --movers
holders (a different set each time) ask for nothing at once, and what they give
back is pushed to the others. It reports the memory per stream, the pushes per
shift and the server's CPU time per push (process_cpu_seconds_total; the
movers' requests included). Run it against an otherwise idle server whose
RESOURCE is FAIR_SHARE with learning mode over, and point it only at servers
you own.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return b.run(cmd) },
	}
	b.rf.add(cmd)
	f := cmd.Flags()
	f.IntVar(&b.holders, "holders", 10000, "watching holders (each its own stream)")
	f.IntVar(&b.conns, "conns", 16, "HTTP/2 connections to spread the streams over")
	f.IntVar(&b.shifts, "shifts", 20, "demand shifts")
	f.IntVar(&b.movers, "movers", 10, "holders that ask for nothing in each shift")
	f.StringVar(&b.resource, "resource", "bench/push", "the resource (FAIR_SHARE, learning mode over)")
	f.BoolVar(&b.asJSON, "json", false, "print the result as JSON")
	return cmd
}

// validate checks the flags: enough holders for every shift to move a
// different set of movers.
func (b *watchBench) validate() error {
	if b.holders < 2 || b.conns < 1 || b.shifts < 1 || b.movers < 1 || (b.shifts+1)*b.movers > b.holders {
		return fmt.Errorf("need --holders ≥ 2, --conns ≥ 1, --shifts ≥ 1, --movers ≥ 1 and (shifts+1) × movers ≤ holders")
	}
	return nil
}

// run measures the streams, the leases and the shifts, and reports.
func (b *watchBench) run(cmd *cobra.Command) error {
	if err := b.validate(); err != nil {
		return err
	}
	cfg, err := b.rf.tlsConfig()
	if err != nil {
		return err
	}
	b.scheme = discovery.Scheme(cfg)
	b.base = b.scheme + "://" + b.rf.server
	b.metrics = &http.Client{Transport: discovery.Transport(cfg, false), Timeout: 10 * time.Second}
	ctx, cancel := context.WithCancel(cmd.Context())
	defer cancel()
	res := WatchBenchResult{Server: b.rf.server, Holders: b.holders, Shifts: b.shifts, Movers: b.movers}
	res.RSSBefore = serverRSS(ctx, b.metrics, b.base)
	b.hcs = make([]*http.Client, b.conns)
	b.capStubs = make([]doormanconnect.CapacityClient, b.conns)
	for i := range b.hcs {
		b.hcs[i] = &http.Client{Transport: discovery.Transport(cfg, false)}
		b.capStubs[i] = discovery.NewDialer(b.hcs[i], b.scheme, false)(b.rf.server)
	}
	var wg sync.WaitGroup
	if err := b.openStreams(ctx, &wg, cmd.ErrOrStderr()); err != nil {
		return err
	}
	time.Sleep(time.Second)
	res.RSSWatching = serverRSS(ctx, b.metrics, b.base)
	res.BytesPerStream = (res.RSSWatching - res.RSSBefore) * 1e6 / float64(b.holders)
	all := make([]int, b.holders)
	for i := range all {
		all[i] = i
	}
	// Wants 4 each: twice an equal share of a capacity of 2 × holders.
	if err := b.ask(ctx, all, 4); err != nil {
		return fmt.Errorf("leasing: %w", err)
	}
	time.Sleep(time.Second)
	res.RSSLeased = serverRSS(ctx, b.metrics, b.base)
	if err := b.shift(ctx, all, &res); err != nil {
		return err
	}
	cancel()
	wg.Wait()
	return b.report(cmd.OutOrStdout(), res)
}

// benchHolderID is the client and holder id of holder i.
func benchHolderID(i int) string { return fmt.Sprintf("bench-watch-%d", i) }

// openStreams opens a Watch stream per holder, each in a goroutine counted
// in wg that counts the leases pushed to it until ctx ends, and waits (60 s
// at most) until every stream has delivered its first message.
func (b *watchBench) openStreams(ctx context.Context, wg *sync.WaitGroup, stderr io.Writer) error {
	opened := make(chan struct{}, b.holders)
	for i := range b.holders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stub := watch.NewDialer(b.hcs[i%b.conns], b.scheme, false)(b.rf.server)
			stream, err := stub.Watch(ctx, connect.NewRequest(&v1.WatchRequest{HolderId: benchHolderID(i)}))
			if err != nil {
				return
			}
			defer stream.Close()
			first := true
			for stream.Receive() {
				if first {
					opened <- struct{}{}
					first = false
				}
				b.pushes.Add(int64(len(stream.Msg().GetLeases())))
			}
		}()
	}
	progress := newProgress(stderr, "streams")
	for n := range b.holders {
		select {
		case <-opened:
		case <-time.After(60 * time.Second):
			return fmt.Errorf("only %d of %d streams opened in 60 s", n, b.holders)
		}
		if n%1000 == 0 {
			progress.Update(float64(n), float64(b.holders))
		}
	}
	progress.Done()
	return nil
}

// ask has the holders ids each ask once, 64 at a time, for the resource
// wanting wants.
func (b *watchBench) ask(ctx context.Context, ids []int, wants float64) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(64)
	for _, i := range ids {
		g.Go(func() error {
			_, err := b.capStubs[i%b.conns].GetCapacity(gctx, connect.NewRequest(&pb.GetCapacityRequest{
				ClientId: proto.String(benchHolderID(i)),
				Resource: []*pb.ResourceRequest{{ResourceId: proto.String(b.resource), Priority: proto.Int64(0), Wants: proto.Float64(wants)}},
			}))
			return err
		})
	}
	return g.Wait()
}

// shift runs the demand shifts, each a different set of movers out of all
// asking for nothing, and records in res the leases pushed meanwhile and
// the server's CPU time per push.
func (b *watchBench) shift(ctx context.Context, all []int, res *WatchBenchResult) error {
	// A holder's next request is decided only 5 s after its last
	// (Doorman's rule): before that, asking for nothing frees nothing.
	time.Sleep(pb.MinRequestInterval)
	p0 := b.pushes.Load()
	cpu0, _ := serverCPU(ctx, b.metrics, b.base)
	for k := range b.shifts {
		if err := b.ask(ctx, all[k*b.movers:(k+1)*b.movers], 0); err != nil {
			return fmt.Errorf("shift %d: %w", k, err)
		}
	}
	time.Sleep(time.Second)
	cpu1, _ := serverCPU(ctx, b.metrics, b.base)
	res.Pushes = b.pushes.Load() - p0
	res.PushesPerShift = float64(res.Pushes) / float64(b.shifts)
	if res.Pushes > 0 {
		res.ServerCPUPerPush = (cpu1 - cpu0) / float64(res.Pushes) * 1e6
	}
	return nil
}

// report prints res to w, as JSON with --json.
func (b *watchBench) report(w io.Writer, res WatchBenchResult) error {
	if b.asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	fmt.Fprintf(w, "%d holders watching %s over %d connections\n", b.holders, b.rf.server, b.conns)
	fmt.Fprintf(w, "  server RSS: %.1f MB before, %.1f MB with the streams open (%.0f bytes per stream), %.1f MB with leases\n",
		res.RSSBefore, res.RSSWatching, res.BytesPerStream, res.RSSLeased)
	fmt.Fprintf(w, "  %d shifts of %d holders asking for nothing: %d pushes (%.1f per shift), server CPU %.1f µs per push\n",
		b.shifts, b.movers, res.Pushes, res.PushesPerShift, res.ServerCPUPerPush)
	return nil
}
