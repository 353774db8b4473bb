package limits

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// MultiRequest asks ReserveMulti for the same number of copies of several
// copy-limited resources and, optionally, as many hits of one
// rate-limited resource, for one domain.
type MultiRequest struct {
	Domain string
	// Copies are the copy-limited resources, reserved in this order, each
	// at most once.
	Copies []string
	// Rate is the rate-limited resource, requested last ("": none). There
	// is at most one: hits cannot be given back, so a second rate-limited
	// resource could leave the first over-granted.
	Rate string
	// Max and Min bound the number n of copies of each resource (and
	// hits): Min ≤ n ≤ Max; Min 0 means Max (all or nothing).
	Max, Min int64
	// MaxWait bounds the whole: each resource is asked with the retry
	// policy of ReserveCopies and Request within what is left of it.
	MaxWait time.Duration
}

// Multi is what ReserveMulti holds: N copies of each copy-limited
// resource (a Hold each) and, with a rate-limited resource, N hits of it
// (Grant). Release or Do gives the copies back; hits are spent.
type Multi struct {
	n      int64
	holds  []*Hold
	grant  Grant
	waited time.Duration
}

// N returns the number of copies held of each copy-limited resource,
// equal to the hits granted of the rate-limited one, in [Min, Max] when
// ReserveMulti returned.
func (m *Multi) N() int64 { return m.n }

// Holds returns the holds of the copy-limited resources, in the order of
// MultiRequest.Copies.
func (m *Multi) Holds() []*Hold { return append([]*Hold(nil), m.holds...) }

// Grant returns the grant of the rate-limited resource (zero without
// one).
func (m *Multi) Grant() Grant { return m.grant }

// Waited returns how long ReserveMulti took.
func (m *Multi) Waited() time.Duration { return m.waited }

// Release releases every copy still held, of every resource; the errors
// of the holds' releases, joined. Safe for concurrent use.
func (m *Multi) Release(ctx context.Context) error {
	var errs []error
	for _, h := range m.holds {
		if err := h.releaseRest(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Do runs f, then releases every copy still held, as Hold.Do does (also
// on a panic, which it then repeats); f's context is cancelled when the
// session holding the copies ends. It returns f's error joined with the
// releases'.
func (m *Multi) Do(ctx context.Context, f func(ctx context.Context) error) error {
	return doHolding(ctx, m.holds, m.Release, f)
}

// trim releases the copies each hold has above n, and makes n the
// multi's.
func (m *Multi) trim(ctx context.Context, n int64) error {
	for _, h := range m.holds {
		h.mu.Lock()
		var err error
		if extra := h.copies.Load() - n; extra > 0 {
			err = h.release(ctx, extra)
		}
		h.mu.Unlock()
		if err != nil {
			return err
		}
	}
	m.n = n
	return nil
}

// ReserveMulti reserves the same number n of copies of several
// copy-limited resources, and optionally n hits of one rate-limited
// resource, pseudo-atomically: the copy-limited resources first, in
// order — Max copies of the first (at least Min), then the n granted of
// the next, releasing the copies the earlier ones hold above each new,
// smaller n — and the rate-limited resource last, for n hits (again
// releasing the copies above what it grants), all within MaxWait (each
// call gets what is left of it; once it is spent, one attempt each). On
// any failure — a rejection, an error, ctx ending — it releases
// everything it took and returns the error (joined with the releases'
// errors, if any).
//
// Degraded grants follow each call's rules (a degraded hold or request
// grants Min, so n drops to Min). Errors: ReserveCopies' and Request's,
// and one wrapping ErrInvalidRequest for an invalid request (no
// resource, a resource named twice, an invalid name, Max or Min out of
// range). Safe for concurrent use.
//
// Source: charon-paper.md, section 3.3 (Multi-Resource Requests), Figure 7.
func (c *Client) ReserveMulti(ctx context.Context, r MultiRequest) (*Multi, error) {
	if c.closed.Load() {
		return nil, ErrClosed
	}
	least, err := checkMulti(r)
	if err != nil {
		return nil, err
	}
	start := c.now()
	m := &Multi{n: r.Max}
	fail := func(err error) (*Multi, error) {
		return nil, errors.Join(err, m.Release(context.WithoutCancel(ctx)))
	}
	for _, res := range r.Copies {
		h, err := c.ReserveCopies(ctx, res, r.Domain, m.n, least, r.MaxWait-c.now().Sub(start))
		if err != nil {
			return fail(err)
		}
		m.holds = append(m.holds, h)
		if got := h.copies.Load(); got < m.n {
			if err := m.trim(context.WithoutCancel(ctx), got); err != nil {
				return fail(err)
			}
		}
	}
	if r.Rate != "" {
		g, err := c.Request(ctx, r.Rate, r.Domain, m.n, least, r.MaxWait-c.now().Sub(start))
		if err != nil {
			return fail(err)
		}
		m.grant = g
		if g.Granted < m.n {
			if err := m.trim(context.WithoutCancel(ctx), g.Granted); err != nil {
				return fail(err)
			}
		}
	}
	m.waited = c.now().Sub(start)
	return m, nil
}

// checkMulti validates a MultiRequest and returns its effective minimum.
func checkMulti(r MultiRequest) (int64, error) {
	if len(r.Copies) == 0 && r.Rate == "" {
		return 0, fmt.Errorf("%w: a multi-resource request names no resource", ErrInvalidRequest)
	}
	if err := checkName("domain", r.Domain); err != nil {
		return 0, err
	}
	names := r.Copies
	if r.Rate != "" {
		names = append(names[:len(names):len(names)], r.Rate)
	}
	seen := map[string]bool{}
	for _, res := range names {
		if err := checkName("resource", res); err != nil {
			return 0, err
		}
		if seen[res] {
			return 0, fmt.Errorf("%w: resource %q named twice", ErrInvalidRequest, res)
		}
		seen[res] = true
	}
	return checkRange("copies", r.Max, r.Min)
}
