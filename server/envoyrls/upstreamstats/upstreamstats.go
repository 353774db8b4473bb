package upstreamstats

import (
	"context"
	"expvar"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/DataDog/datadog-go/v5/statsd"
	gostats "github.com/lyft/gostats"

	"github.com/sluice-rl/sluice/internal/names"
	"github.com/sluice-rl/sluice/server/envoyrls"
)

// DefaultAddress is statsd's address when Options names none: upstream's
// STATSD_HOST and STATSD_PORT defaults.
const DefaultAddress = "localhost:8125"

// DefaultFlushInterval is Options.FlushInterval's default: upstream's
// STATS_FLUSH_INTERVAL.
const DefaultFlushInterval = 10 * time.Second

// MaxUnknownDomains bounds the domain_not_found counters (one per domain
// a request named that has no rules, a name the caller chooses): further
// domains are not counted.
const MaxUnknownDomains = 1000

// Options configure a Sink. The zero value sends plain statsd over TCP to
// localhost:8125 every 10 seconds, as upstream does with USE_STATSD=true
// and nothing else set.
type Options struct {
	// Address is statsd's "host:port" (upstream's STATSD_HOST and
	// STATSD_PORT; "": DefaultAddress). The host is resolved when the
	// sink connects, and again when it reconnects.
	Address string
	// Protocol is "udp" or "tcp" (upstream's STATSD_PROTOCOL, read by
	// gostats; "": "tcp", its default, in plain statsd; "udp" with
	// DogStatsd, which takes nothing else, as upstream's DogStatsD sink).
	Protocol string
	// FlushInterval is how often the counters are sent (upstream's
	// STATS_FLUSH_INTERVAL; 0: DefaultFlushInterval). Timers are sent at
	// once.
	FlushInterval time.Duration
	// ExtraTags are added to every statistic (upstream's EXTRA_TAGS,
	// "k:v,k2:v2"). Keys and values must be non-empty; a key may not hold
	// '.', '=', ':', '|', ',', '#' or whitespace (they would break the
	// line); gostats makes '.', ':' and '|' of a value '_'.
	ExtraTags map[string]string
	// DogStatsd sends DogStatsD lines, the tags after "|#", through
	// DataDog's client (upstream's USE_DOG_STATSD; its mogrifiers are not
	// supported).
	DogStatsd bool
	// Prometheus exposes the statistics to Prometheus instead of sending
	// them to statsd (upstream's USE_PROMETHEUS): every flush hands them
	// to statsd_exporter's exporter, which names them by the mapping
	// (PrometheusMapper) into a registry of the sink's own, served by
	// Sink.PrometheusHandler. Address and DogStatsd must then be unset
	// (upstream takes one sink at a time); Protocol is not read.
	Prometheus bool
	// PrometheusMapper is a statsd_exporter mapping file (upstream's
	// PROMETHEUS_MAPPER_YAML), read once by New; "": upstream's default
	// mapping. Only with Prometheus.
	PrometheusMapper string
	// Logger logs what the statsd client reports (a connection refused,
	// statistics dropped), and what statsd_exporter's exporter reports
	// (at debug: a name of two types) (nil: slog.Default()).
	Logger *slog.Logger
}

// OptionError is an Options value New refuses: the field and why.
type OptionError = names.FieldError

// Sink is an envoyrls.StatsSink on gostats, made by New (its zero value
// is not usable). Safe for concurrent use. Descriptor allocates nothing
// once its key's counters exist, Request nothing of its own (its timer's
// line goes through gostats' pooled buffers): BenchmarkDescriptor,
// BenchmarkRequest.
type Sink struct {
	store  gostats.Store
	dog    *statsd.Client // with DogStatsd
	prom   *promSink      // with Prometheus
	cancel context.CancelFunc
	done   chan struct{}
	closed atomic.Bool

	rateLimit     scope // ratelimit.service.rate_limit
	configSuccess gostats.Counter
	configError   gostats.Counter
	globalShadow  gostats.Counter
	redisError    gostats.Counter
	serviceError  gostats.Counter
	totalRequests gostats.Counter
	responseTime  gostats.Timer

	mu      sync.RWMutex
	rules   map[ruleKey]*ruleCounters
	domains map[string]gostats.Counter // domain_not_found
	made    map[string]gostats.Counter // every counter made, by name: /stats
}

// ruleKey identifies a rule's counters: envoyrls.DescriptorStats' Domain
// and Key.
type ruleKey struct{ domain, key string }

// ruleCounters are one key's counters (upstream's RateLimitStats).
type ruleCounters struct {
	totalHits, withinLimit, nearLimit, overLimit, shadowMode, negativeHits gostats.Counter
}

var _ envoyrls.StatsSink = (*Sink)(nil)

// New returns a sink sending to statsd, and starts its flushing. Errors
// (an *OptionError naming the field): an Address that is not host:port
// with a port in 1–65535, a Protocol other than udp or tcp (or tcp with
// DogStatsd), a negative FlushInterval, a bad ExtraTags entry;
// environment variables gostats reads that it cannot parse (STATSD_PORT,
// USE_STATSD, GOSTATS_FLUSH_INTERVAL_SECONDS,
// GOSTATS_LOGGING_SINK_DISABLED; their values are otherwise ignored);
// DataDog's client's own; with Prometheus, PrometheusMapper's file
// unreadable or refused by statsd_exporter (CheckMapper), or Address or
// DogStatsd set as well. An unreachable statsd is no error: the sink
// retries (every 3 s) and logs.
func New(opts Options) (*Sink, error) {
	if err := opts.check(); err != nil {
		return nil, fmt.Errorf("upstreamstats: Options.%w", err)
	}
	if opts.Address == "" {
		opts.Address = DefaultAddress
	}
	if opts.FlushInterval == 0 {
		opts.FlushInterval = DefaultFlushInterval
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	s := &Sink{rules: map[ruleKey]*ruleCounters{}, domains: map[string]gostats.Counter{}, made: map[string]gostats.Counter{}}
	var sink gostats.Sink
	switch {
	case opts.Prometheus:
		prom, err := newPromSink(opts.PrometheusMapper, log)
		if err != nil {
			return nil, fmt.Errorf("upstreamstats: Options.%w", &OptionError{Field: "PrometheusMapper", Err: err})
		}
		s.prom, sink = prom, prom
	case opts.DogStatsd:
		dog, err := statsd.New(opts.Address, statsd.WithoutClientSideAggregation(), statsd.WithErrorHandler(func(err error) {
			log.Warn("dogstatsd", "err", err)
		}))
		if err != nil {
			return nil, fmt.Errorf("upstreamstats: Options.Address: DogStatsD client: %w", err)
		}
		s.dog = dog
		sink = &dogSink{client: dog}
	default:
		host, port, _ := net.SplitHostPort(opts.Address) // (checked)
		p, _ := strconv.Atoi(port)
		protocol := opts.Protocol
		if protocol == "" {
			protocol = "tcp"
		}
		var err error
		if sink, err = netSink(gostats.WithStatsdHost(host), gostats.WithStatsdPort(p), gostats.WithStatsdProtocol(protocol), gostats.WithLogger(logger{log})); err != nil {
			return nil, err
		}
	}
	s.store = gostats.NewStore(sink, false)
	// The scopes as upstream makes them: ratelimit (its server's, with the
	// Go runtime's statistics), ratelimit.service (its stats manager's),
	// ratelimit_server (its gRPC interceptor's).
	root := s.store.ScopeWithTags("ratelimit", opts.ExtraTags)
	s.store.AddStatGenerator(gostats.NewRuntimeStats(root.Scope("go")))
	service := scope{root.Scope("service"), "ratelimit.service."}
	s.rateLimit = service.sub("rate_limit")
	call := service.sub("call.should_rate_limit")
	server := scope{s.store.ScopeWithTags("ratelimit_server", opts.ExtraTags), "ratelimit_server."}
	s.configSuccess = s.counter(service, "config_load_success")
	s.configError = s.counter(service, "config_load_error")
	s.globalShadow = s.counter(service, "global_shadow_mode")
	s.redisError = s.counter(call, "redis_error")
	s.serviceError = s.counter(call, "service_error")
	s.totalRequests = s.counter(server, "ShouldRateLimit.total_requests")
	s.responseTime = server.NewTimer("ShouldRateLimit.response_time")

	ctx, cancel := context.WithCancel(context.Background())
	s.cancel, s.done = cancel, make(chan struct{})
	go s.flushEvery(ctx, opts.FlushInterval)
	return s, nil
}

// check returns an *OptionError for the first field New refuses.
func (o Options) check() *OptionError {
	if o.Address != "" {
		host, port, err := net.SplitHostPort(o.Address)
		if err != nil {
			return names.FieldErr("Address", "%q: %v (want host:port)", o.Address, err)
		}
		if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
			return names.FieldErr("Address", "%q: port %q, want 1 to 65535", o.Address, port)
		}
		if host == "" {
			return names.FieldErr("Address", "%q: no host", o.Address)
		}
	}
	switch {
	case o.Prometheus && o.Address != "":
		return names.FieldErr("Prometheus", "with Address %q: one sink at a time, as upstream (USE_PROMETHEUS with USE_STATSD)", o.Address)
	case o.Prometheus && o.DogStatsd:
		return names.FieldErr("Prometheus", "with DogStatsd: one sink at a time, as upstream (USE_PROMETHEUS with USE_DOG_STATSD)")
	case !o.Prometheus && o.PrometheusMapper != "":
		return names.FieldErr("PrometheusMapper", "%q without Prometheus", o.PrometheusMapper)
	case o.Protocol != "" && o.Protocol != "udp" && o.Protocol != "tcp":
		return names.FieldErr("Protocol", "%q, want udp or tcp", o.Protocol)
	case o.DogStatsd && o.Protocol == "tcp":
		return names.FieldErr("Protocol", "tcp with DogStatsd, which sends over udp only")
	case o.FlushInterval < 0:
		return names.FieldErr("FlushInterval", "%v, want > 0 (0: %v)", o.FlushInterval, DefaultFlushInterval)
	}
	keys := make([]string, 0, len(o.ExtraTags))
	for k := range o.ExtraTags {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		field := "ExtraTags[" + strconv.Quote(k) + "]"
		switch {
		case k == "":
			return names.FieldErr(field, "an empty key")
		case strings.ContainsAny(k, ".=:|,# \t\r\n"):
			return names.FieldErr(field, "the key holds one of . = : | , # or a space")
		case o.ExtraTags[k] == "":
			return names.FieldErr(field, "an empty value")
		case strings.ContainsAny(o.ExtraTags[k], ",#\r\n"):
			return names.FieldErr(field, "the value holds , # or a line break")
		}
	}
	return nil
}

// netSink is gostats' network sink, with the panic its reading of the
// environment raises on a value it cannot parse made an error.
func netSink(opts ...gostats.SinkOption) (sink gostats.Sink, err error) {
	defer func() {
		if e := recover(); e != nil {
			err = fmt.Errorf("upstreamstats: gostats' environment: %v", e)
		}
	}()
	return gostats.NewNetSink(opts...), nil
}

// scope is a gostats scope and its name (with a trailing dot), which
// gostats keeps to itself: for /stats.
type scope struct {
	gostats.Scope
	prefix string
}

// sub returns the scope's subscope name.
func (sc scope) sub(name string) scope { return scope{sc.Scope.Scope(name), sc.prefix + name + "."} }

// counter returns sc's counter name, noted for /stats. s.mu must be
// held, or s not yet shared.
func (s *Sink) counter(sc scope, name string) gostats.Counter {
	c := sc.NewCounter(name)
	s.made[sc.prefix+name] = c
	return c
}

// flushEvery flushes the store every interval until ctx ends.
func (s *Sink) flushEvery(ctx context.Context, interval time.Duration) {
	defer close(s.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.store.Flush()
		}
	}
}

// Descriptor adds a descriptor's counts to its key's counters (made on
// first use). It implements envoyrls.StatsSink.
func (s *Sink) Descriptor(d envoyrls.DescriptorStats) {
	c := s.rule(d.Domain, d.Key)
	n := d.Counts
	add(c.totalHits, n.TotalHits)
	add(c.withinLimit, n.WithinLimit)
	add(c.nearLimit, n.NearLimit)
	add(c.overLimit, n.OverLimit)
	add(c.shadowMode, n.ShadowMode)
	add(c.negativeHits, n.NegativeHits)
}

func add(c gostats.Counter, n uint64) {
	if n > 0 {
		c.Add(n)
	}
}

// rule returns the counters of domain and key, made on first use.
func (s *Sink) rule(domain, key string) *ruleCounters {
	k := ruleKey{domain, key}
	s.mu.RLock()
	c := s.rules[k]
	s.mu.RUnlock()
	if c != nil {
		return c
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c = s.rules[k]; c != nil {
		return c
	}
	name := Sanitize(domain + "." + key)
	c = &ruleCounters{
		totalHits:    s.counter(s.rateLimit, name+".total_hits"),
		overLimit:    s.counter(s.rateLimit, name+".over_limit"),
		nearLimit:    s.counter(s.rateLimit, name+".near_limit"),
		withinLimit:  s.counter(s.rateLimit, name+".within_limit"),
		shadowMode:   s.counter(s.rateLimit, name+".shadow_mode"),
		negativeHits: s.counter(s.rateLimit, name+".total_negative_hits"),
	}
	s.counter(s.rateLimit, name+".over_limit_with_local_cache") // (upstream's, always 0 here)
	s.rules[k] = c
	return c
}

// Request counts a call: total_requests, its response_time (whole
// milliseconds), redis_error when the store failed, else service_error
// when it erred, global_shadow_mode, and domain_not_found per descriptor
// of an unknown domain (at most MaxUnknownDomains domains). It implements
// envoyrls.StatsSink.
func (s *Sink) Request(r envoyrls.RequestStats) {
	s.totalRequests.Inc()
	s.responseTime.AddValue(float64(r.Duration.Milliseconds()))
	switch {
	case r.StoreFailed:
		s.redisError.Inc()
	case r.Err != nil:
		s.serviceError.Inc()
	}
	if r.GlobalShadowMode {
		s.globalShadow.Inc()
	}
	if r.DomainNotFound > 0 {
		if c := s.notFound(r.Domain); c != nil {
			c.Add(uint64(r.DomainNotFound))
		}
	}
}

// notFound returns domain's domain_not_found counter, made on first use;
// nil beyond MaxUnknownDomains domains.
func (s *Sink) notFound(domain string) gostats.Counter {
	s.mu.RLock()
	c := s.domains[domain]
	s.mu.RUnlock()
	if c != nil {
		return c
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c = s.domains[domain]; c == nil && len(s.domains) < MaxUnknownDomains {
		c = s.counter(s.rateLimit, Sanitize(domain)+".domain_not_found")
		s.domains[domain] = c
	}
	return c
}

// ConfigLoad counts a load of the rules: config_load_success when err is
// nil, else config_load_error. Upstream counts every load, the first
// included, and every reload, changed or not. Call it where the rules are
// read (envoyrls sees only the rules that loaded).
func (s *Sink) ConfigLoad(err error) {
	if err != nil {
		s.configError.Inc()
		return
	}
	s.configSuccess.Inc()
}

// Flush sends what changed now, and waits until it is written (or,
// statsd unreachable, dropped: up to two reconnection attempts, 3 s
// apart); with Prometheus, until the exporter has it, so that the next
// scrape of PrometheusHandler sees it.
func (s *Sink) Flush() { s.store.Flush() }

// Close stops the flushing, sends what changed and closes the DogStatsD
// client; it returns that client's error. Over TCP to a statsd that
// refuses, the last send waits for two reconnection attempts (about 6 s)
// before it drops. gostats' own network sink has no Close: its goroutine
// and connection stay until the process ends (make one Sink per process),
// and a Request after Close still sends its timer there. With
// Prometheus, Close stops statsd_exporter's goroutine after the last
// flush (PrometheusHandler still serves what it had; what comes after is
// dropped). Calls after the first do nothing and return nil.
func (s *Sink) Close() error {
	if !s.closed.CompareAndSwap(false, true) {
		return nil
	}
	s.cancel()
	<-s.done
	s.store.Flush()
	if s.prom != nil {
		s.prom.close()
	}
	if s.dog != nil {
		return s.dog.Close()
	}
	return nil
}

// PrometheusHandler returns upstream's Prometheus endpoint
// (USE_PROMETHEUS; upstream serves it at PROMETHEUS_PATH on
// PROMETHEUS_ADDR, ":9090" and "/metrics" by default), or nil without
// Options.Prometheus: the statistics as statsd_exporter's mapping names
// them, as of the last flush, with the Go runtime's and the process'
// collectors, statsd_exporter's own counts (statsd_exporter_events_total,
// …) and the handler's (promhttp_metric_handler_requests_total), in
// Prometheus' text format (or what the scraper negotiates). Safe for
// concurrent use.
func (s *Sink) PrometheusHandler() http.Handler {
	if s.prom == nil {
		return nil
	}
	return s.prom.handler
}

// Handler returns upstream's debug endpoint GET /stats: as upstream,
// Go's expvar variables, "NAME: VALUE" a line (its memstats and cmdline),
// then every counter of this sink, "NAME: VALUE" a line in name order,
// VALUE its total since start (names without tags; the Go runtime's
// gauges are in memstats). Safe for concurrent use.
func (s *Sink) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		var b strings.Builder
		expvar.Do(func(kv expvar.KeyValue) { fmt.Fprintf(&b, "%s: %s\n", kv.Key, kv.Value) })
		s.mu.RLock()
		keys := make([]string, 0, len(s.made))
		for k := range s.made {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, "%s: %d\n", k, s.made[k].Value())
		}
		s.mu.RUnlock()
		_, _ = io.WriteString(w, b.String())
	})
}

// ipv4 is an IPv4 address in a statistic's name (upstream's pattern).
var ipv4 = regexp.MustCompile(`\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}`)

// Sanitize returns a statistic's name as upstream sends it: ':' and '|'
// (statsd's separators) made '_', and the dots of anything shaped as an
// IPv4 address ("10.0.0.1") too, so that statsd_exporter's mappings,
// which split on dots, see one part. Source: envoyproxy/ratelimit's
// src/utils/utilities.go, SanitizeStatName.
func Sanitize(name string) string {
	name = strings.NewReplacer(":", "_", "|", "_").Replace(name)
	return ipv4.ReplaceAllStringFunc(name, func(ip string) string { return strings.ReplaceAll(ip, ".", "_") })
}

// logger is gostats' Logger on slog.
type logger struct{ l *slog.Logger }

func (l logger) Errorf(msg string, args ...any) { l.l.Error("statsd: " + fmt.Sprintf(msg, args...)) }
func (l logger) Warnf(msg string, args ...any)  { l.l.Warn("statsd: " + fmt.Sprintf(msg, args...)) }

// dogSink is a gostats.Sink on DataDog's client: a name's gostats tags
// (".__KEY=VALUE" suffixes) become DogStatsD tags ("KEY:VALUE"), as
// upstream's DogStatsD sink makes them.
type dogSink struct {
	client *statsd.Client
	names  sync.Map // serialized name → *dogName
}

// dogName is a serialized name split.
type dogName struct {
	name string
	tags []string
}

func (d *dogSink) split(serialized string) *dogName {
	if n, ok := d.names.Load(serialized); ok {
		return n.(*dogName)
	}
	name, rest, _ := strings.Cut(serialized, ".__")
	n := &dogName{name: name}
	for rest != "" {
		var tag string
		tag, rest, _ = strings.Cut(rest, ".__")
		if k, v, ok := strings.Cut(tag, "="); ok {
			n.tags = append(n.tags, k+":"+v)
		}
	}
	got, _ := d.names.LoadOrStore(serialized, n)
	return got.(*dogName)
}

func (d *dogSink) FlushCounter(name string, value uint64) {
	n := d.split(name)
	_ = d.client.Count(n.name, int64(value), n.tags, 1)
}

func (d *dogSink) FlushGauge(name string, value uint64) {
	n := d.split(name)
	_ = d.client.Gauge(n.name, float64(value), n.tags, 1)
}

func (d *dogSink) FlushTimer(name string, milliseconds float64) {
	n := d.split(name)
	_ = d.client.Timing(n.name, time.Duration(milliseconds*float64(time.Millisecond)), n.tags, 1)
}

func (d *dogSink) Flush() { _ = d.client.Flush() }
