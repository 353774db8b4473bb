package quotaapi

import (
	"context"
	"errors"
	"fmt"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-rl/sluice/admin"
	"github.com/sluice-rl/sluice/admin/filestore"
	"github.com/sluice-rl/sluice/admin/internal/yamlnode"
	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/limits/limitsyaml"
	"github.com/sluice-rl/sluice/resources"
)

// File is an admin.Store over the quota service's own configuration
// file (Square's YAML, what `sluice server --quotaservice-config FILE`
// reads), so that quotaservice-cli, and /admin/v1, edit a deployment that
// was never converted, in its own format.
//
// The admin.Service sees Sluice's document: a limits section converted from the
// file (limitsyaml.QuotaServiceSection) with its comments; a change is
// written back to the file in Square's format (limitsyaml.
// MarshalQuotaService: comments kept with what they annotate, fields at the
// quota service's defaults left out, version, user and date set to the
// change's), atomically, with its history in FILE.history/ as
// filestore.Store keeps it (the entries are the file's content, byte for byte). Use
// Check as the admin.Service's Check, so that a change the format
// cannot say is refused before it is stored. Safe for concurrent use; one
// process writes the file (as filestore.Store).
//
// Source: quotaservice-wire.md, "Admin REST API" and "Configuration".
type File struct {
	file *filestore.Store
}

// OpenFile returns the store of the quota service file path
// (filestore.Open's rules: a regular file, history in path.history/).
func OpenFile(path string, o filestore.Options) (*File, error) {
	fs, err := filestore.Open(path, o)
	if err != nil {
		return nil, err
	}
	return &File{file: fs}, nil
}

// String returns "quota service file PATH".
func (s *File) String() string { return "quota service " + s.file.String() }

// Read returns the file converted to Sluice's document, and its version.
// Errors: the file's, and ParseQuotaService's when it does not load.
func (s *File) Read(ctx context.Context) (admin.Snapshot, error) {
	snap, err := s.file.Read(ctx)
	if err != nil {
		return snap, err
	}
	snap.Document, err = toSluice(snap.Document, snap.Version)
	return snap, err
}

// Write converts doc, Sluice's document, to the quota service's format
// and stores it as the next version (filestore.Store.Write). Errors: as
// filestore.Store.Write, and an *admin.InvalidError for a document the format cannot
// say (Check refuses it earlier).
func (s *File) Write(ctx context.Context, expected int64, doc []byte, a admin.Audit) (admin.Audit, error) {
	r, err := resources.Parse(doc)
	if err != nil {
		return admin.Audit{}, admin.Invalid(err)
	}
	var from *yaml.Node
	if d, err := admin.ParseDocument(doc); err == nil {
		from = yamlnode.Deref(yamlnode.MapGet(top(d), "limits"))
	}
	var c limits.Config
	if r.Limits() != nil {
		c = *r.Limits()
	}
	c.Version, c.User, c.Date = int32(expected+1), a.User, a.Time.Unix()
	out, err := limitsyaml.MarshalQuotaService(&c, from)
	if err != nil {
		return admin.Audit{}, admin.Invalid(err)
	}
	return s.file.Write(ctx, expected, out, a)
}

// History returns the file's kept versions (filestore.Store.History).
func (s *File) History(ctx context.Context) ([]admin.Audit, error) {
	return s.file.History(ctx)
}

// Entry returns kept version n converted to Sluice's document; its Audit
// hash is that of the file's content.
func (s *File) Entry(ctx context.Context, n int64) (admin.Entry, error) {
	e, err := s.file.Entry(ctx, n)
	if err != nil {
		return e, err
	}
	e.Document, err = toSluice(e.Document, n)
	return e, err
}

// toSluice converts the quota service file's content (version v) into
// Sluice's document: its limits section.
func toSluice(data []byte, v int64) ([]byte, error) {
	if len(data) == 0 {
		return nil, nil
	}
	section, err := limitsyaml.QuotaServiceSection(data)
	if err != nil {
		return nil, fmt.Errorf("the quota service file (version %d) does not load: %w", v, err)
	}
	return limitsyaml.Encode(&yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Content: []*yaml.Node{yamlnode.NewKey("limits"), section}})
}

// Check is the admin.Service's Check (admin.Options.Check) for a File: a
// document with anything but a limits section the quota service's format
// can say (MarshalQuotaService's errors, each naming its field) is
// refused.
func Check(r *resources.Repository) error {
	var errs []error
	if r.Len() > 0 {
		errs = append(errs, errors.New("resources: Doorman templates have no place in the quota service's file"))
	}
	if r.Copies() != nil {
		errs = append(errs, errors.New("limits: copy-limited resources have no place in the quota service's file"))
	}
	if r.EnvoyRateLimit() != nil {
		errs = append(errs, errors.New("envoy_ratelimit: Envoy's rules have no place in the quota service's file"))
	}
	if cfg := r.Limits(); cfg != nil {
		if _, err := limitsyaml.MarshalQuotaService(cfg, nil); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// top returns d's top mapping.
func top(d *admin.Document) *yaml.Node {
	n, _ := d.Get(admin.Object{Kind: admin.KindDocument})
	return n
}
