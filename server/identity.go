package server

import (
	"fmt"

	"github.com/sluice-rl/sluice/internal/filewatch"
	"github.com/sluice-rl/sluice/internal/identity"
)

// openIdentity builds the Authorizer of Config.Listen.Identity (nil
// without a source) and loads its policy file, whose watcher Run starts
// (a bad new file is logged and counted, and the last good one keeps
// serving). The servers trusted to forward session requests are the
// policy's fleet and this server itself, by the identity of the client
// certificate it forwards with (Parent.TLS).
func (s *Server) openIdentity() error {
	id := s.cfg.Listen.Identity
	if id.Source == "" {
		return nil
	}
	opts := identity.Options{Setting: s.cfg.Runtime.Setting, Fleet: []string{identity.OfConfig(s.tls.parent)}}
	if path := id.PolicyPath; path != "" {
		w, err := filewatch.New(path, identity.LoadPolicy, func(p *identity.Policy) {
			s.configReloaded(nil)
			s.log.Info("identity policy loaded", "path", path, "identities", p.Len(), "hash", p.Hash())
		}, func(err error) {
			s.configReloaded(err)
			s.log.Error("identity policy reload failed; keeping the last good policy", "path", path, "err", err)
		})
		if err != nil {
			return &FieldError{Field: "Listen.Identity.PolicyPath", Err: fmt.Errorf("loading %s: %w", path, err)}
		}
		s.log.Info("identity policy loaded", "path", path, "identities", w.Current().Len(), "hash", w.Current().Hash())
		opts.Policy = w.Current
		s.watchers = append(s.watchers, w.Run)
		s.files = append(s.files, fileWatcher{path, w})
	}
	s.auth = identity.New(opts)
	return nil
}
