package algorithm_test

import (
	"errors"
	"fmt"

	"github.com/sluice-rl/sluice/algorithm"
)

// The FairShare table of charon-paper.md §5.1: capacity 160 shared by four
// clients wanting 100, 50, 45 and 10.
func ExampleAllocate() {
	wants := []algorithm.Requester{{Wants: 100, Subclients: 1}, {Wants: 50, Subclients: 1}, {Wants: 45, Subclients: 1}, {Wants: 10, Subclients: 1}}
	fmt.Println(algorithm.Allocate(algorithm.FairShare, 160, wants))
	// Output: [55 50 45 10]
}

// A decision for one requester: its fair share is 50, but another
// requester still holds a lease of 80 out of 100, so it gets the 20 that is
// free now and the rest on a later refresh.
func ExampleDecide() {
	demand := algorithm.Slice{{Wants: 80, Subclients: 1}, {Wants: 80, Subclients: 1}}
	gets := algorithm.Decide(algorithm.FairShare, 100, algorithm.Requester{Wants: 80, Subclients: 1}, demand, 80)
	fmt.Println(gets)
	// Output: 20
}

// A server adopting what its parent pushed down: a kind it does not know
// runs as NO_ALGORITHM, and Build says so, for the log and the metric.
func ExampleBuild() {
	inst, err := algorithm.Build(algorithm.Kind(7), []algorithm.Parameter{{Name: "decay_factor", Value: "0.25"}})
	fmt.Println(inst.Kind, inst.FellBack, inst.Params.DecayFactor)
	fmt.Println(errors.Is(err, algorithm.ErrUnknownKind))
	// Output:
	// NO_ALGORITHM true 0.25
	// true
}
