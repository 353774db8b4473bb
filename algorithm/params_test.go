package algorithm

import (
	"errors"
	"strings"
	"testing"
)

func TestParseParameters(t *testing.T) {
	tests := []struct {
		name  string
		ps    []Parameter
		want  Params
		errs  []error    // sentinels the error must wrap, in order
		texts [][]string // what each *ParameterError's text must mention
	}{
		{name: "none", want: DefaultParams()},
		{name: "decay factor", ps: []Parameter{{"decay_factor", "0.25"}}, want: Params{DecayFactor: 0.25}},
		{name: "decay factor one", ps: []Parameter{{"decay_factor", "1"}}, want: Params{DecayFactor: 1}},
		{name: "decay factor two", ps: []Parameter{{"decay_factor", "2"}}, want: DefaultParams(),
			errs: []error{ErrBadParameterValue}, texts: [][]string{{"decay_factor", `"2"`, "(0, 1]"}}},
		{name: "decay factor zero", ps: []Parameter{{"decay_factor", "0"}}, want: DefaultParams(),
			errs: []error{ErrBadParameterValue}, texts: [][]string{{"decay_factor", `"0"`}}},
		{name: "decay factor negative", ps: []Parameter{{"decay_factor", "-0.5"}}, want: DefaultParams(),
			errs: []error{ErrBadParameterValue}, texts: [][]string{{"decay_factor", `"-0.5"`}}},
		{name: "decay factor NaN", ps: []Parameter{{"decay_factor", "NaN"}}, want: DefaultParams(),
			errs: []error{ErrBadParameterValue}, texts: [][]string{{"decay_factor", "NaN"}}},
		{name: "decay factor empty", ps: []Parameter{{"decay_factor", ""}}, want: DefaultParams(),
			errs: []error{ErrBadParameterValue}, texts: [][]string{{"decay_factor", `""`}}},
		{name: "decay factor not a number", ps: []Parameter{{"decay_factor", "half"}}, want: DefaultParams(),
			errs: []error{ErrBadParameterValue}, texts: [][]string{{"decay_factor", `"half"`}}},
		{name: "lease_duration_secs", ps: []Parameter{{"lease_duration_secs", "60"}}, want: DefaultParams(),
			errs: []error{ErrParameterDuplicatesField}, texts: [][]string{{"lease_duration_secs", "field lease_length", "set lease_length instead"}}},
		{name: "refresh_interval", ps: []Parameter{{"refresh_interval", "16"}}, want: DefaultParams(),
			errs: []error{ErrParameterDuplicatesField}, texts: [][]string{{"refresh_interval", "set refresh_interval instead"}}},
		{name: "lease_length", ps: []Parameter{{"lease_length", "60"}}, want: DefaultParams(),
			errs: []error{ErrParameterDuplicatesField}, texts: [][]string{{"lease_length", "set lease_length instead"}}},
		{name: "learning_mode_duration", ps: []Parameter{{"learning_mode_duration", "0"}}, want: DefaultParams(),
			errs: []error{ErrParameterDuplicatesField}, texts: [][]string{{"learning_mode_duration", "set learning_mode_duration instead"}}},
		{name: "unknown", ps: []Parameter{{"decay", "0.5"}}, want: DefaultParams(),
			errs: []error{ErrUnknownParameter}, texts: [][]string{{`"decay"`, "decay_factor"}}},
		{name: "empty name", ps: []Parameter{{"", "0.5"}}, want: DefaultParams(),
			errs: []error{ErrUnknownParameter}, texts: [][]string{{`""`}}},
		{name: "repeated: the first counts", ps: []Parameter{{"decay_factor", "0.25"}, {"decay_factor", "0.75"}}, want: Params{DecayFactor: 0.25},
			errs: []error{ErrRepeatedParameter}, texts: [][]string{{"decay_factor", "parameters[0]"}}},
		{name: "every problem reported, the valid one kept",
			ps:   []Parameter{{"lease_duration_secs", "60"}, {"x", ""}, {"decay_factor", "0.8"}},
			want: Params{DecayFactor: 0.8},
			errs: []error{ErrParameterDuplicatesField, ErrUnknownParameter}, texts: [][]string{{"lease_duration_secs"}, {`"x"`}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseParameters(tt.ps)
			if got != tt.want {
				t.Errorf("params %+v, want %+v", got, tt.want)
			}
			if len(tt.errs) == 0 {
				if err != nil {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error, want %v", tt.errs)
			}
			var pes []*ParameterError
			for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
				var pe *ParameterError
				if !errors.As(e, &pe) {
					t.Fatalf("%v is not a *ParameterError", e)
				}
				pes = append(pes, pe)
			}
			if len(pes) != len(tt.errs) {
				t.Fatalf("%d errors (%v), want %d", len(pes), err, len(tt.errs))
			}
			for i, pe := range pes {
				if !errors.Is(pe, tt.errs[i]) {
					t.Errorf("error %d %q does not wrap %v", i, pe, tt.errs[i])
				}
				if tt.ps[pe.Index].Name != pe.Name {
					t.Errorf("error %d: index %d does not point at %q", i, pe.Index, pe.Name)
				}
				for _, w := range tt.texts[i] {
					if !strings.Contains(pe.Error(), w) {
						t.Errorf("error %q does not mention %q", pe, w)
					}
				}
			}
		})
	}
}

func TestBuild(t *testing.T) {
	tests := []struct {
		name         string
		kind         Kind
		ps           []Parameter
		wantKind     Kind
		wantFellBack bool
		wantDecay    float64
		wantErr      []error
	}{
		{name: "fair share", kind: FairShare, wantKind: FairShare, wantDecay: DefaultDecayFactor},
		{name: "every known kind runs as itself", kind: Static, wantKind: Static, wantDecay: DefaultDecayFactor},
		{name: "none", kind: NoAlgorithm, wantKind: NoAlgorithm, wantDecay: DefaultDecayFactor},
		{name: "decay factor honoured", kind: ProportionalShare, ps: []Parameter{{"decay_factor", "0.25"}},
			wantKind: ProportionalShare, wantDecay: 0.25},
		{name: "unknown kind falls back to none", kind: Kind(42), wantKind: NoAlgorithm, wantFellBack: true,
			wantDecay: DefaultDecayFactor, wantErr: []error{ErrUnknownKind}},
		{name: "negative kind falls back to none", kind: Kind(-1), wantKind: NoAlgorithm, wantFellBack: true,
			wantDecay: DefaultDecayFactor, wantErr: []error{ErrUnknownKind}},
		// Every parameter has a default, so a bad one is corrected, not a
		// reason to lift the resource's limit.
		{name: "bad parameter is corrected, the kind still runs", kind: FairShare,
			ps:       []Parameter{{"decay_factor", "7"}, {"lease_duration_secs", "60"}},
			wantKind: FairShare, wantDecay: DefaultDecayFactor, wantErr: []error{ErrBadParameterValue, ErrParameterDuplicatesField}},
		{name: "unknown kind and bad parameter", kind: Kind(9), ps: []Parameter{{"x", "1"}}, wantKind: NoAlgorithm, wantFellBack: true,
			wantDecay: DefaultDecayFactor, wantErr: []error{ErrUnknownKind, ErrUnknownParameter}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inst, err := Build(tt.kind, tt.ps)
			if inst.Kind != tt.wantKind || inst.Asked != tt.kind || inst.FellBack != tt.wantFellBack || inst.Params.DecayFactor != tt.wantDecay {
				t.Errorf("Build(%v, %v) = %+v", tt.kind, tt.ps, inst)
			}
			if (err != nil) != (len(tt.wantErr) > 0) {
				t.Fatalf("error %v, want %v", err, tt.wantErr)
			}
			for _, w := range tt.wantErr {
				if !errors.Is(err, w) {
					t.Errorf("error %v does not wrap %v", err, w)
				}
			}
			if tt.wantFellBack && !strings.Contains(err.Error(), tt.kind.String()) {
				t.Errorf("error %q does not name the kind %v", err, tt.kind)
			}
		})
	}
}
