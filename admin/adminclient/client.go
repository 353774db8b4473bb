package adminclient

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-rl/sluice/admin"
	"github.com/sluice-rl/sluice/admin/adminhttp"
	"github.com/sluice-rl/sluice/limits/limitsyaml"
)

// Client speaks the HTTP API (adminhttp.Handler) of a server: what a CLI
// or a web page's tests build on. Its errors are the admin.Service's:
// *admin.ConflictError for a stale version (409), *admin.InvalidError
// (400, every error), errors wrapping admin.ErrNotFound (404) and
// admin.ErrExists (409 exists), *adminhttp.AuthError (401, 403), else
// *HTTPError. It is safe for concurrent use.
type Client struct {
	base  string
	hc    *http.Client
	token string
	user  string
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient sets the HTTP client (for TLS and client certificates,
// say); default http.DefaultClient.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithToken sends "Authorization: Bearer token" (a token of the server's
// --admin-token-file).
func WithToken(token string) Option { return func(c *Client) { c.token = token } }

// WithForwardedUser sends X-Forwarded-User: user (heeded from trusted
// proxies, and recorded for --admin-insecure loopback writes).
func WithForwardedUser(user string) Option { return func(c *Client) { c.user = user } }

// New returns a client of the server at baseURL
// ("http://127.0.0.1:15000" or "https://host:port").
func New(baseURL string, opts ...Option) *Client {
	c := &Client{base: strings.TrimSuffix(baseURL, "/"), hc: http.DefaultClient}
	for _, o := range opts {
		o(c)
	}
	return c
}

// WriteOptions are a change's parameters.
type WriteOptions struct {
	// IfVersion is sent as If-Match (0: none: the change applies to the
	// current version).
	IfVersion int64
	// DryRun validates and returns the result, storing nothing.
	DryRun bool
	// Upsert makes Update create an absent object.
	Upsert bool
}

// HTTPError is an answer the client does not map to another error.
type HTTPError struct {
	Status int
	Body   adminhttp.ErrorBody
}

func (e *HTTPError) Error() string {
	return fmt.Sprintf("admin API: %d %s: %s", e.Status, http.StatusText(e.Status), e.Body.Error)
}

// Config returns the current document and version.
func (c *Client) Config(ctx context.Context) (admin.Current, error) {
	var out admin.Current
	err := c.do(ctx, http.MethodGet, "config", nil, "", WriteOptions{}, &out)
	return out, err
}

// Get returns one object and the version it was read at (from the
// answer's ETag).
func (c *Client) Get(ctx context.Context, o admin.Object) (admin.ObjectView, int64, error) {
	var out admin.ObjectView
	v, err := c.doVersion(ctx, http.MethodGet, o.String(), nil, "", WriteOptions{}, &out)
	return out, v, err
}

// List returns a collection's objects (o.IsCollection).
func (c *Client) List(ctx context.Context, o admin.Object) (admin.Listing, error) {
	var out admin.Listing
	err := c.do(ctx, http.MethodGet, o.String(), nil, "", WriteOptions{}, &out)
	return out, err
}

// Create creates o with value: YAML or JSON text ([]byte or string), a
// *yaml.Node, or anything encoding/json encodes (map[string]any,
// admin/effective's Bucket, …). The fields are written in the order the
// body gives them: a map's are sorted by encoding/json, a struct's and
// text's kept.
func (c *Client) Create(ctx context.Context, o admin.Object, value any, w WriteOptions) (admin.Result, error) {
	return c.write(ctx, http.MethodPost, o, value, w)
}

// Update replaces o's value (see Create for value; w.Upsert creates an
// absent o).
func (c *Client) Update(ctx context.Context, o admin.Object, value any, w WriteOptions) (admin.Result, error) {
	return c.write(ctx, http.MethodPut, o, value, w)
}

// Delete removes o.
func (c *Client) Delete(ctx context.Context, o admin.Object, w WriteOptions) (admin.Result, error) {
	var out admin.Result
	err := c.do(ctx, http.MethodDelete, o.String(), nil, "", w, &out)
	return out, err
}

// Replace replaces the whole document with doc (YAML), stored byte for
// byte.
func (c *Client) Replace(ctx context.Context, doc []byte, w WriteOptions) (admin.Result, error) {
	var out admin.Result
	err := c.do(ctx, http.MethodPut, "config", doc, "application/yaml", w, &out)
	return out, err
}

// History returns the kept versions' audit records, newest first.
func (c *Client) History(ctx context.Context) ([]admin.Audit, error) {
	var out adminhttp.HistoryBody
	err := c.do(ctx, http.MethodGet, "history", nil, "", WriteOptions{}, &out)
	return out.Entries, err
}

// Version returns kept version n.
func (c *Client) Version(ctx context.Context, n int64) (admin.Entry, error) {
	var out admin.Entry
	err := c.do(ctx, http.MethodGet, "history/"+strconv.FormatInt(n, 10), nil, "", WriteOptions{}, &out)
	return out, err
}

// Diff returns the unified diff from version from to version to (0: the
// current one).
func (c *Client) Diff(ctx context.Context, from, to int64) (string, error) {
	p := "diff?from=" + strconv.FormatInt(from, 10)
	if to > 0 {
		p += "&to=" + strconv.FormatInt(to, 10)
	}
	var out adminhttp.DiffBody
	err := c.do(ctx, http.MethodGet, p, nil, "", WriteOptions{}, &out)
	return out.Diff, err
}

// Rollback stores version n's document as a new version.
func (c *Client) Rollback(ctx context.Context, n int64, w WriteOptions) (admin.Result, error) {
	var out admin.Result
	err := c.do(ctx, http.MethodPost, "rollback/"+strconv.FormatInt(n, 10), nil, "", w, &out)
	return out, err
}

func (c *Client) write(ctx context.Context, method string, o admin.Object, value any, w WriteOptions) (admin.Result, error) {
	var body []byte
	ctype := "application/json"
	switch v := value.(type) {
	case []byte:
		body, ctype = v, "application/yaml"
	case string:
		body, ctype = []byte(v), "application/yaml"
	case *yaml.Node:
		b, err := limitsyaml.Encode(v)
		if err != nil {
			return admin.Result{}, err
		}
		body, ctype = b, "application/yaml"
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return admin.Result{}, err
		}
		body = b
	}
	var out admin.Result
	err := c.do(ctx, method, o.String(), body, ctype, w, &out)
	return out, err
}

func (c *Client) do(ctx context.Context, method, path string, body []byte, ctype string, w WriteOptions, out any) error {
	_, err := c.doVersion(ctx, method, path, body, ctype, w, out)
	return err
}

// doVersion is do, returning the version of the answer's ETag (0 if
// none).
func (c *Client) doVersion(ctx context.Context, method, path string, body []byte, ctype string, w WriteOptions, out any) (int64, error) {
	u := c.base + adminhttp.Prefix + path
	q := url.Values{}
	if w.DryRun {
		q.Set("dry_run", "true")
	}
	if w.Upsert {
		q.Set("upsert", "true")
	}
	if len(q) > 0 {
		sep := "?"
		if strings.Contains(u, "?") {
			sep = "&"
		}
		u += sep + q.Encode()
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return 0, err
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	req.Header.Set("Accept", "application/json")
	if w.IfVersion > 0 {
		req.Header.Set("If-Match", strconv.FormatInt(w.IfVersion, 10))
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if c.user != "" {
		req.Header.Set("X-Forwarded-User", c.user)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return 0, err
	}
	version, _ := strconv.ParseInt(strings.Trim(strings.TrimPrefix(resp.Header.Get("ETag"), "W/"), `"`), 10, 64)
	if resp.StatusCode == http.StatusOK {
		return version, json.Unmarshal(data, out)
	}
	var eb adminhttp.ErrorBody
	if json.Unmarshal(data, &eb) != nil || eb.Error == "" {
		eb.Error = strings.TrimSpace(string(data))
	}
	return version, answerError(resp.StatusCode, eb)
}

// answerError maps an error answer back to the Service's errors.
func answerError(status int, eb adminhttp.ErrorBody) error {
	switch {
	case eb.Code == "conflict":
		return &admin.ConflictError{Current: eb.Version}
	case eb.Code == "invalid":
		return &admin.InvalidError{Errors: eb.Errors}
	case eb.Code == "exists":
		return fmt.Errorf("%s: %w", strings.TrimSuffix(eb.Error, ": "+admin.ErrExists.Error()), admin.ErrExists)
	case eb.Code == "not_found":
		return fmt.Errorf("%s: %w", strings.TrimSuffix(eb.Error, ": "+admin.ErrNotFound.Error()), admin.ErrNotFound)
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return &adminhttp.AuthError{Status: status, Msg: eb.Error}
	}
	return &HTTPError{Status: status, Body: eb}
}
