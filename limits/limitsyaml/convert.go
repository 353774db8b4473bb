package limitsyaml

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-rl/sluice/limits"
)

// Conversions between the peers' formats and Sluice's own, for `sluice
// config convert` and the admin API over the quota service's file.
//
// Source: docs/migrate/quotaservice.md.

// QuotaServiceSection converts the quota service's configuration (Square's
// YAML, as ParseQuotaService reads it) into Sluice's limits section, with
// the same behaviour: every bucket written with all its fields, the quota
// service's defaults applied (MarshalSection's form, so nothing depends on
// which defaults the two formats share). Comments move with what they
// annotate (a namespace's to its resource, a bucket's to its domain), and
// a bucket written in block style stays in block style. The file's
// version, user and date have no place in the section and are dropped.
// Errors: ParseQuotaService's.
func QuotaServiceSection(data []byte) (*yaml.Node, error) {
	cfg, err := ParseQuotaService(data)
	if err != nil {
		return nil, err
	}
	section := sectionNode(cfg)
	root, err := parseDocument(data)
	if err != nil {
		return nil, err
	}
	if root != nil {
		toSluice := make(map[string]string, len(qsVocabulary.Names))
		for sluice, qs := range qsVocabulary.Names {
			toSluice[qs] = sluice
		}
		copyComments(section, root, toSluice)
	}
	return section, nil
}

// MarshalQuotaService writes cfg as the quota service's configuration
// file (Square's YAML: global_default_bucket, namespaces with
// default_bucket, dynamic_bucket_template, max_dynamic_buckets and
// buckets, then version, user and date), every bucket with its size and
// fill rate and the fields that are not the quota service's defaults, in
// milliseconds. Comments of from, the limits section cfg was
// read from (nil: none), move with what they annotate, and block or flow
// style of each bucket is kept. ParseQuotaService reads the result back
// to cfg.
//
// Errors, each naming its field in the section's terms: what the quota
// service's format cannot say — namespace prefixes, a resource other than
// token buckets or failing open, a fill rate that is not a whole number of
// tokens per second or a size below 1, durations that are not whole
// milliseconds, a wait timeout or max debt of 0 (the format reads 0 as
// the default), a bucket's budgets (limits.Bucket.Budgets: the format
// has no such field, and a file written without them would lose them).
func MarshalQuotaService(cfg *limits.Config, from *yaml.Node) ([]byte, error) {
	if cfg == nil {
		cfg = &limits.Config{}
	}
	var errs []error
	bad := func(path, format string, args ...any) {
		errs = append(errs, &limits.ConfigError{Path: path, Msg: fmt.Sprintf(format, args...) + ": the quota service's format cannot say it"})
	}
	bucket := func(b limits.Bucket, path string) *yaml.Node {
		if b.Size < 1 {
			bad(join(path, "size"), "%d", b.Size)
		}
		if b.FillRate < 1 || b.FillRate != math.Trunc(b.FillRate) || b.FillRate > math.MaxInt64/2 {
			bad(join(path, "fill_rate"), "%v tokens per second", b.FillRate)
		}
		ms := func(d time.Duration, field string) *yaml.Node {
			if d%time.Millisecond != 0 || d <= 0 {
				bad(join(path, field), "%v", d)
			}
			return intNode(d.Milliseconds())
		}
		m := mappingNode()
		m.Style = yaml.FlowStyle
		m.Content = []*yaml.Node{keyNode("size"), intNode(b.Size), keyNode("fill_rate"), intNode(int64(b.FillRate))}
		// The other fields only when they are not the quota service's
		// defaults (qsDefaults), so that a file keeps its shape.
		if b.WaitTimeout != limits.DefaultWaitTimeout {
			m.Content = append(m.Content, keyNode("wait_timeout_millis"), ms(b.WaitTimeout, "wait_timeout"))
		}
		if b.MaxIdle > 0 {
			m.Content = append(m.Content, keyNode("max_idle_millis"), ms(b.MaxIdle, "max_idle"))
		}
		if b.MaxDebt != limits.DefaultMaxDebt {
			m.Content = append(m.Content, keyNode("max_debt_millis"), ms(b.MaxDebt, "max_debt"))
		}
		if b.MaxTokensPerRequest != 0 && b.MaxTokensPerRequest != roundUpTokens(b.FillRate) {
			m.Content = append(m.Content, keyNode("max_tokens_per_request"), intNode(b.MaxTokensPerRequest))
		}
		if len(b.Budgets) > 0 {
			bad(join(path, "budgets"), "%d budgets", len(b.Budgets))
		}
		return m
	}
	root := mappingNode()
	add := func(m *yaml.Node, k string, v *yaml.Node) { m.Content = append(m.Content, keyNode(k), v) }
	if len(cfg.Namespaces) > 0 {
		bad(join(sectionPath, "namespaces"), "namespace prefixes %v", sortedKeys(cfg.Namespaces))
	}
	if cfg.GlobalDefault != nil {
		add(root, "global_default_bucket", bucket(*cfg.GlobalDefault, join(sectionPath, "global_default")))
	}
	if len(cfg.Resources) > 0 {
		nss := mappingNode()
		for _, name := range sortedKeys(cfg.Resources) {
			r, path := cfg.Resources[name], key(join(sectionPath, "resources"), name)
			ns := mappingNode()
			if r == nil {
				r = &limits.Resource{}
			}
			if r.Algorithm != limits.TokenBucket {
				bad(join(path, "algorithm"), "%s", r.Algorithm)
			}
			if r.OnStoreError != limits.FailClosed {
				bad(join(path, "on_store_error"), "%s", r.OnStoreError)
			}
			if r.Default != nil {
				add(ns, "default_bucket", bucket(*r.Default, join(path, "default")))
			}
			if r.Template != nil {
				add(ns, "dynamic_bucket_template", bucket(*r.Template, join(path, "template")))
			}
			if r.MaxDynamicBuckets != 0 {
				add(ns, "max_dynamic_buckets", intNode(r.MaxDynamicBuckets))
			}
			if len(r.Buckets) > 0 {
				bs := mappingNode()
				for _, d := range sortedKeys(r.Buckets) {
					add(bs, d, bucket(r.Buckets[d], key(join(path, "domains"), d)))
				}
				add(ns, "buckets", bs)
			}
			if len(ns.Content) == 0 {
				ns.Style = yaml.FlowStyle
			}
			add(nss, name, ns)
		}
		add(root, "namespaces", nss)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if cfg.Version != 0 {
		add(root, "version", intNode(int64(cfg.Version)))
	}
	if cfg.User != "" {
		add(root, "user", scalarNode("!!str", cfg.User))
	}
	if cfg.Date != 0 {
		add(root, "date", intNode(cfg.Date))
	}
	if len(root.Content) == 0 {
		root.Style = yaml.FlowStyle
	}
	if from != nil {
		copyComments(root, from, qsVocabulary.Names)
	}
	return Encode(root)
}

// EnvoySection converts envoyproxy/ratelimit's configuration at path (a
// file, or a directory of them, as LoadEnvoyRateLimit reads it) into the
// items of Sluice's envoy_ratelimit section: a sequence holding each
// domain's document as it is, comments and all, in the order the server
// reads them. Errors: LoadEnvoyRateLimit's (a domain defined twice names
// both files).
func EnvoySection(path string) (*yaml.Node, error) {
	_, docs, err := loadEnvoy(path)
	if err != nil {
		return nil, err
	}
	seq := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
	for _, doc := range docs {
		d := doc.Content[0]
		if doc.HeadComment != "" {
			d.HeadComment = strings.TrimSpace(doc.HeadComment + "\n" + d.HeadComment)
		}
		seq.Content = append(seq.Content, d)
	}
	return seq, nil
}

// envoyFiles returns the files LoadEnvoyRateLimit reads for path: path
// itself, or a directory's *.yaml and *.yml files in name order, dot
// files left out.
func envoyFiles(path string) ([]string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		return []string{path}, nil
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, err
	}
	var files []string
	for _, e := range entries {
		// Dot files are never rules (an editor's, Kubernetes' ..data):
		// envoyproxy/ratelimit's RUNTIME_IGNOREDOTFILES, always.
		if ext := filepath.Ext(e.Name()); !e.IsDir() && !strings.HasPrefix(e.Name(), ".") && (ext == ".yaml" || ext == ".yml") {
			files = append(files, filepath.Join(path, e.Name()))
		}
	}
	slices.Sort(files)
	return files, nil
}

// copyComments copies the comments of src's mapping keys and values to
// dst's, recursively, matching each key of src by its own name or by
// names[key] (a field the two formats name differently); a src mapping in
// block style makes its dst mapping block style too. Keys dst lacks are
// skipped.
func copyComments(dst, src *yaml.Node, names map[string]string) {
	if src.Kind == yaml.DocumentNode && len(src.Content) > 0 {
		dst.HeadComment, dst.FootComment = src.HeadComment, src.FootComment
		copyComments(dst, src.Content[0], names)
		return
	}
	if src.Kind != yaml.MappingNode || dst.Kind != yaml.MappingNode {
		return
	}
	if src.Style&yaml.FlowStyle == 0 && len(dst.Content) > 0 {
		dst.Style &^= yaml.FlowStyle
	}
	find := func(k string) int {
		for i := 0; i+1 < len(dst.Content); i += 2 {
			if dst.Content[i].Value == k {
				return i
			}
		}
		return -1
	}
	for i := 0; i+1 < len(src.Content); i += 2 {
		sk, sv := src.Content[i], src.Content[i+1]
		j := find(sk.Value)
		if j < 0 {
			if n, ok := names[sk.Value]; ok {
				j = find(n)
			}
		}
		if j < 0 {
			continue
		}
		dk, dv := dst.Content[j], dst.Content[j+1]
		dk.HeadComment, dk.LineComment, dk.FootComment = sk.HeadComment, sk.LineComment, sk.FootComment
		dv.HeadComment, dv.LineComment, dv.FootComment = sv.HeadComment, sv.LineComment, sv.FootComment
		copyComments(dv, sv, names)
	}
}

// Encode writes n as a YAML document indented by two spaces (the form
// every YAML file Sluice writes takes). Errors: the encoder's.
func Encode(n *yaml.Node) ([]byte, error) {
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(n); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
