package admin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-rl/sluice/admin/internal/yamlnode"
	"github.com/sluice-rl/sluice/resources"
)

// Service is the admin API in Go: it reads and changes the configuration
// document kept by a Store, object by object, validating every change
// with resources.Parse (the servers' loader) before storing it. The HTTP API
// (Handler) and any other front end (a CLI, the quota service's REST
// API, a web page) are thin layers over it. It is safe for concurrent
// use; the Store's compare-and-swap orders concurrent changes.
type Service struct {
	store Store
	log   *slog.Logger
	now   func() time.Time
	check func(*resources.Repository) error
	sync  func(context.Context) error
}

// Options configures a Service.
type Options struct {
	// Logger receives the audit line of every accepted change (level
	// info, message "configuration changed"); nil: slog.Default().
	Logger *slog.Logger
	// Now is the clock of the audit records; nil: time.Now.
	Now func() time.Time
	// Check, if set, is asked about every new document that loads
	// (resources.Parse), before it is stored: an error refuses the change as
	// invalid (*InvalidError, each joined error one entry), for what only
	// the server knows, e.g. that its limits come from elsewhere.
	Check func(*resources.Repository) error
	// Sync, if set, is called after every change is stored and before it
	// answers: it brings the server's own configuration up to date with
	// the store (its watcher rereads the file or key and applies what
	// changed), so that a change that answers has been applied by the
	// server that accepted it (read-your-writes). Other servers follow
	// through their watchers. An error is logged; the change, stored,
	// still answers (the watcher applies it when it sees it).
	//
	// Source: quotaservice-wire.md, "Admin REST API" (a write answered
	// with the configuration it made, which the next read returns).
	Sync func(context.Context) error
}

// New returns a Service over store.
func New(store Store, o Options) *Service {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Service{store: store, log: o.Logger, now: o.Now, check: o.Check, sync: o.Sync}
}

// Store returns the service's store.
func (s *Service) Store() Store { return s.store }

// ErrInvalid is wrapped by an *InvalidError.
var ErrInvalid = errors.New("invalid configuration")

// InvalidError refuses a change whose document resources.Parse refuses, or
// whose body does not decode: Errors lists every problem, each naming
// its field ("limits.resources.api.domains.x.fill_rate: 0 must be > 0
// (tokens per second)", "body.size: given more than once"). The HTTP API
// answers it with 400.
type InvalidError struct {
	Errors []string
}

// Error returns "invalid configuration: E1; E2; …".
func (e *InvalidError) Error() string {
	return fmt.Sprintf("%v: %s", ErrInvalid, strings.Join(e.Errors, "; "))
}

// Unwrap returns ErrInvalid.
func (e *InvalidError) Unwrap() error { return ErrInvalid }

// Invalid turns err (joined errors, or one error of several lines) into
// an *InvalidError with one line of Errors each: how the HTTP APIs answer
// a body that does not decode.
func Invalid(err error) *InvalidError {
	var out []string
	var walk func(error)
	walk = func(e error) {
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, x := range j.Unwrap() {
				walk(x)
			}
			return
		}
		for _, line := range strings.Split(e.Error(), "\n") {
			if line != "" {
				out = append(out, line)
			}
		}
	}
	walk(err)
	return &InvalidError{Errors: out}
}

// Change is one change of the configuration.
type Change struct {
	// Op is OpCreate (fails with ErrExists when the object exists),
	// OpUpdate (fails with ErrNotFound when it does not), OpDelete, or
	// OpReplace (the whole document: Document). Upsert sets OpUpdate's
	// "create if absent".
	Op     Op
	Upsert bool
	// Object is what to change (KindDocument for OpReplace). For
	// OpCreate of a template, Object may be the collection
	// (Object{Kind: KindTemplate}) and Value's identifier_glob names it.
	Object Object
	// Value is the object's new value (OpCreate, OpUpdate): a node tree
	// from DecodeBody, say. A template's value may leave identifier_glob
	// out (the Object's is used); when it has one, it must be the
	// Object's.
	Value *yaml.Node
	// Document is the whole new document, for OpReplace: stored byte for
	// byte.
	Document []byte
	// IfVersion is the version the change was made against: a change
	// when another version is current fails with a *ConflictError. 0:
	// against whatever version is current (a change made meanwhile is
	// built upon, never overwritten).
	IfVersion int64
	// DryRun validates and normalizes the change and returns its result
	// and diff, storing nothing.
	DryRun bool
	// User and Auth are recorded in the audit record (see Audit).
	User, Auth string
}

// Result is what a change did (or, for a dry run, would do).
type Result struct {
	// Version is the version the change made (a dry run, or a change
	// that changes nothing: the current version).
	Version int64 `json:"version"`
	// PreviousVersion is the version the change was applied to.
	PreviousVersion int64 `json:"previous_version"`
	DryRun          bool  `json:"dry_run,omitempty"`
	// Unchanged: the change leaves the document as it was; nothing is
	// stored.
	Unchanged bool   `json:"unchanged,omitempty"`
	Op        Op     `json:"op"`
	Object    Object `json:"object"`
	// From is, for a rollback, the version restored.
	From int64 `json:"from,omitempty"`
	// View is the object after the change (nil after a delete and for
	// the whole document).
	View *ObjectView `json:"view,omitempty"`
	// Notes is what loading the new document normalizes
	// (resources.Repository.Notes).
	Notes []string `json:"notes,omitempty"`
	// Diff is the unified diff of the document. When the stored document
	// was written differently from how the admin API writes YAML
	// (indentation, quoting), Diff compares it as rewritten and
	// Reformatted is set: the stored document changes more than Diff
	// shows, in form only.
	Diff        string `json:"diff"`
	Reformatted bool   `json:"reformatted,omitempty"`
	// Document is, for a dry run, the whole new document.
	Document string `json:"document,omitempty"`
	// Hash is the hex SHA-256 of the new document, which a server shows
	// (/debug/status, config.hash) once it has applied it.
	Hash string `json:"hash"`
	// Audit is the stored audit record (nil for a dry run).
	Audit *Audit `json:"audit,omitempty"`
}

// MaxRetries bounds how often a change made against "the current
// version" (IfVersion 0) is rebuilt after losing a race; the quota
// service's API (admin/quotaapi) rebuilds its own changes as often.
const MaxRetries = 5

// Apply validates and stores a change. Errors: *ConflictError (a stale
// IfVersion), *InvalidError (the new document does not load, or the value
// does not decode), errors wrapping ErrNotFound or ErrExists, and the
// store's.
func (s *Service) Apply(ctx context.Context, c Change) (Result, error) {
	return s.apply(ctx, c, "", 0)
}

// apply is Apply, recorded as op (rather than c.Op) from version from
// when op is set (a rollback).
func (s *Service) apply(ctx context.Context, c Change, op Op, from int64) (Result, error) {
	for attempt := 0; ; attempt++ {
		snap, err := s.store.Read(ctx)
		if err != nil {
			return Result{}, err
		}
		if c.IfVersion != 0 && snap.Version != c.IfVersion {
			return Result{}, &ConflictError{Current: snap.Version}
		}
		res, doc, err := s.build(snap, c)
		if op != "" {
			res.Op, res.From = op, from
		}
		if err != nil || res.Unchanged || c.DryRun {
			return res, err
		}
		a, err := s.store.Write(ctx, snap.Version, doc, Audit{Time: s.now(), User: c.User, Auth: c.Auth,
			Op: res.Op, Object: res.Object.String(), From: from, Diff: res.Diff})
		var ce *ConflictError
		if errors.As(err, &ce) && c.IfVersion == 0 && attempt < MaxRetries {
			continue // someone else's change came first: build on it
		}
		if err != nil {
			return Result{}, err
		}
		res.Version, res.Audit = a.Version, &a
		s.audit(a)
		if s.sync != nil {
			if err := s.sync(ctx); err != nil {
				s.log.Warn("configuration stored but not yet applied here; the watcher will apply it", "version", a.Version, "err", err)
			}
		}
		return res, nil
	}
}

// audit writes a's audit line.
func (s *Service) audit(a Audit) {
	s.log.Info("configuration changed", "user", a.User, "auth", a.Auth, "time", a.Time.Format(time.RFC3339Nano),
		"version", a.Version, "op", string(a.Op), "object", a.Object, "from", a.From, "hash", a.Hash, "store", s.store.String(), "diff", a.Diff)
}

// build computes the document c makes of snap, validated.
func (s *Service) build(snap Snapshot, c Change) (Result, []byte, error) {
	res := Result{Version: snap.Version, PreviousVersion: snap.Version, DryRun: c.DryRun, Op: c.Op, Object: c.Object}
	var doc []byte
	switch c.Op {
	case OpReplace:
		if len(c.Document) > MaxBodyBytes {
			return res, nil, Invalid(&DecodeError{Msg: fmt.Sprintf("%d bytes; at most %d", len(c.Document), MaxBodyBytes)})
		}
		res.Object = Object{}
		doc = c.Document
		res.Diff = unifiedDiff(fmt.Sprintf("version %d", snap.Version), "new", snap.Document, doc)
	case OpCreate, OpUpdate, OpDelete:
		d, err := ParseDocument(snap.Document)
		if err != nil {
			return res, nil, fmt.Errorf("the stored document does not parse; replace it whole: %w", err)
		}
		before, err := d.Encode()
		if err != nil {
			return res, nil, err
		}
		o, err := s.edit(d, &res, c)
		if err != nil {
			return res, nil, err
		}
		res.Object = o
		if doc, err = d.Encode(); err != nil {
			return res, nil, err
		}
		if err := sameValue(d, doc); err != nil {
			return res, nil, err
		}
		res.Reformatted = !bytes.Equal(before, snap.Document)
		res.Diff = unifiedDiff(fmt.Sprintf("version %d", snap.Version), "new", before, doc)
	default:
		return res, nil, fmt.Errorf("admin: unknown change %q", c.Op)
	}
	repo, err := resources.Parse(doc)
	if err == nil && s.check != nil {
		err = s.check(repo)
	}
	if err != nil {
		return res, nil, Invalid(err)
	}
	res.Notes = repo.Notes()
	res.Hash = Hash(doc)
	if res.Op != OpDelete && res.Object.Kind != KindDocument {
		d, err := ParseDocument(doc)
		if err == nil {
			if n, err := d.Get(res.Object); err == nil {
				v := newObjectView(res.Object, n, repo)
				res.View = &v
			}
		}
	}
	if bytes.Equal(doc, snap.Document) {
		res.Unchanged, res.Diff, res.Reformatted = true, "", false
		return res, nil, nil
	}
	if c.DryRun {
		res.Document = string(doc)
	}
	return res, doc, nil
}

// edit applies an object change to d and returns the object changed
// (named, for a template created through its collection).
func (s *Service) edit(d *Document, res *Result, c Change) (Object, error) {
	o := c.Object
	if o.Kind == KindDocument {
		return o, fmt.Errorf("admin: %s the whole document: use OpReplace", c.Op)
	}
	if c.Op == OpDelete {
		if o.IsCollection() {
			return o, fmt.Errorf("admin: %s is a collection; delete its objects one by one", o)
		}
		return o, d.Remove(o)
	}
	if c.Value == nil {
		return o, Invalid(&DecodeError{Msg: "empty; want a JSON or YAML object"})
	}
	v := c.Value
	if _, ok := itemKinds[o.Kind]; ok {
		var err error
		if o, err = itemName(o, v); err != nil {
			return o, err
		}
	} else if o.IsCollection() {
		return o, fmt.Errorf("admin: %s is a collection; name the object in the path", o)
	}
	copiesDomain := false
	if o.Kind == KindDomain {
		if r, err := d.Get(Resource(o.Name)); err == nil {
			copiesDomain = isCopiesNode(yamlnode.Deref(r))
		}
	}
	if err := checkShape(o, v, copiesDomain); err != nil {
		return o, Invalid(err)
	}
	mode := PutCreate
	switch {
	case c.Op == OpUpdate && c.Upsert:
		mode = PutUpsert
		if _, err := d.Get(o); errors.Is(err, ErrNotFound) {
			res.Op = OpCreate
		}
	case c.Op == OpUpdate:
		mode = PutUpdate
	}
	return o, d.Put(o, v, mode)
}

// sameValue checks that doc, d written as YAML, reads back as the value
// d holds: the YAML library writes a few rare constructs back as others.
func sameValue(d *Document, doc []byte) error {
	back, err := ParseDocument(doc)
	if err != nil {
		return fmt.Errorf("admin: the edited document does not read back: %w", err)
	}
	if !reflect.DeepEqual(nodeValue(d.root, 0), nodeValue(back.root, 0)) {
		return errors.New("admin: the edited document would not read back as written (a YAML construct the library cannot write back); replace the document whole (PUT config)")
	}
	return nil
}

// itemName checks the name field of a list item (a template's
// identifier_glob, an Envoy domain's domain) against the object's name,
// sets it when absent, and names an item created through the collection.
func itemName(o Object, v *yaml.Node) (Object, error) {
	ik := itemKinds[o.Kind]
	if v.Kind != yaml.MappingNode {
		return o, Invalid(&DecodeError{Msg: fmt.Sprintf("want a mapping (the %s's fields), got %s", ik.what, yamlnode.KindName(v))})
	}
	i := yamlnode.MapIndex(v, ik.name)
	switch {
	case i < 0 && o.Name == "":
		return o, Invalid(&DecodeError{Field: ik.name, Msg: fmt.Sprintf("required (the %s's name)", ik.what)})
	case i < 0:
		v.Content = append([]*yaml.Node{yamlnode.NewKey(ik.name), {Kind: yaml.ScalarNode, Tag: "!!str", Value: o.Name}}, v.Content...)
		return o, nil
	}
	g := v.Content[i+1]
	if g.Kind != yaml.ScalarNode || g.Tag != "!!str" || g.Value == "" {
		return o, Invalid(&DecodeError{Field: ik.name, Msg: fmt.Sprintf("want a non-empty string, got %s", yamlnode.KindName(g))})
	}
	if o.Name == "" {
		return Object{Kind: o.Kind, Name: g.Value}, nil
	}
	if g.Value != o.Name {
		return o, Invalid(&DecodeError{Field: ik.name, Msg: fmt.Sprintf("%q is not the path's %q (rename a %s by deleting it and creating the new one)", g.Value, o.Name, ik.what)})
	}
	return o, nil
}

// Current is the current document and its version.
type Current struct {
	Version  int64  `json:"version"`
	Document string `json:"document"`
	// Hash is the hex SHA-256 of Document.
	Hash string `json:"hash"`
	// Notes is what loading it normalizes; Errors, why it does not load
	// (someone stored a bad document by hand: the servers keep their last
	// good one).
	Notes  []string `json:"notes,omitempty"`
	Errors []string `json:"errors,omitempty"`
	// Store describes the store ("etcd key /sluice/config").
	Store string `json:"store"`
}

// Config returns the current document.
func (s *Service) Config(ctx context.Context) (Current, error) {
	snap, err := s.store.Read(ctx)
	if err != nil {
		return Current{}, err
	}
	c := Current{Version: snap.Version, Document: string(snap.Document), Hash: Hash(snap.Document), Store: s.store.String()}
	if repo, err := resources.Parse(snap.Document); err != nil {
		c.Errors = Invalid(err).Errors
	} else {
		c.Notes = repo.Notes()
	}
	return c, nil
}

// load reads and parses the current document.
func (s *Service) load(ctx context.Context) (int64, *Document, *resources.Repository, error) {
	snap, err := s.store.Read(ctx)
	if err != nil {
		return 0, nil, nil, err
	}
	d, err := ParseDocument(snap.Document)
	if err != nil {
		return snap.Version, nil, nil, err
	}
	repo, _ := resources.Parse(snap.Document) // nil when it does not load: no Effective
	return snap.Version, d, repo, nil
}

// Get returns one object and the version it was read at. Errors wrap
// ErrNotFound.
func (s *Service) Get(ctx context.Context, o Object) (ObjectView, int64, error) {
	if o.IsCollection() {
		return ObjectView{}, 0, fmt.Errorf("admin: %s is a collection: List it", o)
	}
	v, d, repo, err := s.load(ctx)
	if err != nil {
		return ObjectView{}, v, err
	}
	n, err := d.Get(o)
	if err != nil {
		return ObjectView{}, v, err
	}
	return newObjectView(o, n, repo), v, nil
}

// Listing is a collection's objects at a version.
type Listing struct {
	Version int64        `json:"version"`
	Objects []ObjectView `json:"objects"`
}

// List returns the objects of collection c (Object.IsCollection), in
// document order. Errors wrap ErrNotFound (the resource of a domain
// collection does not exist).
func (s *Service) List(ctx context.Context, c Object) (Listing, error) {
	if !c.IsCollection() {
		return Listing{}, fmt.Errorf("admin: %s is not a collection", c)
	}
	v, d, repo, err := s.load(ctx)
	if err != nil {
		return Listing{Version: v}, err
	}
	objs, err := d.List(c)
	if err != nil {
		return Listing{Version: v}, err
	}
	out := Listing{Version: v, Objects: make([]ObjectView, 0, len(objs))}
	for _, o := range objs {
		if n, err := d.Get(o); err == nil {
			out.Objects = append(out.Objects, newObjectView(o, n, repo))
		}
	}
	return out, nil
}

// History returns the kept versions' audit records, newest first.
func (s *Service) History(ctx context.Context) ([]Audit, error) { return s.store.History(ctx) }

// Version returns a kept version. Errors wrap ErrNotFound.
func (s *Service) Version(ctx context.Context, n int64) (Entry, error) { return s.store.Entry(ctx, n) }

// DiffVersions returns the unified diff from kept version a to kept
// version b ("" when their documents are equal).
func (s *Service) DiffVersions(ctx context.Context, a, b int64) (string, error) {
	ea, err := s.store.Entry(ctx, a)
	if err != nil {
		return "", err
	}
	eb, err := s.store.Entry(ctx, b)
	if err != nil {
		return "", err
	}
	return unifiedDiff(fmt.Sprintf("version %d", a), fmt.Sprintf("version %d", b), ea.Document, eb.Document), nil
}

// Rollback stores kept version n's document, byte for byte, as a new
// version (OpRollback, From n). IfVersion, DryRun, User and Auth are
// those of c; its other fields are ignored. The document must still load
// (resources.Parse), else *InvalidError.
func (s *Service) Rollback(ctx context.Context, n int64, c Change) (Result, error) {
	e, err := s.store.Entry(ctx, n)
	if err != nil {
		return Result{}, err
	}
	c.Op, c.Document = OpReplace, e.Document
	return s.apply(ctx, c, OpRollback, n)
}
