package limitsyaml

import (
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/limits"
)

// TestOnStoreErrorSection: a resource's on_store_error reads as its
// OnStoreError, closed by default, for both algorithms (the configuration
// of limits' TestOnStoreError).
func TestOnStoreErrorSection(t *testing.T) {
	section := `
resources:
  open:
    default: {size: 10, fill_rate: 1, max_tokens_per_request: 5}
    on_store_error: open
  closed:
    default: {size: 10, fill_rate: 1, max_tokens_per_request: 5}
    on_store_error: closed
  plain:
    domains: {d: {size: 10, fill_rate: 1}}
  tiers:
    algorithm: burst_tiers
    tiers: [{limit: 3, window: 1s, active: 1m}]
    on_store_error: open
  tiers_closed:
    algorithm: burst_tiers
    tiers: [{limit: 3, window: 1s, active: 1m}]
`
	cfg, err := ParseSection([]byte(section))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]limits.OnStoreError{"open": limits.FailOpen, "closed": limits.FailClosed, "plain": limits.FailClosed, "tiers": limits.FailOpen, "tiers_closed": limits.FailClosed} {
		if got := cfg.Resources[name].OnStoreError; got != want {
			t.Errorf("%s: %v, want %v (%+v)", name, got, want, cfg.Resources[name])
		}
	}
}

// TestOnStoreErrorSectionErrors: on_store_error is open or closed;
// anything else is an error naming the field.
func TestOnStoreErrorSectionErrors(t *testing.T) {
	_, err := ParseSection([]byte("resources:\n  r:\n    default: {size: 1, fill_rate: 1}\n    on_store_error: ajar\n"))
	if err == nil || !strings.Contains(err.Error(), `limits.resources.r.on_store_error: "ajar", want closed or open`) {
		t.Errorf("on_store_error ajar: %v", err)
	}
	_, err = ParseSection([]byte("resources:\n  r:\n    default: {size: 1, fill_rate: 1}\n    on_store_error: 1\n"))
	if err == nil || !strings.Contains(err.Error(), "limits.resources.r.on_store_error") {
		t.Errorf("on_store_error 1: %v", err)
	}
	// A section round-trips the key.
	cfg, err := ParseSection([]byte("resources:\n  r: {default: {size: 1, fill_rate: 1}, on_store_error: open}\n"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := MarshalSection(cfg)
	if err != nil || cfg.Resources["r"].OnStoreError != limits.FailOpen || !strings.Contains(string(out), "on_store_error: open") {
		t.Fatalf("section: %+v\n%s%v", cfg.Resources["r"], out, err)
	}
	if again, err := ParseSection(out); err != nil || again.Resources["r"].OnStoreError != limits.FailOpen {
		t.Fatalf("read back: %+v %v", again, err)
	}
}
