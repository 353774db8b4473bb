package upstreamstats_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/server/envoyrls"
	"github.com/sluice-rl/sluice/server/envoyrls/upstreamstats"
)

// scrape returns the text h serves, over loopback HTTP as Prometheus
// would ask for it.
func scrape(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	req, err := http.NewRequestWithContext(t.Context(), "GET", srv.URL+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/plain")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: %d %v\n%s", resp.StatusCode, err, body)
	}
	return string(body)
}

// series returns the sample lines of text whose name starts with
// prefix, histogram buckets left out, sorted.
func series(text, prefix string) []string {
	var out []string
	for l := range strings.SplitSeq(text, "\n") {
		name, _, _ := strings.Cut(l, "{")
		name, _, _ = strings.Cut(name, " ")
		if strings.HasPrefix(l, prefix) && !strings.HasSuffix(name, "_bucket") {
			out = append(out, l)
		}
	}
	slices.Sort(out)
	return out
}

// TestPrometheusSample: USE_PROMETHEUS with upstream's default mapping. A
// real service decides the sample's requests; the sink flushes to
// statsd_exporter's exporter; a scrape of its handler has the series, by
// name, labels and value, that upstream's mapping makes of the statsd
// lines TestSampleUDP reads (a nested rule's second key as key2, what no
// rule matches under statsd_exporter's escaped name), and what upstream's
// /metrics has besides.
func TestPrometheusSample(t *testing.T) {
	sink, err := upstreamstats.New(upstreamstats.Options{Prometheus: true, FlushInterval: time.Hour, Logger: testutil.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	decide(t, service(t, sink, nil), sink)
	sink.Flush()
	text := scrape(t, sink.PrometheusHandler())

	want := []string{
		`ratelimit_service_config_load_error 1`,
		`ratelimit_service_config_load_success 1`,
		`ratelimit_service_rate_limit_near_limit{domain="edge",key1="cluster_trial"} 1`,
		`ratelimit_service_rate_limit_near_limit{domain="edge",key1="database_users"} 1`,
		`ratelimit_service_rate_limit_near_limit{domain="edge",key1="remote_address"} 2`,
		`ratelimit_service_rate_limit_nowhere_domain_not_found 1`,
		`ratelimit_service_rate_limit_over_limit{domain="edge",key1="cluster_trial"} 1`,
		`ratelimit_service_rate_limit_over_limit{domain="edge",key1="database_users"} 1`,
		`ratelimit_service_rate_limit_over_limit{domain="edge",key1="remote_address"} 2`,
		`ratelimit_service_rate_limit_shadow_mode{domain="edge",key1="cluster_trial"} 1`,
		`ratelimit_service_rate_limit_total_hits{domain="edge",key1="client_ip_192_168_1_7"} 1`,
		`ratelimit_service_rate_limit_total_hits{domain="edge",key1="cluster_trial"} 2`,
		`ratelimit_service_rate_limit_total_hits{domain="edge",key1="database_users"} 4`,
		`ratelimit_service_rate_limit_total_hits{domain="edge",key1="message_type_marketing",key2="to_number"} 1`,
		`ratelimit_service_rate_limit_total_hits{domain="edge",key1="remote_address"} 12`,
		`ratelimit_service_rate_limit_within_limit{domain="edge",key1="client_ip_192_168_1_7"} 1`,
		`ratelimit_service_rate_limit_within_limit{domain="edge",key1="cluster_trial"} 1`,
		`ratelimit_service_rate_limit_within_limit{domain="edge",key1="database_users"} 3`,
		`ratelimit_service_rate_limit_within_limit{domain="edge",key1="message_type_marketing",key2="to_number"} 1`,
		`ratelimit_service_rate_limit_within_limit{domain="edge",key1="remote_address"} 9`,
		// The clock stands still: 13 calls of 0 ms.
		`ratelimit_service_response_time_seconds_count{grpc_method="ShouldRateLimit"} 13`,
		`ratelimit_service_response_time_seconds_sum{grpc_method="ShouldRateLimit"} 0`,
		`ratelimit_service_should_rate_limit_error{err_type="service_error"} 1`,
		`ratelimit_service_total_requests{grpc_method="ShouldRateLimit"} 13`,
	}
	if diff := cmp.Diff(want, series(text, "ratelimit_service_")); diff != "" {
		t.Errorf("series (-want +got):\n%s\nthe scrape:\n%s", diff, text)
	}
	for _, line := range []string{
		"# TYPE ratelimit_service_rate_limit_total_hits counter",
		"# TYPE ratelimit_service_response_time_seconds histogram",
		`ratelimit_service_response_time_seconds_bucket{grpc_method="ShouldRateLimit",le="+Inf"} 13`,
		"# TYPE ratelimit_go_numGoroutine gauge", // gostats' runtime statistics, unmapped
		"# TYPE go_goroutines gauge",
		"# TYPE process_start_time_seconds gauge",
		"# TYPE statsd_exporter_events_total counter",
		"# TYPE promhttp_metric_handler_requests_total counter",
	} {
		if !slices.Contains(strings.Split(text, "\n"), line) {
			t.Errorf("no line %q in the scrape:\n%s", line, text)
		}
	}
}

// TestPrometheusMapperFile: PROMETHEUS_MAPPER_YAML replaces the default
// mapping: its names and labels, timer_type (the older name of
// observer_type, as upstream's files have it) honoured; what it does not
// match keeps statsd_exporter's escaped name.
func TestPrometheusMapperFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "conf.yaml")
	mapping := `mappings:
  - match: "ratelimit.service.rate_limit.*.*.total_hits"
    name: "rl_hits_total"
    labels: {domain: "$1", rule: "$2"}
  - match: "ratelimit_server.*.response_time"
    name: "rl_response_milliseconds"
    timer_type: histogram
    labels: {method: "$1"}
`
	if err := os.WriteFile(file, []byte(mapping), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := upstreamstats.CheckMapper(file); err != nil {
		t.Fatal(err)
	}
	sink, err := upstreamstats.New(upstreamstats.Options{Prometheus: true, PrometheusMapper: file, FlushInterval: time.Hour, Logger: testutil.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	decide(t, service(t, sink, nil), sink)
	sink.Flush()
	text := scrape(t, sink.PrometheusHandler())
	lines := strings.Split(text, "\n")
	for _, line := range []string{
		`rl_hits_total{domain="edge",rule="remote_address"} 12`,
		"# TYPE rl_response_milliseconds histogram",
		`rl_response_milliseconds_count{method="ShouldRateLimit"} 13`,
		`ratelimit_service_rate_limit_edge_remote_address_within_limit 9`,
		`ratelimit_service_config_load_success 1`,
	} {
		if !slices.Contains(lines, line) {
			t.Errorf("no line %q in the scrape:\n%s", line, text)
		}
	}
	if got := series(text, "ratelimit_service_rate_limit_total_hits"); len(got) > 0 {
		t.Errorf("the default mapping's series with a file of one's own: %q", got)
	}
}

// TestPrometheusFlushEvery: without Flush, the counters reach the
// handler every FlushInterval, added up across flushes.
func TestPrometheusFlushEvery(t *testing.T) {
	sink, err := upstreamstats.New(upstreamstats.Options{Prometheus: true, FlushInterval: 10 * time.Millisecond, Logger: testutil.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	client := service(t, sink, nil)
	const line = `ratelimit_service_rate_limit_total_hits{domain="edge",key1="database_users"} `
	for i, want := range []string{"3", "10"} {
		hits := uint64(3 + 4*i) // 3, then 7 more
		if _, err := client.ShouldRateLimit(context.Background(), call{"edge", hits, []string{"database", "users"}}.request()); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, deadline, line+want, func() bool {
			return slices.Contains(strings.Split(scrape(t, sink.PrometheusHandler()), "\n"), line+want)
		})
	}
}

// TestPrometheusConcurrent: requests, flushes and scrapes at once (the
// race detector watching) add up; a request after Close is dropped, not a
// panic, and the handler still serves what it had.
func TestPrometheusConcurrent(t *testing.T) {
	sink, err := upstreamstats.New(upstreamstats.Options{Prometheus: true, FlushInterval: 5 * time.Millisecond, Logger: testutil.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	client := service(t, sink, nil)
	var wg sync.WaitGroup
	concurrentCalls(t, &wg, client)
	wg.Go(func() {
		for range 10 {
			rec := httptest.NewRecorder()
			sink.PrometheusHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
			if rec.Code != http.StatusOK {
				t.Errorf("scrape: %d", rec.Code)
			}
		}
	})
	wg.Wait()
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	sink.Request(envoyrls.RequestStats{Domain: "edge"}) // (its timer: dropped)
	text := scrape(t, sink.PrometheusHandler())
	total, names := 0.0, 0
	for _, l := range series(text, `ratelimit_service_rate_limit_total_hits{domain="edge",key1="client_ip_10_0_`) {
		var v float64
		fmt.Sscan(l[strings.LastIndexByte(l, ' ')+1:], &v)
		total += v
		names++
	}
	if total != 100 || names != 20 {
		t.Errorf("%v hits over %d names, want 100 over 20:\n%s", total, names, text)
	}
	if !slices.Contains(strings.Split(text, "\n"), `ratelimit_service_total_requests{grpc_method="ShouldRateLimit"} 100`) {
		t.Errorf("total_requests not 100:\n%s", text)
	}
}

// TestPrometheusOptionErrors: New refuses, naming the field, a second
// sink beside Prometheus (as upstream refuses two), a mapping file
// without Prometheus, and a mapping file statsd_exporter cannot read;
// CheckMapper reports the same of the file.
func TestPrometheusOptionErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	missing := filepath.Join(dir, "missing.yaml")
	cases := []struct {
		name     string
		opts     upstreamstats.Options
		want     string
		notExist bool
	}{
		{"with statsd", upstreamstats.Options{Prometheus: true, Address: "statsd:8125"}, "Options.Prometheus: ", false},
		{"with DogStatsD", upstreamstats.Options{Prometheus: true, DogStatsd: true}, "Options.Prometheus: ", false},
		{"mapper alone", upstreamstats.Options{PrometheusMapper: "conf.yaml"}, "Options.PrometheusMapper: ", false},
		{"no such file", upstreamstats.Options{Prometheus: true, PrometheusMapper: missing}, "Options.PrometheusMapper: " + missing, true},
		{"not YAML", upstreamstats.Options{Prometheus: true, PrometheusMapper: write("bad.yaml", "mappings: [")}, "Options.PrometheusMapper: ", false},
		{"bad name", upstreamstats.Options{Prometheus: true, PrometheusMapper: write("name.yaml", "mappings:\n  - {match: \"a.*\", name: \"not a name\"}\n")}, "Options.PrometheusMapper: ", false},
	}
	for _, c := range cases {
		err := refused(t, c.name, c.opts, c.want)
		if err == nil {
			continue
		}
		if c.notExist && !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: %v, want fs.ErrNotExist", c.name, err)
		}
		if f := c.opts.PrometheusMapper; c.opts.Prometheus && f != "" {
			if err := upstreamstats.CheckMapper(f); err == nil || !strings.HasPrefix(err.Error(), f+": ") {
				t.Errorf("%s: CheckMapper: %v, want an error naming the file", c.name, err)
			}
		}
	}
	addr, _ := listenUDP(t)
	s, err := upstreamstats.New(upstreamstats.Options{Address: addr, Protocol: "udp"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if h := s.PrometheusHandler(); h != nil {
		t.Errorf("statsd alone: a Prometheus handler %v", h)
	}
}
