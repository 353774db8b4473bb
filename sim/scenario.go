package sim

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Scenario is the data of one simulation: the tree, its clients, their
// demand and what happens to them. The built-in scenarios are those of
// doorman-design.md, "Convergence and shortfall"; users write their own in
// YAML with the same fields (see LoadScenario).
type Scenario struct {
	// Name identifies the scenario ("one" … "seven" for the built-ins).
	Name string `yaml:"name"`
	// Description says what the scenario shows.
	Description string `yaml:"description"`
	// Duration is the virtual time simulated, in seconds.
	Duration float64 `yaml:"duration_seconds"`
	// Capacity is the resource's capacity at the root (permits/s).
	Capacity float64 `yaml:"capacity"`
	// Algorithm is the root's algorithm kind (default FAIR_SHARE).
	Algorithm string `yaml:"algorithm"`
	// LeaseLength is the lease length in seconds (default 60).
	LeaseLength float64 `yaml:"lease_length"`
	// RefreshInterval is the root's refresh interval in seconds (default
	// 2); each level further down multiplies it by 1/DecayFactor (by
	// DecayFactor with Options.RefreshDecay DecayDesign). Requesters never
	// refresh more often than every 5 s (Doorman's rule), so shorter
	// intervals act as 5 s.
	RefreshInterval float64 `yaml:"refresh_interval"`
	// LearningModeDuration is in seconds; nil means the lease length.
	LearningModeDuration *float64 `yaml:"learning_mode_duration"`
	// DecayFactor is the refresh-interval decay per level (default 0.5).
	DecayFactor float64 `yaml:"decay_factor"`
	// Tasks is the number of server tasks per node, which elect a master
	// (default 3).
	Tasks int `yaml:"tasks"`
	// Root is the root node of the server tree.
	Root Node `yaml:"root"`
	// Fluctuation changes every client's wants at random.
	Fluctuation Fluctuation `yaml:"fluctuation"`
	// Events happen at fixed times.
	Events []Event `yaml:"events"`
	// Mishaps, when set, happen at random.
	Mishaps *Mishaps `yaml:"mishaps"`
}

// Bounds on a scenario's tree, so that a bad file gets an error rather than
// exhausting memory.
const (
	MaxNodes           = 10000
	MaxClients         = 1000000
	MaxDurationSeconds = 7 * 24 * 3600 // seconds
)

// Node is a node of the server tree (Tasks tasks electing a master) with
// its clients and child nodes.
type Node struct {
	// Name is the node's name, unique in the tree; with Count > 1 the
	// copies are named Name-1 … Name-Count, and their descendants get the
	// same suffix.
	Name string `yaml:"name"`
	// Count replicates the node (default 1).
	Count int `yaml:"count"`
	// Clients is the number of clients of this node; they are named
	// NODE/c1 … NODE/cN.
	Clients int `yaml:"clients"`
	// Wants is each client's initial wants (permits/s).
	Wants float64 `yaml:"wants"`
	// Children are the nodes that ask this node for capacity.
	Children []Node `yaml:"children"`
}

// Fluctuation is a random walk of the clients' wants: every Every seconds
// each client's wants become its base wants times a factor drawn uniformly
// from [1−Fraction, 1+Fraction].
type Fluctuation struct {
	Every    float64 `yaml:"every_seconds"`
	Fraction float64 `yaml:"fraction"`
}

// Event kinds.
const (
	// LoseMaster crashes the node's master; with For > 0 another task is
	// elected For seconds later (else an Elect event must follow).
	LoseMaster = "lose_master"
	// Elect makes another task of the node its master at once (a resign
	// or a crashed master's successor); a crashed task comes back as a
	// non-master.
	Elect = "elect"
	// SetWants sets the base wants of the named clients.
	SetWants = "set_wants"
	// Spike adds Wants to the named clients' base wants for For seconds
	// (for ever if For is 0).
	Spike = "spike"
)

// Event is something that happens at a fixed time.
type Event struct {
	// At is the time in seconds from the start.
	At float64 `yaml:"at"`
	// Kind is LoseMaster, Elect, SetWants or Spike.
	Kind string `yaml:"kind"`
	// Node names the node for LoseMaster and Elect.
	Node string `yaml:"node"`
	// Clients names the clients for SetWants and Spike ("NODE/cN").
	Clients []string `yaml:"clients"`
	// Wants is the new wants (SetWants) or the increase (Spike).
	Wants float64 `yaml:"wants"`
	// For is a duration in seconds (see the kinds).
	For float64 `yaml:"for_seconds"`
}

// Mishaps are random events, one every Every seconds, each chosen
// uniformly among: a client's wants +Spike for SpikeSeconds, a new
// election at a random node, or a random node's master lost for a time
// drawn uniformly from [0, MaxOutage] seconds.
type Mishaps struct {
	Every        float64 `yaml:"every_seconds"`
	Spike        float64 `yaml:"spike"`
	SpikeSeconds float64 `yaml:"spike_seconds"`
	MaxOutage    float64 `yaml:"max_outage_seconds"`
}

// withDefaults fills in the defaults and checks the scenario.
func (sc Scenario) withDefaults() (Scenario, error) {
	if sc.Algorithm == "" {
		sc.Algorithm = "FAIR_SHARE"
	}
	if sc.LeaseLength == 0 {
		sc.LeaseLength = 60
	}
	if sc.RefreshInterval == 0 {
		sc.RefreshInterval = 2
	}
	if sc.DecayFactor == 0 {
		sc.DecayFactor = 0.5
	}
	if sc.Tasks == 0 {
		sc.Tasks = 3
	}
	var errs []error
	if sc.Name == "" {
		errs = append(errs, errors.New("name: required"))
	}
	if !(sc.Duration > 0 && sc.Duration <= MaxDurationSeconds) {
		errs = append(errs, fmt.Errorf("duration_seconds: %v, must be in (0, %d]", sc.Duration, MaxDurationSeconds))
	}
	if !(sc.Capacity >= 0) || math.IsInf(sc.Capacity, 0) {
		errs = append(errs, fmt.Errorf("capacity: %v, must be finite and ≥ 0", sc.Capacity))
	}
	if sc.LeaseLength < 1 || sc.RefreshInterval < 1 || sc.RefreshInterval > sc.LeaseLength {
		errs = append(errs, fmt.Errorf("lease_length %v, refresh_interval %v: need 1 ≤ refresh_interval ≤ lease_length", sc.LeaseLength, sc.RefreshInterval))
	}
	if !(sc.DecayFactor > 0 && sc.DecayFactor <= 1) {
		errs = append(errs, fmt.Errorf("decay_factor: %v, must be in (0, 1]", sc.DecayFactor))
	}
	if sc.Tasks < 1 || sc.Tasks > 100 {
		errs = append(errs, fmt.Errorf("tasks: %d, must be 1…100", sc.Tasks))
	}
	if f := sc.Fluctuation; !(f.Fraction >= 0 && f.Fraction <= 1) || !(f.Every == 0 || f.Every >= 1) {
		errs = append(errs, fmt.Errorf("fluctuation: every %v s, fraction %v: need every 0 (off) or ≥ 1, 0 ≤ fraction ≤ 1", f.Every, f.Fraction))
	}
	if m := sc.Mishaps; m != nil && (!(m.Every >= 1) || !(m.MaxOutage >= 0) || !(m.SpikeSeconds >= 0) || math.IsNaN(m.Spike) || math.IsInf(m.Spike, 0)) {
		errs = append(errs, fmt.Errorf("mishaps: every %v s, max outage %v s, spike %v for %v s: need every ≥ 1 and the others finite, ≥ 0", m.Every, m.MaxOutage, m.Spike, m.SpikeSeconds))
	}
	names := map[string]bool{}
	clients := 0
	var walk func(n Node, path string)
	walk = func(n Node, path string) {
		if n.Count < 0 || n.Count > MaxNodes {
			errs = append(errs, fmt.Errorf("node %q: count %d, must be 0…%d", n.Name, n.Count, MaxNodes))
			return
		}
		if len(names)+max(n.Count, 1) > MaxNodes || clients > MaxClients {
			return // reported once below
		}
		for _, e := range expand(n) {
			if e.Name == "" {
				errs = append(errs, fmt.Errorf("%s: node without a name", path))
			}
			if names[e.Name] {
				errs = append(errs, fmt.Errorf("node %q: name used twice", e.Name))
			}
			names[e.Name] = true
			if e.Clients < 0 || e.Clients > MaxClients || !(e.Wants >= 0) || math.IsInf(e.Wants, 0) {
				errs = append(errs, fmt.Errorf("node %q: clients %d, wants %v: need 0…%d clients and finite wants ≥ 0", e.Name, e.Clients, e.Wants, MaxClients))
				continue
			}
			clients += e.Clients
			for _, c := range e.Children {
				walk(c, e.Name)
			}
		}
	}
	if sc.Root.Count > 1 {
		errs = append(errs, errors.New("root.count: the root cannot be replicated"))
	}
	walk(sc.Root, "root")
	if len(names) >= MaxNodes || clients > MaxClients {
		errs = append(errs, fmt.Errorf("tree too large: at most %d nodes and %d clients", MaxNodes, MaxClients))
	} else if clients == 0 {
		errs = append(errs, errors.New("no clients"))
	}
	for i, ev := range sc.Events {
		switch ev.Kind {
		case LoseMaster, Elect:
			if !names[ev.Node] {
				errs = append(errs, fmt.Errorf("events[%d]: node %q not in the tree", i, ev.Node))
			}
		case SetWants, Spike:
			if len(ev.Clients) == 0 {
				errs = append(errs, fmt.Errorf("events[%d]: %s needs clients", i, ev.Kind))
			}
		default:
			errs = append(errs, fmt.Errorf("events[%d]: kind %q, want %s, %s, %s or %s", i, ev.Kind, LoseMaster, Elect, SetWants, Spike))
		}
		if !(ev.At >= 0) || !(ev.For >= 0) || math.IsInf(ev.At, 0) || math.IsInf(ev.For, 0) || math.IsNaN(ev.Wants) || math.IsInf(ev.Wants, 0) {
			errs = append(errs, fmt.Errorf("events[%d]: at %v, for %v, wants %v: must be finite, at and for ≥ 0", i, ev.At, ev.For, ev.Wants))
		}
	}
	if len(errs) > 0 {
		return sc, fmt.Errorf("scenario %q: %w", sc.Name, errors.Join(errs...))
	}
	sort.SliceStable(sc.Events, func(i, j int) bool { return sc.Events[i].At < sc.Events[j].At })
	return sc, nil
}

// expand returns the copies of n (Count of them), with suffixed names.
func expand(n Node) []Node {
	if n.Count <= 1 {
		return []Node{n}
	}
	out := make([]Node, n.Count)
	for i := range out {
		out[i] = suffix(n, fmt.Sprintf("-%d", i+1))
		out[i].Count = 1
	}
	return out
}

func suffix(n Node, s string) Node {
	n.Name += s
	kids := make([]Node, len(n.Children))
	for i, c := range n.Children {
		kids[i] = suffix(c, s)
	}
	n.Children = kids
	return n
}

// LoadScenario reads a scenario from a YAML file (unknown fields are
// errors).
func LoadScenario(path string) (Scenario, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Scenario{}, err
	}
	return ParseScenario(data)
}

// ParseScenario parses a YAML scenario and checks it.
func ParseScenario(data []byte) (Scenario, error) {
	var sc Scenario
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&sc); err != nil {
		return Scenario{}, fmt.Errorf("scenario: %w", err)
	}
	return sc.withDefaults()
}

// fluctuating is the demand of scenario one: ±10 % every 10 s.
var fluctuating = Fluctuation{Every: 10, Fraction: 0.1}

// datacentres is the tree of scenarios five to eight: a root, 3 regions, 3
// datacentres per region, 5 clients per datacentre wanting wants each.
func datacentres(wants float64) Node {
	return Node{Name: "root", Children: []Node{{
		Name: "region", Count: 3, Children: []Node{{
			Name: "dc", Count: 3, Clients: 5, Wants: wants,
		}},
	}}}
}

// Builtin returns the built-in scenarios: one to seven as
// doorman-design.md's simulation defined them (capacity 500, lease 60 s,
// refresh interval 2 s at the root, 4 s one level down, 8 s two levels
// down — acting as 5, 5 and 8 s under Doorman's 5-second rule — three tasks
// per node), and eight, Sluice's own, in which demand
// moves across the tree. Where the design gives numbers they are its
// ("Convergence and shortfall"): in one five clients each want 100 at
// first; in seven the 45 clients start by asking 14 each. Five, six and
// eight ask 15 each (the design gives no number for five).
func Builtin() []Scenario {
	base := Scenario{Capacity: 500, LeaseLength: 60, RefreshInterval: 2, Tasks: 3, Fluctuation: fluctuating, Duration: 300}
	one := base
	one.Name, one.Description = "one", "5 clients on the root wanting 100 each, ±10 % every 10 s"
	one.Root = Node{Name: "root", Clients: 5, Wants: 100}
	two := one
	two.Name, two.Description = "two", "as one; the root's master is lost at 120 s, a new one elected at 140 s"
	two.Events = []Event{{At: 120, Kind: LoseMaster, Node: "root", For: 20}}
	three := one
	three.Name, three.Description = "three", "as one; the root's master is lost at 120 s, a new one elected only at 190 s"
	three.Events = []Event{{At: 120, Kind: LoseMaster, Node: "root", For: 70}}
	four := base
	four.Name, four.Description = "four", "a root and one regional node with 5 clients wanting 100"
	four.Root = Node{Name: "root", Children: []Node{{Name: "region", Clients: 5, Wants: 100}}}
	five := base
	five.Name, five.Description = "five", "root, 3 regions, 3 datacentres per region, 5 clients each (45) wanting 15, ±10 % every 10 s"
	five.Root = datacentres(15)
	six := five
	six.Name, six.Description = "six", "as five; two clients jump to wants 1000 at 150 s"
	six.Events = []Event{{At: 150, Kind: SetWants, Clients: []string{"dc-1-1/c1", "dc-3-3/c5"}, Wants: 1000}}
	seven := five
	seven.Name, seven.Description = "seven", "as five but clients start at 14, for an hour, a random mishap every 60 s: a client's wants +100, a new election, or a master lost for 0–60 s"
	seven.Duration = 3600
	seven.Root = datacentres(14)
	seven.Mishaps = &Mishaps{Every: 60, Spike: 100, SpikeSeconds: 120, MaxOutage: 60}
	eight := five
	eight.Name, eight.Description = "eight", "Sluice's own: as five for 900 s, with demand moving between datacentres every 120 s (shares shift across the tree)"
	eight.Duration = 900
	dc := func(name string) []string {
		return []string{name + "/c1", name + "/c2", name + "/c3", name + "/c4", name + "/c5"}
	}
	eight.Events = []Event{
		{At: 120, Kind: SetWants, Clients: append(dc("dc-1-1"), dc("dc-1-2")...), Wants: 2},
		{At: 240, Kind: SetWants, Clients: append(dc("dc-1-1"), dc("dc-1-2")...), Wants: 40},
		{At: 240, Kind: SetWants, Clients: append(dc("dc-2-1"), dc("dc-3-1")...), Wants: 2},
		{At: 360, Kind: SetWants, Clients: append(dc("dc-2-1"), dc("dc-3-1")...), Wants: 60},
		{At: 360, Kind: SetWants, Clients: dc("dc-1-1"), Wants: 1},
		{At: 480, Kind: SetWants, Clients: append(dc("dc-1-1"), dc("dc-2-2")...), Wants: 80},
		{At: 480, Kind: SetWants, Clients: append(dc("dc-2-1"), dc("dc-1-2")...), Wants: 1},
		{At: 600, Kind: SetWants, Clients: append(dc("dc-1-1"), dc("dc-2-2")...), Wants: 1},
		{At: 600, Kind: SetWants, Clients: append(dc("dc-2-1"), dc("dc-1-2")...), Wants: 90},
	}
	out := []Scenario{one, two, three, four, five, six, seven, eight}
	for i := range out {
		out[i], _ = out[i].withDefaults()
	}
	return out
}

// Lookup returns the built-in scenario with this name.
func Lookup(name string) (Scenario, error) {
	var names []string
	for _, sc := range Builtin() {
		if sc.Name == name {
			return sc, nil
		}
		names = append(names, sc.Name)
	}
	return Scenario{}, fmt.Errorf("no scenario %q (built-in: %s, or a YAML file)", name, strings.Join(names, ", "))
}
