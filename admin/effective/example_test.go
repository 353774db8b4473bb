package effective_test

import (
	"encoding/json"
	"fmt"

	"github.com/sluice-rl/sluice/admin/effective"
	"github.com/sluice-rl/sluice/resources"
)

// A bucket as written in the repository, and as the servers apply it:
// every default filled in.
func Example() {
	repo, err := resources.Parse([]byte(`
limits:
  resources:
    api:
      domains:
        small: {size: 10, fill_rate: 1}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	lc := repo.Limits().Clone()
	lc.Normalize()
	b, _ := json.Marshal(effective.BucketOf(lc.Resources["api"].Buckets["small"]))
	fmt.Println(string(b))
	// Output:
	// {"size":10,"fill_rate":1,"wait_timeout":"1s","max_idle":"never","max_debt":"10s","max_tokens_per_request":1}
}
