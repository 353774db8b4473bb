package upstreamstats

import (
	_ "embed"
	"fmt"
	"log/slog"
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/statsd_exporter/pkg/event"
	"github.com/prometheus/statsd_exporter/pkg/exporter"
	"github.com/prometheus/statsd_exporter/pkg/mapper"
)

// defaultMapping is upstream's default statsd_exporter mapping
// (USE_PROMETHEUS without PROMETHEUS_MAPPER_YAML).
//
//go:embed prometheus_mapping.yaml
var defaultMapping string

// CheckMapper reads a statsd_exporter mapping file as New reads
// Options.PrometheusMapper, and returns what New would refuse of it: the
// file unreadable, YAML that does not parse, a field statsd_exporter does
// not know, a rule it rejects (a bad name, label, glob or regex).
func CheckMapper(file string) error {
	_, err := loadMapper(file, nil)
	return err
}

// loadMapper returns statsd_exporter's mapper of file ("": upstream's
// default mapping). Its log is dropped, as upstream drops it: it warns,
// at every start, of the glob rules that need backtracking, which
// upstream's own do.
func loadMapper(file string, reg prometheus.Registerer) (*mapper.MetricMapper, error) {
	m := &mapper.MetricMapper{Registerer: reg, Logger: slog.New(slog.DiscardHandler)}
	if file == "" {
		if err := m.InitFromYAMLString(defaultMapping); err != nil {
			return nil, fmt.Errorf("the default mapping: %w", err) // (a test reads it)
		}
		return m, nil
	}
	if err := m.InitFromFile(file); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return m, nil
}

// promSink is a gostats.Sink handing each statistic gostats flushes to
// statsd_exporter's exporter as the event statsd_exporter would have read
// from its statsd line: a counter's delta, a gauge's value, a timer's
// milliseconds (as gostats gives them: the histogram
// ratelimit_service_response_time_seconds observes milliseconds, as
// upstream's does). The exporter names them by the mapping into its own
// registry. Events go one at a time through an unbuffered channel to the
// exporter's one goroutine, so a flush returns once the exporter has them
// all (Flush). Safe for concurrent use.
//
// Source: envoyproxy/ratelimit's src/stats/prom/prometheus_sink.go.
type promSink struct {
	events  chan event.Events
	done    chan struct{} // closed when the exporter's goroutine ends
	handler http.Handler

	mu     sync.RWMutex // held to send; locked to close events
	closed bool
}

// newPromSink returns a sink converting by the mapping of mapperFile
// ("": upstream's default) into a registry of its own, and starts the
// exporter's goroutine (stopped by close).
func newPromSink(mapperFile string, log *slog.Logger) (*promSink, error) {
	reg := prometheus.NewRegistry()
	m, err := loadMapper(mapperFile, reg)
	if err != nil {
		return nil, err
	}
	// What upstream's /metrics holds besides the mapped statistics (it
	// uses Prometheus' default registry): the Go runtime's and the
	// process' collectors, and the exporter's own counts, by
	// statsd_exporter's names.
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	actions := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "statsd_exporter_events_actions_total",
		Help: "The total number of StatsD events by action."}, []string{"action"})
	unmapped := prometheus.NewCounter(prometheus.CounterOpts{Name: "statsd_exporter_events_unmapped_total",
		Help: "The total number of StatsD events no mapping was found for."})
	errs := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "statsd_exporter_events_error_total",
		Help: "The total number of StatsD events discarded due to errors."}, []string{"reason"})
	seen := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "statsd_exporter_events_total",
		Help: "The total number of StatsD events seen."}, []string{"type"})
	conflicts := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "statsd_exporter_events_conflict_total",
		Help: "The total number of StatsD events with conflicting names."}, []string{"type", "metric_name"})
	count := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "statsd_exporter_metrics_total",
		Help: "The total number of metrics."}, []string{"type"})
	reg.MustRegister(actions, unmapped, errs, seen, conflicts, count)
	exp := exporter.NewExporter(reg, m, log, actions, unmapped, errs, seen, conflicts, count)
	p := &promSink{
		events:  make(chan event.Events),
		done:    make(chan struct{}),
		handler: promhttp.InstrumentMetricHandler(reg, promhttp.HandlerFor(reg, promhttp.HandlerOpts{})),
	}
	go func() {
		defer close(p.done)
		exp.Listen(p.events)
	}()
	return p, nil
}

// send hands e to the exporter (e nil: nothing, a barrier); dropped
// after close.
func (p *promSink) send(e event.Event) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return
	}
	var batch event.Events
	if e != nil {
		batch = event.Events{e}
	}
	p.events <- batch
}

func (p *promSink) FlushCounter(name string, value uint64) {
	p.send(&event.CounterEvent{CMetricName: name, CValue: float64(value), CLabels: map[string]string{}})
}

func (p *promSink) FlushGauge(name string, value uint64) {
	p.send(&event.GaugeEvent{GMetricName: name, GValue: float64(value), GLabels: map[string]string{}})
}

func (p *promSink) FlushTimer(name string, milliseconds float64) {
	p.send(&event.ObserverEvent{OMetricName: name, OValue: milliseconds, OLabels: map[string]string{}})
}

// Flush returns once the exporter has handled every event sent before
// it: the exporter takes a batch only when it is done with the one
// before, so an empty batch taken is a barrier. gostats calls it at the
// end of every flush (a gostats.FlushableSink).
func (p *promSink) Flush() { p.send(nil) }

// close stops the exporter's goroutine once the events sent are handled.
func (p *promSink) close() {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.events)
	}
	p.mu.Unlock()
	<-p.done
}
