package quotaapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-rl/sluice/admin"
	"github.com/sluice-rl/sluice/admin/adminhttp"
	"github.com/sluice-rl/sluice/admin/internal/yamlnode"
	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/limits/limitsyaml"
	"github.com/sluice-rl/sluice/resources"
)

// Prefix is the path under which Handler serves: mount it
// at both "/api" and "/api/".
const Prefix = "/api"

// The quota service's special names (quotaservice-wire.md, "Admin REST
// API").
const (
	// GlobalNamespace names the whole configuration in /api/{namespace}
	// (GET and POST: as /api), and, as the namespace of
	// /api/{namespace}/{bucket}, the global default bucket (whatever the
	// bucket name): Sluice's limits.global_default.
	GlobalNamespace = "___GLOBAL___"
	// DefaultBucket names a namespace's default bucket: Sluice's
	// limits.resources.NAMESPACE.default.
	DefaultBucket = "___DEFAULT_BUCKET___"
	// DynamicBucketTemplate names a namespace's dynamic bucket
	// template: Sluice's limits.resources.NAMESPACE.template.
	DynamicBucketTemplate = "___DYNAMIC_BUCKET_TPL___"
	// DefaultUser is the user recorded for a change that names none:
	// an --admin-insecure loopback request without X-Forwarded-User.
	DefaultUser = "quotaservice"
	// VersionHeader carries the configuration's version: in a request,
	// the version the change was made against (another one current: 409);
	// in every answer, the current version (after a change, the version
	// it made).
	VersionHeader = "Version"
)

// BucketConfig is the quota service's BucketConfig as its admin API
// writes it (quotaservice-wire.md, "Configuration"): a Sluice token
// bucket with every default applied. Durations are whole milliseconds
// (rounded up); MaxIdleMillis is -1 for never. FillRate is tokens per
// second: a whole number for every bucket the quota service's format can
// describe, a fraction for a Sluice bucket that fills slower or between
// whole tokens (which this API cannot write back: its bodies take whole
// numbers). A Sluice bucket with no wait or no debt shows 0, which a body
// cannot ask for (the quota service reads 0 as the default).
type BucketConfig struct {
	Name                string  `json:"name,omitempty"`
	Namespace           string  `json:"namespace,omitempty"`
	Size                int64   `json:"size"`
	FillRate            float64 `json:"fill_rate"`
	WaitTimeoutMillis   int64   `json:"wait_timeout_millis"`
	MaxIdleMillis       int64   `json:"max_idle_millis"`
	MaxDebtMillis       int64   `json:"max_debt_millis"`
	MaxTokensPerRequest int64   `json:"max_tokens_per_request"`
}

// NamespaceConfig is the quota service's NamespaceConfig: a Sluice
// token-bucket resource of the limits section. MaxDynamicBuckets 0 is
// unlimited.
type NamespaceConfig struct {
	Name                  string                   `json:"name,omitempty"`
	DefaultBucket         *BucketConfig            `json:"default_bucket,omitempty"`
	DynamicBucketTemplate *BucketConfig            `json:"dynamic_bucket_template,omitempty"`
	MaxDynamicBuckets     int64                    `json:"max_dynamic_buckets,omitempty"`
	Buckets               map[string]*BucketConfig `json:"buckets,omitempty"`
}

// ServiceConfig is the quota service's ServiceConfig: the limits
// section's global default bucket and token-bucket resources. Version is
// the admin Store's version; User and Date (Unix seconds) are those of
// the change that made it. Burst-tier and copy-limited resources,
// namespace prefixes and Doorman templates have no place in it: GET
// leaves them out, and writes keep them as they are.
type ServiceConfig struct {
	GlobalDefaultBucket *BucketConfig               `json:"global_default_bucket,omitempty"`
	Namespaces          map[string]*NamespaceConfig `json:"namespaces,omitempty"`
	Version             int64                       `json:"version,omitempty"`
	User                string                      `json:"user,omitempty"`
	Date                int64                       `json:"date,omitempty"`
}

// ConfigAndHash is one configuration of GET /api/configs: a kept
// version, and Hash, the hex SHA-256 of its document (admin.Audit.Hash).
type ConfigAndHash struct {
	ServiceConfig
	Hash string `json:"hash,omitempty"`
}

// Configs is the answer of GET /api/configs: the kept versions that
// load, newest first.
type Configs struct {
	Configs []ConfigAndHash `json:"configs"`
}

// Error is the quota service's error object: Error is the HTTP
// status's text ("Conflict"), Description what went wrong (for an
// invalid change, every error, each naming its field, joined by "; ").
type Error struct {
	Error       string `json:"error"`
	Description string `json:"description"`
}

// BucketScore is one bucket of a top list of /api/stats/{namespace}:
// Bucket is its domain (DefaultBucket for the namespace's default
// bucket), Score its count.
type BucketScore struct {
	Bucket string `json:"bucket"`
	Score  int64  `json:"value"`
}

// BucketScores are one bucket's counts (/api/stats/{namespace}/{bucket}):
// Hits its granted requests, Misses its rejected ones (not enough tokens
// within the wait).
type BucketScores struct {
	Hits   int64 `json:"hits"`
	Misses int64 `json:"misses"`
}

// Stats is the answer of GET /api/stats/{namespace}: the buckets with
// the most granted requests (TopHits) and the most rejected ones
// (TopMisses), at most TopBuckets of each, most first.
type Stats struct {
	Namespace string        `json:"namespace"`
	TopHits   []BucketScore `json:"topHits"`
	TopMisses []BucketScore `json:"topMisses"`
}

// TopBuckets is how many buckets each top list of /api/stats holds.
const TopBuckets = 10

// StatsSource reports the counts of /api/stats. Implementations are safe
// for concurrent use; EngineStats is the one over a server's limits
// engine.
type StatsSource interface {
	// Top returns at most n buckets of resource ns with a count above 0,
	// most first (ties by domain): by granted requests, or with misses by
	// rejected ones. ctx is the request's: it bounds the walk of the
	// buckets (on Redis, its round trips).
	Top(ctx context.Context, ns string, n int, misses bool) ([]BucketScore, error)
	// Scores returns the counts of bucket (a domain; DefaultBucket for
	// the resource's default bucket) of resource ns; ok is false when the
	// bucket has no state. ctx is as for Top.
	Scores(ctx context.Context, ns, bucket string) (s BucketScores, ok bool, err error)
}

// EngineStats returns the StatsSource of a limits engine (the counts of
// its buckets' states, limits.BucketInfo Grants and Rejections), read at
// now().
func EngineStats(e *limits.Engine, now func() time.Time) StatsSource {
	return engineStats{e: e, now: now}
}

type engineStats struct {
	e   *limits.Engine
	now func() time.Time
}

func bucketName(domain string) string {
	if domain == "" {
		return DefaultBucket
	}
	return domain
}

func (s engineStats) Top(ctx context.Context, ns string, n int, misses bool) ([]BucketScore, error) {
	count := func(b *limits.BucketInfo) uint64 {
		if misses {
			return b.Rejections
		}
		return b.Grants
	}
	page, err := s.e.Query(ctx, s.now(), limits.Query{
		Filter: func(b *limits.BucketInfo) bool {
			return b.Resource == ns && b.Algorithm == limits.TokenBucket && count(b) > 0
		},
		Less:  func(a, b *limits.BucketInfo) bool { return count(a) > count(b) },
		Limit: n,
	})
	if err != nil {
		return nil, err
	}
	out := make([]BucketScore, 0, len(page.Buckets))
	for i := range page.Buckets {
		b := &page.Buckets[i]
		out = append(out, BucketScore{Bucket: bucketName(b.Domain), Score: int64(min(count(b), math.MaxInt64))})
	}
	return out, nil
}

func (s engineStats) Scores(ctx context.Context, ns, bucket string) (BucketScores, bool, error) {
	domain := bucket
	if bucket == DefaultBucket {
		domain = ""
	}
	page, err := s.e.Query(ctx, s.now(), limits.Query{
		Filter: func(b *limits.BucketInfo) bool { return b.Resource == ns && b.Domain == domain },
		Limit:  1,
	})
	if err != nil || len(page.Buckets) == 0 {
		return BucketScores{}, false, err
	}
	b := page.Buckets[0]
	return BucketScores{Hits: int64(min(b.Grants, math.MaxInt64)), Misses: int64(min(b.Rejections, math.MaxInt64))}, true, nil
}

// Handler serves the quota service's admin REST API
// (quotaservice-wire.md, "Admin REST API") over svc's document, so that
// quotaservice-cli and the quota service's admin UI work against Sluice.
// Mount it at Prefix and Prefix+"/". A namespace is a token-bucket
// resource of the limits section, a bucket one of its domains:
//
//	GET    /api                        the whole ServiceConfig (also /api/___GLOBAL___)
//	POST   /api                        replace the global default and every token-bucket resource with the
//	                                   body's (a ServiceConfig); other resources, namespace prefixes and
//	                                   templates are kept
//	GET    /api/{namespace}            that NamespaceConfig (404 if absent)
//	POST   /api/{namespace}            add it (body: a NamespaceConfig; 409 if it exists)
//	PUT    /api/{namespace}            update it (or add it), keeping its on_store_error
//	DELETE /api/{namespace}            delete it
//	GET    /api/{namespace}/{bucket}   that BucketConfig
//	POST   /api/{namespace}/{bucket}   add it (body: a BucketConfig, missing fields the defaults; 409 if it exists)
//	PUT    /api/{namespace}/{bucket}   update it (or add it to an existing namespace)
//	DELETE /api/{namespace}/{bucket}   delete it
//	GET    /api/configs                the kept versions (Configs), newest first
//	GET    /api/stats/{namespace}      the namespace's hottest and most rejected buckets (Stats)
//	GET    /api/stats/{namespace}/{b}  one bucket's counts (BucketScores)
//
// {bucket} may be DefaultBucket or DynamicBucketTemplate, and with
// the namespace GlobalNamespace names the global default bucket. A
// namespace holding '/' is path-escaped (api%2Fsearch); a bucket is the
// rest of the path (/api/api/rate_limit/10.0.0.1). Namespaces named
// configs and stats are reachable only through /admin/v1, as in the quota
// service.
//
// Bodies are JSON objects whose keys are the proto field names, decoded
// strictly (admin.DecodeBody as JSON, then limitsyaml.ParseQuotaService's reading and
// defaults: an unknown field, a wrong type, a duplicate key is refused,
// naming the field); an empty body is {} (every default), but POST /api
// refuses one. A body's name (and a bucket's namespace), when given, must
// be the path's. Changes are validated by resources.Parse as every change
// of the admin.Service is, and recorded in its history and audit log with the
// user: Sluice's authentication (auth: tokens, client certificates,
// X-Forwarded-User from trusted proxies, --admin-insecure loopback, whose
// user is X-Forwarded-User's, else DefaultUser). A request with a
// Version header is refused with 409 when another version is current;
// without one it applies to the current version. Every answer carries
// the current version in its Version header.
//
// A change answers {} (200); an error the HTTP status and an Error:
// 400 invalid body or change, 401/403 authentication, 404 no such
// namespace or bucket, 405 method, 409 stale version or existing object,
// 413 body too large, 500 otherwise. svc nil answers 404 to everything
// (with o.Disabled's reason).
func Handler(svc *admin.Service, auth *adminhttp.Auth, o Options) http.Handler {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Disabled == "" {
		o.Disabled = auth.NothingToEdit()
	}
	return &handler{svc: svc, auth: auth, stats: o.Stats, log: o.Logger, disabled: o.Disabled}
}

// Options configures Handler.
type Options struct {
	// Stats answers /api/stats; nil: empty top lists and zero counts.
	Stats StatsSource
	// Logger receives the refused requests and the failures; nil:
	// slog.Default().
	Logger *slog.Logger
	// Disabled is, when the Service is nil, why there is nothing to edit
	// (the 404's description); "": auth.NothingToEdit().
	Disabled string
}

type handler struct {
	svc      *admin.Service
	auth     *adminhttp.Auth
	stats    StatsSource
	log      *slog.Logger
	disabled string
}

// qsStatus is an error with the HTTP status it answers.
type statusError struct {
	status int
	msg    string
}

func (e *statusError) Error() string { return e.msg }

func errorf(status int, format string, args ...any) error {
	return &statusError{status: status, msg: fmt.Sprintf(format, args...)}
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rest, ok := strings.CutPrefix(r.URL.EscapedPath(), Prefix)
	if !ok || rest != "" && rest[0] != '/' {
		h.fail(w, errorf(http.StatusNotFound, "%s: not under %s", r.URL.Path, Prefix))
		return
	}
	if h.svc == nil {
		h.fail(w, errorf(http.StatusNotFound, "%s", h.disabled))
		return
	}
	var seg []string
	if rest = strings.Trim(rest, "/"); rest != "" {
		for i, s := range strings.Split(rest, "/") {
			u, err := url.PathUnescape(s)
			if err != nil {
				h.fail(w, errorf(http.StatusBadRequest, "path segment %d: %v", i+1, err))
				return
			}
			seg = append(seg, u)
		}
	}
	write := r.Method != http.MethodGet && r.Method != http.MethodHead
	id, err := h.auth.Identify(r, write)
	if err != nil {
		var ae *adminhttp.AuthError
		if errors.As(err, &ae) {
			h.log.Warn("admin: quotaservice API request refused", "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr, "status", ae.Status, "why", ae.Msg)
			if ae.Status == http.StatusUnauthorized {
				w.Header().Set("WWW-Authenticate", `Bearer realm="sluice admin"`)
			}
			h.fail(w, errorf(ae.Status, "%s", ae.Msg))
			return
		}
		h.fail(w, err)
		return
	}
	if id.Method == "insecure" && r.Header.Get("X-Forwarded-User") == "" {
		id.User = DefaultUser
	}
	ctx := r.Context()
	switch {
	case len(seg) == 0 || len(seg) == 1 && seg[0] == GlobalNamespace:
		switch r.Method {
		case http.MethodGet, http.MethodHead:
			h.getAll(ctx, w)
		case http.MethodPost:
			h.replace(w, r, id)
		default:
			h.methodNotAllowed(w, r, "GET, POST")
		}
	case seg[0] == "configs":
		if len(seg) > 1 {
			h.fail(w, errorf(http.StatusNotFound, "%s: no such path", r.URL.Path))
			return
		}
		if !write {
			h.configs(ctx, w)
			return
		}
		h.methodNotAllowed(w, r, "GET")
	case seg[0] == "stats":
		if write {
			h.methodNotAllowed(w, r, "GET")
			return
		}
		h.statsOf(ctx, w, seg[1:])
	case len(seg) == 1:
		h.namespace(w, r, id, seg[0])
	default:
		h.bucket(w, r, id, seg[0], strings.Join(seg[1:], "/"))
	}
}

// loaded is the current document, read and loaded.
type loaded struct {
	snap admin.Snapshot
	doc  *admin.Document
	repo *resources.Repository
}

func (h *handler) load(ctx context.Context) (loaded, error) {
	snap, err := h.svc.Store().Read(ctx)
	if err != nil {
		return loaded{}, err
	}
	repo, err := resources.Parse(snap.Document)
	if err != nil {
		return loaded{snap: snap}, fmt.Errorf("the stored configuration (version %d) does not load; replace it through /admin/v1/config: %w", snap.Version, err)
	}
	d, err := admin.ParseDocument(snap.Document)
	if err != nil {
		return loaded{snap: snap}, err
	}
	return loaded{snap: snap, doc: d, repo: repo}, nil
}

// existingNamespace is tokenBucket with an absent namespace an error
// (404 "unable to locate namespace", as the quota service answers).
func (l loaded) existingNamespace(ns string, status int) (*limits.Resource, error) {
	r, err := l.tokenBucket(ns, status)
	if err == nil && r == nil {
		err = errorf(http.StatusNotFound, "unable to locate namespace %s", ns)
	}
	return r, err
}

// tokenBucket returns resource ns of l if it is a token-bucket resource;
// nil if there is no resource ns; an error answering status when ns is a
// resource of another kind (404 to a read, 409 to a write).
func (l loaded) tokenBucket(ns string, status int) (*limits.Resource, error) {
	if cc := l.repo.Copies(); cc != nil {
		if _, ok := cc.Resources[ns]; ok {
			return nil, errorf(status, "limits.resources.%s is a copy-limited resource (algorithm: copies), not a quota service namespace; see /admin/v1/limits/resources/%s", ns, url.PathEscape(ns))
		}
	}
	lc := l.repo.Limits()
	if lc == nil {
		return nil, nil
	}
	r := lc.Resources[ns]
	if r != nil && r.Algorithm != limits.TokenBucket {
		return nil, errorf(status, "limits.resources.%s is a %s resource, not a quota service namespace; see /admin/v1/limits/resources/%s", ns, r.Algorithm, url.PathEscape(ns))
	}
	return r, nil
}

func (h *handler) getAll(ctx context.Context, w http.ResponseWriter) {
	l, err := h.load(ctx)
	if err != nil {
		h.failAt(w, l.snap.Version, err)
		return
	}
	sc := qsServiceConfig(l.repo.Limits())
	sc.Version = l.snap.Version
	if e, err := h.svc.Version(ctx, l.snap.Version); err == nil {
		sc.User = e.User
		if !e.Time.IsZero() {
			sc.Date = e.Time.Unix()
		}
	}
	h.answer(w, l.snap.Version, sc)
}

func (h *handler) configs(ctx context.Context, w http.ResponseWriter) {
	audits, err := h.svc.History(ctx)
	if err != nil {
		h.fail(w, err)
		return
	}
	out := Configs{Configs: []ConfigAndHash{}}
	for _, a := range audits {
		e, err := h.svc.Version(ctx, a.Version)
		if err != nil {
			continue // pruned meanwhile
		}
		repo, err := resources.Parse(e.Document)
		if err != nil {
			continue // a version that does not load was never applied
		}
		sc := qsServiceConfig(repo.Limits())
		sc.Version, sc.User = a.Version, a.User
		if !a.Time.IsZero() {
			sc.Date = a.Time.Unix()
		}
		out.Configs = append(out.Configs, ConfigAndHash{ServiceConfig: sc, Hash: a.Hash})
	}
	var v int64
	if len(audits) > 0 {
		v = audits[0].Version
	}
	h.answer(w, v, out)
}

func (h *handler) statsOf(ctx context.Context, w http.ResponseWriter, seg []string) {
	if len(seg) == 0 || seg[0] == "" {
		h.fail(w, errorf(http.StatusBadRequest, "no namespace specified: GET /api/stats/{namespace}"))
		return
	}
	ns := seg[0]
	l, err := h.load(ctx)
	if err != nil {
		h.failAt(w, l.snap.Version, err)
		return
	}
	_, err = l.existingNamespace(ns, http.StatusNotFound)
	if err != nil {
		h.failAt(w, l.snap.Version, err)
		return
	}
	if len(seg) > 1 {
		bucket := strings.Join(seg[1:], "/")
		var s BucketScores
		if h.stats != nil {
			if s, _, err = h.stats.Scores(ctx, ns, bucket); err != nil {
				h.failAt(w, l.snap.Version, err)
				return
			}
		}
		h.answer(w, l.snap.Version, s)
		return
	}
	out := Stats{Namespace: ns, TopHits: []BucketScore{}, TopMisses: []BucketScore{}}
	if h.stats != nil {
		if out.TopHits, err = h.stats.Top(ctx, ns, TopBuckets, false); err == nil {
			out.TopMisses, err = h.stats.Top(ctx, ns, TopBuckets, true)
		}
		if err != nil {
			h.failAt(w, l.snap.Version, err)
			return
		}
	}
	h.answer(w, l.snap.Version, out)
}

func (h *handler) namespace(w http.ResponseWriter, r *http.Request, id adminhttp.Identity, ns string) {
	ctx := r.Context()
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		l, err := h.load(ctx)
		if err != nil {
			h.failAt(w, l.snap.Version, err)
			return
		}
		res, err := l.existingNamespace(ns, http.StatusNotFound)
		if err != nil {
			h.failAt(w, l.snap.Version, err)
			return
		}
		h.answer(w, l.snap.Version, qsNamespace(ns, res))
	case http.MethodPost, http.MethodPut:
		body, ok := h.body(w, r)
		if !ok {
			return
		}
		res, err := decodeQSNamespace(body, ns)
		if err != nil {
			h.fail(w, err)
			return
		}
		create := r.Method == http.MethodPost
		h.write(w, r, func(l loaded) (admin.Change, error) {
			old, err := l.tokenBucket(ns, http.StatusConflict)
			if err != nil {
				return admin.Change{}, err
			}
			if create && old != nil {
				return admin.Change{}, fmt.Errorf("namespace %s: %w", ns, admin.ErrExists)
			}
			prev, _ := l.doc.Get(admin.Resource(ns))
			return putChange(create, admin.Resource(ns), resourceNode(res, prev)), nil
		}, id)
	case http.MethodDelete:
		h.write(w, r, func(l loaded) (admin.Change, error) {
			_, err := l.existingNamespace(ns, http.StatusConflict)
			return admin.Change{Op: admin.OpDelete, Object: admin.Resource(ns)}, err
		}, id)
	default:
		h.methodNotAllowed(w, r, "GET, POST, PUT, DELETE")
	}
}

// bucketObject returns the Object a quota service bucket path names.
func bucketObject(ns, bucket string) admin.Object {
	switch {
	case ns == GlobalNamespace:
		return admin.GlobalDefault()
	case bucket == DefaultBucket:
		return admin.Object{Kind: admin.KindDefault, Name: ns}
	case bucket == DynamicBucketTemplate:
		return admin.Object{Kind: admin.KindBucketTemplate, Name: ns}
	}
	return admin.Domain(ns, bucket)
}

// bucketOf returns the bucket o names in lc (nil when absent).
func bucketOf(lc *limits.Config, r *limits.Resource, o admin.Object) *limits.Bucket {
	switch o.Kind {
	case admin.KindGlobalDefault:
		if lc != nil {
			return lc.GlobalDefault
		}
	case admin.KindDefault:
		return r.Default
	case admin.KindBucketTemplate:
		return r.Template
	case admin.KindDomain:
		if b, ok := r.Buckets[o.Domain]; ok {
			return &b
		}
	}
	return nil
}

func (h *handler) bucket(w http.ResponseWriter, r *http.Request, id adminhttp.Identity, ns, bucket string) {
	ctx := r.Context()
	o := bucketObject(ns, bucket)
	// resolve checks that the namespace exists (but for the global
	// default) and returns it.
	resolve := func(l loaded, status int) (*limits.Resource, error) {
		if o.Kind == admin.KindGlobalDefault {
			return nil, nil
		}
		res, err := l.existingNamespace(ns, status)
		return res, err
	}
	notFound := func() error {
		if o.Kind == admin.KindGlobalDefault {
			return errorf(http.StatusNotFound, "no global default bucket")
		}
		return errorf(http.StatusNotFound, "unable to locate bucket %s in namespace %s", bucket, ns)
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		l, err := h.load(ctx)
		if err != nil {
			h.failAt(w, l.snap.Version, err)
			return
		}
		res, err := resolve(l, http.StatusNotFound)
		if err != nil {
			h.failAt(w, l.snap.Version, err)
			return
		}
		b := bucketOf(l.repo.Limits(), res, o)
		if b == nil {
			h.failAt(w, l.snap.Version, notFound())
			return
		}
		name, space := bucket, ns
		if o.Kind == admin.KindGlobalDefault {
			name, space = DefaultBucket, ""
		}
		h.answer(w, l.snap.Version, qsBucket(*b, name, space))
	case http.MethodPost, http.MethodPut:
		body, ok := h.body(w, r)
		if !ok {
			return
		}
		b, err := decodeQSBucket(body, ns, bucket)
		if err != nil {
			h.fail(w, err)
			return
		}
		create := r.Method == http.MethodPost
		h.write(w, r, func(l loaded) (admin.Change, error) {
			res, err := resolve(l, http.StatusConflict)
			if err != nil {
				return admin.Change{}, err
			}
			if create && bucketOf(l.repo.Limits(), res, o) != nil {
				if o.Kind == admin.KindGlobalDefault {
					return admin.Change{}, fmt.Errorf("the global default bucket: %w", admin.ErrExists)
				}
				return admin.Change{}, fmt.Errorf("bucket %s of namespace %s: %w", bucket, ns, admin.ErrExists)
			}
			nb := b
			if old := bucketOf(l.repo.Limits(), res, o); old != nil {
				nb.Budgets = old.Budgets // (Square's format has none: an update keeps Sluice's)
			}
			return putChange(create, o, limitsyaml.BucketNode(nb)), nil
		}, id)
	case http.MethodDelete:
		h.write(w, r, func(l loaded) (admin.Change, error) {
			res, err := resolve(l, http.StatusConflict)
			if err == nil && bucketOf(l.repo.Limits(), res, o) == nil {
				err = notFound()
			}
			return admin.Change{Op: admin.OpDelete, Object: o}, err
		}, id)
	default:
		h.methodNotAllowed(w, r, "GET, POST, PUT, DELETE")
	}
}

// replace is POST /api: the body's global default and namespaces replace
// the document's global default and token-bucket resources, in one
// change.
func (h *handler) replace(w http.ResponseWriter, r *http.Request, id adminhttp.Identity) {
	body, ok := h.body(w, r)
	if !ok {
		return
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		h.fail(w, &admin.InvalidError{Errors: []string{"body: empty; want a ServiceConfig (it replaces the whole configuration)"}})
		return
	}
	cfg, err := decodeQSService(body)
	if err != nil {
		h.fail(w, err)
		return
	}
	h.write(w, r, func(l loaded) (admin.Change, error) {
		var errs []error
		if lc := l.repo.Limits(); lc != nil {
			for _, name := range slices.Sorted(maps.Keys(lc.Resources)) {
				if lc.Resources[name].Algorithm != limits.TokenBucket {
					continue
				}
				if _, keep := cfg.Resources[name]; !keep {
					if err := l.doc.Remove(admin.Resource(name)); err != nil {
						errs = append(errs, err)
					}
				}
			}
		}
		for _, name := range slices.Sorted(maps.Keys(cfg.Resources)) {
			if _, err := l.tokenBucket(name, http.StatusConflict); err != nil {
				errs = append(errs, err)
				continue
			}
			prev, _ := l.doc.Get(admin.Resource(name))
			if err := l.doc.Put(admin.Resource(name), resourceNode(cfg.Resources[name], prev), admin.PutUpsert); err != nil {
				errs = append(errs, err)
			}
		}
		switch _, err := l.doc.Get(admin.GlobalDefault()); {
		case cfg.GlobalDefault != nil:
			if err := l.doc.Put(admin.GlobalDefault(), limitsyaml.BucketNode(*cfg.GlobalDefault), admin.PutUpsert); err != nil {
				errs = append(errs, err)
			}
		case err == nil:
			if err := l.doc.Remove(admin.GlobalDefault()); err != nil {
				errs = append(errs, err)
			}
		}
		if len(errs) > 0 {
			return admin.Change{}, errors.Join(errs...)
		}
		doc, err := l.doc.Encode()
		if err != nil {
			return admin.Change{}, err
		}
		return admin.Change{Op: admin.OpReplace, Document: doc}, nil
	}, id)
}

// write applies the change build makes of the current document: against
// the version of the request's Version header, or without one against
// the version build read (built again, up to maxRetries times, when
// another change comes first). It answers {} or the error.
func (h *handler) write(w http.ResponseWriter, r *http.Request, build func(loaded) (admin.Change, error), id adminhttp.Identity) {
	want := int64(-1)
	if s := strings.TrimSpace(r.Header.Get(VersionHeader)); s != "" {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v < 0 {
			h.fail(w, errorf(http.StatusBadRequest, "%s: %q: want the configuration's version (a whole number ≥ 0)", VersionHeader, s))
			return
		}
		want = v
	}
	ctx := r.Context()
	for attempt := 0; ; attempt++ {
		l, err := h.load(ctx)
		if err != nil {
			h.failAt(w, l.snap.Version, err)
			return
		}
		if want >= 0 && l.snap.Version != want {
			h.fail(w, &admin.ConflictError{Current: l.snap.Version})
			return
		}
		c, err := build(l)
		if err != nil {
			h.failAt(w, l.snap.Version, err)
			return
		}
		c.IfVersion, c.User, c.Auth = l.snap.Version, id.User, id.Method
		res, err := h.svc.Apply(ctx, c)
		var ce *admin.ConflictError
		if errors.As(err, &ce) && want < 0 && attempt < admin.MaxRetries {
			continue
		}
		if err != nil {
			h.fail(w, err)
			return
		}
		h.answer(w, res.Version, struct{}{})
		return
	}
}

// body reads a request body (at most MaxBodyBytes).
func (h *handler) body(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, admin.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			h.fail(w, errorf(http.StatusRequestEntityTooLarge, "body: more than %d bytes", admin.MaxBodyBytes))
		} else {
			h.fail(w, errorf(http.StatusBadRequest, "body: %v", err))
		}
		return nil, false
	}
	return b, true
}

func (h *handler) answer(w http.ResponseWriter, version int64, v any) {
	if version > 0 {
		w.Header().Set(VersionHeader, strconv.FormatInt(version, 10))
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_ = json.NewEncoder(w).Encode(v)
}

func (h *handler) methodNotAllowed(w http.ResponseWriter, r *http.Request, allow string) {
	w.Header().Set("Allow", allow)
	h.fail(w, errorf(http.StatusMethodNotAllowed, "unknown method %s; allowed: %s", r.Method, allow))
}

// failAt answers err, with the current version in the Version header.
func (h *handler) failAt(w http.ResponseWriter, version int64, err error) {
	if version > 0 {
		w.Header().Set(VersionHeader, strconv.FormatInt(version, 10))
	}
	h.fail(w, err)
}

// fail answers err with its status and a Error.
func (h *handler) fail(w http.ResponseWriter, err error) {
	var (
		qe *statusError
		ce *admin.ConflictError
		ie *admin.InvalidError
		de *admin.DecodeError
	)
	status, msg := http.StatusInternalServerError, err.Error()
	switch {
	case errors.As(err, &qe):
		status = qe.status
	case errors.As(err, &ce):
		status = http.StatusConflict
		w.Header().Set(VersionHeader, strconv.FormatInt(ce.Current, 10))
	case errors.As(err, &ie):
		status, msg = http.StatusBadRequest, strings.Join(ie.Errors, "; ")
	case errors.As(err, &de), errors.Is(err, limits.ErrInvalidConfig):
		status, msg = http.StatusBadRequest, strings.Join(admin.Invalid(err).Errors, "; ")
	case errors.Is(err, admin.ErrExists):
		status = http.StatusConflict
	case errors.Is(err, admin.ErrNotFound):
		status = http.StatusNotFound
	default:
		h.log.Error("admin: quotaservice API request failed", "err", err)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(Error{Error: http.StatusText(status), Description: msg})
}

// millis converts d to whole milliseconds, rounded up.
func millis(d time.Duration) int64 {
	if d <= 0 {
		return int64(d / time.Millisecond)
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// qsBucket writes b as a BucketConfig named name in namespace ns.
func qsBucket(b limits.Bucket, name, ns string) *BucketConfig {
	idle := int64(-1)
	if b.MaxIdle > 0 {
		idle = millis(b.MaxIdle)
	}
	per := b.MaxTokensPerRequest
	if per == 0 {
		per = int64(math.Min(math.Ceil(b.FillRate), limits.MaxTokens))
	}
	return &BucketConfig{Name: name, Namespace: ns, Size: b.Size, FillRate: b.FillRate,
		WaitTimeoutMillis: millis(b.WaitTimeout), MaxIdleMillis: idle, MaxDebtMillis: millis(b.MaxDebt), MaxTokensPerRequest: per}
}

// qsNamespace writes token-bucket resource r as namespace ns.
func qsNamespace(ns string, r *limits.Resource) *NamespaceConfig {
	out := &NamespaceConfig{Name: ns, MaxDynamicBuckets: r.MaxDynamicBuckets}
	if r.Default != nil {
		out.DefaultBucket = qsBucket(*r.Default, DefaultBucket, ns)
	}
	if r.Template != nil {
		out.DynamicBucketTemplate = qsBucket(*r.Template, DynamicBucketTemplate, ns)
	}
	if len(r.Buckets) > 0 {
		out.Buckets = make(map[string]*BucketConfig, len(r.Buckets))
		for d, b := range r.Buckets {
			out.Buckets[d] = qsBucket(b, d, ns)
		}
	}
	return out
}

// qsServiceConfig writes lc's global default and token-bucket resources
// (nil lc: an empty configuration).
func qsServiceConfig(lc *limits.Config) ServiceConfig {
	var sc ServiceConfig
	if lc == nil {
		return sc
	}
	if lc.GlobalDefault != nil {
		sc.GlobalDefaultBucket = qsBucket(*lc.GlobalDefault, DefaultBucket, "")
	}
	for name, r := range lc.Resources {
		if r.Algorithm != limits.TokenBucket {
			continue
		}
		if sc.Namespaces == nil {
			sc.Namespaces = map[string]*NamespaceConfig{}
		}
		sc.Namespaces[name] = qsNamespace(name, r)
	}
	return sc
}

// The decoding of request bodies: strict JSON (admin.DecodeBody) placed where
// it belongs in a quota service ServiceConfig and read by
// limitsyaml.ParseQuotaService, the one reading of the quota service's
// format (its fields, types and defaults), so that errors name the field
// as the quota service's configuration does
// ("namespaces.Pinky.buckets.users.fill_rate: want an integer ...").

// qsBody decodes a JSON body into a node; an empty body is {}.
func qsBody(body []byte) (*yaml.Node, error) {
	if len(strings.TrimSpace(string(body))) == 0 {
		return yamlnode.NewMapping(), nil
	}
	n, err := admin.DecodeBody(body, "application/json")
	if err != nil {
		return nil, admin.Invalid(err)
	}
	if n.Kind != yaml.MappingNode && !yamlnode.IsNull(n) {
		return nil, &admin.InvalidError{Errors: []string{fmt.Sprintf("body: want a JSON object, got %s", yamlnode.KindName(n))}}
	}
	if yamlnode.IsNull(n) {
		return yamlnode.NewMapping(), nil
	}
	return n, nil
}

// qsCheckName reports a body's field (name, namespace) that is given and
// is not want.
func qsCheckName(n *yaml.Node, field, want string) error {
	v := yamlnode.MapGet(n, field)
	if v == nil || v.Kind != yaml.ScalarNode || v.Tag != "!!str" || v.Value == "" || v.Value == want {
		return nil // absent, empty, or not a string (which the reading reports)
	}
	return &admin.InvalidError{Errors: []string{fmt.Sprintf("body.%s: %q is not the path's %q", field, v.Value, want)}}
}

// qsParse reads a ServiceConfig node.
func qsParse(root *yaml.Node) (*limits.Config, error) {
	doc, err := limitsyaml.Encode(root)
	if err != nil {
		return nil, admin.Invalid(err)
	}
	cfg, err := limitsyaml.ParseQuotaService(doc)
	if err != nil {
		return nil, admin.Invalid(err)
	}
	return cfg, nil
}

// wrap returns the mapping {k1: {k2: … v}}.
func wrap(v *yaml.Node, keys ...string) *yaml.Node {
	for i := len(keys) - 1; i >= 0; i-- {
		m := yamlnode.NewMapping()
		m.Content = []*yaml.Node{yamlnode.NewKey(keys[i]), v}
		v = m
	}
	return v
}

// decodeQSBucket reads a BucketConfig body for bucket of namespace ns
// (the special names as in Handler): every default applied.
// Errors are *InvalidError.
func decodeQSBucket(body []byte, ns, bucket string) (limits.Bucket, error) {
	n, err := qsBody(body)
	if err != nil {
		return limits.Bucket{}, err
	}
	wantName := bucket
	if ns == GlobalNamespace {
		wantName = DefaultBucket
	}
	if err := errors.Join(qsCheckName(n, "name", wantName), qsCheckName(n, "namespace", ns)); err != nil {
		return limits.Bucket{}, admin.Invalid(err)
	}
	var root *yaml.Node
	switch bucketObject(ns, bucket).Kind {
	case admin.KindGlobalDefault:
		root = wrap(n, "global_default_bucket")
	case admin.KindDefault:
		root = wrap(n, "namespaces", ns, "default_bucket")
	case admin.KindBucketTemplate:
		root = wrap(n, "namespaces", ns, "dynamic_bucket_template")
	default:
		root = wrap(n, "namespaces", ns, "buckets", bucket)
	}
	cfg, err := qsParse(root)
	if err != nil {
		return limits.Bucket{}, err
	}
	var b *limits.Bucket
	switch o := bucketObject(ns, bucket); o.Kind {
	case admin.KindGlobalDefault:
		b = cfg.GlobalDefault
	default:
		if r := cfg.Resources[ns]; r != nil {
			b = bucketOf(cfg, r, o)
		}
	}
	if b == nil {
		return limits.Bucket{}, &admin.InvalidError{Errors: []string{"body: the bucket did not read"}}
	}
	return *b, nil
}

// decodeQSNamespace reads a NamespaceConfig body for namespace ns.
// Errors are *InvalidError.
func decodeQSNamespace(body []byte, ns string) (*limits.Resource, error) {
	if ns == GlobalNamespace {
		return nil, &admin.InvalidError{Errors: []string{fmt.Sprintf("namespace %s names the whole configuration: POST it to /api", GlobalNamespace)}}
	}
	n, err := qsBody(body)
	if err != nil {
		return nil, err
	}
	if err := qsCheckName(n, "name", ns); err != nil {
		return nil, err
	}
	cfg, err := qsParse(wrap(n, "namespaces", ns))
	if err != nil {
		return nil, err
	}
	r := cfg.Resources[ns]
	if r == nil {
		return nil, &admin.InvalidError{Errors: []string{"body: the namespace did not read"}}
	}
	return r, nil
}

// decodeQSService reads a ServiceConfig body. Errors are *InvalidError.
func decodeQSService(body []byte) (*limits.Config, error) {
	n, err := qsBody(body)
	if err != nil {
		return nil, err
	}
	if i := yamlnode.MapIndex(n, "namespaces"); i >= 0 {
		var errs []error
		nss := n.Content[i+1]
		for j := 0; nss.Kind == yaml.MappingNode && j+1 < len(nss.Content); j += 2 {
			if nss.Content[j+1].Kind == yaml.MappingNode {
				if err := qsCheckName(nss.Content[j+1], "name", nss.Content[j].Value); err != nil {
					errs = append(errs, fmt.Errorf("namespaces.%s: %w", nss.Content[j].Value, err))
				}
			}
		}
		if len(errs) > 0 {
			return nil, admin.Invalid(errors.Join(errs...))
		}
	}
	return qsParse(n)
}

// resourceNode writes r, a quota service namespace, as a token-bucket
// resource of the limits section (limitsyaml.ResourceNode); prev, the
// resource it replaces (nil: none), gives it the fields the quota
// service's format has no place for (algorithm, on_store_error, which r,
// read from that format, never sets).
func resourceNode(r *limits.Resource, prev *yaml.Node) *yaml.Node {
	m := limitsyaml.ResourceNode(r)
	if prev = yamlnode.Deref(prev); prev == nil || prev.Kind != yaml.MappingNode {
		return m
	}
	if a := yamlnode.MapGet(prev, "algorithm"); a != nil {
		m.Content = append([]*yaml.Node{yamlnode.NewKey("algorithm"), a}, m.Content...)
	}
	if v := yamlnode.MapGet(prev, "on_store_error"); v != nil {
		m.Content = append(m.Content, yamlnode.NewKey("on_store_error"), v)
	}
	if len(m.Content) > 0 {
		m.Style &^= yaml.FlowStyle // {} only for a namespace with nothing configured
	}
	return m
}

// putChange is the quota service's POST (create: the object must not
// exist) or PUT (an upsert) of o with value v.
func putChange(create bool, o admin.Object, v *yaml.Node) admin.Change {
	if create {
		return admin.Change{Op: admin.OpCreate, Object: o, Value: v}
	}
	return admin.Change{Op: admin.OpUpdate, Object: o, Value: v, Upsert: true}
}
