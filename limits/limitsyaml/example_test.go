package limitsyaml_test

import (
	"fmt"

	"github.com/sluice-rl/sluice/limits/limitsyaml"
)

// The quota service's own configuration file, read as it is.
func ExampleParseQuotaService() {
	cfg, err := limitsyaml.ParseQuotaService([]byte(`
namespaces:
  Pinky_TheBrain:
    default_bucket: {}
    buckets:
      UserService: {size: 200, fill_rate: 100}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	ns := cfg.Resources["Pinky_TheBrain"]
	fmt.Println(ns.Buckets["UserService"])
	fmt.Println(*ns.Default)
	_, err = limitsyaml.ParseQuotaService([]byte("namespaces:\n  a:\n    buckets:\n      b: {fill_rate: 0}\n"))
	fmt.Println(err)
	// Output:
	// size=200 fill_rate=100 wait_timeout=1s max_debt=10s max_tokens_per_request=100
	// size=100 fill_rate=50 wait_timeout=1s max_debt=10s max_tokens_per_request=50
	// namespaces.a.buckets.b.fill_rate: 0 must be > 0 (tokens per second)
}
