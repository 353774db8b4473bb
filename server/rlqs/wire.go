package rlqs

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-rl/sluice/internal/rlqsfilter"
	"github.com/sluice-rl/sluice/server/capacity"
	"github.com/sluice-rl/sluice/server/rlqs/state"
)

// PriorityKey is the BucketId key that sets a bucket's priority band
// instead of naming part of its resource: its value, a decimal integer
// (higher is more important), is the priority its stream asks in, and
// the pair is left out of the resource id, so that buckets differing only
// by it share one resource's capacity, higher bands served first
// (FAIR_SHARE over priority bands). Envoy's bucket_id_builder sets it per
// bucket matcher like any other pair. Absent: priority 0.
//
// Source: doorman-design.md, "Priority bands" (a requester's priority);
// Sluice's mapping of RLQS buckets to resources (docs/rlqs.md).
const PriorityKey = "priority"

// MinRate is the lowest rate (requests per second) an assignment carries
// as a token bucket: one request an hour. A lease of less is sent as a
// DENY_ALL blanket rule, since a token bucket's fill interval cannot be
// longer and a bucket that fills faster would exceed the lease.
const MinRate = rlqsfilter.MinRate

// ResourceID returns the resource a bucket of domain with pairs is
// leased as: domain, "/", then the pairs key=value sorted by key and
// joined with ",", PriorityKey left out. In keys and values the bytes
// '%', ',', '=', '/' and the control characters are percent-escaped
// (%2C for ','), so that the mapping is one to one and a template's
// identifier_glob "D/*" matches every bucket of domain D (path.Match's *
// does not cross '/').
func ResourceID(domain string, pairs map[string]string) string {
	keys := make([]string, 0, len(pairs))
	n := len(domain) + 1
	for k, v := range pairs {
		if k == PriorityKey {
			continue
		}
		keys = append(keys, k)
		n += len(k) + len(v) + 2
	}
	slices.Sort(keys)
	var b strings.Builder
	b.Grow(n)
	b.WriteString(domain)
	b.WriteByte('/')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		escape(&b, k)
		b.WriteByte('=')
		escape(&b, pairs[k])
	}
	return b.String()
}

// pairsOf returns the BucketId pairs of resource (ResourceID's result),
// with the PriorityKey pair prio unless it is "": the bucket id as the
// proxy sent it, rebuilt rather than kept (a map per (stream, bucket)
// costs hundreds of bytes).
func pairsOf(resource, prio string) map[string]string {
	kv := resource[strings.LastIndexByte(resource, '/')+1:]
	out := make(map[string]string, strings.Count(kv, ",")+2)
	for kv != "" {
		var pair string
		pair, kv, _ = strings.Cut(kv, ",")
		k, v, _ := strings.Cut(pair, "=")
		out[unescape(k)] = unescape(v)
	}
	if prio != "" {
		out[PriorityKey] = prio
	}
	return out
}

// unescape undoes escape.
func unescape(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			n, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
			if err == nil {
				b.WriteByte(byte(n))
				i += 2
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// escape writes s to b with the bytes ResourceID escapes percent-encoded.
func escape(b *strings.Builder, s string) {
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '%' || c == ',' || c == '=' || c == '/' || c < 0x20 || c == 0x7f:
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
		default:
			b.WriteByte(c)
		}
	}
}

// parse validates a stream's message against domain (the stream's, ""
// before its first message) and returns its domain and its usages, or an
// error naming the field at fault: a first message without a domain, a
// later one changing it, a usage without a bucket_id or with an empty
// one, an empty key, a priority that is not an integer, a time_elapsed
// invalid or negative (absent or 0 is a watch: see state.Usage), counts
// whose sum overflows, a resource
// id longer than capacity.MaxIDLength, more than
// capacity.MaxResourcesPerRequest usages.
func parse(domain string, m *rlqspb.RateLimitQuotaUsageReports) (string, []state.Usage, error) {
	switch d := m.GetDomain(); {
	case domain == "" && d == "":
		return "", nil, fmt.Errorf("domain: required in the stream's first message")
	case domain == "":
		domain = d
	case d != "" && d != domain:
		return "", nil, fmt.Errorf("domain: %q changes the stream's domain %q (open a new stream for another domain)", d, domain)
	}
	us := m.GetBucketQuotaUsages()
	if len(us) > capacity.MaxResourcesPerRequest {
		return "", nil, fmt.Errorf("bucket_quota_usages: %d, at most %d allowed", len(us), capacity.MaxResourcesPerRequest)
	}
	out := make([]state.Usage, len(us))
	for i, u := range us {
		field := func(f string) string { return fmt.Sprintf("bucket_quota_usages[%d].%s", i, f) }
		pairs := u.GetBucketId().GetBucket()
		if len(pairs) == 0 {
			return "", nil, fmt.Errorf("%s: empty (a bucket needs at least one key)", field("bucket_id"))
		}
		var prio int64
		var raw string
		for k, v := range pairs {
			if k == "" {
				return "", nil, fmt.Errorf("%s: an empty key", field("bucket_id.bucket"))
			}
			if k == PriorityKey {
				p, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return "", nil, fmt.Errorf("%s: %q is not an integer priority band", field("bucket_id.bucket["+PriorityKey+"]"), v)
				}
				prio, raw = p, v
			}
		}
		// Envoy's filter sends time_elapsed in whole seconds, and 0 (or,
		// in some builds, none) in the report it sends the moment a bucket
		// sees its first request: a watch, which Report subscribes
		// without measuring demand. Only a malformed or negative one is
		// refused.
		var elapsed time.Duration
		if te := u.GetTimeElapsed(); te != nil {
			if err := te.CheckValid(); err != nil {
				return "", nil, fmt.Errorf("%s: %v", field("time_elapsed"), err)
			}
			if elapsed = te.AsDuration(); elapsed < 0 {
				return "", nil, fmt.Errorf("%s: %v, must not be negative", field("time_elapsed"), elapsed)
			}
		}
		a, d := u.GetNumRequestsAllowed(), u.GetNumRequestsDenied()
		if a > math.MaxUint64-d {
			return "", nil, fmt.Errorf("%s: num_requests_allowed %d + num_requests_denied %d overflow", field("num_requests_allowed"), a, d)
		}
		res := ResourceID(domain, pairs)
		if err := capacity.CheckID(field("bucket_id"), res); err != nil {
			return "", nil, fmt.Errorf("%w (as resource %.40q…)", err, res)
		}
		out[i] = state.Usage{
			Resource: res,
			Prio:     raw,
			Priority: prio,
			Requests: float64(a) + float64(d),
			Elapsed:  elapsed.Seconds(),
		}
	}
	return domain, out, nil
}

// tokenBucket returns the token bucket that fills at rate (requests per
// second, ≥ MinRate) as Envoy's filter reads one, holding burst's worth:
// rlqsfilter.Encode's, on the wire.
func tokenBucket(rate float64, burst time.Duration) *typev3.TokenBucket {
	return tokenBucketProto(rlqsfilter.Encode(rate, burst))
}

// tokenBucketProto returns tb on the wire: its fill interval's seconds
// and nanos as FillInterval holds them.
func tokenBucketProto(tb rlqsfilter.TokenBucket) *typev3.TokenBucket {
	return &typev3.TokenBucket{
		MaxTokens:     tb.MaxTokens,
		TokensPerFill: wrapperspb.UInt32(tb.TokensPerFill),
		FillInterval:  durationpb.New(tb.FillInterval),
	}
}

// FillRate returns the rate (requests per second) at which Envoy's filter
// fills tb: tokens_per_fill ÷ fill_interval's whole seconds, +Inf when
// they are 0 (as Envoy's division does). See rlqsfilter.TokenBucket.Rate.
func FillRate(tb *typev3.TokenBucket) float64 {
	return rlqsfilter.TokenBucket{TokensPerFill: tb.GetTokensPerFill().GetValue(), FillInterval: tb.GetFillInterval().AsDuration()}.Rate()
}

// strategy returns a's rate limit strategy on the wire (a.Strategy): a
// token bucket at a.Rate holding a.Burst's worth (burst's if a.Burst is
// 0), DENY_ALL below MinRate, or a's blanket rule.
func strategy(a state.Action, burst time.Duration) *typev3.RateLimitStrategy {
	s, _ := a.Strategy(burst)
	if s.TokenBucket != nil {
		return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: tokenBucketProto(*s.TokenBucket)}}
	}
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: s.Blanket}}
}

// response returns actions as one message for the stream, token buckets
// holding their Action.Burst's worth of their rate (burst's if 0).
func response(actions []state.Action, burst time.Duration) *rlqspb.RateLimitQuotaResponse {
	out := &rlqspb.RateLimitQuotaResponse{BucketAction: make([]*rlqspb.RateLimitQuotaResponse_BucketAction, len(actions))}
	for i, a := range actions {
		ba := &rlqspb.RateLimitQuotaResponse_BucketAction{BucketId: &rlqspb.BucketId{Bucket: pairsOf(a.Resource, a.Prio)}}
		if a.Kind == state.Abandon {
			ba.BucketAction = &rlqspb.RateLimitQuotaResponse_BucketAction_AbandonAction_{
				AbandonAction: &rlqspb.RateLimitQuotaResponse_BucketAction_AbandonAction{},
			}
		} else {
			ba.BucketAction = &rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
				QuotaAssignmentAction: &rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
					AssignmentTimeToLive: durationpb.New(a.TTL),
					RateLimitStrategy:    strategy(a, burst),
				},
			}
		}
		out.BucketAction[i] = ba
	}
	return out
}
