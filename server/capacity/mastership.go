package capacity

import (
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/sluice-rl/sluice/api/doorman"
)

// masterState is who this node's master is, as the election last said
// (SetMastership): this server, or another at addr ("" unknown), and
// since when this server is the master (its leases' learning mode starts
// then). It is a value: the Service's mu guards the field holding it,
// and masterNow copies it under the read lock for the handlers.
type masterState struct {
	isMaster bool
	addr     string
	since    time.Time
}

// redirect returns the redirect to put in a response when this server is
// not the master, or nil when it is.
func (m masterState) redirect() *pb.Mastership {
	if m.isMaster {
		return nil
	}
	r := &pb.Mastership{}
	if m.addr != "" {
		r.MasterAddress = proto.String(m.addr)
	}
	return r
}

// redirectOrUnknown is redirect, or a redirect naming no master when this
// server is the master: for a request it could not decide as master
// (the mastership changed while it was decided).
func (m masterState) redirectOrUnknown() *pb.Mastership {
	if r := m.redirect(); r != nil {
		return r
	}
	return &pb.Mastership{}
}

// SetMastership tells the server whether it is the master and, if not, who
// is. Winning mastership starts from an empty state in learning mode;
// losing it drops all state at once.
//
// Source: doorman-design.md, "Master Election".
func (s *Service) SetMastership(isMaster bool, masterAddr string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !isMaster && s.master.isMaster {
		defer s.push.stopAll()
	}
	if isMaster != s.master.isMaster {
		s.resources = make(map[string]*resource)
		s.leasesEndBy.Store(0) // the previous term's
		if isMaster {
			s.horizon.newTerm() // the lease horizon is not kept yet
			s.master.since = s.now()
			s.metrics.elections.WithLabelValues("won").Inc()
		} else {
			s.metrics.elections.WithLabelValues("lost").Inc()
		}
	}
	s.master.isMaster = isMaster
	s.master.addr = masterAddr
	if isMaster && masterAddr == "" {
		s.master.addr = s.opts.Address
	}
}

// IsMaster reports whether the server is the master and the master's
// address.
func (s *Service) IsMaster() (bool, string) {
	m := s.masterNow()
	return m.isMaster, m.addr
}

// masterNow returns the mastership in force, copied under the read lock.
func (s *Service) masterNow() masterState {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.master
}
