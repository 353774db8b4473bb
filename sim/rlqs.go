package sim

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/sluice-rl/sluice/internal/hooks"
	"github.com/sluice-rl/sluice/internal/rlqsfilter"
	"github.com/sluice-rl/sluice/resources"
	"github.com/sluice-rl/sluice/server/capacity"
	"github.com/sluice-rl/sluice/server/rlqs/state"
)

// RLQSScenario is a simulation of Envoy proxies streaming to the RLQS
// service (server/rlqs's state machine, state.Stream, over a real
// capacity.Service on virtual time): Proxies proxies each report Buckets
// buckets every ReportInterval, enforce the assignments they receive as
// Envoy's filter does (internal/rlqsfilter, the model the tests' emulated
// Envoy runs too): the token bucket put on the wire (max_tokens,
// tokens_per_fill, fill_interval, as the filter reads them), starting
// full, kept when a new one is the same on the wire, for the whole
// seconds of the time to live; DENY_ALL without one. Requests are a
// fluid (rlqsfilter.Bucket.Admit). The
// demand of each (proxy, bucket) is drawn at random so that a bucket's
// total is Load × its capacity, and every ShiftEvery seconds half of each
// bucket's proxies trade their demand with the other half (the total
// stays): the shares must move.
type RLQSScenario struct {
	Name        string
	Description string
	// Duration is the virtual time simulated, in seconds.
	Duration float64
	Proxies  int
	Buckets  int
	// Capacity is each bucket's (requests per second); Loads the
	// buckets' total demand as a multiple of it, bucket j taking
	// Loads[j % len(Loads)].
	Capacity float64
	Loads    []float64
	// LeaseLength and RefreshInterval are the template's (whole seconds);
	// ReportInterval Envoy's reporting_interval (seconds).
	LeaseLength, RefreshInterval, ReportInterval float64
	// ShiftEvery is the period of the demand shifts (seconds).
	ShiftEvery float64
	// Smoothing is the demand's smoothing (0: the default).
	Smoothing float64
	// Burst is the token buckets' max_tokens in seconds of their rate
	// (0: 1 s, rlqs.Options.Burst's default; a stream granted less than
	// it asked for gets at most state.LimitedBurst's worth).
	Burst float64
}

// RLQSBuiltin returns the built-in RLQS scenario: 50 proxies, 10 buckets
// of 1000 requests a second (half overloaded at 1.5×, half at 0.8×),
// leases of 20 s refreshed every 5 s, reports every 5 s (Doorman's rule:
// every report a decision), demand shifting every 60 s, for 600 s.
func RLQSBuiltin() RLQSScenario {
	return RLQSScenario{
		Name:        "rlqs",
		Description: "50 Envoys × 10 buckets of 1000/s (loads 1.5 and 0.8), reports every 5 s, leases 20 s refreshed every 5 s, demand shifting every 60 s",
		Duration:    600, Proxies: 50, Buckets: 10, Capacity: 1000, Loads: []float64{1.5, 0.8},
		LeaseLength: 20, RefreshInterval: 5, ReportInterval: 5, ShiftEvery: 60,
	}
}

// RLQSResult is what a run of an RLQSScenario measured.
type RLQSResult struct {
	Scenario string `json:"scenario"`
	Seed     int64  `json:"seed"`
	// Utilization is Σ min(admitted, capacity) ÷ Σ min(capacity,
	// demand) over every second and bucket, the first ShiftEvery seconds
	// (the start) left out: what the token buckets' bursts admit above
	// the capacity is overshoot (AdmittedOvershoot), not use.
	Utilization float64 `json:"utilization"`
	// AssignedOvershoot is the largest (Σ rates assigned − capacity) ÷
	// capacity of a bucket at any step (0: never above the capacity),
	// the rates those the proxies' token buckets fill at.
	AssignedOvershoot float64 `json:"assigned_overshoot"`
	// AdmittedOvershoot is the largest (admitted − capacity) ÷ capacity
	// of a bucket over a second (the token buckets' bursts).
	AdmittedOvershoot float64 `json:"admitted_overshoot"`
	// Unfairness is the mean share of a bucket's capacity assigned
	// elsewhere than its max-min fair shares of the demand (Σ |assigned −
	// fair share| ÷ 2 capacity), every second after the start.
	Unfairness float64 `json:"unfairness"`
	// ReactionMedian and ReactionMax are the times (seconds) from a
	// demand shift until no bucket had more than 5 % of its capacity
	// assigned elsewhere than its new max-min fair shares.
	ReactionMedian float64 `json:"reaction_median_s"`
	ReactionMax    float64 `json:"reaction_max_s"`
	// Reports is the reports the proxies sent.
	Reports int `json:"reports"`
}

// rlqsProxy is one simulated Envoy: its stream state and its buckets.
type rlqsProxy struct {
	s          *state.Stream
	nextReport float64
	lastReport float64
	b          []rlqsBucket
}

// rlqsBucket is one proxy's bucket: its demand, its requests since the
// last report, and Envoy's filter's bucket enforcing its assignment.
type rlqsBucket struct {
	demand float64
	// requests is what the next report counts (allowed + denied, as
	// Envoy's): the demand, summed as it arrives rather than as allowed
	// plus denied, so that the reports — and the server's decisions — do
	// not depend on the admission's floating-point rounding.
	requests float64
	f        rlqsfilter.Bucket // fallbacks DENY_ALL (newRLQSBuckets)
}

// newRLQSBuckets returns n buckets of a proxy, their filter's fallbacks
// DENY_ALL (no_assignment_behavior and expired_assignment_behavior):
// nothing is admitted that the server did not assign.
func newRLQSBuckets(n int) []rlqsBucket {
	b := make([]rlqsBucket, n)
	for j := range b {
		b[j].f = rlqsfilter.Bucket{NoAssignment: typev3.RateLimitStrategy_DENY_ALL, Expired: typev3.RateLimitStrategy_DENY_ALL}
	}
	return b
}

// rate returns the rate b's active assignment admits at now (requests per
// second; 0: none, or DENY_ALL).
func (b *rlqsBucket) rate(now time.Time) float64 {
	a, _ := b.f.Active(now)
	return a.Rate
}

// rlqsStep is the virtual time a step of an RLQS run advances (seconds).
const rlqsStep = 0.05

// rlqsRun is one run of an RLQSScenario: the RLQS service on virtual
// time, its proxies, and what is measured so far.
type rlqsRun struct {
	sc    RLQSScenario
	rng   *rand.Rand
	now   time.Time
	c     *capacity.Service
	ctx   context.Context
	ids   []string // the buckets' resources, by bucket
	ps    []*rlqsProxy
	burst time.Duration // the token buckets' max_tokens, as time at their rate

	res                               RLQSResult
	admittedSum, wantedSum, unfairSum float64
	unfairN                           int
	second                            []float64 // admitted in the current second, by bucket
	shiftAt                           float64   // the last demand shift
	reacted                           bool      // the shares within 5 % since shiftAt
	reactions                         []float64
}

// RunRLQS runs sc with seed and returns what it measured. Deterministic
// for a scenario and seed.
func RunRLQS(sc RLQSScenario, seed int64) (RLQSResult, error) {
	r, err := newRLQSRun(sc, seed)
	if err != nil {
		return RLQSResult{}, err
	}
	const dt = rlqsStep
	nextSweep, nextSample, nextShift := 1.0, 1.0, sc.ShiftEvery
	steps := int(math.Round(sc.Duration / dt))
	for step := 1; step <= steps; step++ {
		t := float64(step) * dt
		r.now = epoch.Add(seconds(t))
		if t >= nextShift {
			r.shift()
			nextShift += sc.ShiftEvery
			r.shiftAt, r.reacted = t, false
		}
		r.admit()
		// Reports, ticks and pushes, at once (no latency).
		if err := r.exchange(t); err != nil {
			return r.res, err
		}
		if t >= nextSweep {
			r.c.Sweep()
			nextSweep++
		}
		r.applyPushes()
		r.checkAssigned()
		if t+dt/2 < nextSample {
			continue
		}
		nextSample++
		r.sample(t)
	}
	return r.result(), nil
}

// newRLQSRun checks sc and sets up its run with seed: the service over
// one FAIR_SHARE resource per bucket, the proxies watching it, reports
// staggered, and the demand drawn.
func newRLQSRun(sc RLQSScenario, seed int64) (*rlqsRun, error) {
	if sc.Proxies < 1 || sc.Buckets < 1 || sc.Capacity <= 0 || len(sc.Loads) == 0 || sc.ReportInterval <= 0 || sc.Duration <= 0 || sc.ShiftEvery <= 0 {
		return nil, fmt.Errorf("rlqs scenario %q: proxies, buckets, capacity, loads, report interval, duration and shift period must be positive", sc.Name)
	}
	repo, err := resources.Parse(fmt.Appendf(nil, "resources:\n  - identifier_glob: \"sim/*\"\n    capacity: %g\n    algorithm: {kind: FAIR_SHARE, lease_length: %g, refresh_interval: %g, learning_mode_duration: 0}\n",
		sc.Capacity, sc.LeaseLength, sc.RefreshInterval))
	if err != nil {
		return nil, err
	}
	r := &rlqsRun{
		sc:      sc,
		rng:     rand.New(rand.NewPCG(uint64(seed), 0x71a5)),
		now:     epoch,
		ctx:     context.Background(),
		ids:     make([]string, sc.Buckets),
		ps:      make([]*rlqsProxy, sc.Proxies),
		res:     RLQSResult{Scenario: sc.Name, Seed: seed},
		second:  make([]float64, sc.Buckets),
		reacted: true,
	}
	r.c = capacity.New(capacity.Options{ID: "root", Config: repo, Now: func() time.Time { return r.now }, Logger: slog.New(slog.DiscardHandler), Hooks: &hooks.Server{}})
	for j := range r.ids {
		r.ids[j] = fmt.Sprintf("sim/name=b%d", j)
	}
	for i := range r.ps {
		s := state.New(fmt.Sprintf("envoy-%d", i), r.c, state.Options{UnconfiguredTTL: time.Minute, Smoothing: sc.Smoothing, Burst: seconds(sc.Burst)}, state.Discard)
		if _, err := r.c.Watch(fmt.Sprintf("envoy-%d", i), &capacity.Watcher{Deliver: s.Deliver, Stop: s.Stop}); err != nil {
			return nil, err
		}
		// Reports start staggered over the first interval, as proxies do.
		r.ps[i] = &rlqsProxy{s: s, nextReport: r.rng.Float64() * sc.ReportInterval, b: newRLQSBuckets(sc.Buckets)}
	}
	r.draw()
	r.burst = seconds(sc.Burst)
	if r.burst <= 0 {
		r.burst = time.Second
	}
	return r, nil
}

// draw gives each (proxy, bucket) a random share of its bucket's total
// demand, Load × capacity.
func (r *rlqsRun) draw() {
	for j := range r.sc.Buckets {
		total := r.sc.Loads[j%len(r.sc.Loads)] * r.sc.Capacity
		ws := make([]float64, r.sc.Proxies)
		var sum float64
		for i := range ws {
			ws[i] = 0.2 + r.rng.Float64()
			sum += ws[i]
		}
		for i, p := range r.ps {
			p.b[j].demand = total * ws[i] / sum
		}
	}
}

// shift has half of each bucket's proxies, at random, trade their demand
// with the other half.
func (r *rlqsRun) shift() {
	for j := range r.sc.Buckets {
		order := r.rng.Perm(r.sc.Proxies)
		for k := 0; k+1 < len(order); k += 2 {
			a, b := &r.ps[order[k]].b[j], &r.ps[order[k+1]].b[j]
			a.demand, b.demand = b.demand, a.demand
		}
	}
}

// apply gives p's filter the actions as the wire carries them.
func (r *rlqsRun) apply(p *rlqsProxy, as []state.Action) {
	for _, a := range as {
		j := slices.Index(r.ids, a.Resource)
		if j < 0 {
			continue
		}
		b := &p.b[j]
		if st, ok := a.Strategy(r.burst); ok {
			b.f.Assign(r.now, st, a.TTL)
		} else {
			b.f.Abandon()
		}
	}
}

// admit has the requests of a step arrive: each bucket admits what its
// token bucket holds.
func (r *rlqsRun) admit() {
	for _, p := range r.ps {
		for j := range p.b {
			b := &p.b[j]
			want := b.demand * rlqsStep
			got := b.f.Admit(r.now, want)
			b.requests += want
			r.second[j] += got
		}
	}
}

// exchange has each proxy report when its interval is up, and tick when
// its stream state asks, applying the answers at once.
func (r *rlqsRun) exchange(t float64) error {
	for _, p := range r.ps {
		if t >= p.nextReport {
			if err := r.report(p, t); err != nil {
				return err
			}
		}
		if next := p.s.Next(); !next.IsZero() && !r.now.Before(next) {
			as, err := state.Perform(r.ctx, r.c, p.s, p.s.Tick(r.now))
			if err != nil {
				return err
			}
			r.apply(p, as)
		}
	}
	return nil
}

// report sends p's usage since its last report, at t, and applies the
// answer.
func (r *rlqsRun) report(p *rlqsProxy, t float64) error {
	us := make([]state.Usage, len(p.b))
	elapsed := t - p.lastReport
	for j := range p.b {
		b := &p.b[j]
		us[j] = state.Usage{Resource: r.ids[j], Requests: b.requests, Elapsed: elapsed}
		b.requests = 0
	}
	p.lastReport, p.nextReport = t, p.nextReport+r.sc.ReportInterval
	as, err := state.Perform(r.ctx, r.c, p.s, p.s.Report(r.now, us))
	if err != nil {
		return err
	}
	r.apply(p, as)
	r.res.Reports++
	return nil
}

// applyPushes applies the assignments the service pushed to each proxy.
func (r *rlqsRun) applyPushes() {
	for _, p := range r.ps {
		select {
		case <-p.s.Pushes():
			r.apply(p, p.s.ApplyPushes(r.now))
		default:
		}
	}
}

// checkAssigned measures Σ assigned against the capacity, at every step
// (AssignedOvershoot).
func (r *rlqsRun) checkAssigned() {
	for j := range r.sc.Buckets {
		var sum float64
		for _, p := range r.ps {
			sum += p.b[j].rate(r.now)
		}
		r.res.AssignedOvershoot = math.Max(r.res.AssignedOvershoot, (sum-r.sc.Capacity)/r.sc.Capacity)
	}
}

// sample measures the second ending at t: utilization, bursts, fairness,
// reaction.
func (r *rlqsRun) sample(t float64) {
	sc := r.sc
	all := true
	for j := range sc.Buckets {
		demands := make([]float64, len(r.ps))
		var total float64
		for i, p := range r.ps {
			demands[i] = p.b[j].demand
			total += demands[i]
		}
		fair := maxMin(sc.Capacity, demands)
		var dev float64
		for i, p := range r.ps {
			dev += math.Abs(p.b[j].rate(r.now) - fair[i])
		}
		dev /= 2 * sc.Capacity
		if t > sc.ShiftEvery {
			r.unfairSum += dev
			r.unfairN++
		}
		if dev > 0.05 {
			all = false
		}
		if t > sc.ShiftEvery {
			r.admittedSum += math.Min(r.second[j], sc.Capacity)
			r.wantedSum += math.Min(sc.Capacity, total)
		}
		r.res.AdmittedOvershoot = math.Max(r.res.AdmittedOvershoot, (r.second[j]-sc.Capacity)/sc.Capacity)
		r.second[j] = 0
	}
	if !r.reacted && all {
		r.reacted = true
		r.reactions = append(r.reactions, t-r.shiftAt)
	}
}

// result is what the run measured, at its end.
func (r *rlqsRun) result() RLQSResult {
	res := r.res
	reactions := r.reactions
	if !r.reacted {
		reactions = append(reactions, r.sc.Duration-r.shiftAt) // never within 5 %: counted to the end
	}
	res.Utilization = r.admittedSum / r.wantedSum
	res.Unfairness = r.unfairSum / float64(max(r.unfairN, 1))
	if len(reactions) > 0 {
		slices.Sort(reactions)
		res.ReactionMedian = reactions[len(reactions)/2]
		res.ReactionMax = reactions[len(reactions)-1]
	}
	return res
}

// maxMin returns the max-min fair shares of capacity among demands
// (algorithm.FairTarget's rule, by water-filling).
func maxMin(capacity float64, demands []float64) []float64 {
	order := make([]int, len(demands))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(demands[a], demands[b]) })
	out := make([]float64, len(demands))
	left := capacity
	for k, i := range order {
		share := left / float64(len(order)-k)
		out[i] = math.Min(demands[i], share)
		left -= out[i]
	}
	return out
}
