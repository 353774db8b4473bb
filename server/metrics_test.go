package server

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// series counts the series of every metric family in reg whose name starts
// with prefix.
func series(t *testing.T, reg *prometheus.Registry, prefix string) (int, []*dto.MetricFamily) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), prefix) {
			n += len(mf.GetMetric())
		}
	}
	return n, mfs
}

func TestMetricsMastershipAndConfig(t *testing.T) {
	s := newDoormanServer(t)
	s.Capacity().SetMastership(false, "x:1")
	s.Capacity().SetMastership(true, "")
	s.configReloaded(nil)
	s.configReloaded(fmt.Errorf("bad"))
	_, mfs := series(t, s.Registry(), "sluice_server_")
	want := map[string]bool{
		`sluice_server_mastership_changes_total{change="lost"} 1`:                                false,
		`sluice_server_mastership_changes_total{change="won"} 1`:                                 false,
		`sluice_server_config_reloads_total{result="failed"} 1`:                                  false,
		`sluice_server_config_reloads_total{result="ok"} 1`:                                      false,
		`sluice_server_config_info{hash="` + s.Capacity().Config().Hash() + `",templates="2"} 1`: false,
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue()
			key := fmt.Sprintf("%s{%s} %v", mf.GetName(), strings.Join(ls, ","), v)
			if _, ok := want[key]; ok {
				want[key] = true
			}
		}
	}
	for k, seen := range want {
		if !seen {
			t.Errorf("missing %s", k)
		}
	}
}
