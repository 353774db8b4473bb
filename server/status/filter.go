package status

import (
	"cmp"
	"fmt"
	"math"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/sluice-rl/sluice/server/status/view"
)

func parseFilter(q url.Values) (Filter, error) {
	f := Filter{Prefix: q.Get("prefix"), Regex: q.Get("regex"), Sort: q.Get("sort"), Desc: q.Get("desc") == "1" || q.Get("desc") == "true"}
	if f.Regex != "" {
		re, err := regexp.Compile(f.Regex)
		if err != nil {
			return f, fmt.Errorf("regex: %w", err)
		}
		f.re = re
	}
	return f, nil
}

func (f Filter) match(s string) bool {
	return strings.HasPrefix(s, f.Prefix) && (f.re == nil || f.re.MatchString(s))
}

// sortRows sorts rows by the JSON field named col (unknown: the first
// column), numbers numerically and the rest as strings, stable.
func sortRows[T any](rows []T, col string, desc bool, key func(T, string) (float64, string, bool)) {
	slices.SortStableFunc(rows, func(a, b T) int {
		na, sa, okA := key(a, col)
		nb, sb, _ := key(b, col)
		c := 0
		if okA {
			c = cmp.Compare(na, nb)
		} else {
			c = strings.Compare(sa, sb)
		}
		if desc {
			c = -c
		}
		return c
	})
}

func boolNum(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func ptrNum(p *float64) float64 {
	if p == nil {
		return math.Inf(1)
	}
	return *p
}

func resourceKey(r view.ResourceRow, col string) (float64, string, bool) {
	switch col {
	case "template":
		return 0, r.Template, false
	case "algorithm":
		return 0, r.Algorithm, false
	case "capacity":
		return ptrNum(r.Capacity), "", true
	case "sum_has":
		return r.SumHas, "", true
	case "sum_wants":
		return r.SumWants, "", true
	case "clients":
		return float64(r.Clients), "", true
	case "learning":
		return boolNum(r.Learning), "", true
	case "safe_capacity":
		return ptrNum(r.SafeCapacity), "", true
	}
	return 0, r.ID, false
}

func leaseKey(l view.LeaseRow, col string) (float64, string, bool) {
	switch col {
	case "priority":
		return float64(l.Priority), "", true
	case "has":
		return l.Has, "", true
	case "wants":
		return l.Wants, "", true
	case "subclients":
		return float64(l.Subclients), "", true
	case "expiry", "expires_in":
		return l.ExpiresIn, "", true
	case "refresh_interval":
		return l.RefreshInterval, "", true
	}
	return 0, l.Client, false
}

// sortURL returns the current page's URL sorted by col (toggling the
// direction if it is already sorted by col).
func sortURL(f Filter, path, col string, extra ...string) string {
	q := url.Values{}
	if f.Prefix != "" {
		q.Set("prefix", f.Prefix)
	}
	if f.Regex != "" {
		q.Set("regex", f.Regex)
	}
	q.Set("sort", col)
	if f.Sort == col && !f.Desc {
		q.Set("desc", "1")
	}
	for i := 0; i+1 < len(extra); i += 2 {
		q.Set(extra[i], extra[i+1])
	}
	return path + "?" + q.Encode()
}
