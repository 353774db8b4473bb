// Package upstreamhttp serves envoyproxy/ratelimit's own HTTP endpoints
// over Sluice's Envoy rate limit service (server/envoyrls), so that what
// probes and scripts written for envoyproxy/ratelimit ask keeps working
// on `sluice envoy-ratelimit`: GET /healthcheck (its readiness probe),
// POST /json (ShouldRateLimit for clients without gRPC) and GET
// /rlconfig (the rules in force, on its debug port).
//
// Source: envoyproxy/ratelimit's README ("HTTP Port", "Debug Port") and
// its src/server (server_impl.go's JSON handler, health.go),
// src/config/config_impl.go (the rules' dump).
package upstreamhttp

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sluice-rl/sluice/limits/rls"
)

// Decider decides a ShouldRateLimit request: *envoyrls.Service.
type Decider interface {
	ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error)
}

// MaxJSONBody bounds a /json request's body (bytes): a request's
// descriptors are a few hundred bytes; a larger body is refused with 413.
const MaxJSONBody = 1 << 20

// JSON returns POST /json: the body is a RateLimitRequest in protobuf's
// JSON mapping (upstream's example: {"domain": "d", "descriptors":
// [{"entries": [{"key": "k", "value": "v"}]}]}), the answer the
// RateLimitResponse in the same mapping, with HTTP 429 when its overall
// code is OVER_LIMIT, 500 when it is UNKNOWN, 200 otherwise, as upstream
// answers. A body that is not such a request, or a request the service
// refuses (an unknown field, no domain, an error of the service), is
// answered 400 with the reason (upstream answers 400 with no reason);
// another method than POST, 405. The request's context bounds the
// decision. Safe for concurrent use.
func JSON(d Decider) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "POST a RateLimitRequest as JSON", http.StatusMethodNotAllowed)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxJSONBody))
		if err != nil {
			http.Error(w, "reading the body: "+err.Error(), http.StatusRequestEntityTooLarge)
			return
		}
		var req rlsv3.RateLimitRequest
		if err := protojson.Unmarshal(body, &req); err != nil {
			http.Error(w, "the body is not a RateLimitRequest: "+err.Error(), http.StatusBadRequest)
			return
		}
		resp, err := d.ShouldRateLimit(r.Context(), &req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		out, err := protojson.Marshal(resp)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		switch resp.GetOverallCode() {
		case rlsv3.RateLimitResponse_OVER_LIMIT:
			w.WriteHeader(http.StatusTooManyRequests)
		case rlsv3.RateLimitResponse_UNKNOWN:
			w.WriteHeader(http.StatusInternalServerError)
		}
		_, _ = w.Write(out)
	})
}

// Healthcheck returns GET /healthcheck: 200 "OK" while ready() says so,
// else 500 with ready's reason, as upstream's health checker (500 before
// the first rules when they are required, and from SIGTERM on).
// Safe for concurrent use; ready is called once per request.
func Healthcheck(ready func() (bool, string)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if ok, why := ready(); !ok {
			http.Error(w, why, http.StatusInternalServerError)
			return
		}
		_, _ = io.WriteString(w, "OK")
	})
}

// RLConfig returns GET /rlconfig: the rules in force (rules() at the
// request), one line per rule with a limit, as upstream dumps them:
// "DOMAIN.KEY_VALUE.KEY: unit=SECOND requests_per_unit=10, shadow_mode:
// false" (its full key, the unit in upper case, UNKNOWN and 0 for an
// unlimited rule), domains in name order and rules in file order (upstream
// prints domains in map order). A burst-tier rule (Sluice's extension)
// prints its resource: "…: burst_tiers=RESOURCE, shadow_mode: false";
// Sluice's other extensions follow requests_per_unit (extensions), and a
// rule with several limits has a line per limit.
func RLConfig(rules func() *rls.Config) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		cfg := rules()
		if cfg == nil {
			return
		}
		var b strings.Builder
		for _, name := range cfg.Names() {
			d := cfg.Domain(name)
			d.Each(func(p []*rls.Rule) {
				r := p[len(p)-1]
				key := d.Name + "." + rls.RulePath(p)
				for l := range r.AllLimits() {
					switch {
					case l.BurstTiers != "":
						fmt.Fprintf(&b, "%s: burst_tiers=%s, shadow_mode: %t\n", key, l.BurstTiers, r.ShadowMode)
					case l.Unlimited:
						fmt.Fprintf(&b, "%s: unit=UNKNOWN requests_per_unit=0, shadow_mode: %t\n", key, r.ShadowMode)
					default:
						fmt.Fprintf(&b, "%s: unit=%s requests_per_unit=%d%s, shadow_mode: %t\n", key, strings.ToUpper(l.Unit.String()), l.RequestsPerUnit, extensions(l), r.ShadowMode)
					}
				}
			})
		}
		_, _ = io.WriteString(w, b.String())
	})
}

// extensions prints a limit's Sluice extensions after its
// requests_per_unit, each as " name=value" ("" when none): a rule with
// several limits (rate_limits) has a line per limit.
func extensions(l *rls.Limit) string {
	var b strings.Builder
	if l.UnitMultiplier > 1 {
		fmt.Fprintf(&b, " unit_multiplier=%d", l.UnitMultiplier)
	}
	if l.Burst != 0 {
		fmt.Fprintf(&b, " burst=%d", l.Burst)
	}
	if l.Calendar != nil {
		fmt.Fprintf(&b, " calendar=%s", l.Calendar)
	}
	return b.String()
}
