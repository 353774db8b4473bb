package main

import (
	"github.com/spf13/pflag"

	"github.com/sluice-rl/sluice/admin"
	"github.com/sluice-rl/sluice/server"
)

// adminFlags are sluice server's flags of the admin API (/admin/v1/).
type adminFlags struct{ server.Admin }

func (a *adminFlags) register(f *pflag.FlagSet) {
	f.StringVar(&a.TokenFile, "admin-token-file", "", "bearer tokens for writes: \"USER TOKEN\" lines (reread on change)")
	f.StringSliceVar(&a.TrustForwarded, "admin-trust-forwarded-user", nil, "take the user from X-Forwarded-User from these CIDRs or IPs")
	f.BoolVar(&a.Insecure, "admin-insecure", false, "allow writes without credentials from loopback (development only)")
	f.BoolVar(&a.AuthReads, "admin-auth-reads", false, "reads need the same authentication as writes")
	f.IntVar(&a.Keep, "admin-history", admin.DefaultKeep, "how many versions of the configuration to keep")
}
