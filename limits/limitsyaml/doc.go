// Package limitsyaml reads the YAML configuration formats of server-side
// limits into the engine's configuration, a *limits.Config, and writes
// Sluice's own back:
//
//   - Sluice's limits section, the `limits:` key of the file `sluice
//     server --config` reads: DecodeSection reads the node under
//     `limits:`, ParseSection a document holding the section's fields;
//     MarshalSection, ResourceNode and BucketNode write a configuration,
//     a resource and a bucket in it (the admin API's edits);
//   - Square's quota service configuration file as it is:
//     ParseQuotaService (token buckets only, durations in milliseconds).
//
// Every reading is strict and reports every problem, joined, each a
// *limits.ConfigError (wrapping limits.ErrInvalidConfig) naming the field
// by its path in the file's own terms and, for a problem of reading, its
// line:
//
//	limits.resources.api.domains.rate_limit.fill_rate: 0 must be > 0 (tokens per second)
//	namespaces.Pinky_TheBrain.buckets.UserService.fill_rate: want an integer (tokens per second), got str "fast" (line 7)
//
// The formats are read by walking yaml.Node trees rather than by yaml's
// struct decoding, so that absent fields are told apart from zeros and
// every error names its field; aliases and merge keys (<<) are followed
// within a budget of nodes, so that an alias bomb is an error, not an
// explosion. What a reading returns has passed limits.Config.ValidateIn,
// the engine's own checks, with the format's names for the fields; it is
// not normalized (limits.Config.Normalize, which the engine applies to
// its own copy, says what it would change). The functions share no state
// and are safe for concurrent use.
//
// # Sluice's limits section
//
// The section sits under the key `limits:` of Sluice's configuration
// file, beside Doorman's `resources:`:
//
//	limits:
//	  global_default: {size: 100, fill_rate: 50}      # optional
//	  resources:
//	    TheBrain_userLogins:
//	      template: {size: 1, fill_rate: 1, wait_timeout: 0s}
//	      max_dynamic_buckets: 100000                  # 0 or absent: unlimited
//	      on_store_error: open                         # Redis down: grant, flagged degraded (default closed)
//	    api:
//	      domains:
//	        rate_limit: {size: 10, fill_rate: 1, max_idle: 10m}
//	        rate_limit/192.168.11.3: {size: 500, fill_rate: 100}
//	    Pinky_TheBrain:
//	      default: {size: 1000, fill_rate: 500}        # shared by unlisted domains
//	      domains:
//	        UserService: {size: 200, fill_rate: 100}
//
// A resource has any of domains (domain-specific buckets, each also the
// configuration of the domains below it: with rate_limit configured,
// rate_limit/10.0.0.1 is a bucket of its own with rate_limit's
// configuration), template (a bucket per other domain) with
// max_dynamic_buckets, default (one bucket shared by the other domains;
// not with template), and algorithm (token_bucket, the default, or
// burst_tiers: see below). A bucket's fields, every one optional:
//
//	size                    tokens, ≥ 1                      default 100
//	fill_rate               tokens per second, > 0, may be   default 50
//	                        fractional (0.5: one per 2 s)
//	wait_timeout            Go duration ("1s", "250ms", "0s") default 1s
//	max_idle                Go duration > 0, or "never"      default never
//	max_debt                Go duration                      default 10s
//	max_tokens_per_request  tokens, ≥ 1                      default fill_rate, rounded up
//	budgets                 a list of budgets (below)        default none
//
// A budget (limits.Budget) is a limit per window every grant of the
// bucket must also fit, counted per bucket (per domain for a template):
//
//	budgets:
//	  - {limit: 100000, unit: month, calendar: UTC}
//	  - {limit: 20000, unit: day, calendar: Europe/Paris}
//	  - {limit: 60, unit: minute, algorithm: token_bucket, burst: 5}
//
// Its fields: limit (tokens per window, 1 to 2³² − 1; required), unit
// (second, minute, hour, day, week, month or year, any case; required),
// unit_multiplier (a window of N units, aligned to the Unix epoch;
// default 1), calendar (UTC or an IANA zone name: windows of a day, an
// ISO week, a month or a year from that zone's midnight; not with
// unit_multiplier), algorithm (fixed_window, the default, or
// token_bucket, not with a calendar) and burst (a token_bucket's depth;
// default the limit). An empty list is none. The quota service's format
// has no budgets (MarshalQuotaService refuses a configuration with
// some).
//
// Charon's rate-limited resources (charon-paper.md, section 2.1) have
// algorithm burst_tiers, and hard_limit (H: hits per second per domain),
// global_limit (G: hits per second across the resource's domains; each a
// count ≥ 1, or "none"; absent: unbounded), tiers (a list, tier 1 first;
// none or absent: every request rejected), max_dynamic_buckets (the most
// domains with a state), and domains, whose configurations replace the
// default one for their domain (and the domains below it): hard_limit
// (absent: the resource's; "none": unbounded) and tiers (absent: the
// resource's; [] : none, the domain is refused everything):
//
//	limits:
//	  namespaces:
//	    open/: {allow_unconfigured: true}   # unknown open/… resources: granted, recorded
//	    muted/: {ignore_configured: true}   # configured muted/… resources: granted, recorded
//	  resources:
//	    api/search:
//	      algorithm: burst_tiers
//	      hard_limit: 50
//	      global_limit: 1000
//	      tiers:
//	        - {limit: 100, window: 1m, active: 1h}
//	        - {limit: 300, window: 1m, active: 5m, cooldown: 1h, skippable: true}
//	      domains:
//	        acme: {hard_limit: none}        # acme keeps the tiers, without H
//	        blocked: {tiers: []}
//
// A tier's fields: limit (hits in a window, ≥ 1), window, active (Go
// durations; required), cooldown (default 0s), skippable (default false).
//
// Either kind of resource may say what its requests get while the store
// fails (a shared Redis, sluice server --redis, unreachable):
// on_store_error: closed (the default: a server error) or open (granted,
// flagged degraded, counted); see limits.OnStoreError. The global default
// bucket always fails closed. A namespace (a resource-name prefix; the
// longest matching one decides) has ignore_configured and
// allow_unconfigured, both default false (see limits.Namespace).
// Copy-limited resources (algorithm: copies) share the section; package
// config takes them out before DecodeSection reads the rest.
//
// Reading is strict at every level: unknown fields, values of the wrong
// type (a duration must be a string with a unit: 1000 is an error, not
// 1000 ns), duplicate keys and invalid names are errors, each naming its
// path under "limits".
//
// # Files
//
// testdata/limits.yaml and testdata/quotaservice.yaml express the
// quota service design's naming examples and the keyed limiter's
// rate_limit example in each format; testdata/charon.yaml holds Charon's
// cookbook resources.
//
// Source: quotaservice-design.md, "Configuration"; quotaservice-wire.md,
// "Configuration"; charon-paper.md, sections 2.1 and 4.3;
// ratelimiting-in-150-lines.md (the keyed limiter).
package limitsyaml
