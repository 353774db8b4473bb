// Package limitsvc is the server-side limits service: sluice.v1.Limits/Allow
// and, wire-compatible with Square's quota service,
// quotaservice.QuotaService/Allow, both over one limits.Engine (token
// buckets and burst tiers per resource and domain), with the engine's
// metrics. Any server answers: limits have no master.
//
// Its handlers have grpc-go's shape (func(ctx, *Req) (*Resp, error));
// package server registers them with grpc-go and adapts them to Connect.
//
// Source: quotaservice-design.md; quotaservice-wire.md; charon-paper.md,
// section 3 (burst tiers).
package limitsvc

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	qs "github.com/sluice-rl/sluice/api/quotaservice"
	v1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/internal/refresh"
	"github.com/sluice-rl/sluice/internal/tracing"
	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/limits/rls"
	"github.com/sluice-rl/sluice/server/internal/promreg"
)

// Options configures a Service.
type Options struct {
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
	// Logger receives structured logs; nil means slog.Default().
	Logger *slog.Logger
	// Registry receives the sluice_limits_* metrics; nil registers none.
	Registry prometheus.Registerer
	// Config is the limits configuration (nil: none, every request is
	// REJECTED_NO_BUCKET; SetConfig changes it). An invalid one is New's
	// error.
	Config *limits.Config
	// Store holds the buckets (nil: a new limits.MemoryStore, this
	// process's alone).
	Store limits.Store
	// Budgets holds the counters of the buckets' budgets
	// (limits.Options.Budgets; nil: a new rls.MemoryStore, this
	// process's alone). With a shared Store, the same Redis's
	// (limits/redis.NewRLS).
	Budgets rls.Store
}

// Service serves sluice.v1.Limits/Allow and quotaservice.QuotaService/Allow
// on one limits engine. It is safe for concurrent use.
type Service struct {
	opts      Options
	now       func() time.Time
	log       *slog.Logger
	limits    *limits.Engine
	metrics   *limitsMetrics
	rateNames atomic.Pointer[map[string]bool] // resources the configuration names
}

// New returns the service. Errors: the configuration is invalid
// (limits.Config.Validate's error); opts.Registry already holds one of
// the service's metrics (the error names it).
func New(opts Options) (*Service, error) {
	s := &Service{opts: opts, now: opts.Now, log: opts.Logger}
	if s.now == nil {
		s.now = time.Now
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	reg := opts.Registry
	if reg == nil {
		reg = prometheus.NewRegistry() // registered nowhere
	}
	var err error
	if s.metrics, err = newLimitsMetrics(reg); err != nil {
		return nil, fmt.Errorf("limits: %w", err)
	}
	eng, err := limits.New(nil, limits.Options{Listener: s.metrics, Store: opts.Store, Budgets: opts.Budgets})
	if err != nil {
		return nil, fmt.Errorf("limits: %w", err)
	}
	s.limits = eng
	buckets := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sluice_limits_buckets",
		Help: "Buckets (token buckets and burst-tier domains) the limits engine's store holds: exact in memory; on Redis an estimate, the keys of its database (DBSIZE per node, other keys included); 0 when Redis does not answer.",
	}, func() float64 {
		// A scrape has no context (client_golang's collectors take
		// none): the store bounds the call by its own timeout.
		n, _ := s.limits.EstimateLen(context.Background())
		return float64(n)
	})
	if err := promreg.Register(reg, buckets); err != nil {
		return nil, fmt.Errorf("limits: %w", err)
	}
	s.rateNames.Store(&map[string]bool{})
	if opts.Config != nil {
		if err := s.SetConfig(opts.Config); err != nil {
			return nil, fmt.Errorf("limits: %w", err)
		}
	}
	return s, nil
}

// Run removes idle buckets every interval (limits.Engine.Reap) until ctx
// is done.
func (s *Service) Run(ctx context.Context, interval time.Duration) {
	refresh.Every(ctx, interval, s.reap)
}

// Engine returns the service's limits engine: the token buckets that
// sluice.v1.Limits/Allow and quotaservice.QuotaService/Allow decide with.
func (s *Service) Engine() *limits.Engine { return s.limits }

// SetConfig replaces the limits configuration (nil: none; every request is
// then REJECTED_NO_BUCKET). On error (the configuration is invalid:
// limits.Config.Validate's error) the old one stays. Buckets whose
// configuration did not change are untouched; a changed bucket keeps its
// fill fraction (limits.Engine.SetConfig). Safe for concurrent use with
// requests.
func (s *Service) SetConfig(cfg *limits.Config) error {
	if err := s.limits.SetConfig(s.now(), cfg); err != nil {
		return err
	}
	s.metrics.configured(cfg)
	var resources map[string]*limits.Resource
	if cfg != nil {
		resources = cfg.Resources
	}
	names := make(map[string]bool, len(resources))
	for name := range resources {
		names[name] = true
	}
	s.rateNames.Store(&names)
	return nil
}

// RateLimited reports whether resource is configured in the limits
// configuration (token buckets or burst tiers).
func (s *Service) RateLimited(resource string) bool { return (*s.rateNames.Load())[resource] }

// reap removes idle buckets (limits.Engine.Reap).
func (s *Service) reap(ctx context.Context) {
	if _, err := s.limits.Reap(ctx, s.now()); err != nil {
		s.log.Warn("reaping idle buckets failed", "err", err)
	}
}

// Allow decides one request for tokens. Over-limit answers are statuses in
// the response; an invalid request is InvalidArgument naming the field; a
// failed store is Unavailable, or, for a resource configured
// on_store_error: open, OK with degraded set; a request whose context
// ended first (the caller's deadline or cancellation, which reaches the
// store) is DeadlineExceeded or Canceled.
func (s *Service) Allow(ctx context.Context, req *v1.AllowRequest) (*v1.AllowResponse, error) {
	r := limits.Request{Resource: req.GetResource(), Domain: req.GetDomain(), Tokens: req.GetTokens(), MinTokens: req.GetMinTokens()}
	if mw := req.GetMaxWait(); mw != nil {
		if err := mw.CheckValid(); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "max_wait: %v", err)
		}
		r.MaxWait, r.HasMaxWait = mw.AsDuration(), true
	}
	d := s.limits.Allow(ctx, s.now(), r)
	tracing.Annotate(ctx, r.Resource, r.Domain, d.Status.String(), d.Degraded)
	switch d.Status {
	case limits.StatusInvalidRequest:
		return nil, status.Error(codes.InvalidArgument, d.Err.Error())
	case limits.StatusServerError:
		if err := ctx.Err(); err != nil { // the caller gave up, not the store
			return nil, status.FromContextError(err).Err()
		}
		return nil, status.Errorf(codes.Unavailable, "limits store: %v", d.Err)
	}
	resp := &v1.AllowResponse{
		Status:    sluiceStatus(d.Status),
		Granted:   d.Granted,
		Remaining: d.Remaining,
		Limit:     d.Limit,
		Bucket:    d.Bucket.String(),
	}
	if d.Status == limits.StatusOK {
		resp.Wait = durationpb.New(d.Wait)
	} else if !d.RetryNever {
		resp.RetryAfter = durationpb.New(d.RetryAfter)
	}
	resp.Unlimited, resp.Degraded = d.Unlimited, d.Degraded
	if d.Algorithm == limits.BurstTiers {
		tc := d.Tiers
		if tc.HardLimit > 0 {
			resp.HardLimit = &tc.HardLimit
		}
		if tc.GlobalLimit > 0 {
			resp.GlobalLimit = &tc.GlobalLimit
		}
		resp.TierLimit, resp.TierHits, resp.Tier = tc.TierLimit, tc.TierHits, int32(tc.Tier)
		resp.DomainHitsLastSecond, resp.GlobalHitsLastSecond = tc.DomainHitsLastSecond, tc.GlobalHitsLastSecond
		resp.Burst, resp.HardLimited, resp.GlobalLimited = tc.Burst, tc.HardLimited, tc.GlobalLimited
	}
	return resp, nil
}

// sluiceStatus maps the engine's status to sluice.v1's.
func sluiceStatus(st limits.Status) v1.AllowResponse_Status {
	switch st {
	case limits.StatusOK:
		return v1.AllowResponse_OK
	case limits.StatusTimeout:
		return v1.AllowResponse_REJECTED_TIMEOUT
	case limits.StatusNoBucket:
		return v1.AllowResponse_REJECTED_NO_BUCKET
	case limits.StatusTooManyBuckets:
		return v1.AllowResponse_REJECTED_TOO_MANY_BUCKETS
	case limits.StatusTooManyTokensRequested:
		return v1.AllowResponse_REJECTED_TOO_MANY_TOKENS_REQUESTED
	}
	return v1.AllowResponse_STATUS_UNSPECIFIED
}

// QuotaService returns quotaservice.QuotaService — Square's quota
// service, wire-compatible — on the same limits engine as Allow: a
// namespace is a resource, a bucket name a domain.
func (s *Service) QuotaService() QuotaService { return QuotaService{s: s} }

// QuotaService serves quotaservice.QuotaService (see Service.QuotaService).
type QuotaService struct {
	qs.UnimplementedQuotaServiceServer
	s *Service
}

// Allow decides one request as Square's quota service does: every answer,
// invalid requests included (REJECTED_INVALID_REQUEST), is a status in a
// normal response, never an RPC error (a namespace the identity policy
// refuses the caller is refused before, by the server's authorization:
// PermissionDenied). tokens_requested 0 means 1 (proto3
// cannot tell it from absent); max_wait_millis_override applies only with
// max_wait_time_override, and never beyond the bucket's own maximum wait;
// wait_millis is rounded up, so a caller that waits it never uses its
// tokens early. A degraded grant (the store failing, the resource
// configured on_store_error: open) is a plain OK: the wire has no flag.
//
// Source: quotaservice-wire.md, "Service quotaservice.QuotaService".
func (a QuotaService) Allow(ctx context.Context, req *qs.AllowRequest) (*qs.AllowResponse, error) {
	r := limits.Request{Resource: req.GetNamespace(), Domain: req.GetBucketName(), Tokens: req.GetTokensRequested()}
	if req.GetMaxWaitTimeOverride() {
		ms := req.GetMaxWaitMillisOverride()
		if ms < 0 || ms > math.MaxInt64/int64(time.Millisecond) {
			return &qs.AllowResponse{Status: qs.AllowResponse_REJECTED_INVALID_REQUEST}, nil
		}
		r.MaxWait, r.HasMaxWait = time.Duration(ms)*time.Millisecond, true
	}
	d := a.s.limits.Allow(ctx, a.s.now(), r)
	tracing.Annotate(ctx, r.Resource, r.Domain, d.Status.String(), d.Degraded)
	resp := &qs.AllowResponse{Status: quotaStatus(d.Status)}
	if d.Status == limits.StatusOK {
		resp.TokensGranted = d.Granted
		resp.WaitMillis = int64((d.Wait + time.Millisecond - 1) / time.Millisecond)
	}
	return resp, nil
}

// quotaStatus maps the engine's status to the quota service's.
func quotaStatus(st limits.Status) qs.AllowResponse_Status {
	switch st {
	case limits.StatusOK:
		return qs.AllowResponse_OK
	case limits.StatusTimeout:
		return qs.AllowResponse_REJECTED_TIMEOUT
	case limits.StatusNoBucket:
		return qs.AllowResponse_REJECTED_NO_BUCKET
	case limits.StatusTooManyBuckets:
		return qs.AllowResponse_REJECTED_TOO_MANY_BUCKETS
	case limits.StatusTooManyTokensRequested:
		return qs.AllowResponse_REJECTED_TOO_MANY_TOKENS_REQUESTED
	case limits.StatusInvalidRequest:
		return qs.AllowResponse_REJECTED_INVALID_REQUEST
	}
	return qs.AllowResponse_REJECTED_SERVER_ERROR
}
