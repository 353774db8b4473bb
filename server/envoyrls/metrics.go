package envoyrls

import (
	"slices"
	"strconv"
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

// Result is what became of a descriptor's hits: the result label of the
// service's metrics, and StatsSink's DescriptorStats.Result.
type Result uint8

// The results.
const (
	// ResultWithin: granted, at or below the near-limit ratio.
	ResultWithin Result = iota
	// ResultNear: granted, above Options.NearLimitRatio of the limit.
	ResultNear
	// ResultOver: over the limit, answered OVER_LIMIT.
	ResultOver
	// ResultShadow: over the limit, answered OK (shadow mode).
	ResultShadow
	// ResultDegraded: answered OK while the store failed (FailOpen).
	ResultDegraded
	nResults // (the results the metrics count)
	// ResultFailed: not decided, the store failed and the request was
	// answered Unavailable (FailClosed); only StatsSink sees it.
	ResultFailed = nResults
)

var resultNames = [nResults]string{"within_limit", "near_limit", "over_limit", "shadow_mode", "degraded"}

// String returns the result's name, as its metrics label reads
// ("within_limit", "near_limit", "over_limit", "shadow_mode",
// "degraded"; "failed" for ResultFailed).
func (r Result) String() string {
	switch {
	case r < nResults:
		return resultNames[r]
	case r == ResultFailed:
		return "failed"
	}
	return "Result(" + strconv.Itoa(int(r)) + ")"
}

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

	// The overrides' statistic names (StatsSink's), domain "\x00" name,
	// at most MaxDetailedSeries of them.
	overrideKeys sync.Map
	overrides    atomic.Int64
}

// ruleInfo is what a configured rule's answers need, resolved once per
// configuration: its metric label and series, and its policy's name in
// the response headers (a Structured Field string).
type ruleInfo struct {
	label    string
	counters *[nResults]prometheus.Counter
	policy   string
	// path is the rule's, first level first, and dynamic reports that its
	// statistics are named by the request's values (the rule has
	// detailed_metric, or a rule of its path value_to_metric).
	path    []*rls.Rule
	dynamic bool
	// limits are, for a rule with several limits (rate_limits), each
	// limit's series: the rule's label then "/" and the limit's name (or
	// rate_limits[i]).
	limits []*[nResults]prometheus.Counter
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
			info := &ruleInfo{label: label, policy: sfString(label), path: slices.Clone(p), dynamic: r.DetailedMetric}
			for _, q := range p {
				info.dynamic = info.dynamic || q.ValueToMetric
			}
			if r.Limit != nil {
				info.counters = m.counters(name+"\x00"+label, name, label, false)
				if r.Limit.Name != "" {
					info.policy = sfString(r.Limit.Name)
				}
			}
			if r.MoreLimits != nil {
				i := 0
				for l := range r.AllLimits() {
					ll := label + "/" + limitName(l, i)
					info.limits = append(info.limits, m.counters(name+"\x00"+ll, name, ll, false))
					i++
				}
			}
			rules[r] = info
		})
	}
	m.rules.Store(&rules)
}

// limitName names a rule's i-th limit in its metrics: its name, else
// rate_limits[i].
func limitName(l *rls.Limit, i int) string {
	if l.Name != "" {
		return l.Name
	}
	return "rate_limits[" + strconv.Itoa(i) + "]"
}

// recordLimits counts, for a descriptor whose rule has several limits,
// its hits under each limit's own series with that limit's result (over,
// or shadow mode, when it did not fit; else near or within by what it
// has left), beside the descriptor's own (record).
func (m *metrics) recordLimits(d *descriptor, results []rls.Result, nearRatio float64) {
	info := d.info
	if info == nil || len(info.limits) != len(results) {
		return // a rule of a configuration just replaced
	}
	for i, r := range results {
		res := ResultWithin
		l := d.limitAt(i)
		switch {
		case r.Over && d.shadow:
			res = ResultShadow
		case r.Over:
			res = ResultOver
		case float64(l.RequestsPerUnit-min(r.Remaining, l.RequestsPerUnit)) > nearRatio*float64(l.RequestsPerUnit):
			res = ResultNear
		}
		info.limits[i][res].Add(float64(d.hits))
	}
}

// rule returns a configured rule's resolved information (nil for a rule
// of an older configuration).
func (m *metrics) rule(r *rls.Rule) *ruleInfo { return (*m.rules.Load())[r] }

// record counts d's hits under res (and notes res in d, for StatsSink).
func (m *metrics) record(d *descriptor, res Result) {
	d.res, d.recorded = res, true
	r := d.match.Rule
	if r == nil {
		m.counters(d.domain+"\x00override", d.domain, "override", false)[res].Add(float64(d.hits))
		return
	}
	if info := d.info; info != nil && info.counters != nil && !info.dynamic && d.limit == r.Limit {
		info.counters[res].Add(float64(d.hits))
		return
	}
	label, detailed := m.label(d)
	key := d.domain + "\x00" + label
	if detailed {
		key = d.domain + "\x00\x00" + label
	}
	m.counters(key, d.domain, label, detailed)[res].Add(float64(d.hits))
}

// label returns the name of the statistics of d, a descriptor that
// matched a rule, after its domain, as envoyproxy/ratelimit names them
// (its rule's key_value.key, or, for a rule named by the request's values,
// those values: requestKey), and whether it is one of the request values'
// (at most MaxDetailedSeries of them; then the rule's own). d keeps it.
func (m *metrics) label(d *descriptor) (string, bool) {
	if d.label != "" {
		return d.label, d.detailed
	}
	r, info := d.match.Rule, d.info
	if info == nil { // a rule of a configuration just replaced
		info = &ruleInfo{label: r.Key, dynamic: r.DetailedMetric || r.ValueToMetric}
	}
	d.label = info.label
	if info.dynamic {
		if k := requestKey(info.path, d.entries); k != d.label {
			if full := d.domain + "\x00\x00" + k; m.has(full) || m.detailed.Load() < MaxDetailedSeries {
				d.label, d.detailed = k, true
			}
		}
	}
	return d.label, d.detailed
}

// statKey returns the name of d's statistics after its domain for
// StatsSink: label's for a rule's limit; for a descriptor's own limit
// (an override), its entries' keys and values (overridePath), as
// envoyproxy/ratelimit names an override's statistics, at most
// MaxDetailedSeries of them (then "override").
func (m *metrics) statKey(d *descriptor) string {
	if r := d.match.Rule; r != nil && d.limit == r.Limit {
		label, _ := m.label(d)
		return label
	}
	k := overridePath(d.entries)
	full := d.domain + "\x00" + k
	if _, ok := m.overrideKeys.Load(full); ok {
		return k
	}
	if m.overrides.Load() >= MaxDetailedSeries {
		return "override"
	}
	if _, loaded := m.overrideKeys.LoadOrStore(full, struct{}{}); !loaded {
		m.overrides.Add(1)
	}
	return k
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

// requestKey names a request descriptor that matched the rule at the end
// of path (one rule per entry, the first level's first) by its values, as
// envoyproxy/ratelimit names the statistics of a detailed_metric rule, or
// of a rule whose path has value_to_metric:
//
//   - detailed_metric (the rule's): every entry's key_value (key_ when the
//     value is empty), except that an entry matched by a share_threshold
//     wildcard is its key and pattern (and then an empty value is the
//     key alone);
//   - else, level by level: a key-only rule is its key, and its key_value
//     with value_to_metric; a rule with a value its key_value; a wildcard
//     its key and pattern, and its key_value with value_to_metric unless
//     it has share_threshold.
//
// With no path (a rule of a configuration just replaced), every entry's
// key_value. Source: envoyproxy/ratelimit's src/config/config_impl.go,
// GetLimit.
func requestKey(path []*rls.Rule, entries []rls.Entry) string {
	if len(path) != len(entries) {
		return valuesPath(entries)
	}
	// shared reports whether entry i was matched by a share_threshold
	// wildcard (a value equal to the pattern matched as a plain value).
	shared := func(i int) bool {
		r := path[i]
		return r.ShareThreshold && r.Wildcard() && entries[i].Value != r.Value
	}
	anyShared := false
	for i := range path {
		anyShared = anyShared || shared(i)
	}
	detailed := path[len(path)-1].DetailedMetric
	var b strings.Builder
	for i, e := range entries {
		if i > 0 {
			b.WriteByte('.')
		}
		r := path[i]
		b.WriteString(e.Key)
		switch wild := r.Wildcard() && e.Value != r.Value; {
		case detailed && !anyShared:
			b.WriteByte('_')
			b.WriteString(e.Value)
		case shared(i), !detailed && wild && !r.ValueToMetric:
			b.WriteByte('_')
			b.WriteString(r.Value)
		case !detailed && r.Value == "" && !r.ValueToMetric:
			// the key alone
		case e.Value != "":
			b.WriteByte('_')
			b.WriteString(e.Value)
		}
	}
	return b.String()
}

// valuesPath names a request descriptor by its keys and values
// (key_value, joined by '.'), as a detailed_metric rule's statistics do.
func valuesPath(entries []rls.Entry) string { return entriesPath(entries, false) }

// overridePath names a descriptor with its own limit by its keys and
// values (key_value, or the key alone for an empty value, joined by '.'),
// as envoyproxy/ratelimit names an override's statistics (its
// src/config/config_impl.go, descriptorKey).
func overridePath(entries []rls.Entry) string { return entriesPath(entries, true) }

// entriesPath joins entries' key_value by '.', the key alone for an
// empty value when keyAlone.
func entriesPath(entries []rls.Entry, keyAlone bool) string {
	var b strings.Builder
	for i, e := range entries {
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(e.Key)
		if e.Value != "" || !keyAlone {
			b.WriteByte('_')
			b.WriteString(e.Value)
		}
	}
	return b.String()
}
