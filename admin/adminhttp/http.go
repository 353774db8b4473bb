package adminhttp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/sluice-rl/sluice/admin"
)

// Prefix is the path under which Handler serves.
const Prefix = "/admin/v1/"

// ErrorBody is the JSON body of every error answer.
type ErrorBody struct {
	// Error says what went wrong, e.g. "configuration changed since you
	// read it: version 8 now".
	Error string `json:"error"`
	// Code is conflict (409, stale version), exists (409, create of an
	// existing object), invalid (400, with Errors), bad_request (400),
	// not_found (404), unauthorized (401), forbidden (403), too_large
	// (413), method_not_allowed (405) or internal (500).
	Code string `json:"code"`
	// Version is, for a conflict, the current version.
	Version int64 `json:"version,omitempty"`
	// Errors lists, for invalid, every problem, each naming its field.
	Errors []string `json:"errors,omitempty"`
}

// HistoryBody is the answer of GET /admin/v1/history.
type HistoryBody struct {
	Entries []admin.Audit `json:"entries"`
}

// DiffBody is the answer of GET /admin/v1/diff.
type DiffBody struct {
	From int64  `json:"from"`
	To   int64  `json:"to"`
	Diff string `json:"diff"`
}

// ReplaceBody is the JSON body of PUT /admin/v1/config (a YAML body is
// the document itself).
type ReplaceBody struct {
	Document string `json:"document"`
}

// Handler serves the admin API as JSON over HTTP under /admin/v1/ (the
// server's one port; mount it at Prefix):
//
//	GET    /admin/v1/config                       version, document, hash, notes (?format=yaml: the document)
//	PUT    /admin/v1/config                       replace the document (YAML body, or JSON {"document": "..."})
//	GET    /admin/v1/templates                    list (likewise limits/resources, limits/resources/NAME/domains,
//	                                              limits/namespaces)
//	POST   /admin/v1/templates                    create a template named by the body's identifier_glob
//	GET    /admin/v1/OBJECT                       one object (admin.ObjectView)
//	POST   /admin/v1/OBJECT                       create it (409 exists if it exists)
//	PUT    /admin/v1/OBJECT                       update it (404 if absent; ?upsert=true creates it)
//	DELETE /admin/v1/OBJECT                       delete it
//	GET    /admin/v1/history                      the kept versions' audit records, newest first
//	GET    /admin/v1/history/N                    version N: audit record and document (?format=yaml: the document)
//	GET    /admin/v1/diff?from=A&to=B             unified diff between kept versions (to: default current)
//	POST   /admin/v1/rollback/N                   store version N's document as a new version
//
// OBJECT is an admin.Object's path (templates/GLOB, limits/resources/NAME,
// limits/resources/NAME/domains/DOMAIN, limits/resources/NAME/default,
// limits/resources/NAME/template, limits/namespaces/PREFIX,
// limits/global_default) with names path-escaped (db%2F*). Bodies are
// JSON (Content-Type: application/json) or YAML (admin.DecodeBody).
//
// Changes take If-Match: VERSION (or ?version=VERSION): when another
// version is current they are refused with 409 and an ErrorBody whose
// error is "configuration changed since you read it: version N now" and
// version N. Without one, a change applies to the current version.
// ?dry_run=true validates and answers the admin.Result (normalized object,
// notes, diff, the whole new document) storing nothing. Answers carry
// ETag: "VERSION". An invalid change answers 400 with every error.
//
// auth decides who may write (and, with AuthReads, read); svc nil (no
// configuration to edit) answers 404 to everything. log receives the
// refused writes.
func Handler(svc *admin.Service, auth *Auth, log *slog.Logger) http.Handler {
	if log == nil {
		log = slog.Default()
	}
	return &handler{svc: svc, auth: auth, log: log}
}

type handler struct {
	svc  *admin.Service
	auth *Auth
	log  *slog.Logger
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path, ok := strings.CutPrefix(r.URL.EscapedPath(), strings.TrimSuffix(Prefix, "/"))
	if !ok {
		writeError(w, http.StatusNotFound, ErrorBody{Error: "not under " + Prefix, Code: "not_found"})
		return
	}
	path = strings.Trim(path, "/")
	if h.svc == nil {
		writeError(w, http.StatusNotFound, ErrorBody{Error: h.auth.NothingToEdit(), Code: "not_found"})
		return
	}
	write := r.Method != http.MethodGet && r.Method != http.MethodHead
	id, err := h.auth.Identify(r, write)
	if err != nil {
		if !refuse(w, r, h.log, err) {
			h.fail(w, err)
		}
		return
	}
	head, rest, _ := strings.Cut(path, "/")
	switch head {
	case "history":
		h.history(w, r, rest)
	case "diff":
		h.diff(w, r, rest)
	case "rollback":
		h.rollback(w, r, rest, id)
	case "config":
		if rest != "" {
			h.notFound(w, path)
			return
		}
		h.config(w, r, id)
	default:
		o, err := admin.ParseObject(path)
		if err != nil {
			writeError(w, http.StatusNotFound, ErrorBody{Error: err.Error(), Code: "not_found"})
			return
		}
		h.object(w, r, o, id)
	}
}

func (h *handler) notFound(w http.ResponseWriter, path string) {
	writeError(w, http.StatusNotFound, ErrorBody{Error: fmt.Sprintf("%s%s: no such path", Prefix, path), Code: "not_found"})
}

func (h *handler) config(w http.ResponseWriter, r *http.Request, id Identity) {
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		cur, err := h.svc.Config(r.Context())
		if err != nil {
			h.fail(w, err)
			return
		}
		setVersion(w, cur.Version)
		if wantsYAML(r) {
			w.Header().Set("Content-Type", "application/yaml")
			_, _ = io.WriteString(w, cur.Document)
			return
		}
		writeJSON(w, http.StatusOK, cur)
	case http.MethodPut:
		c, ok := h.change(w, r, admin.OpReplace, admin.Object{}, id)
		if !ok {
			return
		}
		body, ok := readBody(w, r)
		if !ok {
			return
		}
		if isJSON(r) {
			var rb ReplaceBody
			dec := json.NewDecoder(bytes.NewReader(body))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&rb); err != nil {
				writeError(w, http.StatusBadRequest, ErrorBody{Error: "body: want {\"document\": \"YAML\"}: " + err.Error(), Code: "invalid", Errors: []string{"body: " + err.Error()}})
				return
			}
			body = []byte(rb.Document)
		}
		c.Document = body
		res, err := h.svc.Apply(r.Context(), c)
		h.answer(w, res, err)
	default:
		methodNotAllowed(w, "GET, PUT")
	}
}

func (h *handler) object(w http.ResponseWriter, r *http.Request, o admin.Object, id Identity) {
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		if o.IsCollection() {
			l, err := h.svc.List(r.Context(), o)
			if err != nil {
				h.fail(w, err)
				return
			}
			setVersion(w, l.Version)
			writeJSON(w, http.StatusOK, l)
			return
		}
		v, ver, err := h.svc.Get(r.Context(), o)
		if err != nil {
			h.fail(w, err)
			return
		}
		setVersion(w, ver)
		writeJSON(w, http.StatusOK, v)
	case http.MethodPost, http.MethodPut, http.MethodDelete:
		op := map[string]admin.Op{http.MethodPost: admin.OpCreate, http.MethodPut: admin.OpUpdate, http.MethodDelete: admin.OpDelete}[r.Method]
		if o.IsCollection() && !(op == admin.OpCreate && o.Kind.IsItem()) {
			methodNotAllowed(w, "GET")
			return
		}
		c, ok := h.change(w, r, op, o, id)
		if !ok {
			return
		}
		if op != admin.OpDelete {
			body, ok := readBody(w, r)
			if !ok {
				return
			}
			v, err := admin.DecodeBody(body, r.Header.Get("Content-Type"))
			if err != nil {
				h.fail(w, admin.Invalid(err))
				return
			}
			c.Value = v
		}
		if op == admin.OpUpdate {
			if c.Upsert, ok = boolParam(w, r, "upsert"); !ok {
				return
			}
		}
		res, err := h.svc.Apply(r.Context(), c)
		h.answer(w, res, err)
	default:
		methodNotAllowed(w, "GET, POST, PUT, DELETE")
	}
}

// change reads the parameters every change has: the expected version,
// dry_run, and the user.
func (h *handler) change(w http.ResponseWriter, r *http.Request, op admin.Op, o admin.Object, id Identity) (admin.Change, bool) {
	c := admin.Change{Op: op, Object: o, User: id.User, Auth: id.Method}
	v, err := expectedVersion(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, ErrorBody{Error: err.Error(), Code: "bad_request"})
		return c, false
	}
	c.IfVersion = v
	dry, ok := boolParam(w, r, "dry_run")
	c.DryRun = dry
	return c, ok
}

func (h *handler) history(w http.ResponseWriter, r *http.Request, rest string) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		methodNotAllowed(w, "GET")
		return
	}
	if rest == "" {
		es, err := h.svc.History(r.Context())
		if err != nil {
			h.fail(w, err)
			return
		}
		if len(es) > 0 {
			setVersion(w, es[0].Version)
		}
		writeJSON(w, http.StatusOK, HistoryBody{Entries: es})
		return
	}
	n, err := strconv.ParseInt(rest, 10, 64)
	if err != nil || n <= 0 {
		writeError(w, http.StatusBadRequest, ErrorBody{Error: fmt.Sprintf("history/%s: want a version number", rest), Code: "bad_request"})
		return
	}
	e, err := h.svc.Version(r.Context(), n)
	if err != nil {
		h.fail(w, err)
		return
	}
	if wantsYAML(r) {
		w.Header().Set("Content-Type", "application/yaml")
		_, _ = w.Write(e.Document)
		return
	}
	writeJSON(w, http.StatusOK, e)
}

func (h *handler) diff(w http.ResponseWriter, r *http.Request, rest string) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		methodNotAllowed(w, "GET")
		return
	}
	if rest != "" {
		h.notFound(w, "diff/"+rest)
		return
	}
	q := r.URL.Query()
	from, err := strconv.ParseInt(q.Get("from"), 10, 64)
	if err != nil || from <= 0 {
		writeError(w, http.StatusBadRequest, ErrorBody{Error: "from: want a version number", Code: "bad_request"})
		return
	}
	var to int64
	if s := q.Get("to"); s != "" {
		if to, err = strconv.ParseInt(s, 10, 64); err != nil || to <= 0 {
			writeError(w, http.StatusBadRequest, ErrorBody{Error: "to: want a version number", Code: "bad_request"})
			return
		}
	} else {
		cur, err := h.svc.Config(r.Context())
		if err != nil {
			h.fail(w, err)
			return
		}
		to = cur.Version
	}
	d, err := h.svc.DiffVersions(r.Context(), from, to)
	if err != nil {
		h.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, DiffBody{From: from, To: to, Diff: d})
}

func (h *handler) rollback(w http.ResponseWriter, r *http.Request, rest string, id Identity) {
	if r.Method != http.MethodPost {
		methodNotAllowed(w, "POST")
		return
	}
	n, err := strconv.ParseInt(rest, 10, 64)
	if err != nil || n <= 0 {
		writeError(w, http.StatusBadRequest, ErrorBody{Error: fmt.Sprintf("rollback/%s: want a version number", rest), Code: "bad_request"})
		return
	}
	c, ok := h.change(w, r, admin.OpRollback, admin.Object{}, id)
	if !ok {
		return
	}
	res, err := h.svc.Rollback(r.Context(), n, c)
	h.answer(w, res, err)
}

func (h *handler) answer(w http.ResponseWriter, res admin.Result, err error) {
	if err != nil {
		h.fail(w, err)
		return
	}
	setVersion(w, res.Version)
	writeJSON(w, http.StatusOK, res)
}

// fail answers err with its status.
func (h *handler) fail(w http.ResponseWriter, err error) {
	var (
		ce *admin.ConflictError
		ie *admin.InvalidError
		de *admin.DecodeError
	)
	switch {
	case errors.As(err, &ce):
		setVersion(w, ce.Current)
		writeError(w, http.StatusConflict, ErrorBody{Error: ce.Error(), Code: "conflict", Version: ce.Current})
	case errors.As(err, &ie):
		writeError(w, http.StatusBadRequest, ErrorBody{Error: ie.Error(), Code: "invalid", Errors: ie.Errors})
	case errors.As(err, &de):
		e := admin.Invalid(err)
		writeError(w, http.StatusBadRequest, ErrorBody{Error: e.Error(), Code: "invalid", Errors: e.Errors})
	case errors.Is(err, admin.ErrExists):
		writeError(w, http.StatusConflict, ErrorBody{Error: err.Error(), Code: "exists"})
	case errors.Is(err, admin.ErrNotFound):
		writeError(w, http.StatusNotFound, ErrorBody{Error: err.Error(), Code: "not_found"})
	default:
		h.log.Error("admin: request failed", "err", err)
		writeError(w, http.StatusInternalServerError, ErrorBody{Error: err.Error(), Code: "internal"})
	}
}

// expectedVersion reads If-Match ("7", "\"7\"", W/"7"; "*": any) or
// ?version=7; 0 when neither is given.
func expectedVersion(r *http.Request) (int64, error) {
	s := strings.TrimSpace(r.Header.Get("If-Match"))
	src := "If-Match"
	if s == "" {
		s, src = r.URL.Query().Get("version"), "version"
	}
	if s == "" || s == "*" {
		return 0, nil
	}
	t := strings.Trim(strings.TrimPrefix(s, "W/"), `"`)
	v, err := strconv.ParseInt(t, 10, 64)
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("%s: %q: want a version number (the version you read: ETag, or \"version\" in an answer)", src, s)
	}
	return v, nil
}

// boolParam reads a boolean query parameter (absent: false), answering
// 400 for a bad one.
func boolParam(w http.ResponseWriter, r *http.Request, name string) (bool, bool) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return false, true
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		writeError(w, http.StatusBadRequest, ErrorBody{Error: fmt.Sprintf("%s: %q: want true or false", name, s), Code: "bad_request"})
		return false, false
	}
	return b, true
}

func readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, admin.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(w, http.StatusRequestEntityTooLarge, ErrorBody{Error: fmt.Sprintf("body: more than %d bytes", admin.MaxBodyBytes), Code: "too_large"})
			return nil, false
		}
		writeError(w, http.StatusBadRequest, ErrorBody{Error: "body: " + err.Error(), Code: "bad_request"})
		return nil, false
	}
	return b, true
}

func isJSON(r *http.Request) bool {
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}

func wantsYAML(r *http.Request) bool {
	if f := r.URL.Query().Get("format"); f != "" {
		return f == "yaml"
	}
	a := r.Header.Get("Accept")
	return strings.Contains(a, "yaml") && !strings.Contains(a, "json")
}

func setVersion(w http.ResponseWriter, v int64) {
	w.Header().Set("ETag", `"`+strconv.FormatInt(v, 10)+`"`)
}

func methodNotAllowed(w http.ResponseWriter, allow string) {
	w.Header().Set("Allow", allow)
	writeError(w, http.StatusMethodNotAllowed, ErrorBody{Error: "method not allowed; allowed: " + allow, Code: "method_not_allowed"})
}

func writeError(w http.ResponseWriter, status int, e ErrorBody) { writeJSON(w, status, e) }

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
