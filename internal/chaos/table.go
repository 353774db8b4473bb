package chaos

import (
	"fmt"
	"maps"
	"slices"
	"time"
)

// Matrix is every mode under every fault that applies to it, as (mode,
// fault) pairs in a stable order: modes by name, the baseline first.
func Matrix() [][2]string {
	var runs [][2]string
	for _, m := range slices.Sorted(maps.Keys(Modes)) {
		runs = append(runs, [2]string{m, "none"})
		for _, f := range slices.Sorted(maps.Keys(Faults)) {
			if f != "none" && Faults[f].applies(Modes[m]) {
				runs = append(runs, [2]string{m, f})
			}
		}
	}
	return runs
}

// TableHeader is the header of docs/accuracy.md's table; TableRow a row.
const TableHeader = `| mode | fault | requests | granted | over the limit, worst window | errors by code | degraded (flagged) | recovery | lost / released twice |
|---|---|---:|---:|---|---|---:|---:|---|`

// TableRow is the report as a row of TableHeader's table.
func (r *Report) TableRow() string {
	over := "0"
	switch {
	case r.Bucket != nil && r.Bucket.Worst.Excess() > 0:
		w := r.Bucket.Worst
		over = fmt.Sprintf("%.0f %% (%d granted in %v, bound %.0f)", 100*r.OverLimit(), w.Granted, (w.To - w.From).Round(time.Millisecond), w.Bound)
	case r.Leases != nil:
		over = fmt.Sprintf("%.0f %% (Σ leases at most %.1f of %g, mean %.1f; %d lapsed)", 100*r.OverLimit(), float64(r.Leases.Max)/1000, r.Capacity, r.LeaseMean, r.Lapsed)
		if o := r.Outlived; o != nil && o.Outlived > 0 {
			over += fmt.Sprintf("; **%d outlived the parent's lease**", o.Outlived)
		}
	case r.Count != nil:
		over = fmt.Sprintf("%.0f %% (most held %d of %d)", 100*r.OverLimit(), r.Count.Max, r.Limit)
	}
	lost := "—"
	if r.Count != nil {
		lost = fmt.Sprintf("%d / %d", r.Lost, r.ReleasedTwice)
	}
	return fmt.Sprintf("| %s | %s | %d | %d | %s | %s | %d | %v | %s |", r.Mode, r.Fault, r.Requests, r.Granted, over, r.errorsString(), r.Degraded,
		r.Recovery.Round(100*time.Millisecond), lost)
}
