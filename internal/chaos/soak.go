package chaos

import (
	"cmp"
	"context"
	"encoding/csv"
	"fmt"
	"image/color"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-rl/sluice/api/doorman"
	quotapb "github.com/sluice-rl/sluice/api/quotaservice"
	v1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/internal/scrape"
	"github.com/sluice-rl/sluice/internal/testutil/etcdtest"
	"github.com/sluice-rl/sluice/internal/testutil/redistest"
)

// soakConfig adds to limitsConfig a Doorman resource and per-user
// dynamic buckets (10 000 users, idle buckets dropped after 30 s).
var soakConfig = limitsConfig + `
    users:
      template: {size: 10, fill_rate: 5, wait_timeout: 0s, max_idle: 30s}
resources:
  - identifier_glob: soak
    capacity: 1000
    algorithm: {kind: FAIR_SHARE, lease_length: 20, refresh_interval: 5, learning_mode_duration: 0}
`

// soakEnvoy is the servers' envoyproxy/ratelimit configuration: 5 hits a
// second per user.
const soakEnvoy = `
domain: soak
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 5}
`

// SoakOptions says what Soak runs.
type SoakOptions struct {
	// Sluice is the sluice binary; Servers how many servers share one
	// Redis (with their fleet on etcd).
	Sluice  string
	Servers int
	// Duration is the soak's length, Every the sampling period (zero: 10 s).
	Duration, Every time.Duration
	// Out is the directory for soak-<servers>.csv and .png.
	Out string
	// Log receives progress (nil: none).
	Log io.Writer
}

// SoakSample is one sample of one server and of Redis.
type SoakSample struct {
	// T is seconds since the load started.
	T      float64
	Server int
	// RSS in MB, Goroutines, FDs (open files) of the server; Requests
	// answered by every API since the last sample, per second.
	RSS, Goroutines, FDs, RequestsPerSecond float64
	// RedisMB is Redis's used_memory in MB, RedisKeys its DBSIZE.
	RedisMB, RedisKeys float64
}

// Soak runs steady load on every API — Doorman's GetCapacity, Sluice's
// Allow on per-user buckets, the quota service's Allow, copies held in
// sessions, Envoy's ShouldRateLimit — against opts.Servers servers on
// one Redis for opts.Duration, samples each server's RSS, goroutines and
// open files and Redis's memory and keys every opts.Every, and writes
// them as CSV and a PNG plot. It returns the samples.
func Soak(ctx context.Context, opts SoakOptions) ([]SoakSample, error) {
	opts.Every = cmp.Or(opts.Every, 10*time.Second)
	dir, err := os.MkdirTemp("", "sluice-soak-")
	if err != nil {
		return nil, err
	}
	e := &Env{Dir: dir}
	defer e.Close()
	cfg, err := e.writeFile("config.yaml", soakConfig)
	if err != nil {
		return nil, err
	}
	envoy, err := e.writeFile("envoy.yaml", soakEnvoy)
	if err != nil {
		return nil, err
	}
	if e.Redis, err = redistest.Start(); err != nil {
		return nil, err
	}
	if e.Etcd, err = etcdtest.StartCluster(filepath.Join(dir, "etcd"), 1); err != nil {
		return nil, err
	}
	for i := range opts.Servers {
		s, err := startServer(opts.Sluice, "server-"+strconv.Itoa(i), opts.Log, "--config", cfg, "--envoy-ratelimit-config", envoy,
			"--redis", "redis://"+e.Redis.Addr+"/0", "--etcd-endpoints", e.Etcd.Members[0].Endpoint, "--fleet-ttl", "2s", "--fleet-prefix", "/soak")
		if err != nil {
			return nil, err
		}
		e.Servers = append(e.Servers, s)
	}
	var answered atomic.Int64
	lctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i, s := range e.Servers {
		conn, err := dial(s.Addr)
		if err != nil {
			stop()
			return nil, err
		}
		defer conn.Close()
		for _, load := range soakLoads {
			wg.Go(func() { load(lctx, conn, i, &answered) })
		}
	}
	defer func() { stop(); wg.Wait() }()

	rc := redis.NewClient(&redis.Options{Addr: e.Redis.Addr})
	defer rc.Close()
	hc := &http.Client{Timeout: 5 * time.Second}
	var samples []SoakSample
	start, last, lastN := time.Now(), time.Now(), int64(0)
	tick := time.NewTicker(opts.Every)
	defer tick.Stop()
	for time.Since(start) < opts.Duration {
		select {
		case <-ctx.Done():
			return samples, ctx.Err()
		case <-tick.C:
		}
		now, n := time.Now(), answered.Load()
		rps := float64(n-lastN) / now.Sub(last).Seconds()
		last, lastN = now, n
		info, _ := rc.InfoMap(ctx, "memory").Result()
		mem, _ := strconv.ParseFloat(info["Memory"]["used_memory"], 64)
		keys, _ := rc.DBSize(ctx).Result()
		for i, s := range e.Servers {
			v, err := scrape.Values(ctx, hc, "http://"+s.Addr, "process_resident_memory_bytes", "go_goroutines", "process_open_fds")
			if err != nil {
				return samples, err
			}
			samples = append(samples, SoakSample{T: now.Sub(start).Seconds(), Server: i, RSS: v["process_resident_memory_bytes"] / 1e6,
				Goroutines: v["go_goroutines"], FDs: v["process_open_fds"], RequestsPerSecond: rps, RedisMB: mem / 1e6, RedisKeys: float64(keys)})
		}
		if opts.Log != nil {
			s := samples[len(samples)-1]
			fmt.Fprintf(opts.Log, "soak %4.0fs: %.0f req/s, server %d RSS %.1f MB, %.0f goroutines, %.0f fds; Redis %.1f MB, %.0f keys\n",
				s.T, s.RequestsPerSecond, s.Server, s.RSS, s.Goroutines, s.FDs, s.RedisMB, s.RedisKeys)
		}
	}
	base := filepath.Join(opts.Out, fmt.Sprintf("soak-%d", opts.Servers))
	if err := writeSoakCSV(base+".csv", samples); err != nil {
		return samples, err
	}
	return samples, plotSoak(base+".png", opts.Servers, samples)
}

// soakLoads are the soak's clients, one of each per server, each a
// request every 5 ms.
var soakLoads = []func(ctx context.Context, conn *grpc.ClientConn, server int, answered *atomic.Int64){
	func(ctx context.Context, conn *grpc.ClientConn, server int, answered *atomic.Int64) {
		c := doorman.NewCapacityClient(conn)
		rng := rand.New(rand.NewPCG(uint64(server), 1))
		every(ctx, pace, func() {
			id := fmt.Sprintf("client-%d-%d", server, rng.IntN(200))
			_, err := c.GetCapacity(ctx, &doorman.GetCapacityRequest{ClientId: proto.String(id),
				Resource: []*doorman.ResourceRequest{{ResourceId: proto.String("soak"), Priority: proto.Int64(0), Wants: proto.Float64(float64(rng.IntN(20)))}}})
			count(answered, err)
		})
	},
	func(ctx context.Context, conn *grpc.ClientConn, server int, answered *atomic.Int64) {
		c := v1.NewLimitsClient(conn)
		rng := rand.New(rand.NewPCG(uint64(server), 2))
		every(ctx, pace, func() {
			_, err := c.Allow(ctx, &v1.AllowRequest{Resource: "users", Domain: "u" + strconv.Itoa(rng.IntN(10_000)), Tokens: 1})
			count(answered, err)
		})
	},
	func(ctx context.Context, conn *grpc.ClientConn, _ int, answered *atomic.Int64) {
		c := quotapb.NewQuotaServiceClient(conn)
		every(ctx, pace, func() {
			_, err := c.Allow(ctx, &quotapb.AllowRequest{Namespace: "chaos", BucketName: "closed", TokensRequested: 1, MaxWaitTimeOverride: true})
			count(answered, err)
		})
	},
	func(ctx context.Context, conn *grpc.ClientConn, server int, answered *atomic.Int64) {
		c := rlsv3.NewRateLimitServiceClient(conn)
		rng := rand.New(rand.NewPCG(uint64(server), 3))
		every(ctx, pace, func() {
			_, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "soak", Descriptors: []*ratelimitv3.RateLimitDescriptor{
				{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: "u" + strconv.Itoa(rng.IntN(10_000))}}}}})
			count(answered, err)
		})
	},
	func(ctx context.Context, conn *grpc.ClientConn, _ int, answered *atomic.Int64) {
		// A session a second: open, reserve, release, close.
		c := v1.NewLimitsClient(conn)
		every(ctx, time.Second, func() {
			s, err := openSession(ctx, c)
			count(answered, err)
			if err != nil {
				return
			}
			_, err = c.Reserve(ctx, &v1.ReserveRequest{SessionId: s.id, Resource: "pool", Domain: "soak", Copies: 1})
			count(answered, err)
			_, err = c.Release(ctx, &v1.ReleaseRequest{SessionId: s.id, Resource: "pool", Domain: "soak", Copies: 1})
			count(answered, err)
			s.close()
			_, err = c.CloseSession(ctx, &v1.CloseSessionRequest{SessionId: s.id})
			count(answered, err)
		})
	},
}

func count(answered *atomic.Int64, err error) {
	if err == nil {
		answered.Add(1)
	}
}

func writeSoakCSV(path string, samples []SoakSample) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	_ = w.Write([]string{"t_seconds", "server", "rss_mb", "goroutines", "open_fds", "requests_per_second", "redis_mb", "redis_keys"})
	for _, s := range samples {
		_ = w.Write([]string{fmt.Sprint(s.T), fmt.Sprint(s.Server), fmt.Sprint(s.RSS), fmt.Sprint(s.Goroutines), fmt.Sprint(s.FDs),
			fmt.Sprint(s.RequestsPerSecond), fmt.Sprint(s.RedisMB), fmt.Sprint(s.RedisKeys)})
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// plotSoak draws the samples as six panels, one line per server.
func plotSoak(path string, servers int, samples []SoakSample) error {
	panels := []struct {
		title string
		y     func(SoakSample) float64
		redis bool
	}{
		{"server RSS (MB)", func(s SoakSample) float64 { return s.RSS }, false},
		{"goroutines", func(s SoakSample) float64 { return s.Goroutines }, false},
		{"open files", func(s SoakSample) float64 { return s.FDs }, false},
		{"requests answered per second", func(s SoakSample) float64 { return s.RequestsPerSecond }, true},
		{"Redis used memory (MB)", func(s SoakSample) float64 { return s.RedisMB }, true},
		{"Redis keys", func(s SoakSample) float64 { return s.RedisKeys }, true},
	}
	colors := []color.Color{color.RGBA{B: 220, A: 255}, color.RGBA{R: 220, A: 255}, color.RGBA{G: 150, A: 255}}
	plots := make([][]*plot.Plot, 2)
	for i, pn := range panels {
		p := plot.New()
		p.Title.Text = pn.title
		p.X.Label.Text = "time (s)"
		p.Y.Min = 0
		p.Add(plotter.NewGrid())
		for srv := range servers {
			if pn.redis && srv > 0 {
				break
			}
			var pts plotter.XYs
			for _, s := range samples {
				if s.Server == srv {
					pts = append(pts, plotter.XY{X: s.T, Y: pn.y(s)})
				}
			}
			l, err := plotter.NewLine(pts)
			if err != nil {
				return err
			}
			l.Color = colors[srv%len(colors)]
			p.Add(l)
			if !pn.redis && servers > 1 {
				p.Legend.Add(fmt.Sprintf("server %d", srv), l)
			}
		}
		plots[i/3] = append(plots[i/3], p)
	}
	img := vgimg.New(15*vg.Inch, 7*vg.Inch)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: 3, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 4, PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2,
		PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	canvases := plot.Align(plots, tiles, dc)
	for r := range plots {
		for c := range plots[r] {
			plots[r][c].Draw(canvases[r][c])
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// PrintSoak writes, per server and for Redis, each figure's mean over the
// second third of the samples (after warm-up) and over the last third,
// and the change between them: flat is a change within noise.
func PrintSoak(w io.Writer, samples []SoakSample) {
	servers := 0
	for _, s := range samples {
		servers = max(servers, s.Server+1)
	}
	mean := func(srv int, from, to float64, y func(SoakSample) float64) float64 {
		var sum float64
		var n int
		for _, s := range samples {
			if s.Server == srv && s.T >= from && s.T < to {
				sum += y(s)
				n++
			}
		}
		if n == 0 {
			return 0
		}
		return sum / float64(n)
	}
	if len(samples) == 0 {
		return
	}
	end := samples[len(samples)-1].T + 1
	a, b := end/3, 2*end/3
	line := func(name string, srv int, y func(SoakSample) float64) {
		m1, m2 := mean(srv, a, b, y), mean(srv, b, end, y)
		change := 0.0
		if m1 != 0 {
			change = 100 * (m2 - m1) / m1
		}
		fmt.Fprintf(w, "  %-28s %12.1f %12.1f %+8.1f %%\n", name, m1, m2, change)
	}
	fmt.Fprintf(w, "means over the second and the last third of %.0f s (%d samples):\n", end, len(samples))
	for srv := range servers {
		line(fmt.Sprintf("server %d RSS (MB)", srv), srv, func(s SoakSample) float64 { return s.RSS })
		line(fmt.Sprintf("server %d goroutines", srv), srv, func(s SoakSample) float64 { return s.Goroutines })
		line(fmt.Sprintf("server %d open files", srv), srv, func(s SoakSample) float64 { return s.FDs })
	}
	line("requests answered per second", 0, func(s SoakSample) float64 { return s.RequestsPerSecond })
	line("Redis used memory (MB)", 0, func(s SoakSample) float64 { return s.RedisMB })
	line("Redis keys", 0, func(s SoakSample) float64 { return s.RedisKeys })
}
