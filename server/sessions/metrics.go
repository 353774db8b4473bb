package sessions

import (
	"math"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/internal/names"
	"github.com/sluice-rl/sluice/limits/copies"
	"github.com/sluice-rl/sluice/server/internal/promreg"
	"github.com/sluice-rl/sluice/server/status/view"
)

// registerMetrics exports the copy-limited resources' counters
// (copies.Engine.Stats) and, with a shared copy log, the fleet's state:
//
//	sluice_copies_sessions                 gauge    open sessions
//	sluice_copies_sessions_max             gauge    the cap on open sessions (Options.MaxSessions; +Inf: none)
//	sluice_copies_sessions_refused_total   counter  sessions refused at the cap (OpenSession answered ResourceExhausted)
//	sluice_copies_reserves_total           counter  reserves by result: granted, rejected, degraded (granted fail-open)
//	sluice_copies_released_total           counter  copies released
//	sluice_copies_fenced                   gauge    1 while the engine serves no holds (fleet membership lost)
//	sluice_copies_fences_total             counter  times the engine was fenced
//	sluice_copies_forwarded_total          counter  session requests forwarded to the session's home server
//	sluice_fleet_leader                    gauge    1 while this server leads the fleet
//	sluice_fleet_buried_total              counter  dead epochs this server buried as leader
//
// It returns an error naming the first metric reg refused (one it
// already holds).
func (s *Service) registerMetrics(reg prometheus.Registerer) error {
	stats := func(f func(copies.Stats) float64) func() float64 {
		return func() float64 { return f(s.copies.Stats()) }
	}
	var cs []prometheus.Collector
	cs = append(cs, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_copies_sessions", Help: "Open sessions of copy-limited resources."},
		stats(func(v copies.Stats) float64 { return float64(v.Sessions) })))
	cs = append(cs, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_copies_sessions_max", Help: "The cap on open sessions of copy-limited resources (" + names.Setting(s.opts.Setting, "Sessions.Max") + "; +Inf: none)."},
		func() float64 {
			if n := s.maxSessions(); n > 0 {
				return float64(n)
			}
			return math.Inf(1)
		}))
	cs = append(cs, prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_copies_sessions_refused_total", Help: "Sessions refused because this server held its maximum of open sessions (" + names.Setting(s.opts.Setting, "Sessions.Max") + ")."},
		func() float64 { return float64(s.refused.Load()) }))
	for result, f := range map[string]func(copies.Stats) float64{
		"granted":  func(v copies.Stats) float64 { return float64(v.Granted - v.Degraded) },
		"rejected": func(v copies.Stats) float64 { return float64(v.Rejected) },
		"degraded": func(v copies.Stats) float64 { return float64(v.Degraded) },
	} {
		cs = append(cs, prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_copies_reserves_total",
			Help:        "Reserves of copy-limited resources by result (degraded: granted fail-open while the shared copy log failed).",
			ConstLabels: prometheus.Labels{"result": result}}, stats(f)))
	}
	cs = append(cs, prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_copies_released_total", Help: "Copies released."},
		stats(func(v copies.Stats) float64 { return float64(v.Released) })))
	cs = append(cs, prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_copies_fences_total", Help: "Times the copies engine was fenced (its fleet membership ended)."},
		stats(func(v copies.Stats) float64 { return float64(v.Fenced) })))
	cs = append(cs, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_copies_fenced", Help: "1 while the copies engine serves no holds (no fleet epoch)."},
		func() float64 { return b2f(s.copies.Fenced()) }))
	cs = append(cs, prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_copies_forwarded_total", Help: "Session requests forwarded to the server holding the session (its home in the fleet)."},
		func() float64 { return float64(s.forwarded.Load()) }))
	cs = append(cs, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_fleet_leader", Help: "1 while this server leads the fleet sharing copy-limited resources."},
		func() float64 { return b2f(s.fleetStatus().Leader) }))
	cs = append(cs, prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_fleet_buried_total", Help: "Dead servers' epochs this server buried as the fleet's leader."},
		func() float64 { return float64(s.fleetStatus().Buried) }))
	return promreg.Register(reg, cs...)
}

// fleetStatus returns the fleet membership's status (zero without one).
func (s *Service) fleetStatus() view.FleetStatus {
	st, _ := s.Fleet()
	return st
}

// Fleet returns the fleet membership's status; ok is false when the
// service has no fleet (its copy log is this server's own).
func (s *Service) Fleet() (st view.FleetStatus, ok bool) {
	if s.fleet != nil {
		return s.fleet.FleetStatus(), true
	}
	return view.FleetStatus{}, false
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
