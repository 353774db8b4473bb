// Package names is the one rule for the names of Sluice's limits —
// resources, domains, groups — and for the paths that name configuration
// fields in errors. Packages limits and limits/copies use it (and re-export
// its constants), so that a name valid in one is valid in the other.
package names

import (
	"fmt"
	"strconv"
)

// MaxLen bounds a name, in bytes.
const MaxLen = 256

// Chars describes the characters allowed in names, for messages:
// quotaservice's [a-zA-Z0-9_]+ widened with the separators of
// ratelimiting-in-150-lines.md and Sluice's resource ids.
const Chars = "A-Z a-z 0-9 / _ - . :"

// Allowed reports, by byte, whether it may appear in a name.
var Allowed = func() (t [256]bool) {
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
	}
	for c := 'A'; c <= 'Z'; c++ {
		t[c] = true
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for _, c := range "/_-.:" {
		t[c] = true
	}
	return t
}()

// Check returns "" for a valid name (1 to MaxLen bytes of Chars), else
// what is wrong with it, e.g. `"a b" has ' ' at byte 1; allowed: …`.
func Check(s string) string {
	if s == "" {
		return "is empty"
	}
	if len(s) > MaxLen {
		return fmt.Sprintf("is %d bytes long; at most %d", len(s), MaxLen)
	}
	for i := 0; i < len(s); i++ {
		if !Allowed[s[i]] {
			return fmt.Sprintf("%q has %q at byte %d; allowed: %s", s, s[i], i, Chars)
		}
	}
	return ""
}

// Join returns prefix.field, or field when prefix is empty.
func Join(prefix, field string) string {
	if prefix == "" {
		return field
	}
	return prefix + "." + field
}

// Key returns path.name, or path["name"] when name is empty or has
// characters that would make the path ambiguous ('.', '[', invalid bytes).
func Key(path, name string) string {
	if name == "" {
		return path + `[""]`
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == ':' || c == '/') {
			return path + "[" + strconv.Quote(name) + "]"
		}
	}
	return Join(path, name)
}

// Setting returns what the operator calls the server.Config field at path
// ("Sessions.Max") in a message that reaches a client or a log: name's
// answer (sluice server's: the flag, "--max-sessions"), or path itself
// when name is nil or answers "". Packages under server/ take such a
// name function in their options (server.Config.Runtime.Setting) so that
// they never speak of a front end's flags themselves.
func Setting(name func(path string) string, path string) string {
	if name != nil {
		if n := name(path); n != "" {
			return n
		}
	}
	return path
}

// FieldError is a configuration value refused: the field at fault, by its
// Go path in the value refused ("Store.Timeout", "NearLimitRatio"), and
// why. server.FieldError and the services' OptionError types are this
// one type, so that a composition root names a service's field by its
// own path with Under.
type FieldError struct {
	Field string
	Err   error
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Err.Error() }

func (e *FieldError) Unwrap() error { return e.Err }

// Under returns e with its field under prefix ("Envoy" + "NearLimitRatio"
// is "Envoy.NearLimitRatio"; Join's rule).
func (e *FieldError) Under(prefix string) *FieldError {
	return &FieldError{Field: Join(prefix, e.Field), Err: e.Err}
}

// FieldErr returns a *FieldError for field with a formatted reason.
func FieldErr(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Err: fmt.Errorf(format, args...)}
}
