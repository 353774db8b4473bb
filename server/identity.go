package server

import (
	"crypto/tls"
	"fmt"

	"github.com/sluice-rl/sluice/internal/filewatch"
	"github.com/sluice-rl/sluice/internal/identity"
)

// openIdentity builds the Authorizer of id (Config.Listen.Identity; nil
// without a source) and loads its policy file, whose watcher Run starts
// (a bad new file is logged and counted, and the last good one keeps
// serving). The servers trusted to forward session requests are the
// policy's fleet and this server itself, by the identity of the client
// certificate it forwards with (parentTLS: Parent.TLS). setting is
// Config.Runtime.Setting.
func (c *configSources) openIdentity(id Identity, setting func(string) string, parentTLS *tls.Config) (*identity.Authorizer, error) {
	if id.Source == "" {
		return nil, nil
	}
	opts := identity.Options{Setting: setting, Fleet: []string{identity.OfConfig(parentTLS)}}
	if path := id.PolicyPath; path != "" {
		w, err := filewatch.New(path, identity.LoadPolicy, func(p *identity.Policy) {
			c.reloaded(nil)
			c.log.Info("identity policy loaded", "path", path, "identities", p.Len(), "hash", p.Hash())
		}, func(err error) {
			c.reloaded(err)
			c.log.Error("identity policy reload failed; keeping the last good policy", "path", path, "err", err)
		})
		if err != nil {
			return nil, &FieldError{Field: "Listen.Identity.PolicyPath", Err: fmt.Errorf("loading %s: %w", path, err)}
		}
		c.log.Info("identity policy loaded", "path", path, "identities", w.Current().Len(), "hash", w.Current().Hash())
		opts.Policy = w.Current
		c.watchers = append(c.watchers, w.Run)
		c.files = append(c.files, fileWatcher{path, w})
	}
	return identity.New(opts), nil
}
