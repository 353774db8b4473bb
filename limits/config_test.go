package limits

import (
	"errors"
	"strings"
	"testing"
)

func TestConfigValidate(t *testing.T) {
	bad := &Config{
		GlobalDefault: &Bucket{Size: 1, FillRate: 1, WaitTimeout: -1},
		Resources: map[string]*Resource{
			"r":   {Buckets: map[string]Bucket{"": {Size: 1, FillRate: 1}}, Algorithm: 3},
			"r 2": nil,
		},
	}
	err := bad.Validate()
	for _, w := range []string{
		`global_default.wait_timeout: -1ns is negative`,
		`resources.r.domains[""]: domain name is empty`,
		`resources.r.algorithm: unknown algorithm 3 (want token_bucket or burst_tiers)`,
		`resources["r 2"]: resource name "r 2" has ' '`,
	} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("error %v does not say %s", err, w)
		}
	}
	var ce *ConfigError
	if !errors.As(err, &ce) {
		t.Errorf("%T is not a *ConfigError", err)
	}
	if _, err := New(bad, Options{}); err == nil {
		t.Error("New accepted a bad configuration")
	}
}
