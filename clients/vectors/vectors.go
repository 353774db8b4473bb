// Package vectors holds Sluice's language-neutral client test vectors —
// the JSON files of clients/vectors, which pin the behaviour the Go,
// Python, Java and C++ clients share — and their schema as Go types, for
// the Go tests that check the Go client against them.
//
// One file per behaviour, each with an "about" naming the rule's source
// document and a "schema" describing how a test reads and runs it:
//
//   - refresh.json: the lease client's refresh planner (Doorman's 5-second
//     rule, bulk GetCapacity requests, the expiry margin, fallback modes).
//   - limiter.json: the SmoothBursty rate limiter (Guava's).
//   - retry.json: Charon's retry schedule, and the lease client's backoff.
//   - errors.json: gRPC status codes and each language's error for them.
//   - constants.json: the shared defaults.
//
// Times are seconds (plain JSON numbers); the only string number is "inf"
// (Num). docs/clients.md describes the files and which test reads each.
package vectors

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"math"
	"strconv"
	"time"
)

//go:embed *.json
var files embed.FS

// File names of the vectors.
const (
	RefreshFile   = "refresh.json"
	LimiterFile   = "limiter.json"
	RetryFile     = "retry.json"
	ErrorsFile    = "errors.json"
	ConstantsFile = "constants.json"
)

// Files returns the names of every vector file, sorted.
func Files() []string {
	names, err := fs.Glob(files, "*.json")
	if err != nil { // only for a malformed pattern
		panic(err)
	}
	return names
}

// Read decodes the vector file name into v strictly: a field v does not
// know, a second JSON value or a malformed number is an error naming the
// file.
func Read(name string, v any) error {
	b, err := files.ReadFile(name)
	if err != nil {
		return fmt.Errorf("vectors: %w", err)
	}
	return decode(name, b, v)
}

// decode is Read of the JSON text b, named name in errors.
func decode(name string, b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return fmt.Errorf("vectors: %s: %w", name, err)
	}
	if d.More() {
		return fmt.Errorf("vectors: %s: more than one JSON value", name)
	}
	return nil
}

// Num is a number of a vector that may be unlimited: a JSON number, or
// the string "inf" for +Inf.
type Num float64

// UnmarshalJSON reads a JSON number or "inf".
func (n *Num) UnmarshalJSON(b []byte) error {
	if string(b) == `"inf"` {
		*n = Num(math.Inf(1))
		return nil
	}
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil {
		return fmt.Errorf("%s is neither a number nor \"inf\"", b)
	}
	*n = Num(f)
	return nil
}

// Duration converts seconds to a time.Duration, rounded to the nanosecond.
func Duration(seconds float64) time.Duration {
	return time.Duration(math.Round(seconds * float64(time.Second)))
}

// Refresh is refresh.json: the lease client's refresh planner.
type Refresh struct {
	About  string   `json:"about"`
	Schema []string `json:"schema"`
	// Epoch is the Unix time (whole seconds) of t = 0.
	Epoch int64         `json:"epoch"`
	Cases []RefreshCase `json:"cases"`
}

// RefreshCase is one client driven on a fake clock against a scripted
// server (the schema in refresh.json says how).
type RefreshCase struct {
	Name string `json:"name"`
	// Mode is the fallback mode: safe, pessimistic or optimistic.
	Mode string `json:"mode"`
	// Server is what the server answers for each resource.
	Server   map[string]ServerLease `json:"server"`
	Events   []RefreshEvent         `json:"events"`
	Until    float64                `json:"until"`
	Requests []RefreshRequest       `json:"requests"`
	Capacity []CapacityCheck        `json:"capacity"`
}

// ServerLease is the scripted server's answer for one resource.
type ServerLease struct {
	Capacity float64 `json:"capacity"`
	// LeaseLength makes expiry_time floor(epoch + t) + LeaseLength.
	LeaseLength     int64 `json:"lease_length"`
	RefreshInterval int64 `json:"refresh_interval"`
	// SafeCapacity is sent only when set.
	SafeCapacity *float64 `json:"safe_capacity"`
}

// RefreshEvent is what the application does at At: Op "add" (a new
// handle of Resource asking Wants), "set_wants" (that handle asks Wants)
// or "release" (that handle is released).
type RefreshEvent struct {
	At       float64 `json:"at"`
	Op       string  `json:"op"`
	Resource string  `json:"resource"`
	Wants    float64 `json:"wants"`
}

// RefreshRequest is a GetCapacity request the server sees: when, and the
// wants of each resource it carries.
type RefreshRequest struct {
	At    float64            `json:"at"`
	Wants map[string]float64 `json:"wants"`
}

// CapacityCheck is the capacity Resource's latest handle has at At, after
// that instant's step.
type CapacityCheck struct {
	At       float64 `json:"at"`
	Resource string  `json:"resource"`
	Capacity Num     `json:"capacity"`
}

// Limiter is limiter.json: the SmoothBursty rate limiter.
type Limiter struct {
	About  string   `json:"about"`
	Schema []string `json:"schema"`
	// Tolerance bounds the difference of waits (seconds) and tokens.
	Tolerance float64       `json:"tolerance"`
	Cases     []LimiterCase `json:"cases"`
}

// LimiterCase is one limiter and the steps run on it, in order.
type LimiterCase struct {
	Name            string        `json:"name"`
	Rate            Num           `json:"rate"`
	MaxBurstSeconds float64       `json:"max_burst_seconds"`
	Steps           []LimiterStep `json:"steps"`
}

// LimiterStep is one operation at At: Op "acquire" (expects Wait),
// "try_acquire" (expects OK), "set_rate" (to Rate) or "tokens" (expects
// Tokens).
type LimiterStep struct {
	At      float64 `json:"at"`
	Op      string  `json:"op"`
	Permits *int    `json:"permits"`
	Rate    *Num    `json:"rate"`
	Wait    *Num    `json:"wait"`
	OK      *bool   `json:"ok"`
	Tokens  *Num    `json:"tokens"`
}

// N returns the permits the step asks for: Permits, 1 when absent.
func (s LimiterStep) N() int {
	if s.Permits == nil {
		return 1
	}
	return *s.Permits
}

// Retry is retry.json: Charon's retry schedule and the lease client's
// backoff.
type Retry struct {
	About  string      `json:"about"`
	Schema []string    `json:"schema"`
	Charon CharonRetry `json:"charon"`
	Leases LeasesRetry `json:"leases"`
}

// CharonRetry is Charon's retry policy.
type CharonRetry struct {
	// Unit is the default backoff unit, in seconds.
	Unit        float64 `json:"unit"`
	MaxExponent int     `json:"max_exponent"`
	Delays      []struct {
		Attempt int     `json:"attempt"`
		U       float64 `json:"u"`
		Delay   float64 `json:"delay"`
	} `json:"delays"`
	Bounds []struct {
		Attempt int     `json:"attempt"`
		Min     float64 `json:"min"`
		Max     float64 `json:"max"`
	} `json:"bounds"`
	Schedules []CharonSchedule `json:"schedules"`
	// RetriedStatuses and FinalStatuses map a call ("request",
	// "reserve_copies") to the answer statuses it asks again after, and
	// those that end it at once.
	RetriedStatuses map[string][]string `json:"retried_statuses"`
	FinalStatuses   map[string][]string `json:"final_statuses"`
}

// CharonSchedule is one call against a server that always rejects: when
// each of its requests arrives.
type CharonSchedule struct {
	Name       string    `json:"name"`
	Call       string    `json:"call"`
	Unit       float64   `json:"unit"`
	U          float64   `json:"u"`
	MaxWait    float64   `json:"max_wait"`
	AttemptsAt []float64 `json:"attempts_at"`
}

// LeasesRetry is the lease client's backoff.
type LeasesRetry struct {
	MinBackoff float64 `json:"min_backoff"`
	MaxBackoff float64 `json:"max_backoff"`
	Cases      []struct {
		Failures int     `json:"failures"`
		Interval float64 `json:"interval"`
		Min      float64 `json:"min"`
		Max      float64 `json:"max"`
	} `json:"cases"`
}

// Errors is errors.json: each gRPC code's error in each language.
type Errors struct {
	About      string            `json:"about"`
	Schema     []string          `json:"schema"`
	Namespaces map[string]string `json:"namespaces"`
	Codes      []struct {
		Code   string `json:"code"`
		Number int    `json:"number"`
		Go     string `json:"go"`
		Python string `json:"python"`
		Java   string `json:"java"`
		Cpp    string `json:"cpp"`
		// Charon is "caller" or "fail_open".
		Charon string `json:"charon"`
	} `json:"codes"`
	Conditions []struct {
		Condition string `json:"condition"`
		About     string `json:"about"`
		Code      string `json:"code"`
		Go        string `json:"go"`
		Python    string `json:"python"`
		Java      string `json:"java"`
		Cpp       string `json:"cpp"`
	} `json:"conditions"`
}

// Constants is constants.json: the shared defaults.
type Constants struct {
	About     string     `json:"about"`
	Schema    []string   `json:"schema"`
	Constants []Constant `json:"constants"`
}

// Constant is one shared default and where each language keeps it.
type Constant struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	// Unit is "seconds" or "count".
	Unit   string `json:"unit"`
	About  string `json:"about"`
	Go     string `json:"go"`
	Python string `json:"python"`
	Java   string `json:"java"`
	Cpp    string `json:"cpp"`
}
