package upstreamstats_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/limits/limitsyaml"
	"github.com/sluice-rl/sluice/limits/rls"
	"github.com/sluice-rl/sluice/server/envoyrls"
	"github.com/sluice-rl/sluice/server/envoyrls/upstreamstats"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		// gostats' network sink has no Close: its goroutine stays (Close's
		// doc); everything else ends with its test.
		if err := goleak.Find(goleak.IgnoreAnyFunction("github.com/lyft/gostats.(*netSink).run")); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// deadline bounds every wait for packets: generous, never a timing claim.
const deadline = 20 * time.Second

// collector keeps the lines a statsd listener receives.
type collector struct {
	mu      sync.Mutex
	lines   []string
	changed chan struct{}
}

func newCollector() *collector { return &collector{changed: make(chan struct{}, 1)} }

func (c *collector) add(text string) {
	c.mu.Lock()
	for line := range strings.SplitSeq(strings.TrimRight(text, "\n"), "\n") {
		if line != "" {
			c.lines = append(c.lines, line)
		}
	}
	c.mu.Unlock()
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

// snapshot returns the lines so far.
func (c *collector) snapshot() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.lines)
}

// waitFor waits, at most deadline, until done holds for the lines so
// far, and returns them.
func (c *collector) waitFor(t *testing.T, what string, done func([]string) bool) []string {
	t.Helper()
	timer := time.NewTimer(deadline)
	defer timer.Stop()
	for {
		lines := c.snapshot()
		if done(lines) {
			return lines
		}
		select {
		case <-c.changed:
		case <-timer.C:
			t.Fatalf("no %s within %v; received:\n%s", what, deadline, strings.Join(lines, "\n"))
		}
	}
}

// listenUDP returns the address of a statsd UDP socket on loopback and
// what it receives.
func listenUDP(t *testing.T) (string, *collector) {
	t.Helper()
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := newCollector()
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 64<<10)
		for {
			n, _, err := conn.ReadFrom(buf)
			if err != nil {
				return
			}
			c.add(string(buf[:n]))
		}
	}()
	t.Cleanup(func() { conn.Close(); <-done })
	return conn.LocalAddr().String(), c
}

// listenTCP returns the address of a statsd TCP listener on loopback and
// what its connections send.
func listenTCP(t *testing.T) (string, *collector) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := newCollector()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
			wg.Go(func() {
				r := bufio.NewReader(conn)
				for {
					line, err := r.ReadString('\n')
					if line != "" {
						c.add(line)
					}
					if err != nil {
						return
					}
				}
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, conn := range conns {
			conn.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String(), c
}

// The sample rules, envoyproxy/ratelimit's YAML.
const sample = `
domain: edge
descriptors:
  - key: remote_address                # a key alone
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: database                      # a key and a value
    value: users
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: message_type                  # nested
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: {unit: day, requests_per_unit: 2}
  - key: cluster                       # shadow mode
    value: trial
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: client_ip                     # detailed: the request's value
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 100}
`

// service is an envoyrls.Service over sample, on the memory store and a
// clock that stands still, reporting to sink, served on loopback gRPC.
func service(t *testing.T, sink envoyrls.StatsSink, store rls.Store) rlsv3.RateLimitServiceClient {
	t.Helper()
	domains, err := limitsyaml.ParseEnvoyRateLimit("sample.yaml", []byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := rls.NewConfig(domains...)
	if err != nil {
		t.Fatal(err)
	}
	if store == nil {
		store = rls.NewMemoryStore()
	}
	clock := testutil.NewClock(time.Unix(1_800_000_000, 0))
	svc, err := envoyrls.New(envoyrls.Options{Store: store, Now: clock.Now, Stats: sink, Logger: testutil.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	svc.SetConfig(cfg)
	return rlsv3.NewRateLimitServiceClient(testutil.ServeGRPC(t, func(gs *grpc.Server) { rlsv3.RegisterRateLimitServiceServer(gs, svc) }))
}

// call is one ShouldRateLimit of a descriptor of key, value pairs with
// hits (0: the request's default, 1).
type call struct {
	domain string
	hits   uint64
	kv     []string
}

func (c call) request() *rlsv3.RateLimitRequest {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(c.kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: c.kv[i], Value: c.kv[i+1]})
	}
	if c.hits > 0 {
		d.HitsAddend = wrapperspb.UInt64(c.hits)
	}
	return &rlsv3.RateLimitRequest{Domain: c.domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{d}}
}

// sampleCalls decide 13 requests of sample (and a bad one): their
// statistics are sampleLines.
var sampleCalls = []call{
	{"edge", 5, []string{"remote_address", "10.0.0.1"}}, // within 5
	{"edge", 4, []string{"remote_address", "10.0.0.1"}}, // within 4, 1 of them near (above 8)
	{"edge", 3, []string{"remote_address", "10.0.0.1"}}, // over: 1 near, 2 over
	{"edge", 0, []string{"database", "users"}},          // within
	{"edge", 0, []string{"database", "users"}},          // within
	{"edge", 0, []string{"database", "users"}},          // within, near (above 2)
	{"edge", 0, []string{"database", "users"}},          // over
	{"edge", 0, []string{"message_type", "marketing", "to_number", "2061111111"}},
	{"edge", 0, []string{"cluster", "trial"}},         // within, near (above 0)
	{"edge", 0, []string{"cluster", "trial"}},         // over, answered OK: shadow_mode
	{"edge", 0, []string{"client_ip", "192.168.1.7"}}, // detailed, the address' dots made '_'
	{"nowhere", 0, []string{"database", "users"}},     // an unknown domain
	{"", 0, []string{"database", "users"}},            // refused: service_error
}

// sampleLines are the statsd lines of sampleCalls, the sink told of one
// load of the rules and one that failed (tags: the name's suffix), in
// name order.
func sampleLines(tags string) []string {
	lines := []string{
		"ratelimit.service.call.should_rate_limit.service_error" + tags + ":1|c",
		"ratelimit.service.config_load_error" + tags + ":1|c",
		"ratelimit.service.config_load_success" + tags + ":1|c",
		"ratelimit.service.rate_limit.edge.client_ip_192_168_1_7.total_hits" + tags + ":1|c",
		"ratelimit.service.rate_limit.edge.client_ip_192_168_1_7.within_limit" + tags + ":1|c",
		"ratelimit.service.rate_limit.edge.cluster_trial.near_limit" + tags + ":1|c",
		"ratelimit.service.rate_limit.edge.cluster_trial.over_limit" + tags + ":1|c",
		"ratelimit.service.rate_limit.edge.cluster_trial.shadow_mode" + tags + ":1|c",
		"ratelimit.service.rate_limit.edge.cluster_trial.total_hits" + tags + ":2|c",
		"ratelimit.service.rate_limit.edge.cluster_trial.within_limit" + tags + ":1|c",
		"ratelimit.service.rate_limit.edge.database_users.near_limit" + tags + ":1|c",
		"ratelimit.service.rate_limit.edge.database_users.over_limit" + tags + ":1|c",
		"ratelimit.service.rate_limit.edge.database_users.total_hits" + tags + ":4|c",
		"ratelimit.service.rate_limit.edge.database_users.within_limit" + tags + ":3|c",
		"ratelimit.service.rate_limit.edge.message_type_marketing.to_number.total_hits" + tags + ":1|c",
		"ratelimit.service.rate_limit.edge.message_type_marketing.to_number.within_limit" + tags + ":1|c",
		"ratelimit.service.rate_limit.edge.remote_address.near_limit" + tags + ":2|c",
		"ratelimit.service.rate_limit.edge.remote_address.over_limit" + tags + ":2|c",
		"ratelimit.service.rate_limit.edge.remote_address.total_hits" + tags + ":12|c",
		"ratelimit.service.rate_limit.edge.remote_address.within_limit" + tags + ":9|c",
		"ratelimit.service.rate_limit.nowhere.domain_not_found" + tags + ":1|c",
		"ratelimit_server.ShouldRateLimit.total_requests" + tags + ":13|c",
	}
	for range 13 {
		lines = append(lines, "ratelimit_server.ShouldRateLimit.response_time"+tags+":0|ms")
	}
	return lines
}

// decide makes sampleCalls through client and tells sink of two loads.
func decide(t *testing.T, client rlsv3.RateLimitServiceClient, sink *upstreamstats.Sink) {
	t.Helper()
	for _, c := range sampleCalls {
		_, err := client.ShouldRateLimit(context.Background(), c.request())
		if (err != nil) != (c.domain == "") {
			t.Fatalf("%v: %v", c, err)
		}
	}
	sink.ConfigLoad(nil)
	sink.ConfigLoad(errors.New("sample.yaml: bad"))
}

// ours returns lines with the names of upstream's service and server
// (not the Go runtime's, not DataDog's client's own), sorted.
func ours(lines []string) []string {
	var out []string
	for _, l := range lines {
		if strings.HasPrefix(l, "ratelimit.service.") || strings.HasPrefix(l, "ratelimit_server.") {
			out = append(out, l)
		}
	}
	slices.Sort(out)
	return out
}

// TestSampleUDP: a real service deciding the sample's requests, a sink
// flushed by Close, a UDP socket reading its packets: the exact lines,
// name, value and type, of upstream's statistics.
func TestSampleUDP(t *testing.T) {
	addr, got := listenUDP(t)
	sink, err := upstreamstats.New(upstreamstats.Options{Address: addr, Protocol: "udp", FlushInterval: time.Hour, Logger: testutil.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	decide(t, service(t, sink, nil), sink)
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	want := sampleLines("")
	slices.Sort(want)
	lines := got.waitFor(t, "sample lines", func(l []string) bool { return len(ours(l)) >= len(want) })
	if diff := cmp.Diff(want, ours(lines)); diff != "" {
		t.Errorf("lines (-want +got):\n%s", diff)
	}
	// The Go runtime's statistics, as upstream's server adds them.
	if !slices.ContainsFunc(lines, func(l string) bool {
		return strings.HasPrefix(l, "ratelimit.go.numGoroutine:") && strings.HasSuffix(l, "|g")
	}) {
		t.Errorf("no ratelimit.go.numGoroutine gauge in:\n%s", strings.Join(lines, "\n"))
	}
}

// TestExtraTagsTCP: over TCP, flushed every 20 ms (no Flush called), with
// EXTRA_TAGS as gostats sends them in plain statsd: suffixes of the name,
// in key order; counters are sent as the deltas since the last flush.
func TestExtraTagsTCP(t *testing.T) {
	addr, got := listenTCP(t)
	sink, err := upstreamstats.New(upstreamstats.Options{Address: addr, Protocol: "tcp", FlushInterval: 20 * time.Millisecond,
		ExtraTags: map[string]string{"team": "rl", "cluster": "eu-1"}, Logger: testutil.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	decide(t, service(t, sink, nil), sink)
	const tags = ".__cluster=eu-1.__team=rl"
	want := sum(sampleLines(tags))
	got.waitFor(t, "the sample's totals", func(l []string) bool { return cmp.Equal(want, sum(ours(l))) })
	// Another request: its delta alone.
	n := len(got.snapshot())
	client := service(t, sink, nil)
	if _, err := client.ShouldRateLimit(context.Background(), call{"edge", 7, []string{"database", "users"}}.request()); err != nil {
		t.Fatal(err)
	}
	line := "ratelimit.service.rate_limit.edge.database_users.total_hits" + tags + ":7|c"
	got.waitFor(t, line, func(l []string) bool { return slices.Contains(l[n:], line) })
}

// sum adds up lines of the same name and type ("name|type" → total).
func sum(lines []string) map[string]float64 {
	out := map[string]float64{}
	for _, l := range lines {
		name, rest, _ := strings.Cut(l, ":")
		value, typ, _ := strings.Cut(rest, "|")
		var v float64
		fmt.Sscan(value, &v)
		if typ == "ms" {
			v = 1 // (a timer: count its lines)
		}
		out[name+"|"+typ] += v
	}
	return out
}

// dogLine is a DogStatsD line's parts.
type dogLine struct {
	Name, Value, Type string
	Tags              []string
}

func parseDog(line string) dogLine {
	parts := strings.Split(line, "|")
	name, value, _ := strings.Cut(parts[0], ":")
	d := dogLine{Name: name, Value: value, Type: parts[1]}
	for _, p := range parts[2:] {
		if tags, ok := strings.CutPrefix(p, "#"); ok {
			d.Tags = strings.Split(tags, ",")
		}
	}
	return d
}

// TestDogStatsdExtraTags: USE_DOG_STATSD with EXTRA_TAGS: the same names,
// the tags as DogStatsD tags, through DataDog's client over UDP.
func TestDogStatsdExtraTags(t *testing.T) {
	addr, got := listenUDP(t)
	sink, err := upstreamstats.New(upstreamstats.Options{Address: addr, DogStatsd: true, FlushInterval: time.Hour,
		ExtraTags: map[string]string{"team": "rl", "cluster": "eu-1"}, Logger: testutil.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	decide(t, service(t, sink, nil), sink)
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	tags := []string{"cluster:eu-1", "team:rl"}
	var want []dogLine
	for _, l := range sampleLines("") {
		name, rest, _ := strings.Cut(l, ":")
		value, typ, _ := strings.Cut(rest, "|")
		if typ == "ms" {
			value = "0.000000" // (DataDog's client writes a timer's milliseconds so)
		}
		want = append(want, dogLine{name, value, typ, tags})
	}
	lines := got.waitFor(t, "sample lines", func(l []string) bool { return len(ours(l)) >= len(want) })
	var gotLines []dogLine
	for _, l := range ours(lines) {
		gotLines = append(gotLines, parseDog(l))
	}
	less := func(a, b dogLine) int { return strings.Compare(a.Name+a.Value, b.Name+b.Value) }
	slices.SortFunc(want, less)
	slices.SortFunc(gotLines, less)
	if diff := cmp.Diff(want, gotLines); diff != "" {
		t.Errorf("lines (-want +got):\n%s", diff)
	}
}

// flaky is the memory store, failing while fail is set.
type flaky struct {
	*rls.MemoryStore
	fail atomic.Bool
}

func (f *flaky) Decide(ctx context.Context, now int64, domain string, hits []rls.Hit, results []rls.Result) (bool, error) {
	if f.fail.Load() {
		return false, errors.New("connection refused")
	}
	return f.MemoryStore.Decide(ctx, now, domain, hits, results)
}

// TestRedisError: a store that fails counts redis_error, not
// service_error, and the hits of its descriptors as total_hits alone.
func TestRedisError(t *testing.T) {
	addr, got := listenUDP(t)
	sink, err := upstreamstats.New(upstreamstats.Options{Address: addr, Protocol: "udp", FlushInterval: time.Hour, Logger: testutil.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	store := &flaky{MemoryStore: rls.NewMemoryStore()}
	store.fail.Store(true)
	client := service(t, sink, store)
	if _, err := client.ShouldRateLimit(context.Background(), call{"edge", 2, []string{"database", "users"}}.request()); err == nil {
		t.Fatal("no error from a failing store")
	}
	sink.Close()
	want := []string{
		"ratelimit.service.call.should_rate_limit.redis_error:1|c",
		"ratelimit.service.rate_limit.edge.database_users.total_hits:2|c",
		"ratelimit_server.ShouldRateLimit.response_time:0|ms",
		"ratelimit_server.ShouldRateLimit.total_requests:1|c",
	}
	lines := got.waitFor(t, "redis_error", func(l []string) bool { return len(ours(l)) >= len(want) })
	if diff := cmp.Diff(want, ours(lines)); diff != "" {
		t.Errorf("lines (-want +got):\n%s", diff)
	}
}

// TestStatsHandler: upstream's /stats, served on loopback: expvar's
// variables and the sink's counters, "NAME: VALUE" a line.
func TestStatsHandler(t *testing.T) {
	addr, _ := listenUDP(t)
	sink, err := upstreamstats.New(upstreamstats.Options{Address: addr, Protocol: "udp", FlushInterval: time.Hour, Logger: testutil.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	decide(t, service(t, sink, nil), sink)
	srv := httptest.NewServer(sink.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	lines := strings.Split(string(body), "\n")
	for _, want := range []string{
		"ratelimit.service.rate_limit.edge.remote_address.total_hits: 12",
		"ratelimit.service.rate_limit.edge.remote_address.over_limit_with_local_cache: 0",
		"ratelimit.service.config_load_success: 1",
		"ratelimit_server.ShouldRateLimit.total_requests: 13",
	} {
		if !slices.Contains(lines, want) {
			t.Errorf("no %q in /stats:\n%s", want, body)
		}
	}
	if !slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, "memstats: {") }) {
		t.Errorf("no expvar memstats in /stats:\n%s", body)
	}
	ours := slices.DeleteFunc(slices.Clone(lines), func(l string) bool { return !strings.HasPrefix(l, "ratelimit") })
	if !slices.IsSorted(ours) {
		t.Errorf("counters not in name order:\n%s", strings.Join(ours, "\n"))
	}
}

// TestOptionErrors: New refuses bad options, naming the field.
func TestOptionErrors(t *testing.T) {
	cases := []struct {
		name string
		opts upstreamstats.Options
		want string
	}{
		{"no port", upstreamstats.Options{Address: "statsd"}, "Options.Address: "},
		{"port 0", upstreamstats.Options{Address: "statsd:0"}, "Options.Address: "},
		{"port not a number", upstreamstats.Options{Address: "statsd:x"}, "Options.Address: "},
		{"no host", upstreamstats.Options{Address: ":8125"}, "Options.Address: "},
		{"protocol", upstreamstats.Options{Protocol: "sctp"}, "Options.Protocol: "},
		{"tcp with DogStatsD", upstreamstats.Options{Protocol: "tcp", DogStatsd: true}, "Options.Protocol: "},
		{"interval", upstreamstats.Options{FlushInterval: -time.Second}, "Options.FlushInterval: "},
		{"empty tag key", upstreamstats.Options{ExtraTags: map[string]string{"": "v"}}, `Options.ExtraTags[""]: `},
		{"dotted tag key", upstreamstats.Options{ExtraTags: map[string]string{"a.b": "v"}}, `Options.ExtraTags["a.b"]: `},
		{"empty tag value", upstreamstats.Options{ExtraTags: map[string]string{"k": ""}}, `Options.ExtraTags["k"]: `},
		{"tag value with a comma", upstreamstats.Options{ExtraTags: map[string]string{"k": "a,b"}}, `Options.ExtraTags["k"]: `},
	}
	for _, c := range cases {
		refused(t, c.name, c.opts, c.want)
	}
}

// TestEnvironmentError: gostats reads the environment (and would panic
// on a value it cannot parse): an error naming the variable.
func TestEnvironmentError(t *testing.T) {
	t.Setenv("STATSD_PORT", "eighty")
	s, err := upstreamstats.New(upstreamstats.Options{Address: "127.0.0.1:8125"})
	if err == nil {
		s.Close()
		t.Fatal("no error")
	}
	if !strings.Contains(err.Error(), "STATSD_PORT") {
		t.Fatalf("%v, want it to name STATSD_PORT", err)
	}
}

// TestClose: Close twice is no error; an unreachable statsd is none
// either.
func TestClose(t *testing.T) {
	addr, _ := listenUDP(t)
	s, err := upstreamstats.New(upstreamstats.Options{Address: addr, Protocol: "udp", DogStatsd: true})
	if err != nil {
		t.Fatal(err)
	}
	s.Request(envoyrls.RequestStats{Domain: "d"})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestSanitize: upstream's SanitizeStatName.
func TestSanitize(t *testing.T) {
	cases := []struct{ in, want string }{
		{"edge.remote_address", "edge.remote_address"},
		{"edge.path_/foo:*", "edge.path_/foo_*"},
		{"edge.a|b", "edge.a_b"},
		{"edge.remote_address_10.0.0.1", "edge.remote_address_10_0_0_1"},
		{"edge.masked_remote_address_192.168.1.0/24", "edge.masked_remote_address_192_168_1_0/24"},
		{"edge.version_1.2.3", "edge.version_1.2.3"},
		{"edge.ip_1234.5.6.7", "edge.ip_1234_5_6_7"},
		{"edge.host_::1", "edge.host___1"},
	}
	for _, c := range cases {
		if got := upstreamstats.Sanitize(c.in); got != c.want {
			t.Errorf("Sanitize(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestConcurrent: requests from many goroutines (the race detector
// watching) add up.
func TestConcurrent(t *testing.T) {
	addr, got := listenUDP(t)
	sink, err := upstreamstats.New(upstreamstats.Options{Address: addr, Protocol: "udp", FlushInterval: 10 * time.Millisecond, Logger: testutil.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	client := service(t, sink, nil)
	var wg sync.WaitGroup
	concurrentCalls(t, &wg, client)
	wg.Wait()
	// 4 × 5 detailed names, 5 hits each; 100 requests.
	got.waitFor(t, "100 hits over 20 names", func(l []string) bool {
		s := sum(ours(l))
		total, names := 0.0, 0
		for k, v := range s {
			if strings.HasSuffix(k, ".total_hits|c") && strings.HasPrefix(k, "ratelimit.service.rate_limit.edge.client_ip_10_0_") {
				total += v
				names++
			}
		}
		return total == 100 && names == 20 && s["ratelimit_server.ShouldRateLimit.total_requests|c"] == 100
	})
}

// refused reports whether New refuses opts with an OptionError whose text
// starts with "upstreamstats: " and want (the test fails otherwise,
// naming the case), and returns New's error.
func refused(t *testing.T, name string, opts upstreamstats.Options, want string) error {
	t.Helper()
	s, err := upstreamstats.New(opts)
	if err == nil {
		s.Close()
		t.Errorf("%s: no error", name)
		return nil
	}
	var fe *upstreamstats.OptionError
	if !errors.As(err, &fe) || !strings.HasPrefix(err.Error(), "upstreamstats: "+want) {
		t.Errorf("%s: %v, want an OptionError starting %q", name, err, want)
	}
	return err
}

// concurrentCalls starts, in wg, 4 goroutines of 25 requests each on
// domain edge, 5 client_ip values per goroutine (20 detailed names, 5
// hits each).
func concurrentCalls(t *testing.T, wg *sync.WaitGroup, client rlsv3.RateLimitServiceClient) {
	for g := range 4 {
		wg.Go(func() {
			for i := range 25 {
				c := call{"edge", 1, []string{"client_ip", fmt.Sprintf("10.0.%d.%d", g, i%5)}}
				if _, err := client.ShouldRateLimit(context.Background(), c.request()); err != nil {
					t.Error(err)
				}
			}
		})
	}
}
