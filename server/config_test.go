package server

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// usersOwn are the fields of Config's groups (by their struct type and
// field, "Runtime.Logger") whose kind New could set itself — functions,
// interfaces, pointers — but that are the user's: New uses each as
// given and sets none of them, a nil one meaning the documented
// default. Why each is the user's:
var usersOwn = map[string]string{
	"Listen.Listener":  "a listener the caller opened (tests, socket activation), served instead of Listen.Address",
	"TLS.Config":       "a TLS configuration built in code (a certificate's SAN checked, a skipped name), instead of the files",
	"Runtime.Logger":   "where the process logs (nil: slog.Default())",
	"Runtime.Registry": "the registry the caller serves or gathers (nil: a new one)",
	"Runtime.Now":      "the clock (nil: time.Now); the simulator and tests move their own",
	"Runtime.Setting":  "the front end's names of Config's fields (sluice server's flags)",
	"Tracing.Provider": "a program's own OpenTelemetry SDK, used as is",
	"Repository.Fixed": "a repository built in code (resources.Compose, resources.Parse)",
	"Store.Shared":     "a store the caller opened, used as is (its fields are the store's, not the server's)",
}

// TestConfigHoldsOnlyTheUsers: no exported field of Config, at any
// depth, is of a kind that New sets itself (a function, an interface, a
// channel or a pointer: a clock, a logger, a registry, a store, an
// authorizer, a sink, as the services' Options have), except the ones
// usersOwn lists and says why. A service's Options in Config would bring
// its server-set fields with it, each silently overwritten by New; the
// server's own types (EnvoyRateLimit, RLQS, Statsd) carry only what a
// user chooses.
func TestConfigHoldsOnlyTheUsers(t *testing.T) {
	seen := map[string]bool{}
	var walk func(path string, typ reflect.Type)
	walk = func(path string, typ reflect.Type) {
		for f := range typ.Fields() {
			if !f.IsExported() {
				continue
			}
			p, key := f.Name, typ.Name()+"."+f.Name
			if path != "" {
				p = path + "." + f.Name
			}
			if _, ok := usersOwn[key]; ok {
				seen[key] = true
				continue
			}
			check(t, p, f.Type, walk)
		}
	}
	walk("", reflect.TypeFor[Config]())
	for key := range usersOwn {
		if !seen[key] {
			t.Errorf("usersOwn lists %s, which Config no longer has", key)
		}
	}
}

// check refuses typ at path when it is of a kind New could set, and
// walks into structs, and the elements of slices, arrays and maps.
func check(t *testing.T, path string, typ reflect.Type, walk func(string, reflect.Type)) {
	t.Helper()
	switch typ.Kind() {
	case reflect.Func, reflect.Interface, reflect.Chan, reflect.Pointer, reflect.UnsafePointer:
		t.Errorf("Config.%s is a %s (%v): a value New could set itself; make it the server's (not in Config), or list it in usersOwn saying why it is the user's",
			path, typ.Kind(), typ)
	case reflect.Struct:
		walk(path, typ)
	case reflect.Slice, reflect.Array:
		check(t, path+"[]", typ.Elem(), walk)
	case reflect.Map:
		check(t, path+"[key]", typ.Key(), walk)
		check(t, path+"[]", typ.Elem(), walk)
	}
}

// TestOptionsMirrored: each of the server's configuration types for a
// service (EnvoyRateLimit, RLQS, Statsd) carries every field of that
// service's Options a user chooses, by the same name and type (so that
// the Options' rule, Check, names the Config field), and nothing else;
// the rest of the Options are the server's, listed here; and the
// conversion copies every field. A field added to an Options fails
// here until it is either the user's (a field of the server's type and
// a flag) or the server's (set in newServices).
func TestOptionsMirrored(t *testing.T) {
	for _, tc := range []struct {
		name    string
		user    any                          // a value of the server's type
		options func(user any) reflect.Value // the Options it converts to
		serverS []string                     // the Options' fields New sets
	}{
		{"EnvoyRateLimit", EnvoyRateLimit{}, func(u any) reflect.Value { return reflect.ValueOf(u.(EnvoyRateLimit).options()) },
			[]string{"Store", "Now", "Tiers", "Registry", "Logger", "Stats"}},
		{"RLQS", RLQS{}, func(u any) reflect.Value { return reflect.ValueOf(u.(RLQS).options()) },
			[]string{"Now", "Logger", "Registry", "Authorizer"}},
		{"Statsd", Statsd{}, func(u any) reflect.Value { return reflect.ValueOf(u.(Statsd).options(nil)) },
			[]string{"Logger"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			uv := reflect.New(reflect.TypeOf(tc.user)).Elem()
			fill(t, tc.name, uv)
			ov := tc.options(uv.Interface())
			ut, ot := uv.Type(), ov.Type()
			server := map[string]bool{}
			for _, n := range tc.serverS {
				server[n] = true
			}
			for f := range ot.Fields() {
				uf, ok := ut.FieldByName(f.Name)
				switch {
				case server[f.Name] && ok:
					t.Errorf("%s.%s is the server's (newServices sets it), but %s has it too", ot, f.Name, tc.name)
				case server[f.Name]:
				case !ok:
					t.Errorf("%s.%s: %s lacks it; add it (and its flag), or list it as the server's here", ot, f.Name, tc.name)
				case uf.Type != f.Type:
					t.Errorf("%s.%s is a %v, %s's a %v", ot, f.Name, f.Type, tc.name, uf.Type)
				case !reflect.DeepEqual(uv.FieldByIndex(uf.Index).Interface(), ov.FieldByIndex(f.Index).Interface()):
					t.Errorf("%s.options() does not copy %s: %v, want %v", tc.name, f.Name, ov.FieldByIndex(f.Index), uv.FieldByIndex(uf.Index))
				}
			}
			for f := range ut.Fields() {
				if _, ok := ot.FieldByName(f.Name); !ok {
					t.Errorf("%s.%s: %s has no such field", tc.name, f.Name, ot)
				}
			}
			for _, n := range tc.serverS {
				if _, ok := ot.FieldByName(n); !ok {
					t.Errorf("%s has no field %s any more; drop it from the server's", ot, n)
				}
			}
		})
	}
}

// fill sets every exported field of v (a settable struct) to a value
// other than its zero value, so that a field a conversion forgets shows.
func fill(t *testing.T, path string, v reflect.Value) {
	t.Helper()
	switch v.Kind() {
	case reflect.Bool:
		v.SetBool(true)
	case reflect.String:
		v.SetString(path)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if v.Type() == reflect.TypeFor[time.Duration]() {
			v.SetInt(int64(3 * time.Second))
		} else {
			v.SetInt(1)
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(1)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(0.5)
	case reflect.Array:
		for i := range v.Len() {
			fill(t, path, v.Index(i))
		}
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(t, path+"[key]", k)
		fill(t, path+"[]", e)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Struct:
		for f, fv := range v.Fields() {
			if f.IsExported() {
				fill(t, path+"."+f.Name, fv)
			}
		}
	default:
		t.Fatalf("%s: a %v; teach fill to set one", path, v.Type())
	}
}

// TestFieldNamesOrder: no name in FieldNames extends one before it, so
// that a front end rewriting them in a message (sluice server's
// strings.Replacer, which takes the first match) rewrites the longer
// one whole ("RLQS.UnconfiguredTTL" before "RLQS.Unconfigured").
func TestFieldNamesOrder(t *testing.T) {
	for i, n := range FieldNames {
		for _, later := range FieldNames[i+1:] {
			if later == n || strings.HasPrefix(later, n) {
				t.Errorf("FieldNames: %q before %q, which extends it (or repeats it)", n, later)
			}
		}
	}
}
