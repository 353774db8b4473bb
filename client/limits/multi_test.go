package limits_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/client/limits"
)

// TestReserveMulti drives the paper's multi-resource pattern against the
// real engines: the same n of every resource, extras released as n
// drops, the rate-limited resource last, and everything released on a
// failure.
func TestReserveMulti(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name      string
		initech   int64 // sandboxes initech holds first (group trusted: 4 for acme and initech)
		req       limits.MultiRequest
		wantN     int64
		wantErr   func(error) bool
		wantGPUs  int64 // gpus the domain holds after
		wantBoxes int64 // sandboxes the domain holds after
		wantHits  int64
	}{
		{name: "every resource grants max",
			req:   limits.MultiRequest{Domain: "acme", Copies: []string{"gpus", "sandboxes"}, Max: 3, Min: 1},
			wantN: 3, wantGPUs: 3, wantBoxes: 3},
		{name: "the second grants fewer: extras of the first released", initech: 3,
			req:   limits.MultiRequest{Domain: "acme", Copies: []string{"gpus", "sandboxes"}, Max: 4, Min: 1},
			wantN: 1, wantGPUs: 1, wantBoxes: 1},
		{name: "the rate-limited resource last grants fewer",
			// "api"/"strict" is a bucket of 2 tokens; sandboxes' domain limit is 3.
			req:   limits.MultiRequest{Domain: "strict", Copies: []string{"gpus", "sandboxes"}, Rate: "api", Max: 4, Min: 1},
			wantN: 2, wantGPUs: 2, wantBoxes: 2, wantHits: 2},
		{name: "a rejection releases everything", initech: 3,
			req:     limits.MultiRequest{Domain: "acme", Copies: []string{"gpus", "sandboxes"}, Max: 4, Min: 2},
			wantErr: func(err error) bool { return errors.As(err, new(*limits.OverLimitError)) }},
		{name: "a rate-limited rejection releases everything",
			req:     limits.MultiRequest{Domain: "strict", Copies: []string{"gpus"}, Rate: "api", Max: 4, Min: 3},
			wantErr: func(err error) bool { return errors.As(err, new(*limits.RejectedError)) }},
		{name: "a client error releases everything",
			req:     limits.MultiRequest{Domain: "acme", Copies: []string{"gpus", "nothing"}, Max: 2},
			wantErr: func(err error) bool { return errors.Is(err, limits.ErrNotFound) }},
		{name: "no resource", req: limits.MultiRequest{Domain: "acme", Max: 1},
			wantErr: func(err error) bool { return errors.Is(err, limits.ErrInvalidRequest) }},
		{name: "a resource twice", req: limits.MultiRequest{Domain: "acme", Copies: []string{"gpus", "gpus"}, Max: 1},
			wantErr: func(err error) bool { return errors.Is(err, limits.ErrInvalidRequest) }},
		{name: "min above max", req: limits.MultiRequest{Domain: "acme", Copies: []string{"gpus"}, Max: 1, Min: 2},
			wantErr: func(err error) bool { return errors.Is(err, limits.ErrInvalidRequest) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newCharon(t)
			addr := startCharon(t, h)
			c, _ := newClient(t, addr)
			if tc.initech > 0 {
				other, _ := newClient(t, addr)
				if _, err := other.ReserveCopies(ctx, "sandboxes", "initech", tc.initech, 0, 0); err != nil {
					t.Fatal(err)
				}
			}
			m, err := c.ReserveMulti(ctx, tc.req)
			_, gpus := h.held("gpus", tc.req.Domain)
			_, boxes := h.held("sandboxes", tc.req.Domain)
			if tc.wantErr != nil {
				if !tc.wantErr(err) {
					t.Fatalf("err = %v", err)
				}
				if gpus != 0 || boxes != 0 {
					t.Errorf("after the failure: the domain holds %d gpus, %d sandboxes; want none", gpus, boxes)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if m.N() != tc.wantN || gpus != tc.wantGPUs || boxes != tc.wantBoxes || m.Grant().Granted != tc.wantHits {
				t.Errorf("n %d, the domain holds %d gpus, %d sandboxes, %d hits; want %d, %d, %d, %d",
					m.N(), gpus, boxes, m.Grant().Granted, tc.wantN, tc.wantGPUs, tc.wantBoxes, tc.wantHits)
			}
			for _, hold := range m.Holds() {
				if hold.Copies() != m.N() {
					t.Errorf("%s holds %d, want %d", hold.Resource(), hold.Copies(), m.N())
				}
			}
			if err := m.Do(ctx, func(context.Context) error { return nil }); err != nil {
				t.Fatal(err)
			}
			_, gpus = h.held("gpus", tc.req.Domain)
			_, boxes = h.held("sandboxes", tc.req.Domain)
			if gpus != 0 || boxes != 0 {
				t.Errorf("after Do: the domain holds %d gpus, %d sandboxes", gpus, boxes)
			}
		})
	}
}

// TestReserveMultiDegraded: with the service unreachable, each resource
// fails open with Min, so n is Min.
func TestReserveMultiDegraded(t *testing.T) {
	c, _ := newClient(t, unreachable(t))
	m, err := c.ReserveMulti(context.Background(), limits.MultiRequest{Domain: "acme", Copies: []string{"gpus", "sandboxes"}, Rate: "http", Max: 4, Min: 2, MaxWait: time.Second})
	if err != nil || m.N() != 2 || m.Grant().Source != limits.FromDegraded {
		t.Fatalf("ReserveMulti = %v, %v", m, err)
	}
	for _, hold := range m.Holds() {
		if !hold.Degraded() || hold.Copies() != 2 {
			t.Errorf("%s: degraded %v, %d copies", hold.Resource(), hold.Degraded(), hold.Copies())
		}
	}
	if err := m.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}
