package testutil

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
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
