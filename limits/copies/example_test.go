package copies_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluice-rl/sluice/limits/copies"
)

// The cookbook/sandboxes of examples/charon.yaml, a bulkhead: acme and
// initech share the trusted pool of 4, so acme's 4 sandboxes leave
// initech none, while the global limit of 5 leaves one for everybody else.
func Example() {
	e, err := copies.New(&copies.Config{Resources: map[string]copies.Resource{
		"cookbook/sandboxes": {
			DomainLimit:  3,
			DomainLimits: map[string]int64{"acme": 4},
			GlobalLimit:  5,
			Groups:       []copies.Group{{Name: "trusted", Limit: 4, Domains: []string{"acme", "initech"}}},
		},
	}}, copies.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s, _ := e.Open(now, 10*time.Second)
	for _, domain := range []string{"acme", "initech", "globex", "globex"} {
		r, _ := e.Reserve(context.Background(), now, s.ID, "cookbook/sandboxes", domain, 4, 1)
		fmt.Printf("%-7s granted %d (domain %d/%d, global %d/%d, groups %v)\n",
			domain, r.Granted, r.DomainHolds, r.DomainLimit, r.GlobalHolds, r.GlobalLimit, r.Groups)
	}
	// Release names the groups the copies were reserved under.
	err = e.Release(context.Background(), now, s.ID, "cookbook/sandboxes", "acme", 5, []string{"trusted"})
	fmt.Println(err, errors.Is(err, copies.ErrNotHeld), copies.ClassOf(err))
	// Closing the session releases the rest.
	ended, _ := e.Close(context.Background(), now, s.ID)
	for _, h := range ended.Released {
		fmt.Println("released", h.Copies, "for", h.Domain, h.Groups)
	}
	// Output:
	// acme    granted 4 (domain 4/4, global 4/5, groups [{trusted 4 4}])
	// initech granted 0 (domain 0/3, global 4/5, groups [{trusted 4 4}])
	// globex  granted 1 (domain 1/3, global 5/5, groups [])
	// globex  granted 0 (domain 1/3, global 5/5, groups [])
	// copies: release of 5 copies of "cookbook/sandboxes" for domain "acme" in groups [trusted]; the session holds 4 true FailedPrecondition
	// released 4 for acme [trusted]
	// released 1 for globex []
}

// A process stages copies for another and may then end: the transfer
// outlives its session until seized, or until its ttl passes.
func ExampleEngine_Transfer() {
	e, _ := copies.New(&copies.Config{Resources: map[string]copies.Resource{"workers": {DomainLimit: 20}}}, copies.Options{})
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p1, _ := e.Open(now, 0)
	p2, _ := e.Open(now, 0)
	r, _ := e.Reserve(context.Background(), now, p1.ID, "workers", "acme", 15, 0)
	tr, _ := e.Transfer(context.Background(), now, p1.ID, "workers", "acme", 10, nil, 30*time.Second)
	ended, _ := e.Close(context.Background(), now, p1.ID) // releases p1's other 5
	got, _ := e.Seize(context.Background(), now.Add(time.Second), p2.ID, tr.ID)
	_, err := e.Seize(context.Background(), now.Add(time.Second), p2.ID, tr.ID)
	fmt.Println("reserved", r.Granted, "released at close", ended.Released[0].Copies, "seized", got.Copies)
	fmt.Println(errors.Is(err, copies.ErrUnknownTransfer), copies.ClassOf(err))
	// Output:
	// reserved 15 released at close 5 seized 10
	// true NotFound
}

// Sessions end when their ttl passes without a keep-alive; Expire releases
// what they held.
func ExampleEngine_Expire() {
	e, _ := copies.New(&copies.Config{AllowUnconfigured: []string{"open/"}}, copies.Options{})
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s, _ := e.Open(now, 2*time.Second)
	r, _ := e.Reserve(context.Background(), now, s.ID, "open/anything", "acme", 3, 0)
	fmt.Println("granted", r.Granted, "unlimited", r.Unlimited)
	e.KeepAlive(now.Add(time.Second), s.ID)
	fmt.Println(len(e.Expire(context.Background(), now.Add(2*time.Second))), "ended at 2 s")
	for _, end := range e.Expire(context.Background(), now.Add(3*time.Second)) {
		fmt.Println(end.Reason, "released", end.Released[0].Copies)
	}
	// Output:
	// granted 3 unlimited true
	// 0 ended at 2 s
	// expired released 3
}
