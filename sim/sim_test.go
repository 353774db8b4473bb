package sim

import (
	"fmt"
	"math"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	pb "github.com/sluice-rl/sluice/api/doorman"
	"google.golang.org/protobuf/proto"
)

// Every built-in scenario, shortened where it is long, keeps the invariants
// under both allocations and both directions of the refresh decay: no lease
// outlives its grantor's lease, no server hands out more than its capacity
// (the root) or than the largest capacity it held during the last lease
// length (intermediates).
func TestScenariosKeepInvariants(t *testing.T) {
	t.Parallel() // virtual time: the simulations' outcomes do not depend on the machine
	for _, sc := range Builtin() {
		t.Run(sc.Name, func(t *testing.T) {
			opts := Options{Seed: 7}
			if sc.Duration > 600 {
				opts.Duration = 600
			}
			for _, v := range []struct {
				doorman bool
				decay   string
			}{{false, DecaySluice}, {true, DecaySluice}, {false, DecayDesign}} {
				opts.DoormanAllocation, opts.RefreshDecay = v.doorman, v.decay
				res, err := Run(sc, opts)
				if err != nil {
					t.Fatal(err)
				}
				if len(res.Violations) > 0 {
					t.Fatalf("doorman=%v decay=%s: %d violations, first: %v", v.doorman, v.decay, len(res.Violations), res.Violations[0])
				}
				want := int(sc.Duration) + 1
				if opts.Duration > 0 {
					want = int(opts.Duration) + 1
				}
				if got := len(res.Series.Samples); got != want {
					t.Fatalf("%d samples, want %d", got, want)
				}
			}
		})
	}
}

// The goals on the full scenarios (docs/simulate.md: seven and eight at 99 % or
// more on seeds 1-3, zero overshoot), as regression guards at or a little
// below what the code achieves (Doorman's 5-second rule on the servers and
// in the client, refresh 2 s at the root, Sluice's direction of the decay,
// pushed leases, the root's lease horizon):
//
//	seven  seed 1: 99.35 %  seed 2: 99.58 %  seed 3: 99.74 %  (overshoot 0 %)
//	eight  seed 1: 99.25 %  seed 2: 99.24 %  seed 3: 99.22 %
//	one    seed 1: 99.98 %  seed 2: 99.99 %  seed 3: 99.98 %
//	five   100.00 % on every seed, no shortfall
//
// Before pushed leases and the learning-mode rules (3ab67d3), seven was at
// 95.63 / 96.14 / 98.50 % and eight at 97.39 / 97.27 / 97.22 %. Doorman's
// own simulation reported 96.6 % on seven, with 14 shortfall episodes;
// Sluice's allocation never overshoots.
func TestAllocationGoals(t *testing.T) {
	t.Parallel() // virtual time: the simulations' outcomes do not depend on the machine
	seven, _ := Lookup("seven")
	eight, _ := Lookup("eight")
	one, _ := Lookup("one")
	five, _ := Lookup("five")
	floors := map[int64]struct{ seven, one float64 }{
		1: {0.99, 0.999},
		2: {0.99, 0.999},
		3: {0.99, 0.999},
	}
	for _, seed := range []int64{1, 2, 3} {
		t.Run(fmt.Sprintf("seed %d", seed), func(t *testing.T) {
			t.Parallel()
			runSeven := func() (*Result, error) { return Run(seven, Options{Seed: seed}) }
			if seed == 1 {
				runSeven = sevenSeed1
			}
			res, err := runSeven()
			if err != nil {
				t.Fatal(err)
			}
			sum := Summarize(&res.Series)
			t.Logf("seven seed %d: utilization %.2f %%, worst overshoot %.2f %%, reconverge max %v s", seed, 100*sum.UtilizationMean, sum.OvershootMaxPercent, sum.ReconvergeMaxSeconds)
			if floor := floors[seed].seven; sum.UtilizationMean < floor || sum.OvershootMaxPercent > 0 || sum.ShortfallEpisodes > 0 || len(res.Violations) > 0 {
				t.Errorf("seven seed %d: utilization %.2f %% (want ≥ %.1f %%), %d shortfall episodes (worst %.2f %%), %d violations",
					seed, 100*sum.UtilizationMean, 100*floor, sum.ShortfallEpisodes, sum.OvershootMaxPercent, len(res.Violations))
			}
			res, err = Run(eight, Options{Seed: seed})
			if err != nil {
				t.Fatal(err)
			}
			sum = Summarize(&res.Series)
			if sum.UtilizationMean < 0.99 || sum.OvershootMaxPercent > 0 || sum.ShortfallEpisodes > 0 || len(res.Violations) > 0 {
				t.Errorf("eight seed %d: utilization %.2f %% (want ≥ 99 %%), worst overshoot %.2f %%, %d shortfall episodes, %d violations",
					seed, 100*sum.UtilizationMean, sum.OvershootMaxPercent, sum.ShortfallEpisodes, len(res.Violations))
			}
			res, err = Run(one, Options{Seed: seed})
			if err != nil {
				t.Fatal(err)
			}
			sum = Summarize(&res.Series)
			if floor := floors[seed].one; sum.UtilizationMean < floor || sum.ShortfallEpisodes > 0 {
				t.Errorf("one seed %d: utilization %.2f %% (want ≥ %.1f %%), %d shortfall episodes", seed, 100*sum.UtilizationMean, 100*floor, sum.ShortfallEpisodes)
			}
			res, err = Run(five, Options{Seed: seed})
			if err != nil {
				t.Fatal(err)
			}
			sum = Summarize(&res.Series)
			if sum.ShortfallEpisodes != 0 || sum.UtilizationMean < 0.999 {
				t.Errorf("five seed %d: %d shortfall episodes, utilization %.2f %%", seed, sum.ShortfallEpisodes, 100*sum.UtilizationMean)
			}
		})
	}
}

// sevenSeed1 is scenario seven on seed 1 with the default options, run
// once for the tests that read it (TestAllocationGoals and
// TestSluiceBeatsDoorman): a run is a function of its scenario, seed and
// options (TestDeterministic), and each reads the same numbers.
var sevenSeed1 = sync.OnceValues(func() (*Result, error) {
	seven, err := Lookup("seven")
	if err != nil {
		return nil, err
	}
	return Run(seven, Options{Seed: 1})
})

// Sluice's allocation beats Doorman's on scenario seven, run on the same
// code with the same seed.
func TestSluiceBeatsDoorman(t *testing.T) {
	t.Parallel() // virtual time: the simulations' outcomes do not depend on the machine
	seven, _ := Lookup("seven")
	var util [2]float64
	for i, doorman := range []bool{false, true} {
		run := func() (*Result, error) { return Run(seven, Options{Seed: 1, DoormanAllocation: doorman}) }
		if !doorman {
			run = sevenSeed1
		}
		res, err := run()
		if err != nil {
			t.Fatal(err)
		}
		util[i] = Summarize(&res.Series).UtilizationMean
	}
	t.Logf("seven: sluice %.2f %%, doorman %.2f %%", 100*util[0], 100*util[1])
	if util[0] <= util[1] {
		t.Fatalf("sluice %.4f ≤ doorman %.4f", util[0], util[1])
	}
}

// The lease horizon: in scenario three the root has no master for 70 s,
// longer than a lease (60 s); its new master, told by the horizon that its
// predecessor's leases ended 9 s after it won (lost at 120 s, horizon
// HorizonTTL = 79 s), learns for 9 s rather than 60, with no overshoot.
// Its clients use their safe capacity meanwhile either way (UtilizationMean
// counts it), so what the horizon gains shows in their leases.
func TestLeaseHorizonShortensLearning(t *testing.T) {
	three, _ := Lookup("three")
	var util [2]float64
	for i, none := range []bool{false, true} {
		res, err := Run(three, Options{Seed: 1, NoLeaseHorizon: none})
		if err != nil {
			t.Fatal(err)
		}
		sum := Summarize(&res.Series)
		if sum.OvershootMaxPercent > 0 || sum.ShortfallEpisodes > 0 || len(res.Violations) > 0 {
			t.Fatalf("horizon %v: overshoot %v %%, %d shortfalls, %v", !none, sum.OvershootMaxPercent, sum.ShortfallEpisodes, res.Violations)
		}
		if sum.SafeModeOvershootMaxPercent > 0 {
			t.Fatalf("horizon %v: %v %% over the capacity in safe mode", !none, sum.SafeModeOvershootMaxPercent)
		}
		util[i] = leaseUtilization(&res.Series)
	}
	t.Logf("three: leases with the horizon %.2f %%, without %.2f %%", 100*util[0], 100*util[1])
	if util[0] < util[1]+0.15 {
		t.Fatalf("with the horizon %.4f, without %.4f: want 15 points more", util[0], util[1])
	}
}

// A root master that granted nothing keeps no lease horizon
// (docs/departures.md, "Doorman"): the first master, lost at 40 s while learning, holds its
// successor (elected at 60 s) in learning mode only until the horizon it
// wrote for an unknown predecessor lapses (HorizonTTL = 79 s after it
// won), not until 40 + 79 s, nor for 60 s as without the horizon. A master
// that granted keeps its horizon: its successor, after a loss at 150 s,
// learns until every lease it granted may have ended (150 + 79 s). No
// overshoot either way.
func TestLeaseHorizonOnlyOnceGranted(t *testing.T) {
	sc, _ := Lookup("one")
	sc.Events = []Event{{At: 40, Kind: LoseMaster, Node: "root", For: 20}, {At: 150, Kind: LoseMaster, Node: "root", For: 20}}
	for _, none := range []bool{false, true} {
		sc, err := sc.withDefaults()
		if err != nil {
			t.Fatal(err)
		}
		s, err := newSim(sc, Options{Seed: 1, NoLeaseHorizon: none})
		if err != nil {
			t.Fatal(err)
		}
		learning := map[float64]bool{}
		has := map[float64]float64{}
		s.onSample = func(s *sim) {
			at := s.elapsed()
			root := s.nodes[0]
			if root.master >= 0 {
				st, err := root.tasks[root.master].srv.Status(ResourceID)
				learning[at] = err == nil && st.Learning
			}
			has[at] = s.series.Samples[len(s.series.Samples)-1].Levels[0].Has
		}
		s.run()
		sum := Summarize(&s.series)
		if sum.OvershootMaxPercent > 0 || sum.ShortfallEpisodes > 0 || len(s.violations) > 0 {
			t.Fatalf("horizon %v: overshoot %v %%, %d shortfalls, %v", !none, sum.OvershootMaxPercent, sum.ShortfallEpisodes, s.violations)
		}
		t.Logf("horizon %v: learning at 70 / 90 / 180 / 225 / 240 s: %v / %v / %v / %v / %v; Σ has at 100 s %.1f",
			!none, learning[70], learning[90], learning[180], learning[225], learning[240], has[100])
		if none {
			if !learning[90] || has[100] > 0 {
				t.Fatalf("without the horizon: learning at 90 s %v, Σ has at 100 s %.1f; want learning until 120 s, nothing handed out", learning[90], has[100])
			}
			continue
		}
		if !learning[70] || learning[90] || has[100] < 450 {
			t.Fatalf("with the horizon: learning at 70 s %v, at 90 s %v, Σ has at 100 s %.1f; want learning until 79 s, then the capacity handed out", learning[70], learning[90], has[100])
		}
		if !learning[180] || !learning[225] || learning[240] {
			t.Fatalf("with the horizon: learning at 180 / 225 / 240 s %v / %v / %v; want until 229 s (the granting master's horizon)", learning[180], learning[225], learning[240])
		}
	}
}

func TestDeterministic(t *testing.T) {
	t.Parallel() // virtual time: the simulations' outcomes do not depend on the machine
	sc, _ := Lookup("seven")
	a, err := Run(sc, Options{Seed: 3, Duration: 900})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Run(sc, Options{Seed: 3, Duration: 900})
	if !reflect.DeepEqual(a.Series, b.Series) {
		t.Fatal("two runs with the same seed differ")
	}
	c, _ := Run(sc, Options{Seed: 4, Duration: 900})
	if reflect.DeepEqual(a.Series.Mishaps, c.Series.Mishaps) {
		t.Fatal("different seeds, same mishaps")
	}
}

// The checks can fail: a lease beyond the grantor's own lease is reported.
func TestLeaseCheckCatchesOverlongLease(t *testing.T) {
	sc, _ := Lookup("four")
	sc.Duration = 100
	s, err := newSim(sc, Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	s.run()
	if len(s.violations) != 0 {
		t.Fatalf("violations %v", s.violations)
	}
	leaf := s.byName["region"]
	st := s.dial(leaf.tasks[leaf.master].addr).(*stub)
	st.check("c", &pb.Lease{Capacity: proto.Float64(1), ExpiryTime: proto.Int64(s.now.Add(time.Hour).Unix()), RefreshInterval: proto.Int64(1)})
	if len(s.violations) != 1 || !strings.Contains(s.violations[0], "beyond its own lease") {
		t.Fatalf("violations %v", s.violations)
	}
}

// A scenario written as YAML, as users write their own.
func TestParseScenario(t *testing.T) {
	sc, err := ParseScenario([]byte(`
name: mine
duration_seconds: 120
capacity: 100
root:
  name: root
  children:
    - {name: leaf, count: 2, clients: 3, wants: 30}
events:
  - {at: 30, kind: lose_master, node: leaf-1, for_seconds: 10}
  - {at: 60, kind: spike, clients: [leaf-2/c1], wants: 50, for_seconds: 20}
`))
	if err != nil {
		t.Fatal(err)
	}
	if sc.Tasks != 3 || sc.LeaseLength != 60 || sc.RefreshInterval != 2 || sc.Algorithm != "FAIR_SHARE" {
		t.Fatalf("defaults not applied: %+v", sc)
	}
	res, err := Run(sc, Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Series.Mishaps) != 2 || len(res.Series.Levels) != 3 || len(res.Violations) != 0 {
		t.Fatalf("mishaps %v levels %v violations %v", res.Series.Mishaps, res.Series.Levels, res.Violations)
	}

	for _, bad := range []struct{ yaml, want string }{
		{"name: x\nduration_seconds: 10\ncapacity: 1\nroot: {name: r, clients: 1, wants: 1}\nbogus: 1\n", "bogus"},
		{"name: x\nduration_seconds: 0\ncapacity: 1\nroot: {name: r, clients: 1, wants: 1}\n", "duration_seconds"},
		{"name: x\nduration_seconds: 10\ncapacity: 1\nroot: {name: r}\n", "no clients"},
		{"name: x\nduration_seconds: 10\ncapacity: 1\nroot: {name: r, clients: 1, wants: 1}\nevents: [{at: 1, kind: lose_master, node: nope}]\n", "not in the tree"},
		{"name: x\nduration_seconds: 10\ncapacity: 1\nroot: {name: r, clients: 1, wants: 1}\nevents: [{at: 1, kind: explode}]\n", "kind"},
		{"name: x\nduration_seconds: 10\ncapacity: 1\nroot: {name: r, clients: 1, wants: 1, children: [{name: r, clients: 1}]}\n", "used twice"},
	} {
		if _, err := ParseScenario([]byte(bad.yaml)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%q: err %v, want %q", bad.yaml, err, bad.want)
		}
	}
	if _, err := Run(Scenario{Name: "x", Duration: 10, Capacity: 1, Root: Node{Name: "r", Clients: 1, Wants: 1},
		Events: []Event{{At: 1, Kind: SetWants, Clients: []string{"r/c9"}}}}, Options{}); err == nil || !strings.Contains(err.Error(), "no client") {
		t.Errorf("unknown client: err %v", err)
	}
}

func FuzzParseScenario(f *testing.F) {
	f.Add([]byte("name: x\nduration_seconds: 10\ncapacity: 1\nroot: {name: r, clients: 1, wants: 1}\n"))
	f.Add([]byte("name: x\nroot: {name: r, count: 3, children: [{name: c, count: 2, clients: 2}]}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		sc, err := ParseScenario(data)
		if err != nil {
			return
		}
		if sc.Name == "" || !(sc.Duration > 0) || sc.Tasks < 1 {
			t.Fatalf("accepted an invalid scenario: %+v", sc)
		}
	})
}

func TestParseScenarioBounds(t *testing.T) {
	for _, y := range []string{
		"name: x\nduration_seconds: 10\ncapacity: 1\nroot: {name: r, children: [{name: a, count: 1000, children: [{name: b, count: 1000, clients: 1}]}]}\n",
		"name: x\nduration_seconds: 10\ncapacity: 1\nroot: {name: r, children: [{name: a, count: 1000000000, clients: 1}]}\n",
		"name: x\nduration_seconds: 10\ncapacity: 1\nroot: {name: r, children: [{name: a, count: 100, clients: 100000}]}\n",
	} {
		if _, err := ParseScenario([]byte(y)); err == nil {
			t.Errorf("accepted %q", y)
		}
	}
}

// The direction of the refresh interval's decay reaches every server: the
// clients of the leaves (and the servers of each level) are handed the
// intervals Intervals computes.
func TestRefreshDecay(t *testing.T) {
	five, _ := Lookup("five")
	for _, tc := range []struct {
		name  string
		opts  Options
		want  []float64 // root first
		label string
	}{
		{"sluice", Options{RefreshDecay: DecaySluice, RefreshInterval: 5}, []float64{5, 10, 20}, "sluice 5/10/20 s"},
		{"design", Options{RefreshDecay: DecayDesign, RefreshInterval: 20}, []float64{20, 10, 5}, "design 20/10/5 s"},
		{"design floor", Options{RefreshDecay: DecayDesign}, []float64{2, 1, 1}, "design 2/1/1 s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.Seed, tc.opts.Duration = 1, 120
			sc := five
			sc.RefreshInterval = tc.want[0]
			if got := Intervals(sc, tc.opts.RefreshDecay, 3); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Intervals %v, want %v", got, tc.want)
			}
			s, err := newSim(five, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			s.run()
			for _, nd := range s.nodes {
				st, err := nd.tasks[nd.master].srv.Status(ResourceID)
				if err != nil {
					t.Fatal(err)
				}
				for _, l := range st.Leases {
					if got := l.RefreshInterval.Seconds(); got != tc.want[nd.depth] {
						t.Fatalf("%s hands %s refresh %v s, want %v s", nd.name, l.Client, got, tc.want[nd.depth])
					}
				}
			}
			for _, c := range s.clients {
				if _, _, ri, ok := c.res.Lease(); !ok || ri.Seconds() != tc.want[2] {
					t.Fatalf("client %s: refresh %v (lease %v), want %v s", c.name, ri, ok, tc.want[2])
				}
			}
			if got := refreshLabel(Summarize(&s.series)); got != tc.label {
				t.Fatalf("label %q, want %q", got, tc.label)
			}
		})
	}
	if _, err := Run(five, Options{RefreshDecay: "up"}); err == nil || !strings.Contains(err.Error(), "refresh decay") {
		t.Errorf("bad direction: err %v", err)
	}
	if _, err := Run(five, Options{RefreshInterval: 61}); err == nil || !strings.Contains(err.Error(), "refresh interval") {
		t.Errorf("interval beyond the lease length: err %v", err)
	}
}

// Runs of one seed that differ only in timing (allocation, refresh decay,
// refresh interval) see the same demand and the same mishaps: the
// scenario's random choices do not share a source with the retry jitter,
// whose draws depend on timing.
func TestSameScenarioAcrossTimings(t *testing.T) {
	t.Parallel() // virtual time: the simulations' outcomes do not depend on the machine
	seven, _ := Lookup("seven")
	var first *Series
	for _, opts := range []Options{
		{}, {DoormanAllocation: true}, {RefreshDecay: DecayDesign}, {RefreshDecay: DecaySluice, RefreshInterval: 5},
		{RefreshDecay: DecayDesign, RefreshInterval: 20},
	} {
		opts.Seed, opts.Duration = 2, 900
		res, err := Run(seven, opts)
		if err != nil {
			t.Fatal(err)
		}
		s := &res.Series
		if first == nil {
			first = s
			if len(s.Mishaps) < 10 {
				t.Fatalf("only %d mishaps", len(s.Mishaps))
			}
			continue
		}
		if !reflect.DeepEqual(s.Mishaps, first.Mishaps) {
			t.Fatalf("%+v: other mishaps than the first run's", opts)
		}
		for i := range s.Samples {
			if s.Samples[i].Levels[0].Wants != first.Samples[i].Levels[0].Wants {
				t.Fatalf("%+v: at %v s the clients want %v, the first run's %v", opts, s.Samples[i].T,
					s.Samples[i].Levels[0].Wants, first.Samples[i].Levels[0].Wants)
			}
		}
	}
}

// The built-in scenarios use doorman-design.md's numbers where it gives
// them ("Convergence and shortfall"): in one five clients each want 100
// initially; in seven 45 clients start by asking 14 each.
func TestBuiltinDesignNumbers(t *testing.T) {
	for _, tc := range []struct {
		name    string
		clients int
		wants   float64
	}{{"one", 5, 100}, {"two", 5, 100}, {"three", 5, 100}, {"five", 45, 15}, {"seven", 45, 14}} {
		sc, err := Lookup(tc.name)
		if err != nil {
			t.Fatal(err)
		}
		s, err := newSim(sc, Options{Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(s.clients) != tc.clients {
			t.Fatalf("%s: %d clients, want %d", tc.name, len(s.clients), tc.clients)
		}
		for _, c := range s.clients {
			if c.base != tc.wants {
				t.Fatalf("%s: %s wants %v, want %v", tc.name, c.name, c.base, tc.wants)
			}
		}
	}
}

// leaseUtilization is UtilizationMean over the clients' leases alone: Σ
// unexpired leases ÷ min(capacity, Σ wants), after the initial learning
// period.
func leaseUtilization(s *Series) float64 {
	var u, n float64
	for _, smp := range s.Samples {
		if steady := math.Min(s.Capacity, smp.Levels[0].Wants); smp.T >= s.LearningEnd && steady > 0 {
			u += smp.Levels[0].Has / steady
			n++
		}
	}
	return u / n
}
