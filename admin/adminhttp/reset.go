package adminhttp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ResetPath is where ResetHandler serves: POST /admin/v1/reset.
const ResetPath = Prefix + "reset"

// ResetRequest is the JSON body of POST /admin/v1/reset: exactly one of
// its fields, naming the counters to restore to full.
//
// Source: envoyproxy/ratelimit issue #191 (reset one key after a good
// login, from a support desk); gubernator's Behavior RESET_REMAINING.
type ResetRequest struct {
	// Envoy names the counters of the Envoy rate limit rule a request
	// descriptor matches.
	Envoy *EnvoyReset `json:"envoy,omitempty"`
	// Limits names a bucket of the limits engine (Sluice's Limits API):
	// a token bucket, or a burst-tier domain.
	Limits *LimitsReset `json:"limits,omitempty"`
	// Quota names a bucket of Square's quota service: the same engine
	// (namespace = resource, bucket = domain).
	Quota *QuotaReset `json:"quota,omitempty"`
}

// EnvoyReset is a request descriptor of Envoy's rate limit service: its
// domain and entries, in order, as Envoy sends them.
type EnvoyReset struct {
	Domain     string       `json:"domain"`
	Descriptor []EnvoyEntry `json:"descriptor"`
}

// EnvoyEntry is one entry of a descriptor.
type EnvoyEntry struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// LimitsReset is a limits engine request's resource and domain.
type LimitsReset struct {
	Resource string `json:"resource"`
	Domain   string `json:"domain"`
}

// QuotaReset is a quota service request's namespace and bucket name.
type QuotaReset struct {
	Namespace string `json:"namespace"`
	Bucket    string `json:"bucket"`
}

// ResetBody is the answer of POST /admin/v1/reset: how many counters
// were held and forgotten (0 is no error: they were full already).
type ResetBody struct {
	Reset int `json:"reset"`
}

// MaxResetEntries bounds an Envoy descriptor's entries in a reset (Envoy
// RLS's own bound, server/envoyrls.MaxEntries).
const MaxResetEntries = 32

// Check returns a *ResetError (400) naming the first field at fault: not
// exactly one of Envoy, Limits and Quota ("body"), or an empty domain,
// descriptor, key, resource, namespace or bucket
// ("envoy.descriptor[1].key", "limits.domain"), or more than
// MaxResetEntries entries. Names are checked further by the Resetter.
func (r *ResetRequest) Check() error {
	bad := func(field, format string, args ...any) error {
		return &ResetError{Status: http.StatusBadRequest, Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	n := 0
	for _, set := range []bool{r.Envoy != nil, r.Limits != nil, r.Quota != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		return bad("body", "want exactly one of envoy, limits and quota; got %d", n)
	}
	switch {
	case r.Envoy != nil:
		e := r.Envoy
		switch {
		case e.Domain == "":
			return bad("envoy.domain", "empty")
		case len(e.Descriptor) == 0:
			return bad("envoy.descriptor", "no entries (at least one {\"key\": ..., \"value\": ...})")
		case len(e.Descriptor) > MaxResetEntries:
			return bad("envoy.descriptor", "%d entries, at most %d", len(e.Descriptor), MaxResetEntries)
		}
		for i, en := range e.Descriptor {
			if en.Key == "" {
				return bad("envoy.descriptor["+strconv.Itoa(i)+"].key", "empty")
			}
		}
	case r.Limits != nil:
		switch {
		case r.Limits.Resource == "":
			return bad("limits.resource", "empty")
		case r.Limits.Domain == "":
			return bad("limits.domain", "empty")
		}
	default:
		switch {
		case r.Quota.Namespace == "":
			return bad("quota.namespace", "empty")
		case r.Quota.Bucket == "":
			return bad("quota.bucket", "empty")
		}
	}
	return nil
}

// String describes what r resets, for messages and the audit log:
// `envoy domain "edge" descriptor "route=a"`, `limits resource "api"
// domain "small"`, `quota namespace "api" bucket "small"`.
func (r *ResetRequest) String() string {
	switch {
	case r.Envoy != nil:
		return fmt.Sprintf("envoy domain %q descriptor %q", r.Envoy.Domain, r.Envoy.entries())
	case r.Limits != nil:
		return fmt.Sprintf("limits resource %q domain %q", r.Limits.Resource, r.Limits.Domain)
	case r.Quota != nil:
		return fmt.Sprintf("quota namespace %q bucket %q", r.Quota.Namespace, r.Quota.Bucket)
	}
	return "nothing"
}

// entries writes the descriptor as "key=value,key=value".
func (e *EnvoyReset) entries() string {
	var b strings.Builder
	for i, en := range e.Descriptor {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(en.Key + "=" + en.Value)
	}
	return b.String()
}

// auditAttrs are the audit line's attributes of what r resets.
func (r *ResetRequest) auditAttrs() []any {
	switch {
	case r.Envoy != nil:
		return []any{"api", "envoy", "domain", r.Envoy.Domain, "descriptor", r.Envoy.entries()}
	case r.Limits != nil:
		return []any{"api", "limits", "resource", r.Limits.Resource, "domain", r.Limits.Domain}
	case r.Quota != nil:
		return []any{"api", "quota", "namespace", r.Quota.Namespace, "bucket", r.Quota.Bucket}
	}
	return nil
}

// Resetter restores counters to full for POST /admin/v1/reset: the
// server's composition root gives one over its limits engine and its
// Envoy rate limit service (this package knows neither). Reset is given
// a request that passed Check, and the HTTP request's context; it returns
// how many counters it forgot. Errors: a *ResetError for the caller's
// input (400, naming the field) or for something that does not exist
// (404: no such resource, rule or bucket); any other is the server's
// (500, logged). Implementations are safe for concurrent use.
type Resetter interface {
	Reset(ctx context.Context, req ResetRequest) (int, error)
}

// ResetterFunc is a func as a Resetter.
type ResetterFunc func(ctx context.Context, req ResetRequest) (int, error)

// Reset calls f.
func (f ResetterFunc) Reset(ctx context.Context, req ResetRequest) (int, error) { return f(ctx, req) }

// ResetError is a reset refused for its input: Status 400 (Field is
// invalid) or 404 (what Field names does not exist), Field the body's
// field ("limits.resource", "envoy.descriptor"), Msg why. The answer's
// ErrorBody has code bad_request or not_found and error "Field: Msg".
type ResetError struct {
	Status int
	Field  string
	Msg    string
}

// Error returns "Field: Msg".
func (e *ResetError) Error() string { return e.Field + ": " + e.Msg }

// ResetHandler serves POST /admin/v1/reset (mount it at ResetPath): the
// body a ResetRequest (JSON), the answer a ResetBody, {"reset": N}. It
// is a write: Auth identifies the caller as for a change of the
// configuration (401 without credentials, 403 when writes are disabled),
// and every reset done is audited on log (level info, message "counters
// reset", with user, auth, time, api and what was reset, and counters:
// N); a reset is not a change of the configuration, so it has no
// version and no entry in the history. Errors answer an ErrorBody: 400
// bad_request naming the field (a body that does not decode, not exactly
// one of envoy, limits and quota, an empty or invalid name), 404
// not_found (no such resource, rule or bucket; also every request when r
// is nil), 405 for another method, 413 for a body over
// admin.MaxBodyBytes, 500 for the Resetter's own failure (a store down).
// The handler is safe for concurrent use (as r must be).
//
// Source: envoyproxy/ratelimit issue #191; gubernator's Behavior
// RESET_REMAINING; docs/admin.md, "Resetting a counter".
func ResetHandler(r Resetter, auth *Auth, log *slog.Logger) http.Handler {
	if log == nil {
		log = slog.Default()
	}
	return &resetHandler{r: r, auth: auth, log: log}
}

type resetHandler struct {
	r    Resetter
	auth *Auth
	log  *slog.Logger
}

func (h *resetHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p := r.URL.EscapedPath(); p != ResetPath {
		writeError(w, http.StatusNotFound, ErrorBody{Error: fmt.Sprintf("%s: no such path", p), Code: "not_found"})
		return
	}
	if r.Method != http.MethodPost {
		methodNotAllowed(w, "POST")
		return
	}
	id, err := h.auth.Identify(r, true)
	if err != nil {
		if !refuse(w, r, h.log, err) {
			h.log.Error("admin: request failed", "err", err)
			writeError(w, http.StatusInternalServerError, ErrorBody{Error: err.Error(), Code: "internal"})
		}
		return
	}
	if h.r == nil {
		writeError(w, http.StatusNotFound, ErrorBody{Error: "resetting counters is not available on this server", Code: "not_found"})
		return
	}
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "" && !isJSON(r) {
		writeError(w, http.StatusBadRequest, ErrorBody{Error: fmt.Sprintf("Content-Type: %q: want application/json", ct), Code: "bad_request"})
		return
	}
	var req ResetRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, ErrorBody{Error: "body: want {\"envoy\": {...}}, {\"limits\": {...}} or {\"quota\": {...}}: " + err.Error(), Code: "bad_request"})
		return
	}
	if dec.More() {
		writeError(w, http.StatusBadRequest, ErrorBody{Error: "body: more than one JSON value", Code: "bad_request"})
		return
	}
	if err := req.Check(); err != nil {
		h.fail(w, &req, id, err)
		return
	}
	n, err := h.r.Reset(r.Context(), req)
	if err != nil {
		h.fail(w, &req, id, err)
		return
	}
	h.log.Info("counters reset", append([]any{"user", id.User, "auth", id.Method, "time", time.Now().UTC().Format(time.RFC3339Nano)},
		append(req.auditAttrs(), "counters", n)...)...)
	writeJSON(w, http.StatusOK, ResetBody{Reset: n})
}

// fail answers a reset's error: a *ResetError with its status, else 500
// (logged, with who asked for what).
func (h *resetHandler) fail(w http.ResponseWriter, req *ResetRequest, id Identity, err error) {
	var re *ResetError
	switch {
	case errors.As(err, &re) && re.Status == http.StatusNotFound:
		writeError(w, http.StatusNotFound, ErrorBody{Error: re.Error(), Code: "not_found"})
	case errors.As(err, &re):
		writeError(w, http.StatusBadRequest, ErrorBody{Error: re.Error(), Code: "bad_request"})
	default:
		h.log.Error("admin: reset failed", "user", id.User, "auth", id.Method, "reset", req.String(), "err", err)
		writeError(w, http.StatusInternalServerError, ErrorBody{Error: "reset " + req.String() + ": " + err.Error(), Code: "internal"})
	}
}

// refuse answers an Identify error that is an *AuthError: its status
// (and, for 401, WWW-Authenticate), logged, as every admin handler
// answers them; false (nothing written) for any other error.
func refuse(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) bool {
	var ae *AuthError
	if !errors.As(err, &ae) {
		return false
	}
	log.Warn("admin: request refused", "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr, "status", ae.Status, "why", ae.Msg)
	code := "unauthorized"
	if ae.Status == http.StatusForbidden {
		code = "forbidden"
	} else {
		w.Header().Set("WWW-Authenticate", `Bearer realm="sluice admin"`)
	}
	writeError(w, ae.Status, ErrorBody{Error: ae.Msg, Code: code})
	return true
}
