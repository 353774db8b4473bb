package vectors_test

import (
	"fmt"

	"github.com/sluice-rl/sluice/clients/vectors"
)

// A test reads a vector file into its type and runs each case.
func ExampleRead() {
	var v vectors.Limiter
	if err := vectors.Read(vectors.LimiterFile, &v); err != nil {
		panic(err)
	}
	c := v.Cases[0]
	fmt.Printf("%s: rate %v, %d steps, first %s at %v s\n", c.Name, c.Rate, len(c.Steps), c.Steps[0].Op, c.Steps[0].At)
	// Output: the first permit is free; the next are spaced at the rate: rate 4, 6 steps, first acquire at 0 s
}
