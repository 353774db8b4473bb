package main

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/google/go-cmp/cmp"
)

// A small reader of PromQL, enough to check the dashboards' queries
// against a server's /metrics (TestDashboards): the metric names a query
// selects, each with its label matchers and the functions around it, and
// the labels it groups by. Not a parser of the whole language (Prometheus's
// own, github.com/prometheus/prometheus/promql/parser, would bring the
// whole of Prometheus into go.mod): it refuses what it does not know — a
// function it has no name for, a selector without a metric name, an
// unbalanced bracket — rather than guess.

// promqlQuery is what readPromQL finds in one query.
type promqlQuery struct {
	selectors []promqlSelector
	grouping  []string // labels of by, without, on, ignoring, group_left, group_right
}

// promqlSelector is one metric named in a query.
type promqlSelector struct {
	metric   string
	matchers []promqlMatcher
	funcs    []string // the functions and aggregations around it, innermost first
}

// promqlMatcher is one label matcher of a selector: label op value.
type promqlMatcher struct {
	label, op, value string
}

// in reports whether the selector is an argument (at any depth) of one of
// fns.
func (s promqlSelector) in(fns ...string) bool {
	for _, f := range s.funcs {
		if slices.Contains(fns, f) {
			return true
		}
	}
	return false
}

// promqlAggregations may take a by or without clause before their
// parentheses.
var promqlAggregations = []string{"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
	"bottomk", "topk", "quantile", "limitk", "limit_ratio"}

// promqlFunctions are PromQL's functions (Prometheus 3).
var promqlFunctions = []string{"abs", "absent", "absent_over_time", "acos", "acosh", "asin", "asinh", "atan", "atanh",
	"avg_over_time", "ceil", "changes", "clamp", "clamp_max", "clamp_min", "cos", "cosh", "count_over_time",
	"day_of_month", "day_of_week", "day_of_year", "days_in_month", "deg", "delta", "deriv", "exp", "floor",
	"histogram_avg", "histogram_count", "histogram_fraction", "histogram_quantile", "histogram_stddev",
	"histogram_stdvar", "histogram_sum", "double_exponential_smoothing", "hour", "idelta", "increase", "irate",
	"label_join", "label_replace", "last_over_time", "ln", "log10", "log2", "mad_over_time", "max_over_time",
	"min_over_time", "minute", "month", "pi", "predict_linear", "present_over_time", "quantile_over_time", "rad",
	"rate", "resets", "round", "scalar", "sgn", "sin", "sinh", "sort", "sort_by_label", "sort_by_label_desc",
	"sort_desc", "sqrt", "stddev_over_time", "stdvar_over_time", "sum_over_time", "tan", "tanh", "time",
	"timestamp", "vector", "year"}

// promqlKeywords are words that are neither metrics nor functions.
var promqlKeywords = []string{"and", "or", "unless", "bool", "offset", "inf", "nan", "start", "end", "atan2"}

// promqlGroupings take a list of labels in parentheses.
var promqlGroupings = []string{"by", "without", "on", "ignoring", "group_left", "group_right"}

// readPromQL reads expr. Grafana's variables ($var, ${var}, [[var]],
// $__rate_interval) may stand for a label value or a duration.
func readPromQL(expr string) (promqlQuery, error) {
	var q promqlQuery
	var stack []string // what each open parenthesis belongs to: a function, "(" or a grouping
	pending := ""      // the function or grouping the next "(" opens
	last := -1         // the selector a following "{" belongs to (-1: none)
	rs := []rune(expr)
	i := 0
	isIdent := func(r rune, first bool) bool {
		return r == '_' || r == ':' || unicode.IsLetter(r) || !first && unicode.IsDigit(r)
	}
	skipSpace := func() {
		for i < len(rs) && unicode.IsSpace(rs[i]) {
			i++
		}
	}
	ident := func() string {
		start := i
		for i < len(rs) && isIdent(rs[i], i == start) {
			i++
		}
		return string(rs[start:i])
	}
	str := func() (string, error) { // at a quote
		quote := rs[i]
		var b strings.Builder
		for i++; i < len(rs); i++ {
			switch {
			case rs[i] == '\\' && quote != '`' && i+1 < len(rs):
				i++
				b.WriteRune(rs[i])
			case rs[i] == quote:
				i++
				return b.String(), nil
			default:
				b.WriteRune(rs[i])
			}
		}
		return "", fmt.Errorf("unterminated string")
	}
	variable := func() { // at a $
		i++
		if i < len(rs) && rs[i] == '{' {
			for i < len(rs) && rs[i] != '}' {
				i++
			}
			i++
			return
		}
		ident()
	}
	for {
		skipSpace()
		if i >= len(rs) {
			break
		}
		r := rs[i]
		wasSelector := last
		last = -1
		switch {
		case r == '#':
			for i < len(rs) && rs[i] != '\n' {
				i++
			}
		case r == '"' || r == '\'' || r == '`':
			if _, err := str(); err != nil {
				return q, err
			}
		case r == '$':
			variable()
		case r == '[' && i+1 < len(rs) && rs[i+1] == '[': // [[var]]
			end := strings.Index(string(rs[i:]), "]]")
			if end < 0 {
				return q, fmt.Errorf("unterminated [[variable]]")
			}
			i += len([]rune(string(rs[i:])[:end+2]))
		case r == '[': // a range or subquery: durations and variables
			for i < len(rs) && rs[i] != ']' {
				i++
			}
			if i == len(rs) {
				return q, fmt.Errorf("unterminated [")
			}
			i++
			last = wasSelector // x[5m]{…} is not PromQL, but offset may follow
		case r == '{':
			if wasSelector < 0 {
				return q, fmt.Errorf("label matchers at %d select no metric by name", i)
			}
			i++
			for {
				skipSpace()
				if i < len(rs) && rs[i] == '}' {
					i++
					break
				}
				label := ident()
				if label == "" {
					return q, fmt.Errorf("a label name expected at %d", i)
				}
				skipSpace()
				var op string
				for _, o := range []string{"=~", "!~", "!=", "="} {
					if strings.HasPrefix(string(rs[i:]), o) {
						op = o
						break
					}
				}
				if op == "" {
					return q, fmt.Errorf("a matcher operator expected after %s", label)
				}
				i += len(op)
				skipSpace()
				if i >= len(rs) || !strings.ContainsRune("\"'`", rs[i]) {
					return q, fmt.Errorf("a quoted value expected after %s%s", label, op)
				}
				value, err := str()
				if err != nil {
					return q, err
				}
				s := &q.selectors[wasSelector]
				s.matchers = append(s.matchers, promqlMatcher{label, op, value})
				skipSpace()
				if i < len(rs) && rs[i] == ',' {
					i++
				}
			}
			last = wasSelector
		case r == '(':
			i++
			if slices.Contains(promqlGroupings, pending) {
				for {
					skipSpace()
					if i < len(rs) && rs[i] == ')' {
						i++
						break
					}
					l := ident()
					if l == "" {
						return q, fmt.Errorf("a label expected in %s (…) at %d", pending, i)
					}
					q.grouping = append(q.grouping, l)
					skipSpace()
					if i < len(rs) && rs[i] == ',' {
						i++
					}
				}
				pending = ""
				continue
			}
			if pending == "" {
				pending = "("
			}
			stack = append(stack, pending)
			pending = ""
		case r == ')':
			i++
			if len(stack) == 0 {
				return q, fmt.Errorf("unbalanced ) at %d", i)
			}
			stack = stack[:len(stack)-1]
		case unicode.IsDigit(r) || r == '.':
			for i < len(rs) && (isIdent(rs[i], false) || rs[i] == '.') {
				i++
			}
		case isIdent(r, true):
			word := ident()
			skipSpace()
			next := rune(0)
			if i < len(rs) {
				next = rs[i]
			}
			switch {
			case slices.Contains(promqlGroupings, word):
				pending = word
			case slices.Contains(promqlAggregations, word):
				// sum (…), sum by (l) (…), sum (…) by (l)
				if next == '(' {
					pending = word
				} else {
					after := i
					if w := ident(); !slices.Contains([]string{"by", "without"}, w) {
						return q, fmt.Errorf("%s: ( or by/without expected", word)
					}
					// Its grouping comes first: read it, so that the
					// next "(" opens the aggregation.
					i = after
					if err := readGrouping(rs, &i, &q); err != nil {
						return q, err
					}
					pending = word
				}
			case slices.Contains(promqlFunctions, word):
				if next != '(' {
					return q, fmt.Errorf("%s: ( expected", word)
				}
				pending = word
			case slices.Contains(promqlKeywords, word):
			case next == '(':
				return q, fmt.Errorf("%s is no PromQL function", word)
			default:
				var funcs []string
				for j := len(stack) - 1; j >= 0; j-- {
					if stack[j] != "(" {
						funcs = append(funcs, stack[j])
					}
				}
				q.selectors = append(q.selectors, promqlSelector{metric: word, funcs: funcs})
				last = len(q.selectors) - 1
			}
		default: // operators, commas, @
			i++
		}
	}
	if len(stack) > 0 {
		return q, fmt.Errorf("%d unclosed (", len(stack))
	}
	return q, nil
}

// readGrouping reads a `by (l, …)` or `without (l, …)` clause at *i into
// q.grouping.
func readGrouping(rs []rune, i *int, q *promqlQuery) error {
	s := string(rs[*i:])
	open := strings.IndexRune(s, '(')
	end := strings.IndexRune(s, ')')
	if open < 0 || end < open {
		return fmt.Errorf("a (label list) expected after by/without")
	}
	for _, l := range strings.Split(s[open+1:end], ",") {
		if l = strings.TrimSpace(l); l != "" {
			q.grouping = append(q.grouping, l)
		}
	}
	*i += len([]rune(s[:end+1]))
	return nil
}

func TestReadPromQL(t *testing.T) {
	for _, c := range []struct {
		name, expr string
		want       promqlQuery
		err        string
	}{
		{
			name: "rate by",
			expr: `sum by (method, code) (rate(sluice_server_requests_total{job=~"$job", method=~"/a/.*|/b"}[$__rate_interval]))`,
			want: promqlQuery{grouping: []string{"method", "code"}, selectors: []promqlSelector{{metric: "sluice_server_requests_total",
				matchers: []promqlMatcher{{"job", "=~", "$job"}, {"method", "=~", "/a/.*|/b"}}, funcs: []string{"rate", "sum"}}}},
		},
		{
			name: "histogram_quantile",
			expr: `histogram_quantile(0.99, sum by (le) (rate(x_bucket{a="b"}[5m])))`,
			want: promqlQuery{grouping: []string{"le"}, selectors: []promqlSelector{{metric: "x_bucket",
				matchers: []promqlMatcher{{"a", "=", "b"}}, funcs: []string{"rate", "sum", "histogram_quantile"}}}},
		},
		{
			name: "by after, binary operators, numbers and keywords",
			expr: "sum(a_total) by (r) / on (r) group_left max(b{c!=\"d\"} offset 5m) > bool 0.5e3 or vector(1)",
			want: promqlQuery{grouping: []string{"r", "r"}, selectors: []promqlSelector{
				{metric: "a_total", funcs: []string{"sum"}},
				{metric: "b", matchers: []promqlMatcher{{"c", "!=", "d"}}, funcs: []string{"max"}}}},
		},
		{
			name: "strings and label_replace",
			expr: `label_replace(up_gauge, "x", "$1", "instance", "(rate|sum)(.*)")`,
			want: promqlQuery{selectors: []promqlSelector{{metric: "up_gauge", funcs: []string{"label_replace"}}}},
		},
		{
			name: "a bare gauge",
			expr: `sluice_redis_up`,
			want: promqlQuery{selectors: []promqlSelector{{metric: "sluice_redis_up"}}},
		},
		{name: "unknown function", expr: "rat(x_total[5m])", err: "no PromQL function"},
		{name: "no metric name", expr: `{__name__="x"}`, err: "select no metric"},
		{name: "unbalanced", expr: "sum(rate(x[5m])", err: "unclosed"},
		{name: "unterminated string", expr: `x{a="b}`, err: "unterminated"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := readPromQL(c.expr)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("readPromQL(%q) = %+v, %v; want an error containing %q", c.expr, got, err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(c.want, got, cmp.AllowUnexported(promqlQuery{}, promqlSelector{}, promqlMatcher{})); d != "" {
				t.Errorf("readPromQL(%q) (-want +got):\n%s", c.expr, d)
			}
		})
	}
}
