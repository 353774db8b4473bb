package chaos

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/sluice-rl/sluice/server/status/view"
)

// clockSkew is the skew of a client's clock over a run (worker 0's, under
// a clock-skew fault): a step at each change, from 0.
type clockSkew struct {
	mu    sync.Mutex
	steps []skewStep // by at
}

type skewStep struct{ at, skew time.Duration }

// set steps the skew to d at the offset at.
func (c *clockSkew) set(at, d time.Duration) {
	c.mu.Lock()
	c.steps = append(c.steps, skewStep{at, d})
	c.mu.Unlock()
}

// until returns when, on the harness's clock, the skewed clock first reads
// e or later, from the offset from on: e − skew while the skew in force
// lasts that long, else at the next step (from the step's instant on, if
// the clock is past e by then). Both are offsets of the run; a client
// holds its lease until its clock reads the lease's expiry.
func (c *clockSkew) until(from, e time.Duration) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	var s time.Duration
	k := 0
	for ; k < len(c.steps) && c.steps[k].at <= from; k++ {
		s = c.steps[k].skew
	}
	a := from
	for ; ; k++ {
		if k == len(c.steps) || e-s < c.steps[k].at {
			return max(a, e-s)
		}
		a, s = c.steps[k].at, c.steps[k].skew
	}
}

// leaseAnswer is an intermediate's answer granting a lease of more than 0.
type leaseAnswer struct {
	// Server is the intermediate (its index), At when its answer arrived,
	// Expiry the lease's expiry (Unix seconds, from the wire).
	Server int
	At     time.Duration
	Expiry int64
}

// rootLease is what the root's status page said of its lease to an
// intermediate (its id, "mid-N") at a poll that ended at At.
type rootLease struct {
	At     time.Duration
	Client string
	Expiry int64 // Unix seconds
}

// OutlivedCheck is CheckOutlived's verdict.
type OutlivedCheck struct {
	// Outlived counts the intermediates' leases that end after every lease
	// the root had granted that intermediate (must be 0); First is the
	// first of them. Unchecked counts answers no root lease could be
	// compared with (the root's status page not read before them).
	Outlived, Unchecked int
	First               *leaseAnswer
	// By is how far First ends after the root's lease.
	By time.Duration
}

// outlivedGrace is how long after an intermediate's answer a poll of the
// root may still be the first to see the lease that backs it (the root
// granted it before the answer; a poll started before the grant ends a
// poll period or so later).
const outlivedGrace = time.Second

// CheckOutlived checks Doorman's rule that an intermediate never hands out
// a lease outliving its own lease from its parent: each answer's expiry
// must be at most that of the latest lease the root had granted the
// intermediate, as the polls of the root's status page saw it, up to
// outlivedGrace after the answer. id names intermediate i at the root.
// (An intermediate in learning mode hands a claim it cannot cover back
// until the claim ends, docs/departures.md's rule 1, which this check
// would count: no fault restarts an intermediate.)
func CheckOutlived(answers []leaseAnswer, polls []rootLease, id func(i int) string) OutlivedCheck {
	var c OutlivedCheck
	polls = slices.Clone(polls)
	slices.SortFunc(polls, func(a, b rootLease) int { return cmpDur(a.At, b.At) })
	for _, a := range answers {
		var latest int64
		for _, p := range polls {
			if p.At > a.At+outlivedGrace {
				break
			}
			if p.Client == id(a.Server) {
				latest = max(latest, p.Expiry)
			}
		}
		switch {
		case latest == 0:
			c.Unchecked++
		case a.Expiry > latest:
			c.Outlived++
			if c.First == nil {
				c.First, c.By = &a, time.Duration(a.Expiry-latest)*time.Second
			}
		}
	}
	return c
}

// pollRoot reads the root's leases of the resource "leases" from its status
// page every 100 ms until ctx ends, and returns what it saw. A poll that
// fails (the root killed or stopped) is skipped.
func (r *runner) pollRoot(ctx context.Context) []rootLease {
	c := http.Client{Timeout: 500 * time.Millisecond}
	url := "http://" + r.env.Servers[0].Addr + "/debug/status/resource?id=leases&format=json"
	var seen []rootLease
	for {
		select {
		case <-ctx.Done():
			return seen
		case <-time.After(100 * time.Millisecond):
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return seen
		}
		resp, err := c.Do(req)
		if err != nil {
			continue
		}
		var page view.ResourcePage
		err = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			continue
		}
		at := r.hist.Since(time.Now())
		for _, l := range page.Leases {
			seen = append(seen, rootLease{At: at, Client: l.Client, Expiry: l.Expiry.Unix()})
		}
	}
}

// addLeaseAnswer records an intermediate's answer for CheckOutlived.
func (r *runner) addLeaseAnswer(a leaseAnswer) {
	r.holds.mu.Lock()
	r.answers = append(r.answers, a)
	r.holds.mu.Unlock()
}
