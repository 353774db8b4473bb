package limitsyaml

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/limits"
)

// charon is the configuration of testdata/charon.yaml.
func charon() *limits.Config {
	bt := func(h, g int64, tiers ...limits.Tier) *limits.Resource {
		return &limits.Resource{Algorithm: limits.BurstTiers, HardLimit: h, GlobalLimit: g, Tiers: tiers}
	}
	return &limits.Config{
		Namespaces: map[string]limits.Namespace{"open/": {AllowUnconfigured: true}, "muted/": {IgnoreConfigured: true}},
		Resources: map[string]*limits.Resource{
			"cookbook/tiers": bt(0, 0, tier(3, 2*sec, 6*sec, 0), tier(4, 2*sec, 2*sec, 4*sec)),
			"cookbook/hard":  bt(2, 3, tier(1000, sec, 3600*sec, 0)),
			"cookbook/batch": bt(0, 0, tier(5000, 300*sec, 300*sec, 86100*sec)),
			"muted/r":        bt(0, 0, tier(1, 60*sec, 60*sec, 0)),
		},
	}
}

// testdata/charon.yaml holds exactly the rate-limited resources of
// examples/charon.yaml, and each behaves as that file's comments and
// docs/charon.md say.
func TestCharonExample(t *testing.T) {
	got, err := decodeFile(t, readFile(t, "testdata/charon.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if want := charon(); !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}
	if notes := got.Clone().Normalize(); notes != nil {
		t.Fatalf("the example needs normalizing: %v", notes)
	}
	e := newEngine(t, got)
	allow := func(when time.Duration, resource, domain string, tokens, lo int64) limits.Decision {
		return e.Allow(t.Context(), at(when), limits.Request{Resource: resource, Domain: domain, Tokens: tokens, MinTokens: lo})
	}
	ns := time.Nanosecond

	t.Run("cookbook/tiers", func(t *testing.T) {
		for i := range 3 {
			if d := allow(0, "cookbook/tiers", "acme", 1, 0); d.Granted != 1 || d.Tiers.Tier != 1 || d.Tiers.Burst != (i == 0) {
				t.Fatalf("hit %d: %+v", i, d)
			}
		}
		if d := allow(0, "cookbook/tiers", "acme", 5, 1); d.Granted != 4 || d.Tiers.Tier != 2 || !d.Tiers.Burst || d.Tiers.TierLimit != 4 {
			t.Fatalf("burst into tier 2: %+v", d)
		}
		if d := allow(0, "cookbook/tiers", "acme", 1, 0); d.Status != limits.StatusTimeout || d.RetryAfter != 2*sec+ns {
			t.Fatalf("tier 2 full: %+v", d)
		}
		if d := allow(2*sec+ns, "cookbook/tiers", "acme", 4, 1); d.Granted != 3 || d.Tiers.Tier != 1 {
			t.Fatalf("fallback: %+v", d)
		}
		if d := allow(3*sec, "cookbook/tiers", "acme", 1, 0); d.Status != limits.StatusTimeout || d.Tiers.Tier != 1 {
			t.Fatalf("blocked by tier 2's cooldown: %+v", d)
		}
		if d := allow(6*sec, "cookbook/tiers", "acme", 9, 1); d.Granted != 7 || d.Tiers.Tier != 2 {
			t.Fatalf("both tiers anew: %+v", d)
		}
		if d := allow(6*sec, "cookbook/tiers", "initech", 9, 1); d.Granted != 7 {
			t.Fatalf("another domain's own tiers: %+v", d)
		}
	})
	t.Run("cookbook/hard", func(t *testing.T) {
		if d := allow(0, "cookbook/hard", "acme", 3, 1); d.Granted != 2 || !d.Tiers.HardLimited || d.Tiers.HardLimit != 2 || d.Tiers.GlobalLimit != 3 {
			t.Fatalf("H: %+v", d)
		}
		if d := allow(0, "cookbook/hard", "initech", 2, 1); d.Granted != 1 || !d.Tiers.GlobalLimited || d.Tiers.GlobalHitsLastSecond != 3 {
			t.Fatalf("G: %+v", d)
		}
		if d := allow(sec, "cookbook/hard", "hooli", 1, 0); d.Status != limits.StatusTimeout || d.RetryAfter != ns {
			t.Fatalf("G over the closed last second: %+v", d)
		}
		if d := allow(sec+ns, "cookbook/hard", "hooli", 3, 3); d.Status != limits.StatusTimeout || !d.RetryNever {
			t.Fatalf("min above H: %+v", d)
		}
		if d := allow(sec+ns, "cookbook/hard", "hooli", 3, 1); d.Granted != 2 {
			t.Fatalf("a second later: %+v", d)
		}
	})
	t.Run("cookbook/batch", func(t *testing.T) {
		if d := allow(0, "cookbook/batch", "acme", 5000, 0); d.Granted != 5000 {
			t.Fatalf("the batch: %+v", d)
		}
		if d := allow(299*sec, "cookbook/batch", "acme", 1, 0); d.Status != limits.StatusTimeout || d.RetryAfter != 86101*sec {
			t.Fatalf("5001st: %+v", d)
		}
		if d := allow(86400*sec, "cookbook/batch", "acme", 1, 0); d.Granted != 1 || !d.Tiers.Burst {
			t.Fatalf("the next day: %+v", d)
		}
	})
	t.Run("open/ allows unconfigured resources", func(t *testing.T) {
		for i := range 3 {
			if d := allow(0, "open/anything", "acme", 1000, 0); d.Granted != 1000 || !d.Unlimited || d.Bucket.String() != "namespace open/" || d.Tiers.DomainHitsLastSecond != int64(1000*(i+1)) {
				t.Fatalf("%d: %+v", i, d)
			}
		}
	})
	t.Run("muted/ ignores configured limits", func(t *testing.T) {
		for i := range 3 {
			if d := allow(0, "muted/r", "acme", 5, 0); d.Granted != 5 || !d.Unlimited || d.Tiers.TierHits != 1 || d.Tiers.DomainHitsLastSecond != int64(5*(i+1)) {
				t.Fatalf("%d: %+v", i, d)
			}
		}
	})
	t.Run("anything else is unknown", func(t *testing.T) {
		if d := allow(0, "cookbook/unknown", "acme", 1, 0); d.Status != limits.StatusNoBucket {
			t.Fatalf("%+v", d)
		}
	})
}

func TestTierSectionValues(t *testing.T) {
	cfg, err := ParseSection([]byte(`
namespaces:
  a/: {ignore_configured: true, allow_unconfigured: false}
  b/:
resources:
  r:
    algorithm: burst_tiers
    hard_limit: 5
    global_limit: none
    max_dynamic_buckets: 10
    tiers:
      - {limit: 2, window: 1s, active: 1m}
      - {limit: 9, window: 1m, active: 1h, cooldown: 2h, skippable: true}
    domains:
      inherits:
      unbounded: {hard_limit: none}
      own: {hard_limit: 7, tiers: [{limit: 1, window: 1s, active: 1s}]}
      none: {tiers: []}
  empty: {algorithm: burst_tiers}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := &limits.Config{
		Namespaces: map[string]limits.Namespace{"a/": {IgnoreConfigured: true}, "b/": {}},
		Resources: map[string]*limits.Resource{
			"r": {Algorithm: limits.BurstTiers, HardLimit: 5, MaxDynamicBuckets: 10,
				Tiers: []limits.Tier{tier(2, sec, mn, 0), skippable(tier(9, mn, hr, 2*hr))},
				TierDomains: map[string]limits.TierDomain{
					"inherits":  {},
					"unbounded": {HardLimit: limits.Unbounded},
					"own":       {HardLimit: 7, Tiers: []limits.Tier{tier(1, sec, sec, 0)}},
					"none":      {Tiers: []limits.Tier{}},
				}},
			"empty": {Algorithm: limits.BurstTiers},
		},
	}
	if !reflect.DeepEqual(cfg, want) {
		t.Fatalf("got  %+v\nwant %+v", cfg, want)
	}
}

func TestTierSectionErrors(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		want []string
	}{
		{"unknown tier field", "resources:\n  r:\n    algorithm: burst_tiers\n    tiers: [{limit: 1, window: 1s, active: 1s, cool: 1s}]\n",
			[]string{`limits.resources.r.tiers[0].cool: unknown field (want one of limit, window, active, cooldown, skippable) (line 4)`}},
		{"required tier fields", "resources:\n  r:\n    algorithm: burst_tiers\n    tiers: [{cooldown: 1s}]\n",
			[]string{`limits.resources.r.tiers[0].limit: required`, `limits.resources.r.tiers[0].window: required`, `limits.resources.r.tiers[0].active: required`}},
		{"a null tier", "resources:\n  r:\n    algorithm: burst_tiers\n    tiers: [~]\n", []string{`limits.resources.r.tiers[0]: want a tier`}},
		{"tiers a mapping", "resources:\n  r:\n    algorithm: burst_tiers\n    tiers: {limit: 1}\n", []string{`limits.resources.r.tiers: want a sequence, got a mapping (line 4)`}},
		{"limit 0", "resources:\n  r:\n    algorithm: burst_tiers\n    tiers: [{limit: 0, window: 1s, active: 1s}]\n", []string{`limits.resources.r.tiers[0].limit: 0 must be ≥ 1`}},
		{"window 0", "resources:\n  r:\n    algorithm: burst_tiers\n    tiers: [{limit: 1, window: 0s, active: 1s}]\n", []string{`limits.resources.r.tiers[0].window: 0s must be > 0`}},
		{"negative cooldown", "resources:\n  r:\n    algorithm: burst_tiers\n    tiers: [{limit: 1, window: 1s, active: 1s, cooldown: -1s}]\n", []string{`limits.resources.r.tiers[0].cooldown: -1s is negative`}},
		{"active too long", "resources:\n  r:\n    algorithm: burst_tiers\n    tiers: [{limit: 1, window: 1s, active: 100000h}]\n", []string{`limits.resources.r.tiers[0].active: 100000h0m0s exceeds 87600h0m0s (ten years)`}},
		{"a duration without a unit", "resources:\n  r:\n    algorithm: burst_tiers\n    tiers: [{limit: 1, window: 1, active: 1s}]\n", []string{`limits.resources.r.tiers[0].window: want a Go duration string`}},
		{"skippable not a bool", "resources:\n  r:\n    algorithm: burst_tiers\n    tiers: [{limit: 1, window: 1s, active: 1s, skippable: yes please}]\n", []string{`limits.resources.r.tiers[0].skippable: want true or false, got str "yes please"`}},
		{"hard limit 0", "resources:\n  r:\n    algorithm: burst_tiers\n    hard_limit: 0\n", []string{`limits.resources.r.hard_limit: 0 must be ≥ 1 (hits per second; unbounded: "none", or leave it out)`}},
		{"hard limit a word", "resources:\n  r:\n    algorithm: burst_tiers\n    hard_limit: lots\n", []string{`limits.resources.r.hard_limit: want a count of hits per second or "none", got str "lots"`}},
		{"global limit too big", "resources:\n  r:\n    algorithm: burst_tiers\n    global_limit: 9007199254740993\n", []string{`limits.resources.r.global_limit: 9007199254740993 exceeds 9007199254740992 (2^53) hits per second`}},
		{"tier fields on a token bucket", "resources:\n  r:\n    hard_limit: 3\n    tiers: []\n", []string{
			`limits.resources.r.hard_limit: burst-tier settings are only for algorithm burst_tiers (this resource's is token_bucket)`,
			`limits.resources.r.tiers: burst-tier settings are only for algorithm burst_tiers`}},
		{"bucket fields on burst tiers", "resources:\n  r:\n    algorithm: burst_tiers\n    template: {}\n    default: {}\n", []string{
			`limits.resources.r.template: token-bucket settings are only for algorithm token_bucket (this resource's is burst_tiers)`,
			`limits.resources.r.default: token-bucket settings are only for algorithm token_bucket`}},
		{"a bucket as a tier domain", "resources:\n  r:\n    algorithm: burst_tiers\n    domains:\n      acme: {size: 3}\n", []string{`limits.resources.r.domains.acme.size: unknown field (want one of hard_limit, tiers) (line 5)`}},
		{"a tier domain's bad tier", "resources:\n  r:\n    algorithm: burst_tiers\n    domains:\n      acme: {hard_limit: -2, tiers: [{limit: 1, window: 1s, active: -1s}]}\n", []string{
			`limits.resources.r.domains.acme.hard_limit: -2 must be ≥ 1`, `limits.resources.r.domains.acme.tiers[0].active: -1s is negative`}},
		{"a bad tier domain name", "resources:\n  r:\n    algorithm: burst_tiers\n    domains:\n      'a b': {}\n", []string{`limits.resources.r.domains["a b"]: domain name "a b" has ' '`}},
		{"unknown namespace field", "namespaces:\n  open/: {allow: true}\n", []string{`limits.namespaces.open/.allow: unknown field (want one of ignore_configured, allow_unconfigured) (line 2)`}},
		{"namespace flag not a bool", "namespaces:\n  open/: {allow_unconfigured: 1}\n", []string{`limits.namespaces.open/.allow_unconfigured: want true or false, got int "1"`}},
		{"bad namespace prefix", "namespaces:\n  'a b/': {}\n", []string{`limits.namespaces["a b/"]: namespace prefix "a b/" has ' '`}},
		{"too many tiers", "resources:\n  r:\n    algorithm: burst_tiers\n    tiers: [" + strings.Repeat("{limit: 1, window: 1s, active: 1s},", 65) + "]\n", []string{`limits.resources.r.tiers: 65 tiers; at most 64`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := ParseSection([]byte(tc.doc))
			wantInvalid(t, cfg, err, tc.want...)
		})
	}
}

// A section with burst tiers and namespaces encodes back to YAML that
// decodes to the same configuration.
func TestTierSectionRoundTrip(t *testing.T) {
	cfg, err := decodeFile(t, readFile(t, "testdata/charon.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Resources["cookbook/hard"].TierDomains = map[string]limits.TierDomain{
		"acme":    {HardLimit: limits.Unbounded},
		"initech": {Tiers: []limits.Tier{}},
		"hooli":   {HardLimit: 9, Tiers: []limits.Tier{skippable(tier(3, sec, sec, 0))}},
		"globex":  {},
	}
	out, err := MarshalSection(cfg)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseSection(out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	want := charon()
	want.Resources["cookbook/hard"].TierDomains = map[string]limits.TierDomain{
		"acme":    {HardLimit: limits.Unbounded},
		"initech": {Tiers: []limits.Tier{}},
		"hooli":   {HardLimit: 9, Tiers: []limits.Tier{skippable(tier(3, sec, sec, 0))}},
		"globex":  {},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("round trip:\n%s\ngot  %+v\nwant %+v", out, got, want)
	}
	for _, w := range []string{"window: 2s", "cooldown: 23h55m0s", "hard_limit: none", "tiers: []", "allow_unconfigured: true"} {
		if !strings.Contains(string(out), w) {
			t.Errorf("%q not in\n%s", w, out)
		}
	}
}
