package sim

// Series is the time series of one simulation run, sampled once per virtual second.
type Series struct {
	Scenario    string  // scenario name, e.g. "seven"
	Seed        int64   // the run's seed
	Capacity    float64 // the resource's configured capacity at the root (permits/s)
	LearningEnd float64 // seconds from the start after which utilization is counted (end of initial learning mode)
	// RefreshDecay is the direction of the refresh interval's decay
	// (DecaySluice or DecayDesign), RefreshIntervals the intervals the
	// server levels hand out (seconds), root first.
	RefreshDecay     string
	RefreshIntervals []float64
	Levels           []string // level names, index-aligned with Sample.Levels: "clients" first, then the server levels from the leaves up to the root
	Samples          []Sample
	Mishaps          []Mishap // events after which reconvergence is measured, in time order
}

// Sample is the state at one instant.
type Sample struct {
	T      float64 // seconds since the start
	Levels []Level // per level, index-aligned with Series.Levels
	// Uses is Σ over the clients of what each may use (permits/s): its
	// lease while it holds an unexpired one, else what its mode falls back
	// to (the client library's Resource.Capacity: the safe capacity the
	// server last sent, in safe mode, the default). It differs from the
	// clients' Levels[0].Has only while some client has no lease.
	Uses float64
	// Unfair is Σ over the clients of |what it may use − max-min fair share
	// of the root's capacity given every client's wants| (permits/s): 0
	// when every client uses exactly its fair share.
	Unfair float64
}

// Level aggregates one level of the tree at one instant (permits/s).
type Level struct {
	Wants    float64 // Σ wants of the requesters at this level
	Has      float64 // Σ unexpired leases held at this level
	Capacity float64 // Σ capacity available at this level
	Leases   int     // number of unexpired leases held at this level
}

// Mishap is an event of the scenario (a demand spike, an election, a lost master).
type Mishap struct {
	T    float64 // seconds since the start
	What string  // human-readable, e.g. "master of region-1 lost for 37s"
}
