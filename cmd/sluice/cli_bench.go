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
	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	pb "github.com/sluice-rl/sluice/api/doorman"
	"github.com/sluice-rl/sluice/internal/discovery"
	"github.com/sluice-rl/sluice/internal/scrape"
)

// BenchResult is what `sluice bench` measured. Latencies are milliseconds.
type BenchResult struct {
	Server      string  `json:"server"`
	Clients     int     `json:"clients"`
	Resources   int     `json:"resources"`
	Connections int     `json:"connections"`
	Seconds     float64 `json:"seconds"`
	Requests    int64   `json:"requests"`
	Errors      int64   `json:"errors"`
	Redirects   int64   `json:"redirects"`
	PerSecond   float64 `json:"requests_per_second"`
	P50         float64 `json:"p50_ms"`
	P90         float64 `json:"p90_ms"`
	P99         float64 `json:"p99_ms"`
	P999        float64 `json:"p999_ms"`
	Max         float64 `json:"max_ms"`
	// ServerCPUPerRequest is the server process's CPU time (user and
	// system, process_cpu_seconds_total from its /metrics, read before
	// and after the run) per request answered, in microseconds; 0 when the
	// server exposes no such figure. It counts everything the server did
	// meanwhile: run it against an otherwise idle server.
	ServerCPUPerRequest float64 `json:"server_cpu_us_per_request"`
}

// serverCPU reads process_cpu_seconds_total from the /metrics page at base
// ("http://host:port") with hc; ok is false when it cannot.
func serverCPU(ctx context.Context, hc *http.Client, base string) (seconds float64, ok bool) {
	return serverGauge(ctx, hc, base, "process_cpu_seconds_total")
}

// serverGauge reads the first sample of the metric name (a counter or a
// gauge) from the /metrics page at base with hc; ok is false when it
// cannot.
func serverGauge(ctx context.Context, hc *http.Client, base, name string) (value float64, ok bool) {
	v, err := scrape.Values(ctx, hc, base, name)
	value, ok = v[name]
	return value, err == nil && ok
}

func newBenchCmd() *cobra.Command {
	var (
		rf         rpcFlags
		clients    int
		resources  int
		conns      int
		duration   time.Duration
		wants      float64
		asJSON     bool
		firstError string
	)
	cmd := &cobra.Command{
		Use:   "bench --server ADDR --clients N --resources M --duration D",
		Short: "Load a server with GetCapacity from many simulated clients and report throughput and latency",
		Long: `bench runs N simulated clients, each with its own client id, each asking in one
GetCapacity for M resources (bench/0 … bench/M-1, wants --wants each) in a closed
loop, spread over --conns HTTP/2 connections, for --duration. It reports requests
per second, errors, mastership redirects followed, and latency percentiles from an
HDR histogram (1 µs to 60 s, 3 significant digits), and the server's CPU time per
request (its process_cpu_seconds_total on /metrics, read before and after: run it
against an otherwise idle server). A progress bar shows on a terminal. Point it only at servers you own: it sends as fast as they answer.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if clients < 1 || resources < 1 || conns < 1 || duration <= 0 {
				return fmt.Errorf("--clients, --resources, --conns and --duration must be positive")
			}
			cfg, err := rf.tlsConfig()
			if err != nil {
				return err
			}
			scheme := discovery.Scheme(cfg)
			dialers := make([]discovery.Dialer, conns)
			for i := range dialers {
				// A transport per connection: HTTP/2 multiplexes each
				// transport's requests over one connection.
				dialers[i] = discovery.NewDialer(&http.Client{Transport: discovery.Transport(cfg, false)}, scheme, false)
			}
			ids := make([]string, resources)
			for i := range ids {
				ids[i] = fmt.Sprintf("bench/%d", i)
			}
			metricsClient := &http.Client{Transport: discovery.Transport(cfg, false), Timeout: 10 * time.Second}
			cpu0, cpuOK := serverCPU(cmd.Context(), metricsClient, scheme+"://"+rf.server)
			// Cancelled, not a deadline: a deadline would travel with each
			// RPC (grpc-timeout) and the server could end the last ones
			// before this side noticed the end of the run.
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			stopTimer := time.AfterFunc(duration, cancel)
			defer stopTimer.Stop()
			var requests, errs, redirects atomic.Int64
			var errOnce sync.Once
			hists := make([]*hdrhistogram.Histogram, clients)
			var wg sync.WaitGroup
			start := time.Now()
			for i := range clients {
				hists[i] = hdrhistogram.New(1, 60_000_000, 3)
				wg.Add(1)
				go func() {
					defer wg.Done()
					dial, addr := dialers[i%conns], rf.server
					stub := dial(addr)
					req := &pb.GetCapacityRequest{ClientId: proto.String(fmt.Sprintf("bench-%d", i))}
					for _, id := range ids {
						req.Resource = append(req.Resource, &pb.ResourceRequest{ResourceId: proto.String(id), Priority: proto.Int64(0), Wants: proto.Float64(wants)})
					}
					for ctx.Err() == nil {
						t0 := time.Now()
						resp, err := stub.GetCapacity(ctx, connect.NewRequest(req))
						if ctx.Err() != nil {
							return // cut off by the end of the run, not counted
						}
						switch {
						case err != nil:
							errs.Add(1)
							errOnce.Do(func() { firstError = err.Error() })
							time.Sleep(10 * time.Millisecond)
						case resp.Msg.Mastership != nil:
							redirects.Add(1)
							if m := resp.Msg.GetMastership().GetMasterAddress(); m != "" && m != addr {
								addr, stub = m, dial(m)
							} else {
								time.Sleep(10 * time.Millisecond)
							}
						default:
							requests.Add(1)
							_ = hists[i].RecordValue(time.Since(t0).Microseconds())
						}
					}
				}()
			}
			progress := newProgress(cmd.ErrOrStderr(), "bench")
			tick := time.NewTicker(100 * time.Millisecond)
		wait:
			for {
				select {
				case <-ctx.Done():
					break wait
				case <-tick.C:
					progress.Update(time.Since(start).Seconds(), duration.Seconds())
				}
			}
			tick.Stop()
			progress.Done()
			wg.Wait()
			elapsed := time.Since(start).Seconds()
			all := hdrhistogram.New(1, 60_000_000, 3)
			for _, h := range hists {
				all.Merge(h)
			}
			ms := func(q float64) float64 { return float64(all.ValueAtQuantile(q)) / 1000 }
			answered := requests.Load() + errs.Load() + redirects.Load()
			var cpuPerRequest float64
			if cpu1, ok := serverCPU(cmd.Context(), metricsClient, scheme+"://"+rf.server); ok && cpuOK && answered > 0 {
				cpuPerRequest = (cpu1 - cpu0) / float64(answered) * 1e6
			}
			res := BenchResult{ServerCPUPerRequest: cpuPerRequest, Server: rf.server, Clients: clients, Resources: resources, Connections: conns, Seconds: elapsed,
				Requests: requests.Load(), Errors: errs.Load(), Redirects: redirects.Load(),
				PerSecond: float64(requests.Load()) / elapsed, P50: ms(50), P90: ms(90), P99: ms(99), P999: ms(99.9), Max: float64(all.Max()) / 1000}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				if err := enc.Encode(res); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "%d clients × %d resources over %d connections for %.1f s against %s\n", clients, resources, conns, elapsed, rf.server)
				fmt.Fprintf(cmd.OutOrStdout(), "  %d requests, %.0f req/s, %d errors, %d redirects\n", res.Requests, res.PerSecond, res.Errors, res.Redirects)
				fmt.Fprintf(cmd.OutOrStdout(), "  latency ms: p50 %.3f  p90 %.3f  p99 %.3f  p99.9 %.3f  max %.3f\n", res.P50, res.P90, res.P99, res.P999, res.Max)
				if res.ServerCPUPerRequest > 0 {
					fmt.Fprintf(cmd.OutOrStdout(), "  server CPU per request: %.1f µs (process_cpu_seconds_total from its /metrics)\n", res.ServerCPUPerRequest)
				}
			}
			if res.Errors > 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "first error: %s\n", firstError)
			}
			if res.Requests == 0 {
				return fmt.Errorf("no request succeeded")
			}
			return nil
		},
	}
	rf.add(cmd)
	f := cmd.Flags()
	f.IntVar(&clients, "clients", 100, "simulated clients (each with its own client id)")
	f.IntVar(&resources, "resources", 1, "resources each client asks for in one request")
	f.IntVar(&conns, "conns", 8, "HTTP/2 connections to spread the clients over")
	f.DurationVar(&duration, "duration", 10*time.Second, "how long to run")
	f.Float64Var(&wants, "wants", 1, "wants per resource")
	f.BoolVar(&asJSON, "json", false, "print the result as JSON")
	cmd.AddCommand(newBenchWatchCmd())
	return cmd
}
