package capacity

import (
	"google.golang.org/protobuf/proto"

	pb "github.com/sluice-rl/sluice/api/doorman"
)

// SetMastership tells the server whether it is the master and, if not, who
// is. Winning mastership starts from an empty state in learning mode;
// losing it drops all state at once.
//
// Source: doorman-design.md, "Master Election".
func (s *Service) SetMastership(isMaster bool, masterAddr string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !isMaster && s.isMaster {
		defer s.push.stopAll()
	}
	if isMaster != s.isMaster {
		s.resources = make(map[string]*resource)
		s.leasesEndBy.Store(0) // the previous term's
		if isMaster {
			s.horizon.newTerm() // the lease horizon is not kept yet
			s.masterSince = s.now()
			s.metrics.elections.WithLabelValues("won").Inc()
		} else {
			s.metrics.elections.WithLabelValues("lost").Inc()
		}
	}
	s.isMaster = isMaster
	s.masterAddr = masterAddr
	if isMaster && masterAddr == "" {
		s.masterAddr = s.opts.Address
	}
}

// IsMaster reports whether the server is the master and the master's
// address.
func (s *Service) IsMaster() (bool, string) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.isMaster, s.masterAddr
}

// mastership returns the redirect to put in a response when this server is
// not the master, or nil when it is.
func (s *Service) mastership() *pb.Mastership {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.isMaster {
		return nil
	}
	m := &pb.Mastership{}
	if s.masterAddr != "" {
		m.MasterAddress = proto.String(s.masterAddr)
	}
	return m
}

func (s *Service) mastershipOrUnknown() *pb.Mastership {
	if m := s.mastership(); m != nil {
		return m
	}
	return &pb.Mastership{}
}
