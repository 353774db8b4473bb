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

// serverRSS reads process_resident_memory_bytes from the /metrics page at
// base with hc, in MB (0 when it cannot).
func serverRSS(ctx context.Context, hc *http.Client, base string) float64 {
	v, _ := serverGauge(ctx, hc, base, "process_resident_memory_bytes")
	return v / 1e6
}

// serverGauge reads the first sample of the metric name (a counter or a
// gauge) from the /metrics page at base with hc; ok is false when it
// cannot.
func serverGauge(ctx context.Context, hc *http.Client, base, name string) (value float64, ok bool) {
	v, err := scrape.Values(ctx, hc, base, name)
	value, ok = v[name]
	return value, err == nil && ok
}

// capacityBench is one run of `sluice bench`: its flags and what its
// clients counted.
type capacityBench struct {
	rf        rpcFlags
	clients   int
	resources int
	conns     int
	duration  time.Duration
	wants     float64
	asJSON    bool

	requests, errs, redirects atomic.Int64
	errOnce                   sync.Once
	firstError                string
	hists                     []*hdrhistogram.Histogram // latencies (µs), one per client
}

func newBenchCmd() *cobra.Command {
	b := &capacityBench{}
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
		RunE: func(cmd *cobra.Command, _ []string) error { return b.run(cmd) },
	}
	b.rf.add(cmd)
	f := cmd.Flags()
	f.IntVar(&b.clients, "clients", 100, "simulated clients (each with its own client id)")
	f.IntVar(&b.resources, "resources", 1, "resources each client asks for in one request")
	f.IntVar(&b.conns, "conns", 8, "HTTP/2 connections to spread the clients over")
	f.DurationVar(&b.duration, "duration", 10*time.Second, "how long to run")
	f.Float64Var(&b.wants, "wants", 1, "wants per resource")
	f.BoolVar(&b.asJSON, "json", false, "print the result as JSON")
	cmd.AddCommand(newBenchWatchCmd(), newBenchRLQSCmd())
	return cmd
}

// run loads the server for --duration, reads its CPU time before and
// after, and reports.
func (b *capacityBench) run(cmd *cobra.Command) error {
	if b.clients < 1 || b.resources < 1 || b.conns < 1 || b.duration <= 0 {
		return fmt.Errorf("--clients, --resources, --conns and --duration must be positive")
	}
	cfg, err := b.rf.tlsConfig()
	if err != nil {
		return err
	}
	scheme := discovery.Scheme(cfg)
	dialers := make([]discovery.Dialer, b.conns)
	for i := range dialers {
		// A transport per connection: HTTP/2 multiplexes each
		// transport's requests over one connection.
		dialers[i] = discovery.NewDialer(&http.Client{Transport: discovery.Transport(cfg, false)}, scheme, false)
	}
	ids := make([]string, b.resources)
	for i := range ids {
		ids[i] = fmt.Sprintf("bench/%d", i)
	}
	metricsClient := &http.Client{Transport: discovery.Transport(cfg, false), Timeout: 10 * time.Second}
	cpu0, cpuOK := serverCPU(cmd.Context(), metricsClient, scheme+"://"+b.rf.server)
	// Cancelled, not a deadline: a deadline would travel with each
	// RPC (grpc-timeout) and the server could end the last ones
	// before this side noticed the end of the run.
	ctx, cancel := context.WithCancel(cmd.Context())
	defer cancel()
	stopTimer := time.AfterFunc(b.duration, cancel)
	defer stopTimer.Stop()
	b.hists = make([]*hdrhistogram.Histogram, b.clients)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range b.clients {
		b.hists[i] = hdrhistogram.New(1, 60_000_000, 3)
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.client(ctx, i, dialers[i%b.conns], ids)
		}()
	}
	b.showProgress(ctx, cmd.ErrOrStderr(), start)
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	res := b.result(elapsed)
	answered := b.requests.Load() + b.errs.Load() + b.redirects.Load()
	if cpu1, ok := serverCPU(cmd.Context(), metricsClient, scheme+"://"+b.rf.server); ok && cpuOK && answered > 0 {
		res.ServerCPUPerRequest = (cpu1 - cpu0) / float64(answered) * 1e6
	}
	return b.report(cmd.OutOrStdout(), cmd.ErrOrStderr(), res)
}

// client is simulated client i: it asks for every resource in ids, in a
// closed loop until ctx ends, following mastership redirects, and counts
// the answers.
func (b *capacityBench) client(ctx context.Context, i int, dial discovery.Dialer, ids []string) {
	addr := b.rf.server
	stub := dial(addr)
	req := &pb.GetCapacityRequest{ClientId: proto.String(fmt.Sprintf("bench-%d", i))}
	for _, id := range ids {
		req.Resource = append(req.Resource, &pb.ResourceRequest{ResourceId: proto.String(id), Priority: proto.Int64(0), Wants: proto.Float64(b.wants)})
	}
	for ctx.Err() == nil {
		t0 := time.Now()
		resp, err := stub.GetCapacity(ctx, connect.NewRequest(req))
		if ctx.Err() != nil {
			return // cut off by the end of the run, not counted
		}
		switch {
		case err != nil:
			b.errs.Add(1)
			b.errOnce.Do(func() { b.firstError = err.Error() })
			time.Sleep(10 * time.Millisecond)
		case resp.Msg.Mastership != nil:
			b.redirects.Add(1)
			if m := resp.Msg.GetMastership().GetMasterAddress(); m != "" && m != addr {
				addr, stub = m, dial(m)
			} else {
				time.Sleep(10 * time.Millisecond)
			}
		default:
			b.requests.Add(1)
			_ = b.hists[i].RecordValue(time.Since(t0).Microseconds())
		}
	}
}

// showProgress updates a progress bar on stderr (on a terminal) every
// 100 ms from start until ctx ends.
func (b *capacityBench) showProgress(ctx context.Context, stderr io.Writer, start time.Time) {
	progress := newProgress(stderr, "bench")
	defer progress.Done()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			progress.Update(time.Since(start).Seconds(), b.duration.Seconds())
		}
	}
}

// result is what the clients counted over elapsed seconds, their
// latencies merged; the server's CPU time is left to the caller.
func (b *capacityBench) result(elapsed float64) BenchResult {
	all := hdrhistogram.New(1, 60_000_000, 3)
	for _, h := range b.hists {
		all.Merge(h)
	}
	ms := func(q float64) float64 { return float64(all.ValueAtQuantile(q)) / 1000 }
	return BenchResult{Server: b.rf.server, Clients: b.clients, Resources: b.resources, Connections: b.conns, Seconds: elapsed,
		Requests: b.requests.Load(), Errors: b.errs.Load(), Redirects: b.redirects.Load(),
		PerSecond: float64(b.requests.Load()) / elapsed, P50: ms(50), P90: ms(90), P99: ms(99), P999: ms(99.9), Max: float64(all.Max()) / 1000}
}

// report prints res to stdout (as JSON with --json) and the first error to
// stderr; it fails when no request succeeded.
func (b *capacityBench) report(stdout, stderr io.Writer, res BenchResult) error {
	if b.asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(stdout, "%d clients × %d resources over %d connections for %.1f s against %s\n", b.clients, b.resources, b.conns, res.Seconds, b.rf.server)
		fmt.Fprintf(stdout, "  %d requests, %.0f req/s, %d errors, %d redirects\n", res.Requests, res.PerSecond, res.Errors, res.Redirects)
		fmt.Fprintf(stdout, "  latency ms: p50 %.3f  p90 %.3f  p99 %.3f  p99.9 %.3f  max %.3f\n", res.P50, res.P90, res.P99, res.P999, res.Max)
		if res.ServerCPUPerRequest > 0 {
			fmt.Fprintf(stdout, "  server CPU per request: %.1f µs (process_cpu_seconds_total from its /metrics)\n", res.ServerCPUPerRequest)
		}
	}
	if res.Errors > 0 {
		fmt.Fprintf(stderr, "first error: %s\n", b.firstError)
	}
	if res.Requests == 0 {
		return fmt.Errorf("no request succeeded")
	}
	return nil
}
