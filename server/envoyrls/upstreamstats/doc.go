// Package upstreamstats emits the statistics of Sluice's Envoy rate limit
// service (server/envoyrls) over statsd under envoyproxy/ratelimit's own
// names, byte for byte, through envoyproxy/ratelimit's own statsd library
// (github.com/lyft/gostats), or on Prometheus as upstream's USE_PROMETHEUS
// names them, so that what reads upstream's statistics — Envoy Gateway's
// statsd_exporter and its mapping, DogStatsD agents, Prometheus,
// dashboards — reads Sluice's unchanged. A *Sink is an envoyrls.StatsSink
// (envoyrls.Options.Stats).
//
// The names, for a domain DOMAIN and a rule's key KEY (the rule's keys
// and values, key_value.key, as envoyrls.DescriptorStats.Key; ':' and '|'
// and the dots of an IPv4 address made '_'):
//
//	ratelimit.service.rate_limit.DOMAIN.KEY.total_hits          counter
//	ratelimit.service.rate_limit.DOMAIN.KEY.within_limit        counter
//	ratelimit.service.rate_limit.DOMAIN.KEY.near_limit          counter
//	ratelimit.service.rate_limit.DOMAIN.KEY.over_limit          counter
//	ratelimit.service.rate_limit.DOMAIN.KEY.shadow_mode         counter
//	ratelimit.service.rate_limit.DOMAIN.KEY.total_negative_hits counter
//	ratelimit.service.rate_limit.DOMAIN.domain_not_found        counter
//	ratelimit.service.config_load_success                       counter
//	ratelimit.service.config_load_error                         counter
//	ratelimit.service.global_shadow_mode                        counter
//	ratelimit.service.call.should_rate_limit.redis_error        counter
//	ratelimit.service.call.should_rate_limit.service_error      counter
//	ratelimit_server.ShouldRateLimit.total_requests             counter
//	ratelimit_server.ShouldRateLimit.response_time              timer (ms)
//	ratelimit.go.*                                              gostats' Go runtime gauges and counters
//
// (over_limit_with_local_cache is made too, and stays 0: Sluice has no
// local cache.) Counters are sent as deltas every FlushInterval, only
// when they changed; a timer at once, per request. Options.ExtraTags
// (upstream's EXTRA_TAGS) are gostats tags: in plain statsd, suffixes of
// the name (".__KEY=VALUE", keys in order); with DogStatsd, DogStatsD tags
// ("|#KEY:VALUE").
//
// A server wires it so (upstream's environment in brackets):
//
//	sink, err := upstreamstats.New(upstreamstats.Options{ // USE_STATSD: make one
//		Address:       "statsd:9125",               // STATSD_HOST, STATSD_PORT
//		Protocol:      "udp",                       // STATSD_PROTOCOL (gostats': tcp)
//		FlushInterval: 10 * time.Second,            // STATS_FLUSH_INTERVAL
//		ExtraTags:     map[string]string{"k": "v"}, // EXTRA_TAGS "k:v"
//		DogStatsd:     false,                       // USE_DOG_STATSD
//	})
//	defer sink.Close()
//	svc, err := envoyrls.New(envoyrls.Options{Store: store, Stats: sink})
//	debug.Handle("/stats", sink.Handler()) // DEBUG_PORT's /stats
//	// At every load of the rules, the first and every reload:
//	rules, err := load()
//	sink.ConfigLoad(err) // config_load_success, or config_load_error
//	if err == nil {
//		svc.SetConfig(rules)
//	}
//
// With Options.Prometheus (upstream's USE_PROMETHEUS, which takes the
// place of statsd: upstream refuses both), every flush hands the same
// statistics to statsd_exporter's exporter (github.com/prometheus/statsd_exporter,
// the library upstream uses), which names them by upstream's default
// mapping, or by the statsd_exporter mapping file Options.PrometheusMapper
// names (PROMETHEUS_MAPPER_YAML); Sink.PrometheusHandler serves them, for
// the caller to listen with (upstream: PROMETHEUS_PATH, "/metrics", on
// PROMETHEUS_ADDR, ":9090"). Upstream's default mapping makes, of a rule
// of one key and of a nested rule (its deeper keys are no labels):
//
//	ratelimit_service_rate_limit_total_hits{domain="DOMAIN",key1="KEY"}              counter
//	ratelimit_service_rate_limit_over_limit{domain="DOMAIN",key1="KEY1",key2="KEY2"} counter
//	(and near_limit, within_limit, shadow_mode)
//	ratelimit_service_should_rate_limit_error{err_type="redis_error"}                counter
//	ratelimit_service_total_requests{grpc_method="ShouldRateLimit"}                  counter
//	ratelimit_service_response_time_seconds{grpc_method="ShouldRateLimit"}           histogram (of milliseconds, as upstream's)
//	ratelimit_service_config_load_success, ratelimit_service_config_load_error      counters
//
// What no rule matches keeps statsd_exporter's escaped name
// (ratelimit_service_rate_limit_DOMAIN_domain_not_found,
// ratelimit_go_numGoroutine); so does everything with ExtraTags, whose
// name suffixes no rule of upstream's matches, as upstream.
//
// Older upstream images flushed every GOSTATS_FLUSH_INTERVAL_SECONDS
// (gostats' default store, 5 s); current ones every STATS_FLUSH_INTERVAL.
//
// Source: envoyproxy/ratelimit's src/stats/manager_impl.go (the names),
// src/limiter/base_limiter.go and src/service/ratelimit.go (when each
// counter moves, and by how much), src/metrics/metrics.go (the server's),
// src/utils/utilities.go (SanitizeStatName), src/godogstats (DogStatsD),
// src/service_cmd/runner/runner.go and src/settings/settings.go (the
// settings), src/stats/prom (USE_PROMETHEUS: prometheus_sink.go,
// default_mapper.yaml); Envoy Gateway's statsd_exporter mapping
// (internal/infrastructure/kubernetes/ratelimit/statsd_conf.yaml).
package upstreamstats
