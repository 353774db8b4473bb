package copies

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  *Config
		want []string // the errors, in order
	}{
		{"nil", nil, nil},
		{"empty", &Config{}, nil},
		{"the zero resource", &Config{Resources: map[string]Resource{"r": {}}}, nil},
		{"sandboxes", sandboxes(), nil},
		{"unlimited", &Config{Resources: map[string]Resource{"r": Unlimited()}, AllowUnconfigured: []string{"", "open/"}}, nil},
		{
			"bad names",
			&Config{Resources: map[string]Resource{
				"a b": {},
				"":    {},
				"ok": {DomainLimits: map[string]int64{"x.y z": 1}, Groups: []Group{
					{Name: "", Domains: []string{"ok", "no way"}},
				}},
			}, AllowUnconfigured: []string{"open/", "sp ace"}},
			[]string{
				`allow_unconfigured[1]: prefix "sp ace" has ' ' at byte 2; allowed: A-Z a-z 0-9 / _ - . :`,
				`resources[""]: resource name is empty`,
				`resources["a b"]: resource name "a b" has ' ' at byte 1; allowed: A-Z a-z 0-9 / _ - . :`,
				`resources.ok.domain_limits["x.y z"]: domain name "x.y z" has ' ' at byte 3; allowed: A-Z a-z 0-9 / _ - . :`,
				`resources.ok.groups[0].name: group name is empty`,
				`resources.ok.groups[0].domains[1]: domain name "no way" has ' ' at byte 2; allowed: A-Z a-z 0-9 / _ - . :`,
			},
		},
		{
			"bad limits",
			&Config{Resources: map[string]Resource{"cookbook/sandboxes": {
				DomainLimit:  -1,
				DomainLimits: map[string]int64{"acme": MaxCopies + 1},
				GlobalLimit:  -5,
				Groups:       []Group{{Name: "g", Limit: -2}},
			}}},
			[]string{
				"resources.cookbook/sandboxes.domain_limit: -1 is negative (copies)",
				"resources.cookbook/sandboxes.global_limit: -5 is negative (copies)",
				"resources.cookbook/sandboxes.domain_limits.acme: 9007199254740993 exceeds 9007199254740992 (2^53)",
				"resources.cookbook/sandboxes.groups[0].limit: -2 is negative (copies)",
			},
		},
		{
			"duplicates",
			&Config{Resources: map[string]Resource{"r": {Groups: []Group{
				{Name: "g", Domains: []string{"a", "b", "a"}},
				{Name: "h"},
				{Name: "g"},
			}}}},
			[]string{
				`resources.r.groups[0].domains[2]: domain "a" is also domains[0] of the group`,
				`resources.r.groups[2].name: group "g" is also groups[0]: group names are unique within a resource`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			var got []string
			if err != nil {
				got = strings.Split(err.Error(), "\n")
				if !errors.Is(err, ErrInvalidConfig) {
					t.Error("does not wrap ErrInvalidConfig")
				}
				var ce *ConfigError
				if !errors.As(err, &ce) || ce.Path == "" {
					t.Error("no *ConfigError")
				}
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("\n got %q\nwant %q", got, tt.want)
			}
			if _, err := New(tt.cfg, Options{}); (err != nil) != (tt.want != nil) {
				t.Fatalf("New: %v", err)
			}
		})
	}
}

// A bad configuration leaves the engine's configuration in force.
func TestSetConfigRefused(t *testing.T) {
	e, _ := New(sandboxes(), Options{})
	if err := e.SetConfig(&Config{Resources: map[string]Resource{"x": {DomainLimit: -1}}}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(e.Config(), sandboxes()) {
		t.Fatalf("%+v", e.Config())
	}
}

func TestNormalize(t *testing.T) {
	cfg := &Config{Resources: map[string]Resource{
		"r": {DomainLimit: 7, DomainLimits: map[string]int64{"acme": 9, "small": 2, "x.y": 6}, GlobalLimit: 5,
			Groups: []Group{{Name: "trusted", Limit: 4}, {Name: "big", Limit: 8, Domains: []string{"acme"}}}},
		"unbounded":          {DomainLimit: 100, Groups: []Group{{Name: "g", Limit: 1000}}},
		"cookbook/sandboxes": sandboxes().Resources["cookbook/sandboxes"],
	}}
	before := cfg.Clone()
	got, notes := cfg.Normalize()
	var msgs []string
	for _, n := range notes {
		msgs = append(msgs, n.String())
	}
	want := []string{
		`resources.r.domain_limit: domain limit 7 lowered to the global limit 5`,
		`resources.r.domain_limits.acme: domain "acme"'s limit 9 lowered to the global limit 5`,
		`resources.r.domain_limits["x.y"]: domain "x.y"'s limit 6 lowered to the global limit 5`,
		`resources.r.groups[1].limit: group "big"'s limit 8 lowered to the global limit 5`,
	}
	if !reflect.DeepEqual(msgs, want) {
		t.Fatalf("\n got %q\nwant %q", msgs, want)
	}
	if !reflect.DeepEqual(cfg, before) {
		t.Fatal("Normalize changed its receiver")
	}
	r := got.Resources["r"]
	if r.DomainLimit != 5 || r.DomainLimits["acme"] != 5 || r.DomainLimits["small"] != 2 || r.Groups[0].Limit != 4 || r.Groups[1].Limit != 5 {
		t.Fatalf("%+v", r)
	}
	if !reflect.DeepEqual(got.Resources["unbounded"], cfg.Resources["unbounded"]) || !reflect.DeepEqual(got.Resources["cookbook/sandboxes"], cfg.Resources["cookbook/sandboxes"]) {
		t.Fatal("changed a resource that needed no normalization")
	}
	// Normalizing is idempotent, and the engine applies it.
	if _, again := got.Normalize(); again != nil {
		t.Fatalf("%v", again)
	}
	e, _ := New(cfg, Options{})
	if !reflect.DeepEqual(e.Config(), got) {
		t.Fatal("the engine's configuration is not the normalized one")
	}
	if n, notes := (*Config)(nil).Normalize(); n != nil || notes != nil {
		t.Fatal("nil")
	}
}

// The engine keeps a private copy: changing the caller's configuration
// afterwards changes nothing.
func TestConfigPrivate(t *testing.T) {
	cfg := sandboxes()
	e, _ := New(cfg, Options{Rand: seeded(1)})
	cfg.Resources["cookbook/sandboxes"].DomainLimits["acme"] = 0
	cfg.Resources["cookbook/sandboxes"].Groups[0].Domains[0] = "x"
	s, _ := e.Open(t0, 0)
	if r, _ := e.Reserve(t.Context(), t0, s.ID, "cookbook/sandboxes", "acme", 4, 0); r.Granted != 4 || len(r.Groups) != 1 {
		t.Fatalf("%+v", r)
	}
	got := e.Config()
	got.Resources["cookbook/sandboxes"].DomainLimits["acme"] = 0
	if !reflect.DeepEqual(e.Config(), sandboxes()) {
		t.Fatal("Config returned the engine's own maps")
	}
}

func TestValidName(t *testing.T) {
	for name, want := range map[string]bool{"acme": true, "a/b-c_d.e:f": true, "": false, "a b": false, "a,b": false, strings.Repeat("x", MaxNameLen): true, strings.Repeat("x", MaxNameLen+1): false} {
		if ValidName(name) != want {
			t.Errorf("ValidName(%q) = %v", name, !want)
		}
	}
}
