package sessions

import (
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// learnEvery is how often Run, with a shared copy log, reconciles while
// the engine is fenced, or while a resource's learning mode is unknown or
// on (copies.Engine.Learning): a new member learns within it that the
// fleet's new resources need no learning period, and a learning period
// that waited for this server ends within it of this server's last
// write-back, and is seen to end as soon.
const learnEvery = 100 * time.Millisecond

// reconcileAfter returns when Run reconciles next: learnEvery while the
// engine is fenced or Ready would say learning, else reconcileEvery.
func (s *Service) reconcileAfter() time.Duration {
	if s.copies.Fenced() {
		return learnEvery
	}
	if learning, unchecked := s.copies.Learning(); len(learning)+len(unchecked) > 0 {
		return learnEvery
	}
	return reconcileEvery
}

// Ready reports whether this server serves its copy-limited resources:
// without a shared copy log (Options.Log), always; with one, once the
// engine has its fleet epoch (not fenced) and knows that none of its
// configured resources is in learning mode (copies.Engine.Learning: Run
// asks the log every learnEvery until it knows). While it is not, every
// Reserve of the resources named would answer Unavailable; why says what
// is missing, naming them. Safe for concurrent use.
//
// Source: docs/charon.md, "Readiness".
func (s *Service) Ready() (ready bool, why string) {
	if s.opts.Log == nil {
		return true, ""
	}
	if s.copies.Fenced() {
		return false, "copy-limited resources: not a member of the fleet yet (etcd)"
	}
	learning, unchecked := s.copies.Learning()
	switch {
	case len(learning) > 0:
		return false, "copy-limited resources in learning mode: " + fewNames(learning) +
			" (Redis has no record of their counts; waiting for the fleet's servers to write their holds back)"
	case len(unchecked) > 0:
		return false, "copy-limited resources: not yet checked for learning mode in the shared copy log (Redis): " + fewNames(unchecked)
	}
	return true, ""
}

// fewNames lists resources for Ready: the first few, and how many more.
func fewNames(resources []string) string {
	const most = 5
	if len(resources) <= most {
		return strings.Join(resources, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(resources[:most], ", "), len(resources)-most)
}

// registerLearning registers sluice_copies_learning.
func (s *Service) registerLearning(reg prometheus.Registerer) error {
	return reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_copies_learning",
		Help: "Copy-limited resources this server knows to be in learning mode (Redis has no record of their counts; their Reserves answer Unavailable until the fleet's servers wrote their holds back): the server is not ready meanwhile."},
		func() float64 {
			learning, _ := s.copies.Learning()
			return float64(len(learning))
		}))
}
