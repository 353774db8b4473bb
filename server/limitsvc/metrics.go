package limitsvc

import (
	"maps"
	"slices"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/server/internal/promreg"
)

// otherResource labels the limits events of resources that are not
// configured (answered by the global default, or not at all) and of
// invalid requests: request names never become labels.
const otherResource = "other"

// MaxResourceSeries bounds the per-resource series: at most this many
// resource labels; the rest are aggregated under "other".
const MaxResourceSeries = 200

// limitsEvents are the engine's event types, in label order.
var limitsEvents = []limits.EventType{
	limits.EventTokensServed, limits.EventTimeout, limits.EventTooManyTokensRequested,
	limits.EventBucketMiss, limits.EventBucketCreated, limits.EventBucketRemoved,
	limits.EventInvalidRequest, limits.EventServerError, limits.EventDegraded,
}

// limitsMetrics is the limits engine's listener: Prometheus counters of
// its events and a histogram of the waits it imposed, per configured
// resource (at most MaxResourceSeries, then "other") — never per domain.
// The per-domain view is the buckets page (hottest and most rejected).
//
// Source: quotaservice-design.md, "Listeners", "Metrics".
type limitsMetrics struct {
	events *prometheus.CounterVec
	tokens *prometheus.CounterVec
	waits  *prometheus.HistogramVec

	// byResource maps a configured resource to its series; replaced
	// whole on every configuration (read without a lock on every event).
	byResource atomic.Pointer[map[string]*limitsSeries]
	other      *limitsSeries
}

// limitsSeries are one resource label's series, resolved once.
type limitsSeries struct {
	events [len(eventIndex)]prometheus.Counter
	served prometheus.Counter
	wait   prometheus.Observer
}

// eventIndex maps an event type to its place in limitsSeries.events.
var eventIndex = func() (ix [limits.EventDegraded + 1]int) {
	for i, t := range limitsEvents {
		ix[t] = i
	}
	return ix
}()

func newLimitsMetrics(reg prometheus.Registerer) (*limitsMetrics, error) {
	m := &limitsMetrics{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_limits_events_total",
			Help: "Limits engine events by resource (configured ones; the rest \"other\") and event: tokens_served, timeout, too_many_tokens_requested, bucket_miss, bucket_created, bucket_removed, invalid_request, server_error, degraded (granted without a decision: the store failing, the resource configured on_store_error: open).",
		}, []string{"resource", "event"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_limits_tokens_granted_total",
			Help: "Tokens granted by resource.",
		}, []string{"resource"}),
		waits: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_limits_wait_seconds",
			Help:    "Waits imposed on granted requests, in seconds, by resource.",
			Buckets: []float64{0, 0.001, 0.01, 0.1, 0.5, 1, 5, 10},
		}, []string{"resource"}),
	}
	if err := promreg.Register(reg, m.events, m.tokens, m.waits); err != nil {
		return nil, err
	}
	m.other = m.series(otherResource)
	m.configured(nil)
	return m, nil
}

// series resolves the series of one resource label.
func (m *limitsMetrics) series(resource string) *limitsSeries {
	ls := &limitsSeries{served: m.tokens.WithLabelValues(resource), wait: m.waits.WithLabelValues(resource)}
	for i, t := range limitsEvents {
		ls.events[i] = m.events.WithLabelValues(resource, t.String())
	}
	return ls
}

// configured labels the resources of cfg (the first MaxResourceSeries by
// name). Series of resources no longer configured stay (Prometheus
// counters do not go back).
func (m *limitsMetrics) configured(cfg *limits.Config) {
	byResource := map[string]*limitsSeries{}
	if old := m.byResource.Load(); old != nil {
		byResource = maps.Clone(*old)
	}
	if cfg != nil {
		for _, name := range slices.Sorted(maps.Keys(cfg.Resources)) {
			if _, ok := byResource[name]; !ok && len(byResource) < MaxResourceSeries {
				byResource[name] = m.series(name)
			}
		}
	}
	m.byResource.Store(&byResource)
}

// OnEvent counts one engine event (limits.Listener). It does not allocate.
func (m *limitsMetrics) OnEvent(ev limits.Event) {
	ls := m.other
	if ev.Type != limits.EventInvalidRequest {
		if s, ok := (*m.byResource.Load())[ev.Resource]; ok {
			ls = s
		}
	}
	if int(ev.Type) < len(eventIndex) && ev.Type != 0 {
		ls.events[eventIndex[ev.Type]].Inc()
	}
	if ev.Type == limits.EventTokensServed {
		ls.served.Add(float64(ev.Tokens))
		ls.wait.Observe(ev.Wait.Seconds())
	}
}
