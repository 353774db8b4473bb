package copies

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// FuzzConfig builds a configuration from arbitrary input: Validate never
// panics and names the path of every problem; New agrees with it; a valid
// configuration normalizes (idempotently) to one whose every limit is
// within the global limit, and an engine on it never grants beyond its
// limits.
func FuzzConfig(f *testing.F) {
	f.Add("cookbook/sandboxes", int64(3), int64(5), "acme", int64(4), "trusted", int64(4), "acme\ninitech", false, "open/")
	f.Add("r", int64(9), int64(2), "x.y", int64(7), "g", int64(8), "x.y\nz", true, "")
	f.Add("a b", int64(-1), int64(-5), "", int64(MaxCopies+1), "", int64(-2), "a\na\n", false, "sp ace")
	f.Add("", int64(0), int64(0), "d", int64(0), "g,h", int64(0), "", false, "")
	f.Add(strings.Repeat("r", 300), int64(MaxCopies), int64(MaxCopies), "d", int64(MaxCopies), "g", int64(MaxCopies), "d", true, "r")
	f.Fuzz(func(t *testing.T, name string, domainLimit, globalLimit int64, override string, overrideLimit int64, group string, groupLimit int64, members string, ignore bool, prefix string) {
		var domains []string
		if members != "" {
			domains = strings.Split(members, "\n")
		}
		cfg := &Config{
			Resources: map[string]Resource{name: {
				DomainLimit:  domainLimit,
				DomainLimits: map[string]int64{override: overrideLimit},
				GlobalLimit:  globalLimit,
				Groups:       []Group{{Name: group, Limit: groupLimit, Domains: domains}, {Name: group + "2", Limit: groupLimit / 2, Domains: domains}},
				Ignore:       ignore,
			}},
			AllowUnconfigured: []string{prefix},
		}
		err := cfg.Validate()
		_, nerr := New(cfg, Options{})
		if (err == nil) != (nerr == nil) {
			t.Fatalf("Validate: %v; New: %v", err, nerr)
		}
		if err != nil {
			errs := []error{err}
			if j, ok := err.(interface{ Unwrap() []error }); ok {
				errs = j.Unwrap()
			}
			for _, err := range errs {
				var ce *ConfigError
				if !errors.As(err, &ce) || !errors.Is(err, ErrInvalidConfig) || ce.Msg == "" ||
					!strings.HasPrefix(ce.Path, "resources") && !strings.HasPrefix(ce.Path, "allow_unconfigured[") {
					t.Fatalf("%v: not a *ConfigError with a path", err)
				}
			}
			return
		}
		norm, notes := cfg.Normalize()
		if err := norm.Validate(); err != nil {
			t.Fatalf("normalized, invalid: %v", err)
		}
		if _, again := norm.Normalize(); again != nil {
			t.Fatalf("normalizing twice: %v", again)
		}
		r := norm.Resources[name]
		if g := r.GlobalLimit; g != Unbounded {
			if r.DomainLimit > g || r.DomainLimits[override] > g || r.Groups[0].Limit > g || r.Groups[1].Limit > g {
				t.Fatalf("normalized %+v above its global limit", r)
			}
		} else if notes != nil {
			t.Fatalf("notes without a global limit: %v", notes)
		}
		e, err := New(cfg, Options{Rand: seeded(1)})
		if err != nil {
			t.Fatal(err)
		}
		s, _ := e.Open(t0, 0)
		for _, d := range append(domains, override, "other") {
			res, err := e.Reserve(t.Context(), t0, s.ID, name, d, 3, 1)
			if err != nil {
				t.Fatalf("reserve for %q: %v", d, err)
			}
			if res.Granted > 0 && !res.Unlimited {
				if res.DomainHolds > res.DomainLimit || res.GlobalLimit != Unbounded && res.GlobalHolds > res.GlobalLimit {
					t.Fatalf("beyond a limit: %+v", res)
				}
				for _, g := range res.Groups {
					if g.Holds > g.Limit {
						t.Fatalf("beyond a group's limit: %+v", res)
					}
				}
			}
		}
		if _, err := e.Close(t.Context(), t0.Add(time.Second), s.ID); err != nil {
			t.Fatal(err)
		}
		if err := consistent(e.Snapshot()); err != nil {
			t.Fatal(err)
		}
	})
}
