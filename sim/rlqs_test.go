package sim

import (
	"testing"
)

// TestRLQSScenario: the built-in RLQS scenario, shortened, on seeds 1–3:
// the sum of a bucket's assigned rates never exceeds its capacity, the
// capacity is used (99 %), what the proxies admit is at most 15 % over
// it in any second (the bursts of the token buckets Envoy starts full:
// a limited stream's hold a quarter second's worth, and its increases
// are paced; state.LimitedBurst, state.MinReplaceInterval), the shares
// are max-min fair and follow the demand's shifts within two reports
// (the one straddling the shift shows part of it, the next all of it:
// demand.ObserveCount follows a step at once).
func TestRLQSScenario(t *testing.T) {
	t.Parallel() // virtual time: the simulations' outcomes do not depend on the machine
	sc := RLQSBuiltin()
	sc.Duration = 300
	for seed := int64(1); seed <= 3; seed++ {
		res, err := RunRLQS(sc, seed)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%+v", res)
		if res.AssignedOvershoot > 1e-9 {
			t.Errorf("seed %d: assigned %.4f over the capacity", seed, res.AssignedOvershoot)
		}
		if res.Utilization < 0.99 {
			t.Errorf("seed %d: utilization %.3f", seed, res.Utilization)
		}
		if res.AdmittedOvershoot > 0.15 {
			t.Errorf("seed %d: admitted %.1f %% over the capacity in a second", seed, 100*res.AdmittedOvershoot)
		}
		if res.Unfairness > 0.05 {
			t.Errorf("seed %d: unfairness %.4f of the capacity", seed, res.Unfairness)
		}
		if res.ReactionMax > 2*sc.ReportInterval {
			t.Errorf("seed %d: reaction up to %.1f s", seed, res.ReactionMax)
		}
	}
}
