package main

import (
	"context"
	"encoding/json"
	"fmt"
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

func newBenchWatchCmd() *cobra.Command {
	var (
		rf       rpcFlags
		holders  int
		conns    int
		shifts   int
		movers   int
		resource string
		asJSON   bool
	)
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
		RunE: func(cmd *cobra.Command, _ []string) error {
			if holders < 2 || conns < 1 || shifts < 1 || movers < 1 || (shifts+1)*movers > holders {
				return fmt.Errorf("need --holders ≥ 2, --conns ≥ 1, --shifts ≥ 1, --movers ≥ 1 and (shifts+1) × movers ≤ holders")
			}
			cfg, err := rf.tlsConfig()
			if err != nil {
				return err
			}
			scheme := discovery.Scheme(cfg)
			base := scheme + "://" + rf.server
			mc := &http.Client{Transport: discovery.Transport(cfg, false), Timeout: 10 * time.Second}
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			res := WatchBenchResult{Server: rf.server, Holders: holders, Shifts: shifts, Movers: movers}
			rss := func() float64 {
				v, _ := serverGauge(ctx, mc, base, "process_resident_memory_bytes")
				return v / 1e6
			}
			res.RSSBefore = rss()
			hcs := make([]*http.Client, conns)
			capStubs := make([]doormanconnect.CapacityClient, conns)
			for i := range hcs {
				hcs[i] = &http.Client{Transport: discovery.Transport(cfg, false)}
				capStubs[i] = discovery.NewDialer(hcs[i], scheme, false)(rf.server)
			}
			var pushes atomic.Int64
			opened := make(chan struct{}, holders)
			var wg sync.WaitGroup
			for i := range holders {
				wg.Add(1)
				go func() {
					defer wg.Done()
					stub := watch.NewDialer(hcs[i%conns], scheme, false)(rf.server)
					stream, err := stub.Watch(ctx, connect.NewRequest(&v1.WatchRequest{HolderId: fmt.Sprintf("bench-watch-%d", i)}))
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
						pushes.Add(int64(len(stream.Msg().GetLeases())))
					}
				}()
			}
			progress := newProgress(cmd.ErrOrStderr(), "streams")
			for n := range holders {
				select {
				case <-opened:
				case <-time.After(60 * time.Second):
					return fmt.Errorf("only %d of %d streams opened in 60 s", n, holders)
				}
				if n%1000 == 0 {
					progress.Update(float64(n), float64(holders))
				}
			}
			progress.Done()
			time.Sleep(time.Second)
			res.RSSWatching = rss()
			res.BytesPerStream = (res.RSSWatching - res.RSSBefore) * 1e6 / float64(holders)
			ask := func(ids []int, wants float64) error {
				g, gctx := errgroup.WithContext(ctx)
				g.SetLimit(64)
				for _, i := range ids {
					g.Go(func() error {
						_, err := capStubs[i%conns].GetCapacity(gctx, connect.NewRequest(&pb.GetCapacityRequest{
							ClientId: proto.String(fmt.Sprintf("bench-watch-%d", i)),
							Resource: []*pb.ResourceRequest{{ResourceId: proto.String(resource), Priority: proto.Int64(0), Wants: proto.Float64(wants)}},
						}))
						return err
					})
				}
				return g.Wait()
			}
			all := make([]int, holders)
			for i := range all {
				all[i] = i
			}
			// Wants 4 each: twice an equal share of a capacity of 2 × holders.
			if err := ask(all, 4); err != nil {
				return fmt.Errorf("leasing: %w", err)
			}
			time.Sleep(time.Second)
			res.RSSLeased = rss()
			// A holder's next request is decided only 5 s after its last
			// (Doorman's rule): before that, asking for nothing frees nothing.
			time.Sleep(pb.MinRequestInterval)
			p0 := pushes.Load()
			cpu0, _ := serverCPU(ctx, mc, base)
			for k := range shifts {
				if err := ask(all[k*movers:(k+1)*movers], 0); err != nil {
					return fmt.Errorf("shift %d: %w", k, err)
				}
			}
			time.Sleep(time.Second)
			cpu1, _ := serverCPU(ctx, mc, base)
			res.Pushes = pushes.Load() - p0
			res.PushesPerShift = float64(res.Pushes) / float64(shifts)
			if res.Pushes > 0 {
				res.ServerCPUPerPush = (cpu1 - cpu0) / float64(res.Pushes) * 1e6
			}
			cancel()
			wg.Wait()
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(res)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%d holders watching %s over %d connections\n", holders, rf.server, conns)
			fmt.Fprintf(cmd.OutOrStdout(), "  server RSS: %.1f MB before, %.1f MB with the streams open (%.0f bytes per stream), %.1f MB with leases\n",
				res.RSSBefore, res.RSSWatching, res.BytesPerStream, res.RSSLeased)
			fmt.Fprintf(cmd.OutOrStdout(), "  %d shifts of %d holders asking for nothing: %d pushes (%.1f per shift), server CPU %.1f µs per push\n",
				shifts, movers, res.Pushes, res.PushesPerShift, res.ServerCPUPerPush)
			return nil
		},
	}
	rf.add(cmd)
	f := cmd.Flags()
	f.IntVar(&holders, "holders", 10000, "watching holders (each its own stream)")
	f.IntVar(&conns, "conns", 16, "HTTP/2 connections to spread the streams over")
	f.IntVar(&shifts, "shifts", 20, "demand shifts")
	f.IntVar(&movers, "movers", 10, "holders that ask for nothing in each shift")
	f.StringVar(&resource, "resource", "bench/push", "the resource (FAIR_SHARE, learning mode over)")
	f.BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}
