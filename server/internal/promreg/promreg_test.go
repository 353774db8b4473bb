package promreg

import (
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func counter(name string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: "A test counter."})
}

func TestRegister(t *testing.T) {
	tests := []struct {
		name     string
		first    []prometheus.Collector // registered before
		cs       []prometheus.Collector
		wantErr  string // "" for none
		existing bool   // the error is an AlreadyRegisteredError
	}{
		{name: "fresh registry", cs: []prometheus.Collector{counter("a_total"), counter("b_total")}},
		{name: "duplicate named", first: []prometheus.Collector{counter("b_total")},
			cs:      []prometheus.Collector{counter("a_total"), counter("b_total")},
			wantErr: "metrics: b_total already registered in the Registry", existing: true},
		{name: "inconsistent help", first: []prometheus.Collector{counter("a_total")},
			cs:      []prometheus.Collector{prometheus.NewCounter(prometheus.CounterOpts{Name: "a_total", Help: "Another help."})},
			wantErr: "metrics: registering a_total"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			if err := Register(reg, tt.first...); err != nil {
				t.Fatal(err)
			}
			err := Register(reg, tt.cs...)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Register: %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.HasPrefix(err.Error(), tt.wantErr) {
				t.Fatalf("Register: %v, want an error starting %q", err, tt.wantErr)
			}
			if _, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); ok != tt.existing {
				t.Errorf("errors.As(AlreadyRegisteredError) = %v, want %v", ok, tt.existing)
			}
		})
	}
}

func TestRecorder(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(counter("a_total"))
	r := NewRecorder(reg)
	r.MustRegister(counter("b_total")) // no panic, no error
	if err := r.Err(); err != nil {
		t.Fatalf("Err: %v, want nil", err)
	}
	r.MustRegister(counter("a_total"), counter("c_total"))
	r.MustRegister(counter("d_total")) // registers nothing after an error
	if err := r.Err(); err == nil || !strings.Contains(err.Error(), "a_total already registered") {
		t.Fatalf("Err: %v, want a_total already registered", err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, mf := range mfs {
		names = append(names, mf.GetName())
	}
	if got := strings.Join(names, ","); got != "a_total,b_total" {
		t.Errorf("registered %s, want a_total,b_total", got)
	}
}
