package limitsyaml

import (
	"errors"
	"math"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-rl/sluice/limits"
)

// qsVocabulary names fields as the quota service's YAML does.
var qsVocabulary = limits.Vocabulary{
	Names: map[string]string{
		"global_default": "global_default_bucket", "resources": "namespaces", "domains": "buckets",
		"template": "dynamic_bucket_template", "default": "default_bucket",
		"wait_timeout": "wait_timeout_millis", "max_idle": "max_idle_millis", "max_debt": "max_debt_millis",
	},
	Millis: true,
}

var (
	qsServiceFields   = []string{"global_default_bucket", "namespaces", "version", "user", "date"}
	qsNamespaceFields = []string{"name", "default_bucket", "dynamic_bucket_template", "max_dynamic_buckets", "buckets"}
	qsBucketFields    = []string{"name", "namespace", "size", "fill_rate", "wait_timeout_millis", "max_idle_millis", "max_debt_millis", "max_tokens_per_request"}
)

// ParseQuotaService reads the quota service's configuration file as it
// is: a ServiceConfig (quotaservice-wire.md) in YAML, whose keys are the
// proto field names:
//
//	global_default_bucket: {size: 100, fill_rate: 50}   # optional
//	namespaces:
//	  Pinky_TheBrain:
//	    default_bucket: {}                 # a bucket with every default
//	    buckets:
//	      UserService: {size: 200, fill_rate: 100, wait_timeout_millis: 500}
//	  TheBrain_userLogins:
//	    max_dynamic_buckets: 100000        # 0 or absent: unlimited
//	    dynamic_bucket_template: {size: 1, fill_rate: 1}
//	version: 3                             # version, user, date: carried
//	user: alice
//	date: 1700000000
//
// A bucket's absent fields take the design's defaults (size 100, fill
// rate 50, wait timeout 1000 ms, max idle never, max debt 10 000 ms, max
// tokens per request = the fill rate), and so do the fields the quota
// service itself treats 0 as absent for: wait_timeout_millis,
// max_idle_millis, max_debt_millis, max_tokens_per_request (0 → the
// default; a max_idle_millis ≤ 0 is never). An explicit size or fill_rate
// of 0, which the quota service also turns into the default, is an error
// here: a bucket that never fills is a mistake, not a request for 50
// tokens per second. A bucket's name and namespace fields are accepted
// and ignored (the quota service overwrites them with the map keys), as is
// a namespace's name. A namespace with both default_bucket and
// dynamic_bucket_template is an error (the quota service refuses it too).
//
// Decoding is strict: an unknown field, a value of the wrong type, a
// duplicate key or a name outside limits.NameChars is an error. Every
// problem is reported, joined, each a *limits.ConfigError naming its
// field's path, for example
//
//	namespaces.Pinky_TheBrain.buckets.UserService.fill_rate: want an integer (tokens per second), got str "fast" (line 7)
//
// An empty document is a valid configuration with nothing configured.
//
// Source: quotaservice-wire.md, "Configuration"; quotaservice-design.md,
// "Configuration".
func ParseQuotaService(data []byte) (*limits.Config, error) {
	root, err := parseDocument(data)
	if err != nil {
		return nil, err
	}
	cfg := &limits.Config{}
	if root == nil {
		return cfg, nil
	}
	w := newWalker(root)
	if r := w.deref(root); r != nil && !isNull(r) && r.Kind != yaml.MappingNode {
		w.bad("(document)", r, "want a mapping with %v, got %s", qsServiceFields, kindName(r))
		return nil, w.err()
	}
	pairs, _ := w.mapping(root, "", qsServiceFields)
	for _, p := range pairs {
		switch p.key {
		case "global_default_bucket":
			cfg.GlobalDefault = w.qsBucket(p.value, p.key)
		case "namespaces":
			cfg.Resources = mapOf(w, p.value, p.key, w.qsNamespace)
		case "version":
			if v := w.int64(p.value, p.key, "an int32"); v != nil {
				if *v < math.MinInt32 || *v > math.MaxInt32 {
					w.bad(p.key, p.value, "%d is out of the int32 range", *v)
				} else {
					cfg.Version = int32(*v)
				}
			}
		case "user":
			if v := w.str(p.value, p.key); v != nil {
				cfg.User = *v
			}
		case "date":
			if v := w.int64(p.value, p.key, "an int64"); v != nil {
				cfg.Date = *v
			}
		}
	}
	// Fields that did not read are absent (defaults), so the range checks
	// add only problems of their own: report both.
	if err := errors.Join(w.err(), cfg.ValidateIn(qsVocabulary)); err != nil {
		return nil, err
	}
	return cfg, nil
}

// qsNamespace reads a NamespaceConfig. A null namespace is an empty one.
func (w *walker) qsNamespace(n *yaml.Node, path string) *limits.Resource {
	r := &limits.Resource{}
	pairs, _ := w.mapping(n, path, qsNamespaceFields)
	for _, p := range pairs {
		fp := join(path, p.key)
		switch p.key {
		case "name":
			w.str(p.value, fp) // ignored: the map key names the namespace
		case "default_bucket":
			r.Default = w.qsBucket(p.value, fp)
		case "dynamic_bucket_template":
			r.Template = w.qsBucket(p.value, fp)
		case "max_dynamic_buckets":
			if v := w.int64(p.value, fp, "an int32 count; 0: unlimited"); v != nil {
				if *v > math.MaxInt32 || *v < math.MinInt32 {
					w.bad(fp, p.value, "%d is out of the int32 range", *v)
				} else {
					r.MaxDynamicBuckets = *v
				}
			}
		case "buckets":
			r.Buckets = mapOf(w, p.value, fp, func(n *yaml.Node, bp string) limits.Bucket {
				if v := w.qsBucket(n, bp); v != nil {
					return *v
				}
				return w.qsDefaults(&qsRaw{}, bp)
			})
		}
	}
	return r
}

// qsRaw is a BucketConfig as read, absent fields nil.
type qsRaw struct {
	size, fillRate, wait, idle, debt, perRequest *int64
}

// qsBucket reads a BucketConfig; nil when null (absent).
func (w *walker) qsBucket(n *yaml.Node, path string) *limits.Bucket {
	pairs, ok := w.mapping(n, path, qsBucketFields)
	if !ok {
		return nil
	}
	var raw qsRaw
	for _, p := range pairs {
		fp := join(path, p.key)
		switch p.key {
		case "name", "namespace":
			w.str(p.value, fp) // ignored: the map keys name the bucket
		case "size":
			raw.size = w.int64(p.value, fp, "tokens")
		case "fill_rate":
			raw.fillRate = w.int64(p.value, fp, "tokens per second")
		case "wait_timeout_millis":
			raw.wait = w.int64(p.value, fp, "milliseconds")
		case "max_idle_millis":
			raw.idle = w.int64(p.value, fp, "milliseconds; -1: never")
		case "max_debt_millis":
			raw.debt = w.int64(p.value, fp, "milliseconds")
		case "max_tokens_per_request":
			raw.perRequest = w.int64(p.value, fp, "tokens")
		}
	}
	b := w.qsDefaults(&raw, path)
	return &b
}

// qsDefaults applies the quota service's defaults to raw.
func (w *walker) qsDefaults(raw *qsRaw, path string) limits.Bucket {
	b := limits.DefaultBucket()
	if raw.size != nil {
		b.Size = *raw.size
	}
	if raw.fillRate != nil {
		b.FillRate = float64(*raw.fillRate)
	}
	ms := func(v *int64, field string, def time.Duration) time.Duration {
		if v == nil || *v == 0 {
			return def
		}
		return w.millis(*v, join(path, field))
	}
	b.WaitTimeout = ms(raw.wait, "wait_timeout_millis", limits.DefaultWaitTimeout)
	b.MaxDebt = ms(raw.debt, "max_debt_millis", limits.DefaultMaxDebt)
	b.MaxIdle = limits.DefaultMaxIdle
	if raw.idle != nil && *raw.idle > 0 {
		b.MaxIdle = w.millis(*raw.idle, join(path, "max_idle_millis"))
	}
	b.MaxTokensPerRequest = roundUpTokens(b.FillRate)
	if raw.perRequest != nil && *raw.perRequest != 0 {
		b.MaxTokensPerRequest = *raw.perRequest
	}
	return b
}
