package server

import (
	"context"
	"errors"
	"math"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	qs "github.com/sluice-rl/sluice/api/quotaservice"
	v1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/api/sluice/v1/sluicev1connect"
	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/limits/copies"
)

// Limits returns the server's limits engine: the token buckets that
// sluice.v1.Limits/Allow and quotaservice.QuotaService/Allow decide with.
func (s *Server) Limits() *limits.Engine { return s.limits }

// SetLimits replaces the limits configuration (nil: none; every request is
// then REJECTED_NO_BUCKET). On error (the configuration is invalid:
// limits.Config.Validate's error) the old one stays. Buckets whose
// configuration did not change are untouched; a changed bucket keeps its
// fill fraction (limits.Engine.SetConfig). Safe for concurrent use with
// requests.
func (s *Server) SetLimits(cfg *limits.Config) error {
	if err := s.limits.SetConfig(s.now(), cfg); err != nil {
		return err
	}
	s.limitsMetrics.configured(cfg)
	var resources map[string]*limits.Resource
	if cfg != nil {
		resources = cfg.Resources
	}
	storeNames(&s.rateNames, resources)
	return nil
}

// isRateLimited reports whether resource is configured in the limits
// configuration (token buckets or burst tiers).
func (s *Server) isRateLimited(resource string) bool { return (*s.rateNames.Load())[resource] }

// reapLimits removes idle buckets (limits.Engine.Reap).
func (s *Server) reapLimits(ctx context.Context) {
	if _, err := s.limits.Reap(ctx, s.now()); err != nil {
		s.log.Warn("reaping idle buckets failed", "err", err)
	}
}

// LimitsAPI returns sluice.v1.Limits for grpc-go and Connect. Its methods
// decide on the server's limits engine at the server's clock; any server
// answers (limits have no master).
func (s *Server) LimitsAPI() LimitsAPI { return LimitsAPI{s: s} }

// LimitsAPI serves sluice.v1.Limits (see Server.LimitsAPI).
type LimitsAPI struct {
	v1.UnimplementedLimitsServer
	s *Server
}

// Allow decides one request for tokens. Over-limit answers are statuses in
// the response; an invalid request is InvalidArgument naming the field; a
// failed store is Unavailable, or, for a resource configured
// on_store_error: open, OK with degraded set.
func (a LimitsAPI) Allow(ctx context.Context, req *v1.AllowRequest) (*v1.AllowResponse, error) {
	if a.s.isCopyLimited(req.GetResource()) {
		return nil, copiesError(copies.WrongKind(req.GetResource(), "copy-limited"))
	}
	r := limits.Request{Resource: req.GetResource(), Domain: req.GetDomain(), Tokens: req.GetTokens(), MinTokens: req.GetMinTokens()}
	if mw := req.GetMaxWait(); mw != nil {
		if err := mw.CheckValid(); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "max_wait: %v", err)
		}
		r.MaxWait, r.HasMaxWait = mw.AsDuration(), true
	}
	d := a.s.limits.Allow(ctx, a.s.now(), r)
	switch d.Status {
	case limits.StatusInvalidRequest:
		return nil, status.Error(codes.InvalidArgument, d.Err.Error())
	case limits.StatusServerError:
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

// limitsConnect is LimitsAPI for Connect's handler.
type limitsConnect struct {
	sluicev1connect.UnimplementedLimitsHandler
	api LimitsAPI
}

func (c limitsConnect) Allow(ctx context.Context, req *connect.Request[v1.AllowRequest]) (*connect.Response[v1.AllowResponse], error) {
	return connectUnary(c.api.Allow(ctx, req.Msg))
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

// QuotaServiceAPI returns quotaservice.QuotaService — Square's quota
// service, wire-compatible — for grpc-go and Connect, on the same limits
// engine as LimitsAPI: a namespace is a resource, a bucket name a domain.
func (s *Server) QuotaServiceAPI() QuotaServiceAPI { return QuotaServiceAPI{s: s} }

// QuotaServiceAPI serves quotaservice.QuotaService (see
// Server.QuotaServiceAPI).
type QuotaServiceAPI struct {
	qs.UnimplementedQuotaServiceServer
	s *Server
}

// Allow decides one request as Square's quota service does: every answer,
// invalid requests included (REJECTED_INVALID_REQUEST), is a status in a
// normal response, never an RPC error. tokens_requested 0 means 1 (proto3
// cannot tell it from absent); max_wait_millis_override applies only with
// max_wait_time_override, and never beyond the bucket's own maximum wait;
// wait_millis is rounded up, so a caller that waits it never uses its
// tokens early. A degraded grant (the store failing, the resource
// configured on_store_error: open) is a plain OK: the wire has no flag.
//
// Source: quotaservice-wire.md, "Service quotaservice.QuotaService".
func (a QuotaServiceAPI) Allow(ctx context.Context, req *qs.AllowRequest) (*qs.AllowResponse, error) {
	r := limits.Request{Resource: req.GetNamespace(), Domain: req.GetBucketName(), Tokens: req.GetTokensRequested()}
	if req.GetMaxWaitTimeOverride() {
		ms := req.GetMaxWaitMillisOverride()
		if ms < 0 || ms > math.MaxInt64/int64(time.Millisecond) {
			return &qs.AllowResponse{Status: qs.AllowResponse_REJECTED_INVALID_REQUEST}, nil
		}
		r.MaxWait, r.HasMaxWait = time.Duration(ms)*time.Millisecond, true
	}
	d := a.s.limits.Allow(ctx, a.s.now(), r)
	resp := &qs.AllowResponse{Status: quotaStatus(d.Status)}
	if d.Status == limits.StatusOK {
		resp.TokensGranted = d.Granted
		resp.WaitMillis = int64((d.Wait + time.Millisecond - 1) / time.Millisecond)
	}
	return resp, nil
}

// quotaConnect is QuotaServiceAPI for Connect's handler.
type quotaConnect struct{ api QuotaServiceAPI }

func (c quotaConnect) Allow(ctx context.Context, req *connect.Request[qs.AllowRequest]) (*connect.Response[qs.AllowResponse], error) {
	return connectUnary(c.api.Allow(ctx, req.Msg))
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

// connectError turns a gRPC status error into a Connect error with the
// same code and message (Connect's codes are gRPC's).
func connectError(err error) error {
	if st, ok := status.FromError(err); ok {
		return connect.NewError(connect.Code(st.Code()), errors.New(st.Message()))
	}
	return err
}
