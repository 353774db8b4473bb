// Package limitsyaml reads the YAML configuration formats of server-side
// limits into the engine's configuration, a *limits.Config:
//
//   - Sluice's own limits section, the `limits:` key of the file
//     `sluice server --config` reads (ParseSection for a document holding
//     the section's fields, DecodeSection for the node under `limits:`):
//     token buckets with durations as Go strings and fractional fill
//     rates, Charon's burst tiers, namespaces;
//   - Square's quota service configuration file as it is
//     (ParseQuotaService): token buckets only, durations in milliseconds.
//
// Every reading is strict: an unknown field, a value of the wrong type, a
// duplicate key or an invalid name is an error. Every problem is reported,
// joined, each a *limits.ConfigError (wrapping limits.ErrInvalidConfig)
// naming the field by its path in the file's own terms and its line:
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
// not normalized (limits.Config.Normalize).
//
// testdata/limits.yaml and testdata/quotaservice.yaml express the
// quota service design's naming examples and the keyed limiter's
// rate_limit example in each format; testdata/charon.yaml holds Charon's
// cookbook resources.
//
// The functions are safe for concurrent use: they share no state.
//
// Source: quotaservice-wire.md, "Configuration"; quotaservice-design.md,
// "Configuration"; charon-paper.md, sections 2.1 and 4.
package limitsyaml
