package adminclient

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/sluice-rl/sluice/admin/adminhttp"
)

// Reset restores the counters req names to full (POST /admin/v1/reset:
// exactly one of req.Envoy, req.Limits and req.Quota) and returns how
// many the server held and forgot (0 is no error: they were full
// already). It is a write: the client's credentials are sent, and the
// server audits it; it has no version. Errors: one wrapping
// admin.ErrNotFound (404: no such resource, rule or bucket), an
// *adminhttp.AuthError (401, 403: writes disabled), else an *HTTPError
// (400 naming the field, e.g. "limits.domain: empty"; 500 a store down).
//
// Source: envoyproxy/ratelimit issue #191; gubernator's Behavior
// RESET_REMAINING; docs/admin.md, "Resetting a counter".
func (c *Client) Reset(ctx context.Context, req adminhttp.ResetRequest) (int, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return 0, err
	}
	var out adminhttp.ResetBody
	err = c.do(ctx, http.MethodPost, "reset", body, "application/json", WriteOptions{}, &out)
	return out.Reset, err
}
