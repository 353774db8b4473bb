package upstreamstats_test

import (
	"fmt"
	"net"
	"net/http/httptest"
	"slices"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/server/envoyrls"
	"github.com/sluice-rl/sluice/server/envoyrls/upstreamstats"
)

// A sink sends what envoyrls tells it (envoyrls.Options.Stats) to statsd,
// here a UDP socket on loopback, under envoyproxy/ratelimit's names.
func Example() {
	statsd, _ := net.ListenPacket("udp", "127.0.0.1:0")
	defer statsd.Close()
	sink, err := upstreamstats.New(upstreamstats.Options{Address: statsd.LocalAddr().String(), Protocol: "udp"})
	if err != nil {
		fmt.Println(err)
		return
	}
	// What envoyrls reports of a request with hits_addend 3 on a rule
	// key_value (limit 10) that had 6 used: 3 within, 1 above 8.
	sink.Descriptor(envoyrls.DescriptorStats{Domain: "edge", Key: "key_value", Result: envoyrls.ResultNear, Hits: 3,
		Counts: envoyrls.Counts{TotalHits: 3, WithinLimit: 3, NearLimit: 1}})
	sink.Request(envoyrls.RequestStats{Domain: "edge", Duration: 2 * time.Millisecond})
	sink.Close() // (sends the counters)

	var lines []string
	buf := make([]byte, 64<<10)
	_ = statsd.SetReadDeadline(time.Now().Add(10 * time.Second))
	for len(lines) < 5 {
		n, _, err := statsd.ReadFrom(buf)
		if err != nil {
			break
		}
		for l := range strings.SplitSeq(strings.TrimSpace(string(buf[:n])), "\n") {
			if !strings.HasPrefix(l, "ratelimit.go.") { // (the Go runtime's)
				lines = append(lines, l)
			}
		}
	}
	slices.Sort(lines)
	fmt.Println(strings.Join(lines, "\n"))
	// Output:
	// ratelimit.service.rate_limit.edge.key_value.near_limit:1|c
	// ratelimit.service.rate_limit.edge.key_value.total_hits:3|c
	// ratelimit.service.rate_limit.edge.key_value.within_limit:3|c
	// ratelimit_server.ShouldRateLimit.response_time:2|ms
	// ratelimit_server.ShouldRateLimit.total_requests:1|c
}

// With Prometheus (upstream's USE_PROMETHEUS), the sink hands the same
// statistics to statsd_exporter's exporter, which names them by
// upstream's default mapping; PrometheusHandler serves them.
func Example_prometheus() {
	sink, err := upstreamstats.New(upstreamstats.Options{Prometheus: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sink.Close()
	sink.Descriptor(envoyrls.DescriptorStats{Domain: "edge", Key: "key_value", Result: envoyrls.ResultNear, Hits: 3,
		Counts: envoyrls.Counts{TotalHits: 3, WithinLimit: 3, NearLimit: 1}})
	sink.Descriptor(envoyrls.DescriptorStats{Domain: "edge", Key: "message_type_marketing.to_number", Result: envoyrls.ResultWithin, Hits: 1,
		Counts: envoyrls.Counts{TotalHits: 1, WithinLimit: 1}})
	sink.Flush() // (the exporter has them when Flush returns)

	rec := httptest.NewRecorder()
	sink.PrometheusHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for l := range strings.SplitSeq(rec.Body.String(), "\n") {
		if strings.HasPrefix(l, "ratelimit_service_rate_limit_") {
			fmt.Println(l)
		}
	}
	// Output:
	// ratelimit_service_rate_limit_near_limit{domain="edge",key1="key_value"} 1
	// ratelimit_service_rate_limit_total_hits{domain="edge",key1="key_value"} 3
	// ratelimit_service_rate_limit_total_hits{domain="edge",key1="message_type_marketing",key2="to_number"} 1
	// ratelimit_service_rate_limit_within_limit{domain="edge",key1="key_value"} 3
	// ratelimit_service_rate_limit_within_limit{domain="edge",key1="message_type_marketing",key2="to_number"} 1
}
