package client

import (
	"context"
	"errors"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	pb "github.com/sluice-rl/sluice/api/doorman"
	"github.com/sluice-rl/sluice/api/doorman/doormanconnect"
)

// MaxResourceSeries bounds the client's per-resource series; further
// resources are reported together as "other".
const MaxResourceSeries = 200

// clientMetrics is the client's Prometheus collector (see WithRegisterer).
type clientMetrics struct {
	c        *Client
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec

	mu       sync.Mutex
	admitted map[string]bool
}

var (
	descClientCapacity = prometheus.NewDesc("sluice_client_capacity",
		"Capacity the resource may use now (its lease, or its fallback), permits/s or units.", []string{"resource"}, nil)
	descClientFallback = prometheus.NewDesc("sluice_client_fallback_seconds_total",
		"Seconds the resource has spent without a valid lease (in its fallback mode).", []string{"resource"}, nil)
)

func newClientMetrics(c *Client) *clientMetrics {
	return &clientMetrics{
		c: c,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_client_requests_total",
			Help: "RPCs sent to capacity servers, by method and gRPC status code.",
		}, []string{"method", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_client_request_duration_seconds",
			Help:    "RPC latency in seconds, by method.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}, []string{"method"}),
		admitted: map[string]bool{},
	}
}

func (m *clientMetrics) Describe(ch chan<- *prometheus.Desc) {
	m.requests.Describe(ch)
	m.latency.Describe(ch)
	ch <- descClientCapacity
	ch <- descClientFallback
}

func (m *clientMetrics) Collect(ch chan<- prometheus.Metric) {
	m.requests.Collect(ch)
	m.latency.Collect(ch)
	now := m.c.now()
	m.c.mu.Lock()
	rs := make([]*resourceState, 0, len(m.c.resources))
	for _, r := range m.c.resources {
		rs = append(rs, r)
	}
	m.c.mu.Unlock()
	capacity, fallback := map[string]float64{}, map[string]float64{}
	for _, r := range rs {
		l := m.label(r.id)
		capacity[l] += r.Capacity()
		fallback[l] += r.fallbackTime(now).Seconds()
	}
	for l, v := range capacity {
		ch <- prometheus.MustNewConstMetric(descClientCapacity, prometheus.GaugeValue, v, l)
		ch <- prometheus.MustNewConstMetric(descClientFallback, prometheus.CounterValue, fallback[l], l)
	}
}

func (m *clientMetrics) label(id string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.admitted[id] {
		return id
	}
	if len(m.admitted) >= MaxResourceSeries {
		return "other"
	}
	m.admitted[id] = true
	return id
}

// observe records one RPC.
func (m *clientMetrics) observe(method string, start time.Time, err error) {
	code := "ok"
	var ce *connect.Error
	if errors.As(err, &ce) {
		code = ce.Code().String()
	} else if err != nil {
		code = connect.CodeUnknown.String()
	}
	m.requests.WithLabelValues(method, code).Inc()
	m.latency.WithLabelValues(method).Observe(time.Since(start).Seconds())
}

// wrap returns stub with every call counted and timed.
func (m *clientMetrics) wrap(stub doormanconnect.CapacityClient) doormanconnect.CapacityClient {
	return &instrumented{next: stub, m: m}
}

type instrumented struct {
	next doormanconnect.CapacityClient
	m    *clientMetrics
}

func (i *instrumented) Discovery(ctx context.Context, req *connect.Request[pb.DiscoveryRequest]) (*connect.Response[pb.DiscoveryResponse], error) {
	start := time.Now()
	resp, err := i.next.Discovery(ctx, req)
	i.m.observe("Discovery", start, err)
	return resp, err
}

func (i *instrumented) GetCapacity(ctx context.Context, req *connect.Request[pb.GetCapacityRequest]) (*connect.Response[pb.GetCapacityResponse], error) {
	start := time.Now()
	resp, err := i.next.GetCapacity(ctx, req)
	i.m.observe("GetCapacity", start, err)
	return resp, err
}

func (i *instrumented) GetServerCapacity(ctx context.Context, req *connect.Request[pb.GetServerCapacityRequest]) (*connect.Response[pb.GetServerCapacityResponse], error) {
	start := time.Now()
	resp, err := i.next.GetServerCapacity(ctx, req)
	i.m.observe("GetServerCapacity", start, err)
	return resp, err
}

func (i *instrumented) ReleaseCapacity(ctx context.Context, req *connect.Request[pb.ReleaseCapacityRequest]) (*connect.Response[pb.ReleaseCapacityResponse], error) {
	start := time.Now()
	resp, err := i.next.ReleaseCapacity(ctx, req)
	i.m.observe("ReleaseCapacity", start, err)
	return resp, err
}
