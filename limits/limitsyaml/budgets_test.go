package limitsyaml

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/limits/rls"
)

// budgetsDoc is the recipe of docs/quotaservice.md: a monthly token
// budget per tenant, a daily one in Paris, ten a second at most.
const budgetsDoc = `
resources:
  llm_tokens:
    template:
      size: 10
      fill_rate: 10
      wait_timeout: 0s
      budgets:
        - {limit: 100000, unit: month, calendar: UTC}
        - {limit: 20000, unit: day, calendar: Europe/Paris}
        - limit: 600
          unit: MINUTE
          unit_multiplier: 5
          algorithm: token_bucket
          burst: 50
        - {limit: 30, unit: second, algorithm: fixed_window}
`

func TestSectionBudgets(t *testing.T) {
	paris := testutil.Zone(t, "Europe/Paris")
	cfg, err := ParseSection([]byte(budgetsDoc))
	if err != nil {
		t.Fatal(err)
	}
	want := []limits.Budget{
		{Limit: 100000, Unit: rls.Month, Calendar: time.UTC},
		{Limit: 20000, Unit: rls.Day, Calendar: paris},
		{Limit: 600, Unit: rls.Minute, UnitMultiplier: 5, Algorithm: rls.TokenBucket, Burst: 50},
		{Limit: 30, Unit: rls.Second, Algorithm: rls.FixedWindow},
	}
	got := cfg.Resources["llm_tokens"].Template.Budgets
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %v\nwant %v", got, want)
	}

	// The round trip: MarshalSection writes what ParseSection reads back.
	out, err := MarshalSection(cfg)
	if err != nil {
		t.Fatal(err)
	}
	again, err := ParseSection(out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !reflect.DeepEqual(again, cfg) {
		t.Fatalf("round trip changed the configuration:\n%s\n%+v\n%+v", out, cfg, again)
	}
	for _, w := range []string{"{limit: 100000, unit: month, calendar: UTC}", "{limit: 20000, unit: day, calendar: Europe/Paris}",
		"{limit: 600, unit: minute, unit_multiplier: 5, algorithm: token_bucket, burst: 50}", "{limit: 30, unit: second, algorithm: fixed_window}"} {
		if !strings.Contains(strings.Join(strings.Fields(string(out)), " "), w) {
			t.Errorf("written section lacks %s:\n%s", w, out)
		}
	}

	// The same under limits: in a configuration file.
	indented := "limits:\n  " + strings.ReplaceAll(strings.TrimPrefix(budgetsDoc, "\n"), "\n", "\n  ") + "\n"
	if fromFile, err := decodeFile(t, []byte(indented)); err != nil || !reflect.DeepEqual(fromFile, cfg) {
		t.Fatalf("under limits: %v\n%+v", err, fromFile)
	}

	// An empty list is none.
	cfg, err = ParseSection([]byte("global_default: {budgets: []}\n"))
	if err != nil || cfg.GlobalDefault.Budgets != nil {
		t.Fatalf("budgets: []: %v %v", cfg, err)
	}
}

func TestSectionBudgetErrors(t *testing.T) {
	const at = "limits.resources.r.template.budgets"
	tests := []struct {
		name string
		doc  string
		want []string
	}{
		{"not a list", "{limit: 1, unit: day}", []string{at + `: want a sequence, got a mapping (line 4)`}},
		{"a null item", "[~]", []string{at + `[0]: want a budget ({limit: N, unit: U, ...}), got null (line 4)`}},
		{"a scalar item", "[day]", []string{at + `[0]: want a mapping, got str "day" (line 4)`}},
		{"unknown field", "[{limit: 1, unit: day, period: 1s}]", []string{at + `[0].period: unknown field (want one of limit, unit, unit_multiplier, calendar, algorithm, burst) (line 4)`}},
		{"no limit", "[{unit: day}]", []string{at + `[0].limit: required (tokens per window, ≥ 1) (line 4)`}},
		{"no unit", "[{limit: 5}]", []string{at + `[0].unit: required (second, minute, hour, day, week, month or year) (line 4)`}},
		{"limit 0", "[{limit: 0, unit: day}]", []string{at + `[0].limit: 0 must be ≥ 1 (tokens per window)`}},
		{"limit a string", "[{limit: lots, unit: day}]", []string{at + `[0].limit: want an integer (tokens per window), got str "lots" (line 4)`}},
		{"limit too big", "[{limit: 4294967296, unit: day}]", []string{at + `[0].limit: 4294967296 exceeds 4294967295 (2^32 - 1)`}},
		{"bad unit", "[{limit: 1, unit: fortnight}]", []string{at + `[0].unit: "fortnight" is not a unit (want second, minute, hour, day, week, month or year) (line 4)`}},
		{"bad zone", "[{limit: 1, unit: day, calendar: Mars/Olympus}]", []string{at + `[0].calendar: "Mars/Olympus" is not a time zone (want UTC or an IANA name such as Europe/Paris)`, "(line 4)"}},
		{"local zone", "[{limit: 1, unit: day, calendar: Local}]", []string{at + `[0].calendar: "Local": name the zone`}},
		{"calendar of hours", "[{limit: 1, unit: hour, calendar: UTC}]", []string{at + `[0].calendar: a calendar aligns a day, week, month or year (this budget's unit is hour)`}},
		{"bad algorithm", "[{limit: 1, unit: day, algorithm: leaky}]", []string{at + `[0].algorithm: "leaky" is not a budget's algorithm (want fixed_window or token_bucket) (line 4)`}},
		{"burst of a window", "[{limit: 1, unit: day, burst: 3}]", []string{at + `[0].burst: a burst is a token bucket's depth`}},
		{"negative multiplier", "[{limit: 1, unit: day, unit_multiplier: -2}]", []string{at + `[0].unit_multiplier: -2 is negative`}},
		{"the second item", "[{limit: 1, unit: day}, {limit: -1, unit: day}]", []string{at + `[1].limit: -1 must be ≥ 1`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			doc := "resources:\n  r:\n    template:\n      budgets: " + tc.doc + "\n"
			cfg, err := ParseSection([]byte(doc))
			wantInvalid(t, cfg, err, tc.want...)
			if n := len(strings.Split(err.Error(), "\n")); n != 1 {
				t.Errorf("%d errors, want 1 (no error twice):\n%v", n, err)
			}
		})
	}
}

// The quota service's format has no budgets: writing a configuration
// with some to it is an error naming the field, never a file that lost
// them.
func TestMarshalQuotaServiceRefusesBudgets(t *testing.T) {
	b := limits.DefaultBucket()
	b.Budgets = []limits.Budget{{Limit: 10, Unit: rls.Day}}
	cfg := &limits.Config{Resources: map[string]*limits.Resource{"r": {Buckets: map[string]limits.Bucket{"d": b}}}}
	_, err := MarshalQuotaService(cfg, nil)
	if err == nil || !strings.Contains(err.Error(), "limits.resources.r.domains.d.budgets: 1 budgets: the quota service's format cannot say it") {
		t.Fatalf("MarshalQuotaService: %v", err)
	}
}

// BudgetNode writes each field only when set.
func TestBudgetNode(t *testing.T) {
	out, err := yaml.Marshal(BudgetNode(limits.Budget{Limit: 7, Unit: rls.Week}))
	if err != nil || string(out) != "{limit: 7, unit: week}\n" {
		t.Fatalf("%q %v", out, err)
	}
}
