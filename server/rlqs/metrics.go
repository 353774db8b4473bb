package rlqs

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/server/internal/promreg"
)

// MaxDomainSeries bounds the domains the metrics name: the streams choose
// their domain, so once this many have series, the others are counted
// under the domain label OtherDomains.
const MaxDomainSeries = 1000

// OtherDomains is the domain label of the domains beyond MaxDomainSeries,
// and of messages refused before their stream had a domain ("").
const OtherDomains = "_other"

// metrics are the service's series, by domain.
type metrics struct {
	streams      *prometheus.GaugeVec
	buckets      *prometheus.GaugeVec
	reports      *prometheus.CounterVec
	sent         *prometheus.CounterVec
	pushed       *prometheus.CounterVec
	abandoned    *prometheus.CounterVec
	unconfigured *prometheus.CounterVec
	bad          *prometheus.CounterVec

	mu      sync.Mutex
	domains map[string]*domainMetrics
}

// domainMetrics are one domain's series.
type domainMetrics struct {
	streams, buckets                                        prometheus.Gauge
	reports, sent, pushed, abandoned, unconfigured, badMsgs prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	gauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, []string{"domain"})
	}
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"domain"})
	}
	m := &metrics{
		streams:      gauge("sluice_rlqs_streams", "Open RLQS streams (one per Envoy proxy and domain), by domain."),
		buckets:      gauge("sluice_rlqs_buckets", "(stream, bucket) pairs the RLQS service tracks, by domain."),
		reports:      counter("sluice_rlqs_reports_total", "RLQS usage report messages received, by domain."),
		sent:         counter("sluice_rlqs_assignments_total", "RLQS quota assignments sent (first, renewed, changed, pushed, and unconfigured buckets' blanket rules), by domain."),
		pushed:       counter("sluice_rlqs_assignments_pushed_total", "RLQS assignments sent because the lease tree pushed a bucket's stream a larger share (without a report), by domain."),
		abandoned:    counter("sluice_rlqs_abandons_total", "RLQS buckets abandoned (AbandonAction) after counting no request for their lease length, by domain."),
		unconfigured: counter("sluice_rlqs_unconfigured_buckets_total", "RLQS (stream, bucket) pairs no resource template matched, answered with the configured blanket rule, by domain."),
		bad:          counter("sluice_rlqs_bad_reports_total", "RLQS messages refused with InvalidArgument (ending their stream), by domain (_other: before the stream had one)."),
		domains:      make(map[string]*domainMetrics),
	}
	if reg != nil {
		if err := promreg.Register(reg, m.streams, m.buckets, m.reports, m.sent, m.pushed, m.abandoned, m.unconfigured, m.bad); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// domain returns domain's series (OtherDomains' beyond MaxDomainSeries).
func (m *metrics) domain(d string) *domainMetrics {
	m.mu.Lock()
	defer m.mu.Unlock()
	if dm := m.domains[d]; dm != nil {
		return dm
	}
	label := d
	if len(m.domains) >= MaxDomainSeries || d == "" {
		label = OtherDomains
		if dm := m.domains[label]; dm != nil {
			return dm
		}
	}
	dm := &domainMetrics{
		streams: m.streams.WithLabelValues(label), buckets: m.buckets.WithLabelValues(label),
		reports: m.reports.WithLabelValues(label), sent: m.sent.WithLabelValues(label),
		pushed: m.pushed.WithLabelValues(label), abandoned: m.abandoned.WithLabelValues(label),
		unconfigured: m.unconfigured.WithLabelValues(label), badMsgs: m.bad.WithLabelValues(label),
	}
	m.domains[label] = dm
	return dm
}
