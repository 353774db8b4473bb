// Package promreg registers the server's Prometheus collectors without
// panicking: Register returns an error naming the first metric the
// registry refused (most often one already registered, when two servers
// are given the same Config.Runtime.Registry), where prometheus.MustRegister
// would panic. Every server package can import it; it imports no
// service.
//
//	if err := promreg.Register(reg, requests, latency); err != nil {
//		return nil, err // "metrics: sluice_server_requests_total already registered in the Registry"
//	}
package promreg

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers cs with reg in order and stops at the first one reg
// refuses, returning an error that names its (first) metric and wraps
// reg's error: a prometheus.AlreadyRegisteredError (checked with
// errors.As) when the registry already holds the metric. The collectors
// registered before the refused one stay registered.
func Register(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	for _, c := range cs {
		err := reg.Register(c)
		if err == nil {
			continue
		}
		if are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); ok {
			return fmt.Errorf("metrics: %s already registered in the Registry: %w", Name(are.NewCollector), err)
		}
		return fmt.Errorf("metrics: registering %s: %w", Name(c), err)
	}
	return nil
}

// Name returns the fully-qualified name of c's first metric ("" when c
// describes none).
func Name(c prometheus.Collector) string {
	ch := make(chan *prometheus.Desc)
	go func() {
		c.Describe(ch)
		close(ch)
	}()
	var name string
	for d := range ch {
		if name == "" {
			name = descName(d)
		}
	}
	return name
}

// descName returns d's fqName: client_golang offers no accessor, only
// String, of the form `Desc{fqName: "NAME", help: ...}`.
func descName(d *prometheus.Desc) string {
	s := d.String()
	if _, rest, ok := strings.Cut(s, `fqName: "`); ok {
		if name, _, ok := strings.Cut(rest, `"`); ok {
			return name
		}
	}
	return s
}

// Recorder is a prometheus.Registerer for a constructor that cannot
// return an error: its MustRegister registers with Register and records
// the first error instead of panicking; the caller checks Err after the
// constructor. Safe for concurrent use.
type Recorder struct {
	prometheus.Registerer
	mu  sync.Mutex
	err error
}

// NewRecorder returns a Recorder registering with reg.
func NewRecorder(reg prometheus.Registerer) *Recorder {
	return &Recorder{Registerer: reg}
}

// MustRegister registers cs (see Register); after a first error it
// registers nothing more.
func (r *Recorder) MustRegister(cs ...prometheus.Collector) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err == nil {
		r.err = Register(r.Registerer, cs...)
	}
}

// Err returns the first error MustRegister met, or nil.
func (r *Recorder) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}
