package envoyrls

import (
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/limits/rls"
	"github.com/sluice-rl/sluice/server/internal/promreg"
)

// MaxDetailedSeries bounds the series that carry a request's values
// (rules with detailed_metric or value_to_metric): once this many exist,
// further values are counted under their rule's own label.
const MaxDetailedSeries = 1000

// The results a descriptor's hits are counted under (the result label).
type result int

const (
	resultWithin result = iota
	resultNear
	resultOver
	resultShadow
	resultDegraded
	nResults
)

var resultNames = [nResults]string{"within_limit", "near_limit", "over_limit", "shadow_mode", "degraded"}

// metrics are the service's counters: hits per domain, configured rule
// and result — envoyproxy/ratelimit's per-rule statistics (total_hits is
// their sum) as Prometheus series. Request values become labels only for
// rules that ask (detailed_metric, value_to_metric), and at most
// MaxDetailedSeries of them.
type metrics struct {
	hits        *prometheus.CounterVec
	invalid     prometheus.Counter
	storeErrors prometheus.Counter

	series   sync.Map // domain "\x00" rule label → *[nResults]prometheus.Counter
	detailed atomic.Int64
	rules    atomic.Pointer[map[*rls.Rule]*ruleInfo] // the configured rules'
}

// ruleInfo is what a configured rule's answers need, resolved once per
// configuration: its metric label and series, and its policy's name in
// the response headers (a Structured Field string).
type ruleInfo struct {
	label    string
	counters *[nResults]prometheus.Counter
	policy   string
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		hits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_envoy_ratelimit_hits_total",
			Help: "Hits of Envoy rate limit descriptors by domain, rule (envoyproxy/ratelimit's stat name: key_value.key...; \"override\" for a descriptor's own limit) and result (within_limit, near_limit: granted above the near-limit ratio, over_limit, shadow_mode: over but answered OK, degraded: answered OK while the store failed).",
		}, []string{"domain", "rule", "result"}),
		invalid: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_envoy_ratelimit_invalid_requests_total",
			Help: "ShouldRateLimit requests refused with InvalidArgument.",
		}),
		storeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_envoy_ratelimit_store_errors_total",
			Help: "ShouldRateLimit decisions the counters' store failed.",
		}),
	}
	if reg != nil {
		if err := promreg.Register(reg, m.hits, m.invalid, m.storeErrors); err != nil {
			return nil, err
		}
	}
	m.rules.Store(&map[*rls.Rule]*ruleInfo{})
	return m, nil
}

// setConfig resolves the configured rules' labels, series and policy
// names.
func (m *metrics) setConfig(c *rls.Config) {
	rules := map[*rls.Rule]*ruleInfo{}
	for _, name := range c.Names() {
		c.Domain(name).Each(func(p []*rls.Rule) {
			r := p[len(p)-1]
			label := rls.RulePath(p)
			info := &ruleInfo{label: label, policy: sfString(label)}
			if r.Limit != nil {
				info.counters = m.counters(name+"\x00"+label, name, label, false)
				if r.Limit.Name != "" {
					info.policy = sfString(r.Limit.Name)
				}
			}
			rules[r] = info
		})
	}
	m.rules.Store(&rules)
}

// rule returns a configured rule's resolved information (nil for a rule
// of an older configuration).
func (m *metrics) rule(r *rls.Rule) *ruleInfo { return (*m.rules.Load())[r] }

// record counts d's hits under res.
func (m *metrics) record(d *descriptor, res result) {
	label := "override"
	detailed := false
	if r := d.match.Rule; r != nil {
		detailed = r.DetailedMetric || r.ValueToMetric
		info := d.info
		if info == nil {
			info = &ruleInfo{label: r.Key} // a rule of a configuration just replaced
		}
		if info.counters != nil && !detailed && d.limit == r.Limit {
			info.counters[res].Add(float64(d.hits))
			return
		}
		label = info.label
	}
	key := d.domain + "\x00" + label
	if detailed {
		if k := d.domain + "\x00\x00" + valuesPath(d.entries); m.has(k) || m.detailed.Load() < MaxDetailedSeries {
			key, label = k, k[len(d.domain)+2:]
		} else {
			detailed = false
		}
	}
	m.counters(key, d.domain, label, detailed)[res].Add(float64(d.hits))
}

func (m *metrics) has(key string) bool {
	_, ok := m.series.Load(key)
	return ok
}

// counters returns the series of key, made on first use.
// (detailed: one of the request values' series, which are counted).
func (m *metrics) counters(key, domain, label string, detailed bool) *[nResults]prometheus.Counter {
	if c, ok := m.series.Load(key); ok {
		return c.(*[nResults]prometheus.Counter)
	}
	c := new([nResults]prometheus.Counter)
	for i := range c {
		c[i] = m.hits.WithLabelValues(domain, label, resultNames[i])
	}
	got, loaded := m.series.LoadOrStore(key, c)
	if !loaded && detailed {
		m.detailed.Add(1)
	}
	return got.(*[nResults]prometheus.Counter)
}

// valuesPath names a request descriptor by its keys and values, as a
// detailed_metric rule's statistics do.
func valuesPath(entries []rls.Entry) string {
	var b strings.Builder
	for i, e := range entries {
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(e.Key)
		b.WriteByte('_')
		b.WriteString(e.Value)
	}
	return b.String()
}
