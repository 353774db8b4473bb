package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"
	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluice-rl/sluice/internal/discovery"
)

// RLQSBenchResult is what `sluice bench rlqs` measured.
type RLQSBenchResult struct {
	Server  string `json:"server"`
	Streams int    `json:"streams"`
	Buckets int    `json:"buckets"` // per stream
	// RSSBefore, RSSOne and RSSAll are the server's resident memory (MB)
	// before, with every stream reporting one bucket, and every stream
	// reporting all its buckets.
	RSSBefore float64 `json:"rss_before_mb"`
	RSSOne    float64 `json:"rss_one_bucket_mb"`
	RSSAll    float64 `json:"rss_all_buckets_mb"`
	// BytesPerStream is a stream's memory with its first bucket
	// ((RSSOne − RSSBefore) ÷ streams − BytesPerBucket); BytesPerBucket a
	// further (stream, bucket) pair's ((RSSAll − RSSOne) ÷ (streams ×
	// (buckets − 1))): the RLQS service's state, the lease store's and
	// the capacity service's.
	BytesPerStream float64 `json:"bytes_per_stream"`
	BytesPerBucket float64 `json:"bytes_per_stream_bucket"`
	// Reports is the reports sent in the steady rounds (streams × rounds,
	// each with every bucket), ServerCPUPerReport the server's CPU time
	// per report in microseconds, and per (report, bucket).
	Reports                  int     `json:"reports"`
	ServerCPUPerReport       float64 `json:"server_cpu_us_per_report"`
	ServerCPUPerBucketReport float64 `json:"server_cpu_us_per_bucket_report"`
}

// rlqsBench is one run of `sluice bench rlqs`.
type rlqsBench struct {
	rf      rpcFlags
	streams int
	buckets int
	conns   int
	rounds  int
	domain  string
	asJSON  bool

	base    string       // scheme://server, for /metrics
	metrics *http.Client // reads the server's /metrics
}

func newBenchRLQSCmd() *cobra.Command {
	b := &rlqsBench{}
	cmd := &cobra.Command{
		Use:   "rlqs --server ADDR --streams N --buckets M",
		Short: "Measure the cost of Envoy's RLQS streams: memory per stream and per (stream, bucket), server CPU per report",
		Long: `rlqs opens N StreamRateLimitQuotas streams (emulated Envoys, domain --domain)
over --conns HTTP/2 connections (gRPC), each reporting one bucket, then all M
buckets ({name: b0} … {name: bM-1}, the resources DOMAIN/name=b0 …), waiting for
their assignments, and reads the server's resident memory
(process_resident_memory_bytes on its /metrics) before and after each step;
then every stream sends --rounds reports of its M buckets (the same demand: the
steady state, no decision due) and it reads the server's CPU time
(process_cpu_seconds_total) per report. Give DOMAIN/* a FAIR_SHARE template
with capacity to spare and learning mode over (learning_mode_duration: 0), run
it against an otherwise idle server, and point it only at servers you own.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return b.run(cmd) },
	}
	b.rf.add(cmd)
	f := cmd.Flags()
	f.IntVar(&b.streams, "streams", 10000, "streams (emulated Envoys)")
	f.IntVar(&b.buckets, "buckets", 10, "buckets per stream")
	f.IntVar(&b.conns, "conns", 16, "HTTP/2 connections to spread the streams over")
	f.IntVar(&b.rounds, "rounds", 5, "steady report rounds measured")
	f.StringVar(&b.domain, "domain", "rlqs-bench", "the streams' domain")
	f.BoolVar(&b.asJSON, "json", false, "print the result as JSON")
	return cmd
}

// rlqsStream is one emulated Envoy's stream and its assignments' count.
type rlqsStream struct {
	st       *connect.BidiStreamForClient[rlqspb.RateLimitQuotaUsageReports, rlqspb.RateLimitQuotaResponse]
	assigned chan int // the actions of each response
}

// report returns a report of buckets b0 … bn-1, one request each over a
// second (with the domain when first).
func (b *rlqsBench) report(n int, first bool) *rlqspb.RateLimitQuotaUsageReports {
	m := &rlqspb.RateLimitQuotaUsageReports{}
	if first {
		m.Domain = b.domain
	}
	for j := range n {
		m.BucketQuotaUsages = append(m.BucketQuotaUsages, &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId:           &rlqspb.BucketId{Bucket: map[string]string{"name": fmt.Sprintf("b%d", j)}},
			TimeElapsed:        durationpb.New(time.Second),
			NumRequestsAllowed: 1,
		})
	}
	return m
}

// run opens the streams, measures, and reports.
func (b *rlqsBench) run(cmd *cobra.Command) error {
	if b.streams < 1 || b.buckets < 2 || b.conns < 1 || b.rounds < 1 {
		return fmt.Errorf("need --streams ≥ 1, --buckets ≥ 2, --conns ≥ 1, --rounds ≥ 1")
	}
	cfg, err := b.rf.tlsConfig()
	if err != nil {
		return err
	}
	scheme := discovery.Scheme(cfg)
	b.base = scheme + "://" + b.rf.server
	b.metrics = &http.Client{Transport: discovery.Transport(cfg, false), Timeout: 10 * time.Second}
	ctx, cancel := context.WithCancel(cmd.Context())
	defer cancel()
	res := RLQSBenchResult{Server: b.rf.server, Streams: b.streams, Buckets: b.buckets}
	res.RSSBefore = serverRSS(ctx, b.metrics, b.base)

	clients := make([]*connect.Client[rlqspb.RateLimitQuotaUsageReports, rlqspb.RateLimitQuotaResponse], b.conns)
	for i := range clients {
		hc := &http.Client{Transport: discovery.Transport(cfg, false)}
		clients[i] = connect.NewClient[rlqspb.RateLimitQuotaUsageReports, rlqspb.RateLimitQuotaResponse](hc,
			b.base+rlqspb.RateLimitQuotaService_StreamRateLimitQuotas_FullMethodName, connect.WithGRPC())
	}
	streams := make([]*rlqsStream, b.streams)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for i := range streams {
		s := &rlqsStream{st: clients[i%b.conns].CallBidiStream(ctx), assigned: make(chan int, 4)}
		streams[i] = s
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				m, err := s.st.Receive()
				if err != nil {
					close(s.assigned)
					return
				}
				select {
				case s.assigned <- len(m.GetBucketAction()):
				default:
				}
			}
		}()
	}
	// One bucket each, then all of them: each step waits for every
	// stream's assignments.
	if err := b.step(ctx, cmd.ErrOrStderr(), streams, "one bucket", func(s *rlqsStream) error { return s.st.Send(b.report(1, true)) }, 1); err != nil {
		return err
	}
	time.Sleep(time.Second)
	res.RSSOne = serverRSS(ctx, b.metrics, b.base)
	if err := b.step(ctx, cmd.ErrOrStderr(), streams, "all buckets", func(s *rlqsStream) error { return s.st.Send(b.report(b.buckets, false)) }, b.buckets-1); err != nil {
		return err
	}
	time.Sleep(time.Second)
	res.RSSAll = serverRSS(ctx, b.metrics, b.base)
	res.BytesPerBucket = (res.RSSAll - res.RSSOne) * 1e6 / float64(b.streams*(b.buckets-1))
	res.BytesPerStream = (res.RSSOne-res.RSSBefore)*1e6/float64(b.streams) - res.BytesPerBucket

	// The steady rounds: reports with the demand unchanged.
	reports0, _ := serverGauge(ctx, b.metrics, b.base, "sluice_rlqs_reports_total")
	cpu0, _ := serverCPU(ctx, b.metrics, b.base)
	msg := b.report(b.buckets, false)
	for range b.rounds {
		g, _ := errgroup.WithContext(ctx)
		g.SetLimit(256)
		for _, s := range streams {
			g.Go(func() error { return s.st.Send(msg) })
		}
		if err := g.Wait(); err != nil {
			return fmt.Errorf("reporting: %w", err)
		}
	}
	res.Reports = b.streams * b.rounds
	deadline := time.Now().Add(120 * time.Second)
	for {
		if n, _ := serverGauge(ctx, b.metrics, b.base, "sluice_rlqs_reports_total"); n-reports0 >= float64(res.Reports) {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the server did not count %d reports within 120 s (sluice_rlqs_reports_total)", res.Reports)
		}
		time.Sleep(100 * time.Millisecond)
	}
	cpu1, _ := serverCPU(ctx, b.metrics, b.base)
	res.ServerCPUPerReport = (cpu1 - cpu0) / float64(res.Reports) * 1e6
	res.ServerCPUPerBucketReport = res.ServerCPUPerReport / float64(b.buckets)
	for _, s := range streams {
		_ = s.st.CloseRequest()
	}
	cancel()
	return b.print(cmd.OutOrStdout(), res)
}

// step sends each stream its message (256 at a time) and waits (60 s at
// most) until each received at least want assignments.
func (b *rlqsBench) step(ctx context.Context, stderr io.Writer, streams []*rlqsStream, what string, send func(*rlqsStream) error, want int) error {
	g, _ := errgroup.WithContext(ctx)
	g.SetLimit(256)
	for _, s := range streams {
		g.Go(func() error { return send(s) })
	}
	if err := g.Wait(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	progress := newProgress(stderr, what)
	deadline := time.After(60 * time.Second)
	for i, s := range streams {
		for got := 0; got < want; {
			select {
			case n, ok := <-s.assigned:
				if !ok {
					return fmt.Errorf("%s: stream %d ended (is the server the master, %s/* configured?)", what, i, b.domain)
				}
				got += n
			case <-deadline:
				return fmt.Errorf("%s: only %d of %d streams assigned within 60 s", what, i, len(streams))
			}
		}
		if i%1000 == 0 {
			progress.Update(float64(i), float64(len(streams)))
		}
	}
	progress.Done()
	return nil
}

// print prints res to w, as JSON with --json.
func (b *rlqsBench) print(w io.Writer, res RLQSBenchResult) error {
	if b.asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	fmt.Fprintf(w, "%d RLQS streams × %d buckets on %s over %d connections\n", b.streams, b.buckets, b.rf.server, b.conns)
	fmt.Fprintf(w, "  server RSS: %.1f MB before, %.1f MB with one bucket each, %.1f MB with all\n", res.RSSBefore, res.RSSOne, res.RSSAll)
	fmt.Fprintf(w, "  memory: %.0f bytes per stream, %.0f bytes per (stream, bucket)\n", res.BytesPerStream, res.BytesPerBucket)
	fmt.Fprintf(w, "  %d steady reports of %d buckets: server CPU %.1f µs per report (%.2f µs per bucket)\n",
		res.Reports, b.buckets, res.ServerCPUPerReport, res.ServerCPUPerBucketReport)
	return nil
}
