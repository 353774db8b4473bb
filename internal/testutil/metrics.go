package testutil

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// MetricValue returns the value (a counter's, a gauge's or an untyped
// one's) of the first series of metric name in reg whose labels include
// labels (name, value pairs), and whether there is one.
func MetricValue(tb testing.TB, reg prometheus.Gatherer, name string, labels ...string) (float64, bool) {
	tb.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue series
				}
			}
			return m.GetCounter().GetValue() + m.GetGauge().GetValue() + m.GetUntyped().GetValue(), true
		}
	}
	return 0, false
}

// Series gathers reg and returns the number of series of the metrics
// whose names start with prefix, and every family gathered.
func Series(tb testing.TB, reg prometheus.Gatherer, prefix string) (int, []*dto.MetricFamily) {
	tb.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	n := 0
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), prefix) {
			n += len(mf.GetMetric())
		}
	}
	return n, mfs
}

// MissingSeries returns the lines of want that mfs lacks, each written
// `name{label="value",…} value` (labels in the order the registry gives
// them, sorted by name; the value a counter's plus a gauge's).
func MissingSeries(mfs []*dto.MetricFamily, want ...string) []string {
	have := map[string]bool{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			have[fmt.Sprintf("%s{%s} %v", mf.GetName(), strings.Join(ls, ","), m.GetCounter().GetValue()+m.GetGauge().GetValue())] = true
		}
	}
	var missing []string
	for _, w := range want {
		if !have[w] {
			missing = append(missing, w)
		}
	}
	return missing
}
