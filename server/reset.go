package server

import (
	"context"
	"errors"
	"net/http"

	"github.com/sluice-rl/sluice/admin/adminhttp"
	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/limits/rls"
	"github.com/sluice-rl/sluice/server/envoyrls"
)

// resetter is the admin API's reset (POST /admin/v1/reset) over this
// server's limits engine (a limits bucket, and a quota service bucket:
// namespace = resource, bucket = domain) and its Envoy rate limit
// service. The services' errors become adminhttp.ResetErrors naming the
// body's field: a *limits.RequestError 400 (404 when it wraps
// limits.ErrNotConfigured), envoyrls.ErrNoRule 404; any other (a store
// down) stays the server's own.
//
// Source: envoyproxy/ratelimit issue #191 (reset one key); gubernator's
// Behavior RESET_REMAINING.
func (api adminAPI) resetter() adminhttp.Resetter {
	return adminhttp.ResetterFunc(func(ctx context.Context, req adminhttp.ResetRequest) (int, error) {
		switch {
		case req.Envoy != nil:
			entries := make([]rls.Entry, len(req.Envoy.Descriptor))
			for i, e := range req.Envoy.Descriptor {
				entries[i] = rls.Entry{Key: e.Key, Value: e.Value}
			}
			n, err := api.envoy.Reset(ctx, req.Envoy.Domain, entries)
			return n, resetError(err, func(f string) string { return "envoy." + f })
		case req.Limits != nil:
			held, err := api.limits.Engine().Reset(ctx, req.Limits.Resource, req.Limits.Domain)
			return heldCount(held), resetError(err, func(f string) string { return "limits." + f })
		case req.Quota != nil:
			held, err := api.limits.Engine().Reset(ctx, req.Quota.Namespace, req.Quota.Bucket)
			quotaField := map[string]string{"resource": "quota.namespace", "domain": "quota.bucket"}
			return heldCount(held), resetError(err, func(f string) string { return quotaField[f] })
		}
		return 0, &adminhttp.ResetError{Status: http.StatusBadRequest, Field: "body", Msg: "nothing to reset"}
	})
}

// resetError turns a service's reset error into the admin API's, the
// service's field named by field (its path in the body).
func resetError(err error, field func(string) string) error {
	var re *limits.RequestError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &re):
		status := http.StatusBadRequest
		if errors.Is(err, limits.ErrNotConfigured) {
			status = http.StatusNotFound
		}
		return &adminhttp.ResetError{Status: status, Field: field(re.Field), Msg: re.Reason}
	case errors.Is(err, envoyrls.ErrNoRule):
		return &adminhttp.ResetError{Status: http.StatusNotFound, Field: field("descriptor"), Msg: err.Error()}
	}
	return err
}

// heldCount is a bucket reset's count: 1 when the store held it.
func heldCount(held bool) int {
	if held {
		return 1
	}
	return 0
}
