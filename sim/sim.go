// Package sim is Sluice's simulator: a discrete-event simulation on virtual
// time that drives Sluice's real code — servers (capacity.Service with the
// lease store and algorithms), their links to their parents, and clients
// (client.Client's refresh state machine) — in one process, with in-process
// calls instead of the network and scripted mastership changes instead of
// etcd. It measures what doorman-design.md's simulation measured
// ("Convergence and shortfall"): utilization, shortfall and reconvergence.
//
// A run is deterministic for a given scenario and seed: time is virtual,
// every random choice comes from two sources seeded with it, and events at
// the same instant run in the order they were scheduled. The scenario's
// choices (demand, mishaps, successors) have a source of their own, apart
// from the servers' and clients' retry jitter, so that runs of one seed
// that differ in timing (another allocation, refresh decay or interval)
// see the same demand and the same mishaps.
package sim

import (
	"container/heap"
	"context"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/sluice-rl/sluice/algorithm"
	pb "github.com/sluice-rl/sluice/api/doorman"
	"github.com/sluice-rl/sluice/api/doorman/doormanconnect"
	v1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/client"
	"github.com/sluice-rl/sluice/election"
	"github.com/sluice-rl/sluice/internal/hooks"
	"github.com/sluice-rl/sluice/lease"
	"github.com/sluice-rl/sluice/resources"
	"github.com/sluice-rl/sluice/server/capacity"
	"github.com/sluice-rl/sluice/server/leases"
)

// ResourceID is the one resource every simulated client asks for.
const ResourceID = "sim/resource"

// epoch is virtual time zero: a fixed instant, so runs are reproducible.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Result is the outcome of one run.
type Result struct {
	Series Series
	// Violations lists broken invariants (empty when all held): a lease
	// outliving the grantor's own lease, or a server's outstanding leases
	// above its capacity plus the shortfall bound (see Run).
	Violations []string
}

// Options tune a run.
type Options struct {
	// Seed seeds every random choice.
	Seed int64
	// Duration, when > 0, replaces the scenario's duration (seconds).
	Duration float64
	// DoormanAllocation runs the servers with Doorman's allocation across
	// the tree (internal/hooks.Server.DoormanAllocation), for comparison.
	DoormanAllocation bool
	// RefreshDecay is the direction of the refresh interval's decay
	// across the tree: DecaySluice (also ""), each level further from the
	// root refreshes 1/decay_factor times as long as the one above it
	// (clients least often); or DecayDesign
	// (internal/hooks.Server.DesignRefreshDecay), decay_factor times as long
	// (clients most often). Any other value is an error.
	RefreshDecay string
	// NoPush runs servers that push no leases (capacity.Options.NoPush)
	// and holders that only poll, as in Doorman, for comparison. By
	// default every client and intermediate server watches its master for
	// pushed leases (sluice.v1.Leases), delivered at the instant they are
	// decided.
	NoPush bool
	// NoLeaseHorizon runs roots whose new masters learn for a full
	// learning period whatever happened before, as in Doorman, for
	// comparison (DoormanAllocation implies it). By default a root's new
	// master is told when its predecessor's leases end, as
	// election.Etcd's lease horizon tells it (capacity.Service.
	// SetLeasesEndBy): HorizonTTL after the predecessor crashed or handed
	// over, with the server's default election TTL (SimElectionTTL).
	NoLeaseHorizon bool
	// RefreshInterval, when > 0, replaces the scenario's refresh interval
	// at the root (seconds).
	RefreshInterval float64
	// Progress, when set, is told how far the run is (virtual seconds).
	Progress Progress
}

// Directions of the refresh interval's decay (Options.RefreshDecay).
const (
	DecaySluice = "sluice"
	DecayDesign = "design"
)

// Run simulates the scenario and returns its time series, sampled once per
// virtual second, and the invariant violations seen. It checks, at every
// grant, that no lease an intermediate server hands out outlives its own
// lease from its parent; and at every sample, that the root's outstanding
// leases never exceed its capacity and an intermediate's never exceed the
// largest capacity it held during the last lease length (the shortfall
// bound: what it handed out, it had when it did).
//
// Errors: an invalid scenario.
func Run(sc Scenario, opts Options) (*Result, error) {
	sc, err := sc.withDefaults()
	if err != nil {
		return nil, err
	}
	s, err := newSim(sc, opts)
	if err != nil {
		return nil, err
	}
	s.run()
	return &Result{Series: s.series, Violations: s.violations}, nil
}

// sim is one run.
type sim struct {
	sc    Scenario
	opts  Options
	rng   *rand.Rand // the scenario's choices: demand, mishaps, successors
	jit   *rand.Rand // the servers' and clients' retry jitter
	now   time.Time
	queue events
	seq   int64
	ctx   context.Context
	log   *slog.Logger

	nodes   []*node // root first, parents before children
	byName  map[string]*node
	tasks   map[string]*task // by address
	clients []*simClient
	byID    map[string]*simClient
	depth   int // levels of servers

	series     Series
	violations []string
	onSample   func(*sim) // tests: called after every sample
}

type node struct {
	name   string
	depth  int // 0 at the root
	parent *node
	tasks  []*task
	master int // index of the master task, -1 while there is none
	outage bool
	lostAt time.Time // when its master crashed (zero: no crash since the last election)
	// The lease horizon in etcd (roots; see elect): horizonKept once a
	// master has written one (KEY.horizon-kept), horizonEnd when it lapses
	// unless renewed, keptBy the master that renews it in its term (nil:
	// none, it has granted nothing yet).
	horizonKept bool
	horizonEnd  time.Time
	keptBy      *task
	capHist     []float64 // capacity held at each of the last lease-length seconds
	capPeak     float64   // the most capacity held since the last sample (see notePeak)
	children    []*node
}

type task struct {
	addr string
	node *node
	srv  *capacity.Service
	api  doormanconnect.CapacityClient // srv through Connect
	link *hooks.Server                 // srv's hooks: its parent link's step
	down bool
	gen  int // invalidates scheduled parent-link turns
}

type simClient struct {
	name  string
	node  *node
	c     *client.Client
	hooks *hooks.Client // c's hooks: its refresh step
	res   *client.Resource
	base  float64 // wants before fluctuation
	spike float64 // added to base while a spike lasts
	gen   int     // invalidates scheduled refresh turns
}

// newSim builds a run of sc (with its defaults filled in) under opts.
func newSim(sc Scenario, opts Options) (*sim, error) {
	if opts.Duration > 0 {
		sc.Duration = opts.Duration
	}
	if opts.RefreshInterval > 0 {
		if opts.RefreshInterval < 1 || opts.RefreshInterval > sc.LeaseLength {
			return nil, fmt.Errorf("refresh interval %v s: need 1 ≤ it ≤ the lease length %v s", opts.RefreshInterval, sc.LeaseLength)
		}
		sc.RefreshInterval = opts.RefreshInterval
	}
	switch opts.RefreshDecay {
	case "", DecaySluice, DecayDesign:
	default:
		return nil, fmt.Errorf("refresh decay %q: want %s or %s", opts.RefreshDecay, DecaySluice, DecayDesign)
	}
	s := &sim{
		sc: sc, opts: opts,
		rng:    rand.New(rand.NewPCG(uint64(opts.Seed), 0x5111ce)),
		jit:    rand.New(rand.NewPCG(uint64(opts.Seed), 0x717e7)),
		now:    epoch,
		ctx:    context.Background(),
		log:    slog.New(slog.DiscardHandler),
		byName: map[string]*node{},
		tasks:  map[string]*task{},
		byID:   map[string]*simClient{},
	}
	learning := sc.LeaseLength
	if sc.LearningModeDuration != nil {
		learning = *sc.LearningModeDuration
	}
	cfg, err := resources.Parse(fmt.Appendf(nil, `
resources:
  - identifier_glob: %q
    capacity: %v
    algorithm:
      kind: %s
      lease_length: %d
      refresh_interval: %d
      learning_mode_duration: %d
      parameters: [{name: decay_factor, value: "%v"}]
`, ResourceID, sc.Capacity, sc.Algorithm, int64(sc.LeaseLength), int64(sc.RefreshInterval), int64(learning), sc.DecayFactor))
	if err != nil {
		return nil, fmt.Errorf("scenario %q: %w", sc.Name, err)
	}
	var build func(n Node, parent *node, depth int)
	build = func(n Node, parent *node, depth int) {
		for _, e := range expand(n) {
			nd := &node{name: e.Name, depth: depth, parent: parent}
			s.nodes = append(s.nodes, nd)
			s.byName[nd.name] = nd
			s.depth = max(s.depth, depth+1)
			if parent != nil {
				parent.children = append(parent.children, nd)
			}
			for i := range sc.Tasks {
				t := &task{addr: fmt.Sprintf("%s/task-%d", nd.name, i), node: nd}
				h := &hooks.Server{Rand: s.jit, DoormanAllocation: opts.DoormanAllocation, DesignRefreshDecay: opts.RefreshDecay == DecayDesign}
				o := capacity.Options{ID: nd.name, Address: t.addr, Now: s.clock, Logger: s.log, Hooks: h, NoPush: opts.NoPush}
				if parent == nil {
					o.Config = cfg
				} else {
					for _, pt := range parent.tasks {
						o.Parent = append(o.Parent, pt.addr)
					}
					h.ParentDial, h.ManualParent = s.dial, true
				}
				if parent == nil && !opts.NoLeaseHorizon && !opts.DoormanAllocation {
					// election.LeaseHorizon's KeepHorizon, at once.
					o.Horizon = capacity.HorizonFunc(func(context.Context) error { nd.keptBy = t; return nil })
				}
				t.srv = capacity.New(o)
				t.api, t.link = capacity.InProcessClient(t.srv), h
				nd.tasks = append(nd.tasks, t)
				s.tasks[t.addr] = t
			}
			for i := range e.Clients {
				sc := &simClient{name: fmt.Sprintf("%s/c%d", nd.name, i+1), node: nd, base: e.Wants}
				s.clients = append(s.clients, sc)
				s.byID[sc.name] = sc
			}
			for _, c := range e.Children {
				build(c, nd, depth+1)
			}
		}
	}
	build(sc.Root, nil, 0)
	for i, ev := range sc.Events {
		for _, c := range ev.Clients {
			if s.byID[c] == nil {
				return nil, fmt.Errorf("scenario %q: events[%d]: no client %q", sc.Name, i, c)
			}
		}
	}
	// The initial learning period ends when learning mode has ended at
	// every level and the first leases after it have travelled down the
	// deepest path: one refresh per level, each at least Doorman's 5 s
	// apart.
	decay := opts.RefreshDecay
	if decay == "" {
		decay = DecaySluice
	}
	intervals := Intervals(sc, decay, s.depth)
	settle := 0.0
	for _, ri := range intervals {
		settle += math.Max(ri, pb.MinRequestInterval.Seconds())
	}
	s.series = Series{Scenario: sc.Name, Seed: opts.Seed, Capacity: sc.Capacity, LearningEnd: learning + settle,
		RefreshDecay: decay, RefreshIntervals: intervals}
	s.series.Levels = []string{"clients"}
	for d := s.depth - 1; d >= 0; d-- {
		s.series.Levels = append(s.series.Levels, levelName(d, s.depth))
	}
	return s, nil
}

// Intervals returns the refresh intervals (seconds) the servers of a tree
// depth levels deep hand out, root first: the scenario's at the root, then
// each level's grown by 1/decay_factor (decay DecaySluice or "") or shrunk
// by decay_factor (DecayDesign), in whole seconds, between 1 s and the
// lease length, as server.Server computes them. Requesters stretch those
// under Doorman's 5 s (doorman.MinRequestInterval) to 5 s.
func Intervals(sc Scenario, decay string, depth int) []float64 {
	f := sc.DecayFactor
	if f <= 0 || f > 1 {
		f = 0.5
	}
	if decay == DecayDesign {
		f = 1 / f
	}
	var out []float64
	for d, ri := 0, sc.RefreshInterval; d < depth; d, ri = d+1, math.Min(math.Max(math.Ceil(ri/f), 1), sc.LeaseLength) {
		out = append(out, ri)
	}
	return out
}

// levelName names the server level at depth d of a tree with depth levels.
func levelName(d, depth int) string {
	switch {
	case d == 0:
		return "root"
	case d == depth-1:
		return "leaf"
	default:
		return fmt.Sprintf("level%d", d)
	}
}

func (s *sim) clock() time.Time { return s.now }

// elapsed is the virtual time since the start, in seconds.
func (s *sim) elapsed() float64 { return s.now.Sub(epoch).Seconds() }

// at schedules f at virtual time t seconds from the start.
func (s *sim) at(t float64, f func()) {
	s.seq++
	heap.Push(&s.queue, event{t: epoch.Add(time.Duration(t * float64(time.Second))), seq: s.seq, f: f})
}

// after schedules f d from now.
func (s *sim) after(d time.Duration, f func()) {
	s.seq++
	heap.Push(&s.queue, event{t: s.now.Add(d), seq: s.seq, f: f})
}

func (s *sim) run() {
	// Every node elects its first master at the start.
	for _, nd := range s.nodes {
		s.elect(nd, 0)
	}
	for _, nd := range s.nodes {
		for _, t := range nd.tasks {
			if nd.parent != nil {
				s.scheduleLink(t, 0)
			}
		}
	}
	for _, c := range s.clients {
		s.startClient(c)
	}
	if f := s.sc.Fluctuation; f.Every > 0 && f.Fraction > 0 {
		for t := f.Every; t < s.sc.Duration; t += f.Every {
			s.at(t, s.fluctuate)
		}
	}
	for _, ev := range s.sc.Events {
		s.at(ev.At, func() { s.apply(ev) })
	}
	if m := s.sc.Mishaps; m != nil {
		for t := m.Every; t < s.sc.Duration; t += m.Every {
			s.at(t, s.mishap)
		}
	}
	for t := 0.0; t <= s.sc.Duration; t++ {
		s.at(t, s.sample)
	}
	end := epoch.Add(time.Duration(s.sc.Duration * float64(time.Second)))
	for s.queue.Len() > 0 {
		ev := heap.Pop(&s.queue).(event)
		if ev.t.After(end) {
			break
		}
		s.now = ev.t
		ev.f()
	}
	if s.opts.Progress != nil {
		s.opts.Progress.Done()
	}
}

// SimElectionTTL is the election's session TTL the simulator assumes for
// the lease horizon: `sluice server --election-ttl`'s default.
const SimElectionTTL = 10 * time.Second

// elect makes task i of nd its master (the others learn its address): it
// starts afresh, in learning mode.
func (s *sim) elect(nd *node, i int) {
	nd.master, nd.outage = i, false
	addr := nd.tasks[i].addr
	for j, t := range nd.tasks {
		if t.down {
			// A crashed task restarts as a non-master, with no state.
			t.down = false
			if t.node.parent != nil {
				s.scheduleLink(t, 0)
			}
		}
		t.srv.SetMastership(j == i, addr)
	}
	// A root's new master learns when its predecessor's leases end from
	// the lease horizon in etcd (election.Etcd): the one a master renewed
	// since it first granted more than 0 lapses HorizonTTL after it
	// crashed, or after now when it hands over alive; a master that
	// granted nothing renewed none. When no master has written one (the
	// first master), the new master knows of no predecessor, and writes a
	// horizon of HorizonTTL from now that covers an unknown one.
	if nd.parent == nil && !s.opts.NoLeaseHorizon && !s.opts.DoormanAllocation {
		ttl := election.HorizonTTL(seconds(s.sc.LeaseLength), SimElectionTTL)
		if nd.keptBy != nil {
			last := s.now
			if !nd.lostAt.IsZero() {
				last = nd.lostAt
			}
			if end := last.Add(ttl); end.After(nd.horizonEnd) {
				nd.horizonEnd = end
			}
			nd.keptBy = nil
		}
		if nd.horizonKept {
			nd.tasks[i].srv.SetLeasesEndBy(nd.horizonEnd) // in the past: at once
		} else {
			nd.horizonKept, nd.horizonEnd = true, s.now.Add(ttl)
		}
	}
	nd.lostAt = time.Time{}
	// The holders' streams find the new master: nd's clients and
	// children, and nd itself at its parent.
	for _, c := range s.clients {
		if c.node == nd && c.c != nil {
			s.watchClient(c)
		}
	}
	for _, ch := range nd.children {
		s.watchParent(ch)
	}
	s.watchParent(nd)
}

// watchClient opens client c's stream to its node's master: pushed leases
// reach it at the instant they are decided.
func (s *sim) watchClient(c *simClient) {
	nd := c.node
	if s.opts.NoPush || nd.master < 0 {
		return
	}
	_, _ = nd.tasks[nd.master].srv.Watch(c.name, &capacity.Watcher{
		Deliver: func(resource string, g lease.Grant) bool {
			l := leases.Pushed(resource, g)
			s.after(0, func() { c.hooks.Push([]*v1.PushedLease{l}) })
			return true
		},
		Stop: func() {},
	})
}

// watchParent opens the stream of nd's master to the master of nd's
// parent; a lease pushed to a task that has crashed or lost mastership
// since is not delivered.
func (s *sim) watchParent(nd *node) {
	p := nd.parent
	if s.opts.NoPush || p == nil || p.master < 0 || nd.master < 0 {
		return
	}
	t := nd.tasks[nd.master]
	_, _ = p.tasks[p.master].srv.Watch(nd.name, &capacity.Watcher{
		Deliver: func(resource string, g lease.Grant) bool {
			if t.down || nd.master < 0 || nd.tasks[nd.master] != t {
				return false
			}
			l := leases.Pushed(resource, g)
			s.after(0, func() {
				if !t.down {
					t.link.Push([]*v1.PushedLease{l})
					s.notePeak(t)
				}
			})
			return true
		},
		Stop: func() {},
	})
}

// loseMaster crashes nd's master: its state is gone and it answers
// nothing; the others know no master until the next election.
func (s *sim) loseMaster(nd *node) {
	if nd.master < 0 {
		return
	}
	old := nd.tasks[nd.master]
	old.down = true
	old.gen++
	old.srv.SetMastership(false, "")
	nd.master, nd.outage, nd.lostAt = -1, true, s.now
	for _, t := range nd.tasks {
		if !t.down {
			t.srv.SetMastership(false, "")
		}
	}
}

// successor picks a task other than the current (or crashed) master.
func (s *sim) successor(nd *node) int {
	var cands []int
	for i, t := range nd.tasks {
		if i != nd.master && !t.down {
			cands = append(cands, i)
		}
	}
	if len(cands) == 0 {
		return max(nd.master, 0)
	}
	return cands[s.rng.IntN(len(cands))]
}

func (s *sim) scheduleLink(t *task, d time.Duration) {
	t.gen++
	gen := t.gen
	s.after(d, func() {
		if t.gen != gen || t.down {
			return
		}
		next := t.link.StepParent(s.ctx)
		s.notePeak(t)
		s.scheduleLink(t, max(next, 10*time.Millisecond))
	})
}

func (s *sim) startClient(c *simClient) {
	var addrs []string
	for _, t := range c.node.tasks {
		addrs = append(addrs, t.addr)
	}
	c.hooks = &hooks.Client{Dial: s.dial, Manual: true, Rand: s.jit}
	cl, err := client.New(strings.Join(addrs, ","), client.WithID(c.name), client.WithClock(s.clock), client.WithLogger(s.log), client.WithHooks(c.hooks))
	if err != nil {
		panic(err) // addresses are never empty
	}
	c.c = cl
	s.watchClient(c)
	c.res, err = cl.Resource(ResourceID, c.base)
	if err != nil {
		panic(err) // a fresh client, a valid id and wants
	}
	s.scheduleClient(c, 0)
}

func (s *sim) scheduleClient(c *simClient, d time.Duration) {
	c.gen++
	gen := c.gen
	s.after(d, func() {
		if c.gen != gen {
			return
		}
		next := c.hooks.Step(s.ctx)
		s.scheduleClient(c, max(next, 10*time.Millisecond))
	})
}

// setWants changes a client's wants; as the real client does on Ask, it
// refreshes at once.
func (s *sim) setWants(c *simClient, w float64) {
	w = math.Max(0, w)
	if w == c.res.Wants() {
		return
	}
	if err := c.res.Ask(w); err != nil {
		panic(err) // finite and ≥ 0
	}
	s.scheduleClient(c, 0)
}

func (s *sim) fluctuate() {
	f := s.sc.Fluctuation
	for _, c := range s.clients {
		factor := 1 + f.Fraction*(2*s.rng.Float64()-1)
		s.setWants(c, (c.base+c.spike)*factor)
	}
}

func (s *sim) apply(ev Event) {
	switch ev.Kind {
	case LoseMaster:
		nd := s.byName[ev.Node]
		s.mishapf("master of %s lost", nd.name)
		s.loseMaster(nd)
		if ev.For > 0 {
			s.after(seconds(ev.For), func() { s.elect(nd, s.successor(nd)) })
		}
	case Elect:
		nd := s.byName[ev.Node]
		s.mishapf("new master of %s", nd.name)
		s.elect(nd, s.successor(nd))
	case SetWants:
		s.mishapf("wants of %s set to %v", strings.Join(ev.Clients, ", "), ev.Wants)
		for _, id := range ev.Clients {
			c := s.byID[id]
			c.base, c.spike = ev.Wants, 0
			s.setWants(c, ev.Wants)
		}
	case Spike:
		s.mishapf("wants of %s +%v", strings.Join(ev.Clients, ", "), ev.Wants)
		for _, id := range ev.Clients {
			s.spike(s.byID[id], ev.Wants, ev.For)
		}
	}
}

func (s *sim) spike(c *simClient, add, d float64) {
	c.spike += add
	s.setWants(c, c.res.Wants()+add)
	if d > 0 {
		s.after(seconds(d), func() {
			c.spike -= add
			s.setWants(c, c.res.Wants()-add)
		})
	}
}

// mishap is one random mishap of scenario seven.
func (s *sim) mishap() {
	m := s.sc.Mishaps
	switch s.rng.IntN(3) {
	case 0:
		c := s.clients[s.rng.IntN(len(s.clients))]
		s.mishapf("wants of %s +%v for %vs", c.name, m.Spike, m.SpikeSeconds)
		s.spike(c, m.Spike, m.SpikeSeconds)
	case 1:
		nd := s.nodes[s.rng.IntN(len(s.nodes))]
		if nd.outage {
			return
		}
		s.mishapf("new master of %s", nd.name)
		s.elect(nd, s.successor(nd))
	case 2:
		nd := s.nodes[s.rng.IntN(len(s.nodes))]
		if nd.outage {
			return
		}
		d := math.Round(s.rng.Float64() * m.MaxOutage)
		s.mishapf("master of %s lost for %vs", nd.name, d)
		s.loseMaster(nd)
		s.after(seconds(d), func() { s.elect(nd, s.successor(nd)) })
	}
}

// mishapf records a mishap; mishaps at the same instant are one (so that
// reconvergence is measured once, from the instant).
func (s *sim) mishapf(format string, args ...any) {
	what, now := fmt.Sprintf(format, args...), s.elapsed()
	if n := len(s.series.Mishaps); n > 0 && s.series.Mishaps[n-1].T == now {
		s.series.Mishaps[n-1].What += "; " + what
		return
	}
	s.series.Mishaps = append(s.series.Mishaps, Mishap{T: now, What: what})
}

func (s *sim) violation(format string, args ...any) {
	if len(s.violations) < 100 {
		s.violations = append(s.violations, fmt.Sprintf("t=%.1fs: ", s.elapsed())+fmt.Sprintf(format, args...))
	}
}

// notePeak records the capacity intermediate task t holds from its parent
// now, if it is its node's master: a lease pushed and then cut within one
// second still counts for the shortfall bound (see sample).
func (s *sim) notePeak(t *task) {
	nd := t.node
	if nd.master < 0 || nd.tasks[nd.master] != t {
		return
	}
	if st, err := t.srv.Status(ResourceID); err == nil && st.ParentExpiry.After(s.now) {
		nd.capPeak = math.Max(nd.capPeak, st.Capacity)
	}
}

// sample records the state of every level, and checks the outstanding
// leases of every master against its capacity.
func (s *sim) sample() {
	now := s.now
	levels := make([]Level, len(s.series.Levels))
	wants := make([]float64, len(s.clients))
	uses := make([]float64, len(s.clients)) // what each client may use
	var sumUses float64
	for i, c := range s.clients {
		wants[i] = c.res.Wants()
		levels[0].Wants += wants[i]
		if capacity, _, _, ok := c.res.Lease(); ok {
			levels[0].Has += capacity
			levels[0].Leases++
		}
		uses[i] = c.res.Capacity()
		sumUses += uses[i]
	}
	var unfair float64
	d := make(algorithm.Slice, len(wants))
	for i, w := range wants {
		d[i] = algorithm.Requester{Wants: w, Subclients: 1}
	}
	level := d.WaterLevel(s.sc.Capacity)
	for i, w := range wants {
		unfair += math.Abs(uses[i] - math.Min(w, level))
	}
	window := int(s.sc.LeaseLength+lease.ExpiryAllowance.Seconds()) + 1
	for _, nd := range s.nodes {
		var st capacity.ResourceStatus
		capacity := 0.0
		if nd.master >= 0 {
			t := nd.tasks[nd.master]
			t.srv.Sweep()
			var err error
			st, err = t.srv.Status(ResourceID)
			if err == nil {
				switch {
				case nd.parent == nil:
					capacity = st.Capacity
				case st.ParentExpiry.After(now):
					capacity = st.Capacity
				}
			} else if nd.parent == nil {
				capacity = s.sc.Capacity
			}
		}
		nd.capHist = append(nd.capHist, math.Max(capacity, nd.capPeak))
		nd.capPeak = 0
		if len(nd.capHist) > window {
			nd.capHist = nd.capHist[len(nd.capHist)-window:]
		}
		bound := capacity
		if nd.parent != nil {
			for _, c := range nd.capHist {
				bound = math.Max(bound, c)
			}
		}
		if st.SumHas > bound*(1+1e-9)+1e-9 {
			s.violation("%s hands out %.2f with capacity %.2f (largest in the last lease length %.2f)", nd.name, st.SumHas, capacity, bound)
		}
		l := &levels[s.depth-nd.depth]
		l.Wants += st.SumWants
		l.Has += st.SumHas
		l.Capacity += capacity
		l.Leases += st.Clients
	}
	levels[0].Capacity = s.sc.Capacity
	s.series.Samples = append(s.series.Samples, Sample{T: s.elapsed(), Levels: levels, Uses: sumUses, Unfair: unfair})
	if s.onSample != nil {
		s.onSample(s)
	}
	if s.opts.Progress != nil {
		s.opts.Progress.Update(s.elapsed(), s.sc.Duration)
	}
}

func seconds(x float64) time.Duration { return time.Duration(x * float64(time.Second)) }

// dial returns the in-process stub of the task at addr.
func (s *sim) dial(addr string) doormanconnect.CapacityClient {
	return &stub{s: s, t: s.tasks[addr], addr: addr}
}

// stub calls a task's server in process; a crashed task is unavailable.
// It checks every lease an intermediate hands out against its own lease.
type stub struct {
	s    *sim
	t    *task
	addr string
}

func (st *stub) down() error {
	if st.t == nil {
		return connect.NewError(connect.CodeUnavailable, fmt.Errorf("no task at %s", st.addr))
	}
	if st.t.down {
		return connect.NewError(connect.CodeUnavailable, fmt.Errorf("%s is down", st.addr))
	}
	return nil
}

func (st *stub) Discovery(ctx context.Context, req *connect.Request[pb.DiscoveryRequest]) (*connect.Response[pb.DiscoveryResponse], error) {
	if err := st.down(); err != nil {
		return nil, err
	}
	return st.t.api.Discovery(ctx, req)
}

func (st *stub) GetCapacity(ctx context.Context, req *connect.Request[pb.GetCapacityRequest]) (*connect.Response[pb.GetCapacityResponse], error) {
	if err := st.down(); err != nil {
		return nil, err
	}
	resp, err := st.t.api.GetCapacity(ctx, req)
	if err == nil {
		for _, rr := range resp.Msg.GetResponse() {
			st.check(req.Msg.GetClientId(), rr.GetGets())
		}
	}
	return resp, err
}

func (st *stub) GetServerCapacity(ctx context.Context, req *connect.Request[pb.GetServerCapacityRequest]) (*connect.Response[pb.GetServerCapacityResponse], error) {
	if err := st.down(); err != nil {
		return nil, err
	}
	resp, err := st.t.api.GetServerCapacity(ctx, req)
	if err == nil {
		for _, rr := range resp.Msg.GetResponse() {
			st.check(req.Msg.GetServerId(), rr.GetGets())
		}
	}
	return resp, err
}

func (st *stub) ReleaseCapacity(ctx context.Context, req *connect.Request[pb.ReleaseCapacityRequest]) (*connect.Response[pb.ReleaseCapacityResponse], error) {
	if err := st.down(); err != nil {
		return nil, err
	}
	return st.t.api.ReleaseCapacity(ctx, req)
}

// check verifies that a lease granted by an intermediate task does not
// outlive the task's own lease from its parent.
func (st *stub) check(who string, g *pb.Lease) {
	if st.t.node.parent == nil || g.GetCapacity() <= 0 {
		return
	}
	rs, err := st.t.srv.Status(ResourceID)
	if err != nil {
		return
	}
	if exp := time.Unix(g.GetExpiryTime(), 0); rs.ParentExpiry.IsZero() || exp.After(rs.ParentExpiry) {
		st.s.violation("%s granted %s %.2f until %v, beyond its own lease (until %v)", st.t.addr, who, g.GetCapacity(),
			exp.Sub(epoch), rs.ParentExpiry.Sub(epoch))
	}
}

// event is a scheduled callback; events is a min-heap by time, then by
// scheduling order.
type event struct {
	t   time.Time
	seq int64
	f   func()
}

type events []event

func (e events) Len() int { return len(e) }
func (e events) Less(i, j int) bool {
	if !e[i].t.Equal(e[j].t) {
		return e[i].t.Before(e[j].t)
	}
	return e[i].seq < e[j].seq
}
func (e events) Swap(i, j int) { e[i], e[j] = e[j], e[i] }
func (e *events) Push(x any)   { *e = append(*e, x.(event)) }
func (e *events) Pop() any {
	old := *e
	x := old[len(old)-1]
	*e = old[:len(old)-1]
	return x
}
