package capacity

import (
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the capacity service's Prometheus metrics. Labels are
// bounded: per-resource series by template (see resourceCollector).
type metrics struct {
	unmatched prometheus.Counter
	elections *prometheus.CounterVec

	early           prometheus.Counter
	unrecorded      prometheus.Counter
	emptyReleaseIDs prometheus.Counter
	algoFallbacks   prometheus.Counter
	pushes          prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, s *Service) *metrics {
	m := &metrics{
		unmatched: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_server_unmatched_resource_requests_total",
			Help: "Requests for resources that match no template (granted what they ask).",
		}),
		elections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_server_mastership_changes_total",
			Help: "Mastership won or lost by this server, by change (won, lost).",
		}, []string{"change"}),
		early: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_server_early_requests_total",
			Help: "Resource requests that came within 5 s of the same requester's last one and got its current lease back, undecided (doorman-design.md, Step 2).",
		}),
		unrecorded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_server_unrecorded_has_total",
			Help: "Resource requests claiming a lease (has) the server had no record of, outside learning mode.",
		}),
		emptyReleaseIDs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_server_release_empty_resource_ids_total",
			Help: "Empty resource ids skipped in ReleaseCapacity requests (Doorman's Go client sends them).",
		}),
		algoFallbacks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_server_algorithm_fallbacks_total",
			Help: "Algorithms that could not be built (an unknown kind pushed down by the parent) and ran as NO_ALGORITHM instead.",
		}),
		pushes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_server_pushed_leases_total",
			Help: "Leases pushed to watching holders without a request of theirs (capacity that became free, sluice.v1.Leases/Watch).",
		}),
	}
	watchers := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sluice_server_lease_watchers",
		Help: "Holders with an open sluice.v1.Leases/Watch stream to this server.",
	}, func() float64 { return float64(s.push.count()) })
	master := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sluice_server_is_master",
		Help: "1 if this server is the master of its node, else 0.",
	}, func() float64 {
		if ok, _ := s.IsMaster(); ok {
			return 1
		}
		return 0
	})
	uptime := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sluice_server_uptime_seconds",
		Help: "Seconds since the server started.",
	}, func() float64 { return time.Since(s.started).Seconds() })
	for _, c := range []string{"won", "lost"} {
		m.elections.WithLabelValues(c) // at 0 from the start, so a dashboard's panel has data before the first election
	}
	reg.MustRegister(m.unmatched, m.elections, m.early, m.unrecorded, m.emptyReleaseIDs, m.algoFallbacks, m.pushes, watchers, master, uptime,
		&resourceCollector{s: s, admitted: map[string]bool{}})
	return m
}

// MaxResourceSeries bounds the per-resource series: at most this many
// label values (templates, or resource ids at an intermediate server); the
// rest are aggregated under "other". Label values, once admitted, stay.
const MaxResourceSeries = 200

// resourceCollector reports, per configured template (at an intermediate
// server: per resource id), the capacity, Σ has, Σ wants, clients,
// learning mode and algorithm, aggregated over the resources matching it,
// computed at scrape time. Resources matching no template are "unmatched".
type resourceCollector struct {
	s        *Service
	mu       sync.Mutex
	admitted map[string]bool
}

var (
	descCapacity = prometheus.NewDesc("sluice_server_resource_capacity",
		"Capacity of the resources under this label (the largest, permits/s or units).", []string{"resource"}, nil)
	descHas = prometheus.NewDesc("sluice_server_resource_has",
		"Σ of the unexpired leases handed out for the resources under this label.", []string{"resource"}, nil)
	descWants = prometheus.NewDesc("sluice_server_resource_wants",
		"Σ of what the requesters of the resources under this label want.", []string{"resource"}, nil)
	descClients = prometheus.NewDesc("sluice_server_resource_clients",
		"Number of unexpired leases (requesters) for the resources under this label.", []string{"resource"}, nil)
	descLearning = prometheus.NewDesc("sluice_server_resource_learning",
		"1 if a resource under this label is in learning mode.", []string{"resource"}, nil)
	descCount = prometheus.NewDesc("sluice_server_resources",
		"Number of resource ids the server holds state for under this label.", []string{"resource"}, nil)
	descInfo = prometheus.NewDesc("sluice_server_resource_info",
		"The algorithm of the resources under this label (value 1).", []string{"resource", "algorithm"}, nil)
	descConfig = prometheus.NewDesc("sluice_server_config_info",
		"The loaded configuration's SHA-256 and number of templates (value 1).", []string{"hash", "templates"}, nil)
)

func (c *resourceCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descCapacity, descHas, descWants, descClients, descLearning, descCount, descInfo, descConfig} {
		ch <- d
	}
}

// label returns the bounded label value for a resource.
func (c *resourceCollector) label(id string, r *resource) string {
	v := id
	switch {
	case r.template != nil:
		v = r.template.IdentifierGlob
	case c.s.parent == nil:
		return "unmatched"
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.admitted[v] {
		return v
	}
	if len(c.admitted) >= MaxResourceSeries {
		return "other"
	}
	c.admitted[v] = true
	return v
}

func (c *resourceCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	if cfg := s.Config(); cfg != nil {
		ch <- prometheus.MustNewConstMetric(descConfig, prometheus.GaugeValue, 1, cfg.Hash(), strconv.Itoa(cfg.Len()))
	}
	type agg struct {
		capacity, has, wants float64
		clients, count       int
		learning             bool
		algorithm            string
	}
	now := s.now()
	ids, rs := s.resourceList()
	byLabel := map[string]*agg{}
	for i, r := range rs {
		l := c.label(ids[i], r)
		a := byLabel[l]
		if a == nil {
			a = &agg{}
			byLabel[l] = a
		}
		r.mu.Lock()
		r.store.Cleanup(now)
		w, h, _, n := r.store.Totals()
		p := r.store.Params()
		learning := r.store.Learning(now)
		r.mu.Unlock()
		a.capacity = math.Max(a.capacity, p.Capacity)
		a.has += h
		a.wants += w
		a.clients += n
		a.count++
		a.learning = a.learning || learning
		a.algorithm = p.Kind.String()
	}
	for l, a := range byLabel {
		learning := 0.0
		if a.learning {
			learning = 1
		}
		ch <- prometheus.MustNewConstMetric(descCapacity, prometheus.GaugeValue, a.capacity, l)
		ch <- prometheus.MustNewConstMetric(descHas, prometheus.GaugeValue, a.has, l)
		ch <- prometheus.MustNewConstMetric(descWants, prometheus.GaugeValue, a.wants, l)
		ch <- prometheus.MustNewConstMetric(descClients, prometheus.GaugeValue, float64(a.clients), l)
		ch <- prometheus.MustNewConstMetric(descLearning, prometheus.GaugeValue, learning, l)
		ch <- prometheus.MustNewConstMetric(descCount, prometheus.GaugeValue, float64(a.count), l)
		ch <- prometheus.MustNewConstMetric(descInfo, prometheus.GaugeValue, 1, l, a.algorithm)
	}
}
