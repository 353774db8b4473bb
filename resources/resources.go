// Package resources is Sluice's resource repository: the one document
// (`sluice server --config`) that every API's resources are configured
// in, parsed and validated as a whole into a Repository — Doorman's
// resource templates (resources:), the limits service's token buckets and
// burst tiers and Charon's copy-limited resources (limits:), and Envoy's
// rate limit rules (envoy_ratelimit:); Square's quota service file
// (LoadQuotaService) reads into the same Repository. Parsing is strict
// (unknown fields are errors) and every validation error names its
// section, item and field. A Watcher reloads the file when it changes and
// keeps the last good repository when a new one is bad; the document in
// an etcd key is read by admin/etcdstore, edited by package admin.
//
// # Resource templates
//
// The resources: section mirrors Doorman's ResourceRepository:
//
//	resources:
//	  - identifier_glob: "db/*"
//	    capacity: 1000
//	    safe_capacity: 10        # optional; -1: no limit
//	    description: "…"         # optional
//	    algorithm:
//	      kind: FAIR_SHARE
//	      lease_length: 60       # whole seconds
//	      refresh_interval: 16   # whole seconds, ≤ lease_length
//	      learning_mode_duration: 60   # optional; default lease_length
//	      parameters: [{name: decay_factor, value: "0.5"}]
//
// # Safe capacity
//
// safe_capacity is what a client may use while it cannot refresh its lease.
// Absent, the server computes it (capacity ÷ the clients it knows). 0
// forbids the resource. -1 (NoSafeCapacityLimit) means no limit: the
// template keeps -1, the server sends -1 in the wire field safe_capacity
// (the design returns the configured safe capacity with every lease), and
// a client in safe mode that holds no valid lease is not limited at all
// (+Inf; Sluice's client treats any negative safe capacity so). Any other
// negative value is an error.
//
// # Algorithm parameters
//
// parameters holds the named parameters of the design's table "Common
// algorithm parameters"; none is silently ignored (see
// algorithm.ParseParameters):
//
//   - decay_factor (a number in (0, 1], default 0.5) is honoured: the
//     factor by which the refresh interval decays per level up the server
//     tree.
//   - lease_duration_secs and refresh_interval are refused: they duplicate
//     the fields algorithm.lease_length and algorithm.refresh_interval,
//     which Doorman's Algorithm message requires anyway, and one rule must
//     have one source. The error says which field to set. So are
//     lease_length and learning_mode_duration as parameter names.
//   - Any other name is an error, and so is a name given twice.
//
// Parameters are passed on to child servers verbatim
// (Algorithm.Parameters); Algorithm.Params holds them resolved.
//
// # Limits
//
// A `limits:` section beside `resources:` configures the server-side
// token buckets of sluice.v1.Limits and quotaservice.QuotaService (see
// package limits/limitsyaml for its fields); Repository.Limits returns it.
// Its errors name their path under "limits", e.g.
//
//	limits.resources.api.domains.small.fill_rate: 0 must be > 0 (tokens per second)
//
// Copy-limited resources sit in the same section (Repository.Copies; see
// copies.go), and Envoy's rules, envoyproxy/ratelimit's format, in
// envoy_ratelimit: (Repository.EnvoyRateLimit; package limits/rls).
//
// Source: doorman-design.md, "Root server configuration", "Optimistic,
// pessimistic and safe mode operation" and "Common algorithm parameters";
// doorman-wire.md, ResourceTemplate; charon-paper.md §5.1 (a safe capacity
// of -1 disables rate limiting).
package resources

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-rl/sluice/algorithm"
	pb "github.com/sluice-rl/sluice/api/doorman"
	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/limits/copies"
	"github.com/sluice-rl/sluice/limits/limitsyaml"
	"github.com/sluice-rl/sluice/limits/rls"
)

// Template is one validated resource template.
type Template struct {
	// IdentifierGlob is the resource id or glob (path.Match syntax) the
	// template applies to.
	IdentifierGlob string
	// Capacity is the capacity to divide (for Static: per client), ≥ 0.
	Capacity float64
	// SafeCapacity is the configured safe capacity, in the resource's unit
	// per client, when HasSafeCapacity: ≥ 0, or NoSafeCapacityLimit (-1)
	// for no limit. HasSafeCapacity is false when the file does not set it
	// (the server then computes it).
	SafeCapacity    float64
	HasSafeCapacity bool
	// Description is free text.
	Description string
	// Algorithm says how the capacity is divided.
	Algorithm Algorithm
	// Index is the template's position in the file (0-based).
	Index int
}

// NoSafeCapacityLimit is the safe_capacity that means "no limit": a client
// that cannot refresh its lease is not limited. It is kept as -1 in the
// Template and sent as -1 on the wire.
//
// Source: charon-paper.md §5.1 ("If this capacity is -1, then rate limiting
// is disabled"); doorman-design.md, "Optimistic, pessimistic and safe mode
// operation".
const NoSafeCapacityLimit = -1.0

// SafeCapacityUnlimited reports whether the template sets safe_capacity to
// NoSafeCapacityLimit.
func (t Template) SafeCapacityUnlimited() bool {
	return t.HasSafeCapacity && t.SafeCapacity == NoSafeCapacityLimit
}

// Algorithm is a template's algorithm with its durations and parameters
// resolved.
type Algorithm struct {
	Kind algorithm.Kind
	// LeaseLength and RefreshInterval are whole seconds;
	// RefreshInterval ≤ LeaseLength.
	LeaseLength     time.Duration
	RefreshInterval time.Duration
	// LearningModeDuration is whole seconds; it is LeaseLength when the
	// file does not set it, and may be 0 (no learning mode).
	LearningModeDuration time.Duration
	// Parameters are the named parameters as written in the file, in file
	// order, each known and valid; a server passes them on to its children.
	Parameters []Parameter
	// Params are Parameters resolved, every parameter not given at its
	// default (decay_factor 0.5).
	Params algorithm.Params
}

// Parameter is a named algorithm parameter, {name, value} in the file.
type Parameter = algorithm.Parameter

// Param returns the value of parameter name.
func (a Algorithm) Param(name string) (string, bool) {
	for _, p := range a.Parameters {
		if p.Name == name {
			return p.Value, true
		}
	}
	return "", false
}

// Repository is a parsed, validated set of templates. It is immutable and
// safe for concurrent use.
type Repository struct {
	templates []Template
	exact     map[string]int
	globs     []int
	limits    *limits.Config
	copies    *copies.Config
	envoy     *rls.Config
	notes     []string
	hash      string
}

// Copies returns the copy-limited resources of the file's limits section
// (`algorithm: copies`), validated, or nil when it has none. The caller
// must not change it.
func (r *Repository) Copies() *copies.Config { return r.copies }

// Notes returns what loading normalized, one line each, as charon-paper.md
// §4.1 normalizes a configuration before committing it: burst tiers with
// an active time of 0 removed, windows shortened to the active time,
// active times trimmed to whole windows, copy limits above the global
// limit lowered to it. The servers apply the same normalization.
func (r *Repository) Notes() []string { return r.notes }

// normalizeNotes returns the notes of normalizing copies of lc and cc.
func normalizeNotes(lc *limits.Config, cc *copies.Config) []string {
	var notes []string
	if lc != nil {
		for _, n := range lc.Clone().Normalize() {
			if !strings.HasPrefix(n, "limits.") {
				n = "limits." + n
			}
			notes = append(notes, n)
		}
	}
	if cc != nil {
		_, ns := cc.Normalize()
		for _, n := range ns {
			notes = append(notes, "limits."+n.String())
		}
	}
	return notes
}

// Limits returns the file's limits section, validated (nil when the file
// has none): the server-side token buckets of sluice.v1.Limits and
// quotaservice.QuotaService. See package limits/limitsyaml for its format. The
// caller must not change it.
func (r *Repository) Limits() *limits.Config { return r.limits }

// EnvoyRateLimit returns the envoy_ratelimit section: Envoy's rate limit
// service's rules, written in envoyproxy/ratelimit's format
// (limitsyaml.DecodeEnvoySection); nil when the file has no such section.
func (r *Repository) EnvoyRateLimit() *rls.Config { return r.envoy }

// Templates returns the templates in file order.
func (r *Repository) Templates() []Template { return append([]Template(nil), r.templates...) }

// Len returns the number of templates.
func (r *Repository) Len() int { return len(r.templates) }

// Hash returns the hex SHA-256 of the file the repository was parsed from.
func (r *Repository) Hash() string { return r.hash }

// Find returns the template for resource id: a template whose
// identifier_glob equals id exactly, else the first template in file order
// whose glob matches it. ok is false when none matches.
//
// Source: doorman-design.md, "Root server configuration" (two sweeps).
func (r *Repository) Find(id string) (t Template, ok bool) {
	if i, ok := r.exact[id]; ok {
		return r.templates[i], true
	}
	for _, i := range r.globs {
		if m, _ := path.Match(r.templates[i].IdentifierGlob, id); m {
			return r.templates[i], true
		}
	}
	return Template{}, false
}

// Proto returns the repository as Doorman's ResourceRepository message,
// every required field set.
func (r *Repository) Proto() *pb.ResourceRepository {
	out := &pb.ResourceRepository{}
	for _, t := range r.templates {
		a := &pb.Algorithm{
			Kind:                 pb.Algorithm_Kind(t.Algorithm.Kind).Enum(),
			LeaseLength:          proto.Int64(int64(t.Algorithm.LeaseLength / time.Second)),
			RefreshInterval:      proto.Int64(int64(t.Algorithm.RefreshInterval / time.Second)),
			LearningModeDuration: proto.Int64(int64(t.Algorithm.LearningModeDuration / time.Second)),
		}
		for _, p := range t.Algorithm.Parameters {
			a.Parameters = append(a.Parameters, &pb.NamedParameter{Name: proto.String(p.Name), Value: proto.String(p.Value)})
		}
		pt := &pb.ResourceTemplate{
			IdentifierGlob: proto.String(t.IdentifierGlob),
			Capacity:       proto.Float64(t.Capacity),
			Algorithm:      a,
		}
		if t.HasSafeCapacity {
			pt.SafeCapacity = proto.Float64(t.SafeCapacity)
		}
		if t.Description != "" {
			pt.Description = proto.String(t.Description)
		}
		out.Resources = append(out.Resources, pt)
	}
	return out
}

// LoadQuotaService reads the file at path in Square's quota service
// configuration format (limitsyaml.ParseQuotaService) as a repository with
// no templates whose Limits are the file's namespaces and buckets: what
// `sluice server --quotaservice-config` serves, so that a quota service
// deployment moves over without rewriting its configuration.
func LoadQuotaService(path string) (*Repository, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	r, err := ParseQuotaService(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// ParseQuotaService is LoadQuotaService for the file's content.
func ParseQuotaService(data []byte) (*Repository, error) {
	cfg, err := limitsyaml.ParseQuotaService(data)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(data)
	return &Repository{exact: map[string]int{}, limits: cfg, hash: hex.EncodeToString(sum[:])}, nil
}

// Load reads and parses the file at path.
func Load(file string) (*Repository, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	r, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return r, nil
}

// raw mirrors the YAML with pointers, so absent fields can be told apart.
type rawRepo struct {
	Resources      []rawTemplate `yaml:"resources"`
	Limits         *nodeOf       `yaml:"limits"`
	EnvoyRateLimit *nodeOf       `yaml:"envoy_ratelimit"`
}

// nodeOf keeps a YAML value as a node, for a package that decodes it
// strictly itself (limitsyaml.DecodeSection).
type nodeOf struct{ node *yaml.Node }

func (n *nodeOf) UnmarshalYAML(node *yaml.Node) error {
	n.node = node
	return nil
}

type rawTemplate struct {
	IdentifierGlob *string       `yaml:"identifier_glob"`
	Capacity       *float64      `yaml:"capacity"`
	SafeCapacity   *float64      `yaml:"safe_capacity"`
	Description    *string       `yaml:"description"`
	Algorithm      *rawAlgorithm `yaml:"algorithm"`
}

type rawAlgorithm struct {
	Kind                 *string        `yaml:"kind"`
	LeaseLength          *int64         `yaml:"lease_length"`
	RefreshInterval      *int64         `yaml:"refresh_interval"`
	LearningModeDuration *int64         `yaml:"learning_mode_duration"`
	Parameters           []rawParameter `yaml:"parameters"`
}

type rawParameter struct {
	Name  *string `yaml:"name"`
	Value *string `yaml:"value"`
}

// MaxDurationSeconds bounds lease_length, refresh_interval and
// learning_mode_duration (seconds): ten years.
const MaxDurationSeconds = 10 * 365 * 24 * 3600

// Parse parses and validates a YAML repository. An empty document is a
// valid repository with no templates. It returns every problem found,
// joined, each naming the template (index and glob) and the field, e.g.
//
//	resources[2] ("db/*"): algorithm.refresh_interval: 30 exceeds lease_length 10
func Parse(data []byte) (*Repository, error) {
	sum := sha256.Sum256(data)
	repo := &Repository{exact: map[string]int{}, hash: hex.EncodeToString(sum[:])}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var raw rawRepo
	if err := dec.Decode(&raw); err != nil {
		if errors.Is(err, io.EOF) {
			return repo, nil
		}
		if errs := unknownFields(data); len(errs) > 0 {
			return nil, errors.Join(errs...)
		}
		return nil, fmt.Errorf("config: %w", err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("config: more than one YAML document; want one")
	}
	var errs []error
	if raw.Limits != nil {
		section, cp, err := splitCopies(raw.Limits.node)
		if err != nil {
			errs = append(errs, err)
		} else {
			cfg, err := limitsyaml.DecodeSection(section)
			if err != nil {
				errs = append(errs, err)
			}
			repo.limits, repo.copies = cfg, cp
			repo.notes = normalizeNotes(cfg, cp)
		}
	}
	if raw.EnvoyRateLimit != nil {
		c, err := limitsyaml.DecodeEnvoySection(raw.EnvoyRateLimit.node)
		if err != nil {
			errs = append(errs, err)
		}
		repo.envoy = c
		errs = append(errs, checkBurstTiers(c, repo.limits)...)
	}
	seen := map[string]int{}
	for i, rt := range raw.Resources {
		t, err := rt.validate(i)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if j, dup := seen[t.IdentifierGlob]; dup {
			errs = append(errs, fmt.Errorf("resources[%d] (%q): identifier_glob: duplicate of resources[%d]", i, t.IdentifierGlob, j))
			continue
		}
		seen[t.IdentifierGlob] = i
		repo.templates = append(repo.templates, t)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	for i, t := range repo.templates {
		if strings.ContainsAny(t.IdentifierGlob, `*?[\`) {
			repo.globs = append(repo.globs, i)
		} else {
			repo.exact[t.IdentifierGlob] = i
		}
	}
	return repo, nil
}

func (rt rawTemplate) validate(i int) (Template, error) {
	name := "?"
	if rt.IdentifierGlob != nil {
		name = *rt.IdentifierGlob
	}
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("resources[%d] (%q): %s: %s", i, name, field, fmt.Sprintf(format, args...)))
	}
	t := Template{Index: i}
	switch {
	case rt.IdentifierGlob == nil || *rt.IdentifierGlob == "":
		bad("identifier_glob", "required")
	default:
		if _, err := path.Match(*rt.IdentifierGlob, ""); err != nil {
			bad("identifier_glob", "bad glob: %v", err)
		}
		t.IdentifierGlob = *rt.IdentifierGlob
	}
	switch {
	case rt.Capacity == nil:
		bad("capacity", "required")
	case math.IsNaN(*rt.Capacity) || math.IsInf(*rt.Capacity, 0):
		bad("capacity", "%v is not a finite number", *rt.Capacity)
	case *rt.Capacity < 0:
		bad("capacity", "%v is negative", *rt.Capacity)
	default:
		t.Capacity = *rt.Capacity
	}
	if rt.SafeCapacity != nil {
		switch v := *rt.SafeCapacity; {
		case math.IsNaN(v) || math.IsInf(v, 0):
			bad("safe_capacity", "%v is not a finite number", v)
		case v < 0 && v != NoSafeCapacityLimit:
			bad("safe_capacity", "%v is negative; the only negative value is -1 (no limit)", v)
		default:
			t.SafeCapacity, t.HasSafeCapacity = v, true
		}
	}
	if rt.Description != nil {
		t.Description = *rt.Description
	}
	a := rt.Algorithm
	if a == nil {
		bad("algorithm", "required")
		return t, errors.Join(errs...)
	}
	if a.Kind == nil {
		bad("algorithm.kind", "required")
	} else if k, err := algorithm.ParseKind(*a.Kind); err != nil {
		bad("algorithm.kind", "%v", err)
	} else {
		t.Algorithm.Kind = k
	}
	secs := func(field string, v *int64, min int64) (time.Duration, bool) {
		switch {
		case v == nil:
			return 0, false
		case *v < min:
			bad(field, "%d seconds, must be at least %d", *v, min)
		case *v > MaxDurationSeconds:
			bad(field, "%d seconds, must be at most %d", *v, MaxDurationSeconds)
		default:
			return time.Duration(*v) * time.Second, true
		}
		return 0, false
	}
	if a.LeaseLength == nil {
		bad("algorithm.lease_length", "required")
	}
	if a.RefreshInterval == nil {
		bad("algorithm.refresh_interval", "required")
	}
	lease, okL := secs("algorithm.lease_length", a.LeaseLength, 1)
	refresh, okR := secs("algorithm.refresh_interval", a.RefreshInterval, 1)
	if okL && okR && refresh > lease {
		bad("algorithm.refresh_interval", "%d exceeds lease_length %d", *a.RefreshInterval, *a.LeaseLength)
	}
	t.Algorithm.LeaseLength, t.Algorithm.RefreshInterval = lease, refresh
	t.Algorithm.LearningModeDuration = lease
	if a.LearningModeDuration != nil {
		if d, ok := secs("algorithm.learning_mode_duration", a.LearningModeDuration, 0); ok {
			t.Algorithm.LearningModeDuration = d
		}
	}
	ps := make([]Parameter, len(a.Parameters))
	for j, p := range a.Parameters {
		if p.Name != nil {
			ps[j].Name = *p.Name
		}
		if p.Value != nil {
			ps[j].Value = *p.Value
		}
	}
	params, err := algorithm.ParseParameters(ps)
	for _, e := range unjoin(err) {
		var pe *algorithm.ParameterError
		if !errors.As(e, &pe) {
			bad("algorithm.parameters", "%v", e)
			continue
		}
		field := fmt.Sprintf("algorithm.parameters[%d]", pe.Index)
		switch {
		case pe.Name == "":
			bad(field+".name", "required")
		case errors.Is(pe, algorithm.ErrBadParameterValue):
			bad(field+".value", "%v", pe)
		default:
			bad(field+".name", "%v", pe)
		}
	}
	if len(ps) > 0 {
		t.Algorithm.Parameters = ps
	}
	t.Algorithm.Params = params
	return t, errors.Join(errs...)
}

// unjoin returns the errors err joins (errors.Join), err itself if it
// joins none, or nil.
func unjoin(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// Fields each level of the file may have (the yaml tags of rawRepo,
// rawTemplate, rawAlgorithm and rawParameter).
var (
	repoFields      = []string{"resources", "limits", "envoy_ratelimit"}
	templateFields  = []string{"identifier_glob", "capacity", "safe_capacity", "description", "algorithm"}
	algorithmFields = []string{"kind", "lease_length", "refresh_interval", "learning_mode_duration", "parameters"}
	parameterFields = []string{"name", "value"}
)

// unknownFields finds the fields the file has that the configuration does
// not, each reported with the template (index and glob) and the line:
//
//	resources[0] ("a"): unknown field "capacityy" (line 4; want one of identifier_glob, …)
//
// It returns nil if the file does not parse as YAML or has none.
func unknownFields(data []byte) []error {
	var root yaml.Node
	if yaml.Unmarshal(data, &root) != nil || len(root.Content) == 0 || root.Content[0].Kind != yaml.MappingNode {
		return nil
	}
	var errs []error
	unknown := func(where string, key *yaml.Node, allowed []string) {
		errs = append(errs, fmt.Errorf("%sunknown field %q (line %d; want one of %s)", where, key.Value, key.Line, strings.Join(allowed, ", ")))
	}
	check := func(m *yaml.Node, where string, allowed []string, visit func(key string, v *yaml.Node)) {
		if m.Kind != yaml.MappingNode {
			return
		}
		for i := 0; i+1 < len(m.Content); i += 2 {
			k := m.Content[i]
			if !slices.Contains(allowed, k.Value) {
				unknown(where, k, allowed)
			} else if visit != nil {
				visit(k.Value, m.Content[i+1])
			}
		}
	}
	check(root.Content[0], "", repoFields, func(key string, res *yaml.Node) {
		if key != "resources" || res.Kind != yaml.SequenceNode {
			return
		}
		for i, t := range res.Content {
			glob := "?"
			if t.Kind == yaml.MappingNode {
				for j := 0; j+1 < len(t.Content); j += 2 {
					if t.Content[j].Value == "identifier_glob" {
						glob = t.Content[j+1].Value
					}
				}
			}
			where := fmt.Sprintf("resources[%d] (%q): ", i, glob)
			check(t, where, templateFields, func(key string, alg *yaml.Node) {
				if key != "algorithm" {
					return
				}
				check(alg, where+"algorithm: ", algorithmFields, func(key string, ps *yaml.Node) {
					if key != "parameters" || ps.Kind != yaml.SequenceNode {
						return
					}
					for j, p := range ps.Content {
						check(p, fmt.Sprintf("%salgorithm.parameters[%d]: ", where, j), parameterFields, nil)
					}
				})
			})
		}
	})
	return errs
}

// checkBurstTiers checks that every burst-tier rule of the envoy_ratelimit
// section names a resource of the limits section with algorithm
// burst_tiers.
func checkBurstTiers(envoy *rls.Config, lim *limits.Config) []error {
	var errs []error
	for _, name := range envoy.Names() {
		envoy.Domain(name).Each(func(p []*rls.Rule) {
			l := p[len(p)-1].Limit
			if l == nil || l.BurstTiers == "" {
				return
			}
			var r *limits.Resource
			if lim != nil {
				r = lim.Resources[l.BurstTiers]
			}
			switch {
			case r == nil:
				errs = append(errs, fmt.Errorf("envoy_ratelimit: domain %q, rule %s: rate_limit.burst_tiers: %q is not a resource of the limits section", name, rls.RulePath(p), l.BurstTiers))
			case r.Algorithm != limits.BurstTiers:
				errs = append(errs, fmt.Errorf("envoy_ratelimit: domain %q, rule %s: rate_limit.burst_tiers: resource %q has algorithm %s, not burst_tiers", name, rls.RulePath(p), l.BurstTiers, r.Algorithm))
			}
		})
	}
	return errs
}

// Compose returns a document assembled in code rather than parsed: the
// templates of base (nil: none) with the limits, copy-limited resources
// and Envoy rules given (nil: none; base's own sections are not kept).
// The sections are not validated here: the services that serve them
// validate them when they load the document, and server.New returns
// their errors. The result's Hash is base's (empty without base); the
// caller must not change the parts afterwards.
func Compose(base *Repository, lc *limits.Config, cc *copies.Config, ec *rls.Config) *Repository {
	r := &Repository{exact: map[string]int{}, limits: lc, copies: cc, envoy: ec}
	if base != nil {
		r.templates, r.exact, r.globs, r.hash = base.templates, base.exact, base.globs, base.hash
	}
	return r
}
