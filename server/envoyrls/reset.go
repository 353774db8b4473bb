package envoyrls

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/limits/rls"
)

// ErrNoRule is wrapped by Reset's error for a descriptor that matches no
// rule with a limit in the rules in force (no such domain, no such rule,
// a rule without a limit): the admin API answers it with 404.
var ErrNoRule = errors.New("no rule with a limit")

// TierResetter resets one domain of a burst-tier resource: what Reset
// needs of Options.Tiers for a rule with burst tiers (*limits.Engine has
// it: limits.Engine.Reset).
type TierResetter interface {
	Reset(ctx context.Context, resource, domain string) (bool, error)
}

// Reset restores every counter of the rule a request descriptor
// (entries, in domain) matches under the rules in force
// (rls.Config.Match, as ShouldRateLimit matches it: a share_threshold
// wildcard's counter is the one its values share): each of the rule's
// limits, Limit then MoreLimits, its i-th counter rls.LimitBucket(bucket,
// i), is forgotten in Options.Store (rls.Store.Reset: a token bucket
// full again, a fixed window empty again); a limit with burst tiers
// resets its counter's domain (TierDomain) of the named resource on the
// limits engine instead (limits.Engine.Reset: its tiers and hits
// forgotten); an unlimited limit has no counter. It returns how many
// counters were held and forgotten (0: all full already, no error). The
// store's counters and a burst-tier domain are reset one after the
// other, each atomically; a request decided in between may see one
// reset and not the other. A descriptor's own limit override (a counter
// of the request's making) is not reached.
//
// Errors: a *limits.RequestError naming the field ("domain",
// "descriptor", "descriptor[i].key", "descriptor[i].value") for an empty
// domain, no entries, an empty key, more than MaxEntries entries or a
// name longer than MaxNameBytes (ShouldRateLimit's bounds); an error
// wrapping ErrNoRule, naming the descriptor, when it matches no rule
// with a limit; the store's or the limits engine's error (wrapping
// ctx.Err() when ctx ended). No client identity is consulted: the caller
// (the admin API) authenticates its own. Safe for concurrent use.
//
// Source: envoyproxy/ratelimit issue #191 (reset one key); gubernator's
// Behavior RESET_REMAINING.
func (s *Service) Reset(ctx context.Context, domain string, entries []rls.Entry) (int, error) {
	if err := checkReset(domain, entries); err != nil {
		return 0, err
	}
	m := s.cfg.Load().Match(domain, entries)
	if m.Rule == nil {
		return 0, fmt.Errorf("descriptor %q of domain %q: %w", formatEntries(entries), domain, ErrNoRule)
	}
	var buf [4]string
	buckets := buf[:0]
	type tier struct{ resource, domain string }
	var tiers []tier
	i := 0
	for l := range m.Rule.AllLimits() {
		switch {
		case l.Unlimited:
		case l.BurstTiers != "":
			tiers = append(tiers, tier{l.BurstTiers, TierDomain(m.Bucket)})
		default:
			buckets = append(buckets, rls.LimitBucket(m.Bucket, i))
		}
		i++
	}
	n := 0
	if len(buckets) > 0 {
		got, err := s.opts.Store.Reset(ctx, domain, buckets)
		if err != nil {
			return 0, fmt.Errorf("envoyrls: reset: %w", err)
		}
		n += got
	}
	for _, t := range tiers {
		r, ok := s.opts.Tiers.(TierResetter)
		if !ok {
			return n, fmt.Errorf("envoyrls: reset: burst tiers of resource %q: the service has no limits engine that resets (Options.Tiers)", t.resource)
		}
		held, err := r.Reset(ctx, t.resource, t.domain)
		switch {
		case err != nil && errors.Is(err, limits.ErrInvalidRequest):
			// The rule's resource, not the caller's input: not a field of
			// the reset (a configuration out of step).
			return n, fmt.Errorf("envoyrls: reset: burst tiers of resource %q, domain %q: %v", t.resource, t.domain, err)
		case err != nil:
			return n, fmt.Errorf("envoyrls: reset: burst tiers of resource %q: %w", t.resource, err)
		case held:
			n++
		}
	}
	return n, nil
}

// checkReset checks Reset's input with ShouldRateLimit's bounds.
func checkReset(domain string, entries []rls.Entry) error {
	bad := func(field, format string, args ...any) error {
		return &limits.RequestError{Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case domain == "":
		return bad("domain", "empty")
	case len(domain) > MaxNameBytes:
		return bad("domain", "%d bytes, at most %d", len(domain), MaxNameBytes)
	case len(entries) == 0:
		return bad("descriptor", "no entries (at least one)")
	case len(entries) > MaxEntries:
		return bad("descriptor", "%d entries, at most %d", len(entries), MaxEntries)
	}
	for i, e := range entries {
		f := "descriptor[" + strconv.Itoa(i) + "]"
		switch {
		case e.Key == "":
			return bad(f+".key", "empty")
		case len(e.Key) > MaxNameBytes:
			return bad(f+".key", "%d bytes, at most %d", len(e.Key), MaxNameBytes)
		case len(e.Value) > MaxNameBytes:
			return bad(f+".value", "%d bytes, at most %d", len(e.Value), MaxNameBytes)
		}
	}
	return nil
}

// formatEntries writes entries as "key=value,key=value".
func formatEntries(entries []rls.Entry) string {
	var b strings.Builder
	for i, e := range entries {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(e.Key)
		b.WriteByte('=')
		b.WriteString(e.Value)
	}
	return b.String()
}
