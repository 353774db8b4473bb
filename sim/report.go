package sim

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
)

// Summary is what a run measured, as doorman-design.md's simulation
// reported it ("Convergence and shortfall"). Amounts are fractions or
// percentages of the root's capacity as named; times are virtual seconds.
type Summary struct {
	Scenario        string  `json:"scenario"`
	Seed            int64   `json:"seed"`
	DurationSeconds float64 `json:"duration_seconds"`
	// RefreshDecay and RefreshIntervals are the run's (see Series).
	RefreshDecay     string    `json:"refresh_decay"`
	RefreshIntervals []float64 `json:"refresh_intervals_seconds"`
	// UtilizationMean is the mean, over the samples after the initial
	// learning period, of what the clients may use (Sample.Uses: their
	// leases, or their safe capacity while they hold none) ÷ min(capacity,
	// Σ wants) (0.985 is 98.5 %); samples with nothing to hand out are
	// skipped.
	UtilizationMean float64 `json:"utilization_mean"`
	// UnfairMean is the mean, over the same samples, of the clients'
	// distance from their max-min fair shares (Sample.Unfair) ÷
	// min(capacity, Σ wants): 0 when every client holds its fair share,
	// 0.02 when 2 % of what should be handed out is held by the wrong
	// clients or by none.
	UnfairMean float64 `json:"unfair_mean"`
	// OvershootMaxPercent is the worst of 100·(Σ has − capacity)/capacity
	// over all samples, has being the clients' unexpired leases; 0 if Σ
	// has never exceeded the capacity. This is the bound the servers keep.
	OvershootMaxPercent float64 `json:"overshoot_max_percent"`
	// SafeModeOvershootMaxPercent is the same over what the clients may
	// use (Sample.Uses), their safe capacity counted while they hold no
	// lease, after the initial learning period (as UtilizationMean): safe mode is the clients' own fallback, which a server cannot
	// book for clients it cannot hear from (doorman-design.md, "Optimistic,
	// pessimistic and safe mode operation").
	SafeModeOvershootMaxPercent float64 `json:"safe_mode_overshoot_max_percent"`
	// OvershootMeanPercent is its mean over the samples above capacity.
	OvershootMeanPercent float64 `json:"overshoot_mean_percent"`
	// ShortfallEpisodes counts the runs of consecutive samples in which
	// the clients' Σ has exceeded the capacity (Doorman's "shortfall").
	ShortfallEpisodes int `json:"shortfall_episodes"`
	// ShortfallSeconds is the time spent above capacity.
	ShortfallSeconds float64 `json:"shortfall_seconds"`
	// ReconvergeMaxSeconds is the longest time, over the mishaps, from a
	// mishap until Σ has is back, for good, within 2 % of the steady
	// allocation min(capacity, Σ wants): 0 if it never left; the time to
	// the next mishap (or the end) if it is not back for at least 5
	// samples by then.
	ReconvergeMaxSeconds  float64 `json:"reconverge_max_seconds"`
	ReconvergeMeanSeconds float64 `json:"reconverge_mean_seconds"`
	// RunSeconds is the wall time of the run (set by the caller).
	RunSeconds float64 `json:"run_seconds"`
}

// Reconvergence criteria: within this fraction of the steady allocation,
// for this many consecutive samples.
const (
	reconvergeBand    = 0.02
	reconvergeSamples = 5
)

// Summarize computes the Summary of a series. It does not modify s.
func Summarize(s *Series) Summary {
	sum := Summary{Scenario: s.Scenario, Seed: s.Seed, RefreshDecay: s.RefreshDecay, RefreshIntervals: s.RefreshIntervals}
	if len(s.Samples) == 0 {
		return sum
	}
	sum.DurationSeconds = s.Samples[len(s.Samples)-1].T
	spacing := 1.0
	if len(s.Samples) > 1 {
		spacing = s.Samples[1].T - s.Samples[0].T
	}
	var util, unfair, nUtil, over float64
	var nOver int
	above := false
	for _, smp := range s.Samples {
		c := smp.Levels[0]
		if smp.T >= s.LearningEnd {
			if steady := math.Min(s.Capacity, c.Wants); steady > 0 {
				util += smp.Uses / steady
				unfair += smp.Unfair / steady
				nUtil++
			}
		}
		if smp.T >= s.LearningEnd && s.Capacity > 0 && smp.Uses > s.Capacity*(1+1e-9) {
			sum.SafeModeOvershootMaxPercent = math.Max(sum.SafeModeOvershootMaxPercent, 100*(smp.Uses-s.Capacity)/s.Capacity)
		}
		if s.Capacity > 0 && c.Has > s.Capacity*(1+1e-9) {
			pct := 100 * (c.Has - s.Capacity) / s.Capacity
			sum.OvershootMaxPercent = math.Max(sum.OvershootMaxPercent, pct)
			over += pct
			nOver++
			if !above {
				sum.ShortfallEpisodes++
			}
			above = true
		} else {
			above = false
		}
	}
	if nUtil > 0 {
		sum.UtilizationMean = util / nUtil
		sum.UnfairMean = unfair / nUtil
	}
	if nOver > 0 {
		sum.OvershootMeanPercent = over / float64(nOver)
	}
	sum.ShortfallSeconds = float64(nOver) * spacing
	var total float64
	for i, m := range s.Mishaps {
		until := sum.DurationSeconds
		if i+1 < len(s.Mishaps) {
			until = s.Mishaps[i+1].T
		}
		d := reconverge(s, m.T, until)
		sum.ReconvergeMaxSeconds = math.Max(sum.ReconvergeMaxSeconds, d)
		total += d
	}
	if len(s.Mishaps) > 0 {
		sum.ReconvergeMeanSeconds = total / float64(len(s.Mishaps))
	}
	return sum
}

// reconverge returns how long after from the clients' Σ has was last
// outside reconvergeBand of the steady allocation min(capacity, Σ wants)
// before until: 0 if it never left the band, and until − from if it was
// still outside, or back for fewer than reconvergeSamples samples, at until.
func reconverge(s *Series, from, until float64) float64 {
	lastOut, back := math.Inf(-1), 0
	for _, smp := range s.Samples {
		if smp.T < from {
			continue
		}
		if smp.T > until {
			break
		}
		c := smp.Levels[0]
		steady := math.Min(s.Capacity, c.Wants)
		if math.Abs(c.Has-steady) > reconvergeBand*steady {
			lastOut, back = smp.T, 0
		} else {
			back++
		}
	}
	switch {
	case math.IsInf(lastOut, -1):
		return 0
	case back < reconvergeSamples:
		return until - from
	}
	// Back at the first sample after the last one outside the band.
	for _, smp := range s.Samples {
		if smp.T > lastOut {
			return smp.T - from
		}
	}
	return until - from
}

// WriteCSV writes the series as CSV: a column t (seconds), then for each
// level L the columns L_wants, L_has, L_capacity, L_leases; one row per
// sample.
func WriteCSV(w io.Writer, s *Series) error {
	cw := csv.NewWriter(w)
	header := []string{"t"}
	for _, l := range s.Levels {
		header = append(header, l+"_wants", l+"_has", l+"_capacity", l+"_leases")
	}
	if err := cw.Write(header); err != nil {
		return err
	}
	num := func(x float64) string { return strconv.FormatFloat(x, 'f', -1, 64) }
	row := make([]string, 0, len(header))
	for _, smp := range s.Samples {
		row = append(row[:0], num(smp.T))
		for _, l := range smp.Levels {
			row = append(row, num(l.Wants), num(l.Has), num(l.Capacity), strconv.Itoa(l.Leases))
		}
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// WriteJSON writes the summaries as an indented JSON array.
func WriteJSON(w io.Writer, sums []Summary) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(sums)
}

// WriteTable writes the summaries as an aligned text table.
func WriteTable(w io.Writer, sums []Summary) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\trefresh (root → leaf)\tutilization\tfairness distance\tovershoot max\tovershoot mean\tshortfall episodes\tin safe mode, overshoot max\treconverge max\trun time\t")
	for _, s := range sums {
		fmt.Fprintf(tw, "%s\t%s\t%.2f %%\t%.2f %%\t%.2f %%\t%.2f %%\t%d\t%.2f %%\t%.0f s\t%.2f s\t\n", s.Scenario, refreshLabel(s), 100*s.UtilizationMean,
			100*s.UnfairMean, s.OvershootMaxPercent, s.OvershootMeanPercent, s.ShortfallEpisodes, s.SafeModeOvershootMaxPercent, s.ReconvergeMaxSeconds, s.RunSeconds)
	}
	return tw.Flush()
}

// refreshLabel is the decay direction and the intervals, e.g. "sluice
// 2/4/8 s".
func refreshLabel(s Summary) string {
	if len(s.RefreshIntervals) == 0 {
		return s.RefreshDecay
	}
	parts := make([]string, len(s.RefreshIntervals))
	for i, ri := range s.RefreshIntervals {
		parts[i] = strconv.FormatFloat(ri, 'f', -1, 64)
	}
	return strings.TrimSpace(s.RefreshDecay + " " + strings.Join(parts, "/") + " s")
}
