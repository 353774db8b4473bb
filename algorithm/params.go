package algorithm

import (
	"errors"
	"fmt"
	"math"
	"strconv"
)

// The named parameters of doorman-design.md's table "Common algorithm
// parameters", and what Sluice does with each.
//
// Source: doorman-design.md, "Common algorithm parameters".
const (
	// ParamDecayFactor names the factor (a double in (0, 1], default
	// DefaultDecayFactor) by which the refresh interval decays every time
	// one goes up one level in the server tree. Honoured: it becomes
	// Params.DecayFactor.
	ParamDecayFactor = "decay_factor"
	// ParamLeaseDurationSecs names the lease length (int32 seconds, default
	// 60). Rejected with ErrParameterDuplicatesField: Doorman's Algorithm
	// message already has the required field lease_length, and one rule
	// must not have two sources.
	ParamLeaseDurationSecs = "lease_duration_secs"
	// ParamRefreshInterval names the refresh interval (int32 seconds,
	// default 16). Rejected with ErrParameterDuplicatesField, for the same
	// reason: the field refresh_interval sets it.
	ParamRefreshInterval = "refresh_interval"
)

// DefaultDecayFactor is decay_factor when it is not given: the refresh
// interval halves with every level up the server tree.
//
// Source: doorman-design.md, "Common algorithm parameters" (default 0.5)
// and "Algorithms" ("the refresh interval of a lease should halve with
// every level we go up in the tree").
const DefaultDecayFactor = 0.5

// duplicates maps a parameter name to the Algorithm field that already
// sets the same thing: the design's table names two of them, and the other
// fields of the Algorithm message are refused under their own names too.
var duplicates = map[string]string{
	ParamLeaseDurationSecs:   "lease_length",
	"lease_length":           "lease_length",
	ParamRefreshInterval:     "refresh_interval",
	"learning_mode_duration": "learning_mode_duration",
}

// Errors a ParameterError or Build wraps; test for them with errors.Is.
var (
	// ErrUnknownKind: the kind is not one of the algorithms Sluice
	// implements (Kind.Valid is false).
	ErrUnknownKind = errors.New("unknown algorithm kind")
	// ErrUnknownParameter: the name is not a parameter Sluice knows.
	ErrUnknownParameter = errors.New("unknown algorithm parameter")
	// ErrParameterDuplicatesField: the parameter sets what a field of the
	// Algorithm message sets (for example lease_duration_secs and the field
	// lease_length); set the field instead.
	ErrParameterDuplicatesField = errors.New("parameter duplicates an algorithm field")
	// ErrRepeatedParameter: the same name is given more than once.
	ErrRepeatedParameter = errors.New("algorithm parameter given more than once")
	// ErrBadParameterValue: the value does not parse or is out of range.
	ErrBadParameterValue = errors.New("bad algorithm parameter value")
)

// Parameter is one named algorithm parameter as configured (resources) or
// received on the wire (doorman.NamedParameter). An absent value is "".
//
// Source: doorman-design.md, "Root server configuration" (NamedParameter).
type Parameter struct{ Name, Value string }

// Params are the named algorithm parameters Sluice honours, resolved. The
// zero value is not meaningful; start from DefaultParams.
type Params struct {
	// DecayFactor is the factor in (0, 1] by which the refresh interval
	// decays per level up the server tree (toward the root); a server one
	// level further from the root hands out refresh intervals 1/DecayFactor
	// as long. DefaultDecayFactor when not given.
	DecayFactor float64
}

// DefaultParams returns every parameter at its default.
func DefaultParams() Params { return Params{DecayFactor: DefaultDecayFactor} }

// ParameterError is one rejected parameter. It wraps one of
// ErrUnknownParameter, ErrParameterDuplicatesField, ErrRepeatedParameter
// and ErrBadParameterValue.
type ParameterError struct {
	// Index is the parameter's position in the list (0-based).
	Index int
	// Name and Value are the parameter as given.
	Name, Value string
	// Field is, for ErrParameterDuplicatesField, the Algorithm field to
	// set instead (e.g. "lease_length"); for ErrRepeatedParameter, the
	// index of the first occurrence as "parameters[i]".
	Field string
	// Err is the sentinel.
	Err error
}

// Error says what is wrong, naming the parameter, for example
// `lease_duration_secs duplicates the algorithm field lease_length, which sets
// the same thing: set lease_length instead`.
func (e *ParameterError) Error() string {
	switch {
	case errors.Is(e.Err, ErrParameterDuplicatesField):
		return fmt.Sprintf("%s duplicates the algorithm field %s, which sets the same thing: set %s instead", e.Name, e.Field, e.Field)
	case errors.Is(e.Err, ErrRepeatedParameter):
		return fmt.Sprintf("%s given more than once (first at %s)", e.Name, e.Field)
	case errors.Is(e.Err, ErrBadParameterValue):
		return fmt.Sprintf("%s %q must be a number in (0, 1] (the factor by which the refresh interval decays per level up the server tree)", e.Name, e.Value)
	default:
		return fmt.Sprintf("unknown algorithm parameter %q (Sluice honours %s; lease_duration_secs and refresh_interval are the algorithm fields lease_length and refresh_interval)", e.Name, ParamDecayFactor)
	}
}

// Unwrap returns the sentinel.
func (e *ParameterError) Unwrap() error { return e.Err }

// ParseParameters returns the parameters in ps, every one not given at its
// default, and every problem found, joined, each a *ParameterError: an
// unknown name, a name that duplicates an Algorithm field, a name given
// twice (the first counts), a value out of range (the default stays). The
// returned Params are usable whatever the error: a strict caller (the
// configuration loader) rejects on any error; a lenient one (a server
// adopting what its parent pushed down) runs with them and reports the
// error.
//
// Source: doorman-design.md, "Common algorithm parameters".
func ParseParameters(ps []Parameter) (Params, error) {
	out := DefaultParams()
	var errs []error
	first := map[string]int{}
	for i, p := range ps {
		bad := func(sentinel error, field string) {
			errs = append(errs, &ParameterError{Index: i, Name: p.Name, Value: p.Value, Field: field, Err: sentinel})
		}
		if j, seen := first[p.Name]; seen {
			bad(ErrRepeatedParameter, fmt.Sprintf("parameters[%d]", j))
			continue
		}
		first[p.Name] = i
		if field, dup := duplicates[p.Name]; dup {
			bad(ErrParameterDuplicatesField, field)
			continue
		}
		switch p.Name {
		case ParamDecayFactor:
			f, err := strconv.ParseFloat(p.Value, 64)
			if err != nil || math.IsNaN(f) || !(f > 0 && f <= 1) {
				bad(ErrBadParameterValue, "")
				continue
			}
			out.DecayFactor = f
		default:
			bad(ErrUnknownParameter, "")
		}
	}
	return out, errors.Join(errs...)
}

// Instance is the algorithm a resource runs, as built from its template or
// from what a parent pushed down.
type Instance struct {
	// Kind is the algorithm that runs: the kind asked for, or NoAlgorithm
	// when that cannot be built (FellBack).
	Kind Kind
	// Asked is the kind asked for.
	Asked Kind
	// FellBack is true when Kind is NoAlgorithm because Asked cannot be
	// built. The caller logs it (once per resource and kind) and counts it
	// in a metric.
	FellBack bool
	// Params are the parameters, each at its default when not given or
	// not valid.
	Params Params
}

// Build returns the algorithm to run for kind with parameters params. An
// unknown kind cannot be built: it runs as NoAlgorithm, FellBack is true and
// the error wraps ErrUnknownKind. Parameter problems (see ParseParameters)
// are all correctable, because every parameter Sluice honours has a
// default: the parameter takes its default, the kind still runs, and the
// error reports them (FellBack stays false). So a resource falls back to
// NoAlgorithm, which lifts its limit, only when its kind is unknown.
//
// Source: doorman-design.md, "Finding the algorithm to use" ("If the server
// cannot instantiate the algorithm … it will instantiate the None algorithm
// … logged and exported to the monitoring system") and "The None
// algorithm".
func Build(kind Kind, params []Parameter) (Instance, error) {
	inst := Instance{Kind: kind, Asked: kind}
	var errs []error
	if !kind.Valid() {
		inst.Kind, inst.FellBack = NoAlgorithm, true
		errs = append(errs, fmt.Errorf("%w %s: running NO_ALGORITHM (want one of NO_ALGORITHM, STATIC, PROPORTIONAL_SHARE, FAIR_SHARE)", ErrUnknownKind, kind))
	}
	p, err := ParseParameters(params)
	inst.Params = p
	if err != nil {
		errs = append(errs, err)
	}
	return inst, errors.Join(errs...)
}
