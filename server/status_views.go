package server

import (
	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/server/capacity"
	"github.com/sluice-rl/sluice/server/envoyrls"
	"github.com/sluice-rl/sluice/server/rlqs"
	"github.com/sluice-rl/sluice/server/sessions"
	"github.com/sluice-rl/sluice/server/status"
)

// The services are the status site's views: package status names only
// its view interfaces and the rows of package status/view, so that it
// imports no service; the composition root, which imports both, checks
// that each service satisfies its view.
var (
	_ status.CapacityView = capacity.View{}
	_ status.BucketsView  = (*limits.Engine)(nil)
	_ status.SessionsView = (*sessions.Service)(nil)
	_ status.EnvoyView    = (*envoyrls.Service)(nil)
	_ status.RLQSView     = (*rlqs.Service)(nil)
)
