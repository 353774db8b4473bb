package vectors

import (
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// schemas maps every vector file to the type it decodes into.
func schemas() map[string]func() any {
	return map[string]func() any{
		RefreshFile:   func() any { return new(Refresh) },
		LimiterFile:   func() any { return new(Limiter) },
		RetryFile:     func() any { return new(Retry) },
		ErrorsFile:    func() any { return new(Errors) },
		ConstantsFile: func() any { return new(Constants) },
	}
}

// sourceDocs are the documents an "about" may cite: the reference
// documents (docs/references.md) and Sluice's own guides.
var sourceDoc = regexp.MustCompile(`(doorman-design|guava-ratelimiter|charon-paper)\.md|docs/[a-z]+\.md`)

// TestEveryFileHasASchema: every JSON file of the directory is embedded,
// decodes strictly into its type, and begins with an "about" citing the
// rule's source document and a "schema" saying how to read it.
func TestEveryFileHasASchema(t *testing.T) {
	onDisk, err := filepath.Glob("*.json")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(onDisk, Files()) {
		t.Fatalf("files on disk %v, embedded %v", onDisk, Files())
	}
	known := schemas()
	for _, name := range Files() {
		mk, ok := known[name]
		if !ok {
			t.Errorf("%s: no schema type (add it to schemas and to docs/clients.md)", name)
			continue
		}
		v := mk()
		if err := Read(name, v); err != nil {
			t.Errorf("%v", err)
			continue
		}
		raw, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(string(raw), "{\n  \"about\": \"") {
			t.Errorf("%s does not begin with its \"about\"", name)
		}
		about, schema := header(v)
		if !sourceDoc.MatchString(about) {
			t.Errorf("%s: about %q names no source document", name, about)
		}
		if len(schema) == 0 {
			t.Errorf("%s: no schema", name)
		}
	}
	for name := range known {
		if !slices.Contains(Files(), name) {
			t.Errorf("%s is missing", name)
		}
	}
}

func header(v any) (about string, schema []string) {
	switch v := v.(type) {
	case *Refresh:
		return v.About, v.Schema
	case *Limiter:
		return v.About, v.Schema
	case *Retry:
		return v.About, v.Schema
	case *Errors:
		return v.About, v.Schema
	case *Constants:
		return v.About, v.Schema
	}
	panic("unknown vector type")
}

// TestReadIsStrict: an unknown field, a second value or a bad number is
// an error.
func TestReadIsStrict(t *testing.T) {
	var n struct{ X Num }
	for _, tc := range []struct {
		name, in string
		ok       bool
		want     float64
	}{
		{"number", `{"X": 2.5}`, true, 2.5},
		{"inf", `{"X": "inf"}`, true, math.Inf(1)},
		{"other string", `{"X": "infinity"}`, false, 0},
		{"null", `{"X": null}`, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := decodeString(tc.in, &n)
			if (err == nil) != tc.ok || tc.ok && float64(n.X) != tc.want {
				t.Errorf("decode(%s) = %v, %v; want ok %v, %v", tc.in, n.X, err, tc.ok, tc.want)
			}
		})
	}
	if err := Read("nope.json", &n); err == nil {
		t.Error("Read of a missing file: no error")
	}
	var r Refresh
	if err := decodeString(`{"about": "", "unknown": 1}`, &r); err == nil {
		t.Error("an unknown field: no error")
	}
}

func decodeString(s string, v any) error { return decode("test", []byte(s), v) }

func unique(t *testing.T, what string, names []string) {
	t.Helper()
	seen := map[string]bool{}
	for _, n := range names {
		if n == "" || seen[n] {
			t.Errorf("%s %q is empty or repeated", what, n)
		}
		seen[n] = true
	}
}

// TestRefreshWellFormed: events in time order, known ops and modes, every
// resource with a server lease, every expectation inside the run.
func TestRefreshWellFormed(t *testing.T) {
	var v Refresh
	if err := Read(RefreshFile, &v); err != nil {
		t.Fatal(err)
	}
	if v.Epoch <= 0 || len(v.Cases) == 0 {
		t.Fatalf("epoch %d, %d cases", v.Epoch, len(v.Cases))
	}
	var names []string
	for _, c := range v.Cases {
		names = append(names, c.Name)
		if !slices.Contains([]string{"safe", "pessimistic", "optimistic"}, c.Mode) {
			t.Errorf("%s: mode %q", c.Name, c.Mode)
		}
		last := 0.0
		for _, e := range c.Events {
			if e.At < last || e.At > c.Until || !halves(e.At) {
				t.Errorf("%s: event at %v out of order, past until %v, or not a multiple of 1/2 s", c.Name, e.At, c.Until)
			}
			last = e.At
			if _, ok := c.Server[e.Resource]; !ok {
				t.Errorf("%s: resource %q has no server lease", c.Name, e.Resource)
			}
			if !slices.Contains([]string{"add", "set_wants", "release"}, e.Op) || e.Wants < 0 || e.Op == "release" && e.Wants != 0 {
				t.Errorf("%s: event %+v", c.Name, e)
			}
		}
		last = 0
		for _, r := range c.Requests {
			if r.At < last || r.At > c.Until || !halves(r.At) || len(r.Wants) == 0 {
				t.Errorf("%s: request %+v out of order, past until, or empty", c.Name, r)
			}
			last = r.At
		}
		for _, k := range c.Capacity {
			if k.At > c.Until || !halves(k.At) {
				t.Errorf("%s: capacity check at %v past until %v", c.Name, k.At, c.Until)
			}
		}
		for id, l := range c.Server {
			if l.LeaseLength <= 0 || l.RefreshInterval < 0 || l.Capacity < 0 {
				t.Errorf("%s: server lease of %s: %+v", c.Name, id, l)
			}
		}
		if len(c.Requests) == 0 {
			t.Errorf("%s: no requests expected", c.Name)
		}
	}
	unique(t, "case", names)
}

// halves reports whether x is a multiple of 1/2.
func halves(x float64) bool { return x*2 == math.Trunc(x*2) }

// eighths reports whether x is a multiple of 1/8 (or infinite).
func eighths(x float64) bool { return math.IsInf(x, 0) || x*8 == math.Trunc(x*8) }

// TestLimiterWellFormed: each step has the fields of its op and no
// other, in time order; rates are 0, +Inf or powers of two and times
// multiples of 1/8 s (answers exact in floating point and nanoseconds).
func TestLimiterWellFormed(t *testing.T) {
	var v Limiter
	if err := Read(LimiterFile, &v); err != nil {
		t.Fatal(err)
	}
	if !(v.Tolerance > 0 && v.Tolerance < 1e-6) {
		t.Errorf("tolerance %v", v.Tolerance)
	}
	dyadic := func(r Num) bool {
		f := float64(r)
		if f == 0 || math.IsInf(f, 1) {
			return true
		}
		frac, _ := math.Frexp(f)
		return f > 0 && frac == 0.5
	}
	var names []string
	for _, c := range v.Cases {
		names = append(names, c.Name)
		if !dyadic(c.Rate) || c.MaxBurstSeconds < 0 || !eighths(c.MaxBurstSeconds) {
			t.Errorf("%s: rate %v, burst %v", c.Name, c.Rate, c.MaxBurstSeconds)
		}
		last := 0.0
		for i, s := range c.Steps {
			if s.At < last || !eighths(s.At) {
				t.Errorf("%s, step %d: at %v", c.Name, i, s.At)
			}
			last = s.At
			if s.N() < 1 {
				t.Errorf("%s, step %d: %d permits", c.Name, i, s.N())
			}
			has := map[string]bool{"permits": s.Permits != nil, "rate": s.Rate != nil, "wait": s.Wait != nil, "ok": s.OK != nil, "tokens": s.Tokens != nil}
			want := map[string][]string{"acquire": {"permits", "wait"}, "try_acquire": {"permits", "ok"}, "set_rate": {"rate"}, "tokens": {"tokens"}}[s.Op]
			if want == nil {
				t.Errorf("%s, step %d: op %q", c.Name, i, s.Op)
				continue
			}
			for f, set := range has {
				if set && !slices.Contains(want, f) || !set && f != "permits" && slices.Contains(want, f) {
					t.Errorf("%s, step %d (%s): field %s set %v", c.Name, i, s.Op, f, set)
				}
			}
			if s.Rate != nil && !dyadic(*s.Rate) || s.Wait != nil && !eighths(float64(*s.Wait)) || s.Tokens != nil && !eighths(float64(*s.Tokens)) {
				t.Errorf("%s, step %d: a number not exact in binary: %+v", c.Name, i, s)
			}
		}
	}
	unique(t, "case", names)
}

// TestRetryFollowsItsRule: the delays, bounds and schedules of retry.json
// are what its schema's formulas give, so the file says one thing.
func TestRetryFollowsItsRule(t *testing.T) {
	var v Retry
	if err := Read(RetryFile, &v); err != nil {
		t.Fatal(err)
	}
	c := v.Charon
	delay := func(unit float64, i int, u float64) float64 {
		return unit * math.Ldexp(1, min(i, c.MaxExponent)) * (0.75 + 0.5*u)
	}
	if c.Unit != 1 || c.MaxExponent != 100 {
		t.Errorf("unit %v, max exponent %d", c.Unit, c.MaxExponent)
	}
	for _, d := range c.Delays {
		if d.Attempt < 1 || d.U < 0 || d.U >= 1 || delay(c.Unit, d.Attempt, d.U) != d.Delay {
			t.Errorf("delay %+v, the rule gives %v", d, delay(c.Unit, d.Attempt, d.U))
		}
	}
	for _, b := range c.Bounds {
		if b.Min != delay(1, b.Attempt, 0) || b.Max != delay(1, b.Attempt, 1) {
			t.Errorf("bounds %+v, the rule gives [%v, %v]", b, delay(1, b.Attempt, 0), delay(1, b.Attempt, 1))
		}
	}
	var names []string
	for _, s := range c.Schedules {
		names = append(names, s.Name)
		if s.Call != "request" && s.Call != "reserve_copies" {
			t.Errorf("%s: call %q", s.Name, s.Call)
		}
		want := []float64{0}
		for i, at := 1, 0.0; ; i++ {
			d := min(s.MaxWait-at, delay(s.Unit, i, s.U))
			if d <= 0 {
				break
			}
			at += d
			want = append(want, at)
		}
		if !slices.Equal(s.AttemptsAt, want) {
			t.Errorf("%s: attempts at %v, the rule gives %v", s.Name, s.AttemptsAt, want)
		}
	}
	unique(t, "schedule", names)
	for _, call := range []string{"request", "reserve_copies"} {
		if len(c.RetriedStatuses[call]) == 0 {
			t.Errorf("%s retries no status", call)
		}
		for _, st := range c.FinalStatuses[call] {
			if slices.Contains(c.RetriedStatuses[call], st) {
				t.Errorf("%s: %s both retried and final", call, st)
			}
		}
	}
	l := v.Leases
	for _, k := range l.Cases {
		d := min(l.MinBackoff*math.Ldexp(1, min(k.Failures-1, 20)), l.MaxBackoff)
		lo, hi := d/2, d
		if k.Interval > 0 {
			cp := max(min(k.Interval, l.MaxBackoff), l.MinBackoff)
			lo, hi = min(lo, cp), min(hi, cp)
		}
		if k.Failures < 1 || math.Abs(lo-k.Min) > 1e-9 || math.Abs(hi-k.Max) > 1e-9 {
			t.Errorf("leases case %+v, the rule gives [%v, %v]", k, lo, hi)
		}
	}
}

// TestErrorsWellFormed: one entry per code 1-16, each named in every
// language, classified for Charon.
func TestErrorsWellFormed(t *testing.T) {
	var v Errors
	if err := Read(ErrorsFile, &v); err != nil {
		t.Fatal(err)
	}
	var names []string
	for i, c := range v.Codes {
		names = append(names, c.Code)
		if c.Number != i+1 {
			t.Errorf("code %s is number %d at position %d: want the codes 1-16 in order", c.Code, c.Number, i)
		}
		if c.Python == "" || c.Java == "" || c.Cpp == "" || (c.Charon != "caller" && c.Charon != "fail_open") {
			t.Errorf("code %s: %+v", c.Code, c)
		}
	}
	if len(v.Codes) != 16 {
		t.Errorf("%d codes, want 16", len(v.Codes))
	}
	unique(t, "code", names)
	for _, c := range v.Conditions {
		if !slices.Contains(names, c.Code) || c.Go == "" || c.Python == "" || c.Java == "" || c.Cpp == "" {
			t.Errorf("condition %+v", c)
		}
	}
	for _, lang := range []string{"go", "python", "java", "cpp"} {
		if v.Namespaces[lang] == "" {
			t.Errorf("no namespace for %s", lang)
		}
	}
}

// TestConstantsWellFormed: names unique and snake_case, units known.
func TestConstantsWellFormed(t *testing.T) {
	var v Constants
	if err := Read(ConstantsFile, &v); err != nil {
		t.Fatal(err)
	}
	snake := regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	var names []string
	for _, c := range v.Constants {
		names = append(names, c.Name)
		if !snake.MatchString(c.Name) || (c.Unit != "seconds" && c.Unit != "count") || c.About == "" || c.Value <= 0 {
			t.Errorf("constant %+v", c)
		}
		if c.Go == "" && c.Python == "" && c.Java == "" && c.Cpp == "" {
			t.Errorf("constant %s: kept by no language", c.Name)
		}
	}
	unique(t, "constant", names)
}
