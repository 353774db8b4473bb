package server

import (
	"fmt"
	"testing"

	"github.com/sluice-rl/sluice/internal/testutil"
)

func TestMetricsMastershipAndConfig(t *testing.T) {
	s := newDoormanServer(t)
	s.Capacity().SetMastership(false, "x:1")
	s.Capacity().SetMastership(true, "")
	s.configReloaded(nil)
	s.configReloaded(fmt.Errorf("bad"))
	_, mfs := testutil.Series(t, s.Registry(), "sluice_server_")
	for _, line := range testutil.MissingSeries(mfs,
		`sluice_server_mastership_changes_total{change="lost"} 1`,
		`sluice_server_mastership_changes_total{change="won"} 1`,
		`sluice_server_config_reloads_total{result="failed"} 1`,
		`sluice_server_config_reloads_total{result="ok"} 1`,
		`sluice_server_config_info{hash="`+s.Capacity().Config().Hash()+`",templates="2"} 1`,
	) {
		t.Errorf("missing %s", line)
	}
}
