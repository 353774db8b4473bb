package limitsyaml_test

import (
	"fmt"

	"go.yaml.in/yaml/v3"

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

// Sluice's limits section: a resource's domains, each a bucket of its own
// and the configuration of the domains below it. Errors name the field.
func ExampleParseSection() {
	cfg, err := limitsyaml.ParseSection([]byte(`
resources:
  frontend:
    max_dynamic_buckets: 100000
    domains:
      rate_limit: {size: 10, fill_rate: 1, wait_timeout: 0s}
      rate_limit/192.168.11.3: {size: 500, fill_rate: 100, wait_timeout: 0s}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(cfg.Resources["frontend"].Buckets["rate_limit"])
	_, err = limitsyaml.ParseSection([]byte("resources:\n  api:\n    default: {size: 10, fill_rate: fast}\n"))
	fmt.Println(err)
	// Output:
	// size=10 fill_rate=1 wait_timeout=0s max_debt=10s max_tokens_per_request=1
	// limits.resources.api.default.fill_rate: want a number (tokens per second), got str "fast" (line 3)
}

// The section under `limits:` in Sluice's configuration file, read from
// its node as package resources does.
func ExampleDecodeSection() {
	var file struct {
		Limits yaml.Node `yaml:"limits"`
	}
	if err := yaml.Unmarshal([]byte(`
limits:
  resources:
    api/search:
      algorithm: burst_tiers
      hard_limit: 50
      tiers:
        - {limit: 100, window: 1m, active: 1h}
`), &file); err != nil {
		fmt.Println(err)
		return
	}
	cfg, err := limitsyaml.DecodeSection(&file.Limits)
	if err != nil {
		fmt.Println(err)
		return
	}
	r := cfg.Resources["api/search"]
	fmt.Println(r.Algorithm, r.HardLimit, r.Tiers[0].Limit, r.Tiers[0].Window, r.Tiers[0].Active)
	// Output:
	// burst_tiers 50 100 1m0s 1h0m0s
}

// A configuration written back as a section, for example one read from
// the quota service's format.
func ExampleMarshalSection() {
	cfg, err := limitsyaml.ParseQuotaService([]byte(`
namespaces:
  Pinky_TheBrain:
    buckets:
      UserService: {size: 200, fill_rate: 100, wait_timeout_millis: 500}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	out, err := limitsyaml.MarshalSection(cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Print(string(out))
	// Output:
	// resources:
	//   Pinky_TheBrain:
	//     domains:
	//       UserService: {size: 200, fill_rate: 100, wait_timeout: 500ms, max_idle: never, max_debt: 10s, max_tokens_per_request: 100}
}
